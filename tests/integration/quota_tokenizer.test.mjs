// Quota reservations count the prompt with the model's tokenizer (issue 14 §2: "the prompt's token
// count (our tokenizer when the model has one, else an estimate)"). The expected count comes from
// the independent reference (tests/tokenizer/reference.mjs: HF's Rust tokenizers and the chat
// template through @huggingface/jinja), not from kvgate. While the engine holds the request, the
// tenant's bucket shows the reservation: prompt tokens + max_tokens. A 600-token-per-minute
// bucket refills 10 tokens a second, so the bound below is one-sided with 3 s of slack; the
// 4-bytes-a-token estimate (the fallback) would be 140 tokens off.
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { buildModelsDir } from '../../scripts/models_dir.mjs';
import { loadRef } from '../tokenizer/reference.mjs';
import { LB_BASE, api, freePort, rule, scrapeMetrics, startGateway, tempDir, waitFor } from './lib.mjs';

const MODEL = 'Qwen/Qwen3-8B';
const metric = (ms, name, labels) => ms.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

test('quota reservation: the prompt counted by the model\'s tokenizer', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const modelsDir = path.join(tmp.dir, 'models');
  await buildModelsDir(modelsDir);
  // An engine that answers at once, or holds the answer until released.
  let release = null;
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      if (req.headers['x-hold']) await new Promise((r) => { release = r; });
      const out = JSON.stringify({ object: 'chat.completion', choices: [{ index: 0,
        message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 } });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { if (release) release(); srv.closeAllConnections(); return new Promise((r) => srv.close(r)); });

  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'), extra: ['--models-dir', modelsDir] });
  t.after(() => gw.stop());
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [{ host: '127.0.0.1', port: srv.address().port }],
    extraArgs: { api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', '/netlox/v1/config/ai/tenant/ratelimit',
    { tenant_id: 'acme', tokens_per_min: 600, burst_pct: 1000 });  // capacity 6000
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'acme' });
  assert.equal(r.status, 201, r.text);
  const key = r.json.raw_key;

  const messages = [{ role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'hello '.repeat(280) + 'and goodbye' }];
  const chat = (headers) => fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body: JSON.stringify({ model: MODEL, messages, max_tokens: 100 }) });

  // The first request asks for the tokenizer (loaded off the event loop; until then: estimate).
  await waitFor(async () => {
    await (await chat({})).text();
    const ms = await scrapeMetrics(gw.api);
    return (metric(ms, 'kvgate_quota_prompt_counts_total', { method: 'tokenizer' }) ?? 0) > 0;
  }, 15000, 200);

  const ref = await loadRef(modelsDir, MODEL);
  const promptTokens = (await ref.chat({ model: MODEL, messages })).ids.length;
  const bytesEstimate = Math.ceil(messages.reduce((n, m) => n + m.role.length + 1 + m.content.length, 0) / 4);
  assert.ok(Math.abs(bytesEstimate - promptTokens) > 100, `a test that tells them apart: ${bytesEstimate} vs ${promptTokens}`);

  await new Promise((res) => setTimeout(res, 1000));  // (the warm-up's usage refilled: 1 token)
  const held = chat({ 'x-hold': '1' });
  let reserved = 0;
  await waitFor(async () => {
    const ms = await scrapeMetrics(gw.api);
    reserved = Math.round((metric(ms, 'loxilb_ai_token_quota_utilization', { tenant: 'acme' }) ?? 0) * 6000);
    return reserved > 0;
  }, 5000, 20);
  const expected = promptTokens + 100;
  assert.ok(reserved <= expected && reserved >= expected - 30,
    `reserved ${reserved}, expected ${expected} (prompt ${promptTokens} tokens + max_tokens 100)`);
  release();
  assert.equal((await held).status, 200);
});

// One render and one tokenize per request (issue 29 §1): a metered chat request on a Tier 1.5
// rule is counted by the quota gate and keyed by kv_exact from the same token ids. The observable
// is the tokenizer's own `truncated` event, counted once per tokenize of a prompt over
// LOXILB_KV_TOKENIZE_MAX_BYTES: one per request, metered or not (two before the ids were shared).
test('a metered Tier 1.5 chat request is tokenized once', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const modelsDir = path.join(tmp.dir, 'models');
  await buildModelsDir(modelsDir);
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const out = JSON.stringify({ object: 'chat.completion', choices: [{ index: 0,
        message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { srv.closeAllConnections(); return new Promise((r) => srv.close(r)); });
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'), extra: ['--models-dir', modelsDir],
    env: { LOXILB_KV_TOKENIZE_MAX_BYTES: '1024' } });
  t.after(() => gw.stop());
  const kvPort = await freePort();
  const workers = [{ host: '127.0.0.1', port: srv.address().port }];
  const metered = await freePort();
  const open = await freePort();
  const kv = { kvExactMode: 3, kvZmqPort: kvPort };
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port: metered, workers,
    extraArgs: { ...kv, name: 'metered', api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: open, workers, extraArgs: kv }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', '/netlox/v1/config/ai/tenant/ratelimit',
    { tenant_id: 'acme', tokens_per_min: 600000, burst_pct: 100 });
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'acme' });
  assert.equal(r.status, 201, r.text);
  const key = r.json.raw_key;
  // 1,500 bytes: over the 1,024 cut, under twice it (where a chat is not rendered at all).
  const messages = [{ role: 'user', content: 'hello '.repeat(250) }];
  const chat = async (port, headers = {}) => {
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: MODEL, messages, max_tokens: 10 }) });
    assert.equal(res.status, 200, await res.text());
  };
  const truncated = async () => metric(await scrapeMetrics(gw.api), 'kvgate_kv_prompt_tokenizer_total',
    { event: 'truncated' }) ?? 0;
  // Until the tokenizer is loaded nothing is tokenized.
  assert.ok(await waitFor(async () => { await chat(open); return (await truncated()) > 0; }, 15000, 200),
    'the tokenizer loaded and cut the prompt');
  let before = await truncated();
  await chat(open);
  assert.equal(await truncated(), before + 1, 'an unmetered request: kv_exact tokenizes once');
  before = await truncated();
  const tier15 = async () => {
    const m = await scrapeMetrics(gw.api);
    return { tokenize: metric(m, 'loxilb_pd_kv_tier15_miss_reason_total', { service: 'metered', reason: 'tokenize' }) ?? 0,
      keyed: (metric(m, 'loxilb_pd_kv_tier15_hits_total', { service: 'metered' }) ?? 0) +
        (metric(m, 'loxilb_pd_kv_tier15_miss_reason_total', { service: 'metered', reason: 'no_worker' }) ?? 0) };
  };
  const t0 = await tier15();
  await chat(metered, { authorization: `Bearer ${key}` });
  assert.equal(await truncated(), before + 1, 'a metered request: the quota count and kv_exact share one tokenize');
  const t1 = await tier15();
  // ... and kv_exact did key the request with those ids (not a tokenize miss).
  assert.equal(t1.tokenize, t0.tokenize, 'no tokenize miss');
  assert.equal(t1.keyed, t0.keyed + 1, 'Tier 1.5 keyed the request');
  const ms = await scrapeMetrics(gw.api);
  assert.ok((metric(ms, 'kvgate_quota_prompt_counts_total', { method: 'tokenizer' }) ?? 0) >= 1,
    'the quota gate counted with the tokenizer');
});
