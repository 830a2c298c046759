// The engines' /tokenize and /detokenize answered by the gateway (issue 31; proxy/tokenize_local.h):
// once an engine's answer for a model matched what the gateway computed, the gateway answers the
// model's calls itself (the engine sees none, except the periodic checks); what only the engine
// knows (max_model_len, whether its detokenize cleans spaces up) is learned from its answers; a
// mismatch stops the gateway's answers for that model. Expected ids, token strings and texts come
// from the reference (HF's Rust tokenizers + transformers' rules, tests/tokenizer/reference.mjs),
// never from kvgate.
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, simMetrics, startGateway, startSim, tempDir, waitFor } from './lib.mjs';
import { buildModelsDir } from '../../scripts/models_dir.mjs';
import { loadRef } from '../tokenizer/reference.mjs';

const QWEN = 'Qwen/Qwen3-8B';
const LLAMA = 'meta-llama/Meta-Llama-3-8B-Instruct';
let tmp; let modelsDir; const refs = {};

before(async () => {
  tmp = tempDir();
  modelsDir = path.join(tmp.dir, 'models');
  await buildModelsDir(modelsDir);
  for (const m of [QWEN, LLAMA]) refs[m] = await loadRef(modelsDir, m);
});
after(() => tmp?.remove());

const post = async (port, p, body, headers = { 'content-type': 'application/json' }) => {
  const res = await fetch(`http://127.0.0.1:${port}${p}`, { method: 'POST', headers,
    body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
};
const engineCalls = async (workers) => {
  let n = 0;
  for (const w of workers) n += (await simMetrics(w)).kvgate_sim_tokenize_requests_total ?? 0;
  return n;
};
const events = async (gw, apiName) => {
  const out = { answered: 0, checked: 0, mismatched: 0, forwarded: 0 };
  for (const s of await scrapeMetrics(gw.api))
    if (s.name === 'kvgate_tokenize_api_total' && s.labels.api === apiName) out[s.labels.event] += s.value;
  return out;
};

// A gateway with one rule over the engine `srv` (a node HTTP server), which stops with the test.
async function gatewayInFrontOf(t, srv) {
  await new Promise((res) => srv.listen(0, '127.0.0.1', res));
  t.after(() => srv.close());
  const gw = await gateway(t, ['--workers', '1', '--models-dir', modelsDir]);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [{ host: '127.0.0.1', port: srv.address().port }] }));
  assert.equal(r.status, 200, r.text);
  return { gw, port };
}

const TEXT = 'Tokenize me: the quick brown fox , isn\'t it ? 日本語 👋 <|im_start|>';

// Sends make(i) until the gateway answers one without the engine seeing it (the form is learned
// once an engine answer matched, and the worker taking the call may still be loading the
// tokenizer); every answer must equal expect(i). Returns how many were answered locally.
async function untilLocal(workers, make, expect, want = 2, tries = 300) {
  let local = 0;
  for (let i = 0; i < tries && local < want; i++) {
    const c = await engineCalls(workers);
    const r = await make(i);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, await expect(i));
    if ((await engineCalls(workers)) === c) local++;
    else await new Promise((res) => setTimeout(res, 50));
  }
  return local;
}

describe('vLLM engines', () => {
  let sim; let gw; let gwDir; let port; let workers;
  before(async () => {
    sim = await startSim(['--workers', '2', '--port', '0', '--models-dir', modelsDir, '--model', QWEN,
      '--model', LLAMA, '--max-model-len', '32768']);
    workers = sim.workers;
    gwDir = tempDir();
    gw = await startGateway({ stateDir: gwDir.dir, extra: ['--models-dir', modelsDir] });
    port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers }));
    assert.equal(r.status, 200, r.text);
  });
  after(async () => { await sim?.stop(); });

  test('the first /tokenize of a model is the engine\'s; once it matched, the gateway answers', async () => {
    const ref = refs[QWEN];
    const want = await ref.encode(TEXT, true);
    const c0 = await engineCalls(workers);
    const first = await post(port, '/tokenize', { model: QWEN, prompt: TEXT });
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(first.json, { count: want.length, max_model_len: 32768, tokens: want, token_strs: null });
    assert.equal(await engineCalls(workers), c0 + 1, 'the engine answered the first');
    // The gateway now answers the same model itself (the tokenizer may still be loading on the
    // worker that takes the request: then it is forwarded, and checked, until loaded).
    let local = 0;
    for (let i = 0; i < 300 && local < 5; i++) {
      const before = await engineCalls(workers);
      const r = await post(port, '/tokenize', { model: QWEN, prompt: `${TEXT} #${i}` });
      assert.equal(r.status, 200, r.text);
      const exp = await ref.encode(`${TEXT} #${i}`, true);
      assert.deepEqual(Object.keys(r.json), ['count', 'max_model_len', 'tokens', 'token_strs']);
      assert.deepEqual(r.json, { count: exp.length, max_model_len: 32768, tokens: exp, token_strs: null });
      if ((await engineCalls(workers)) === before) local++;
      else await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(local >= 5, `the gateway answered ${local} of the calls itself`);
    const ev = await waitFor(async () => { const e = await events(gw, 'tokenize'); return e.checked >= 1 && e; });
    assert.ok(ev && ev.answered >= 5 && ev.mismatched === 0, JSON.stringify(ev));
  });

  test('token strings, add_special_tokens and the chat form: each form learned, then answered as the reference computes it', async () => {
    const ref = refs[LLAMA];
    const body = (i) => ({ model: LLAMA, prompt: `${TEXT} ${i}`, add_special_tokens: false, return_token_strs: true });
    let local = await untilLocal(workers, (i) => post(port, '/tokenize', body(i)), async (i) => {
      const want = await ref.encode(`${TEXT} ${i}`, false);
      return { count: want.length, max_model_len: 32768, tokens: want, token_strs: ref.tokenStrs(want) };
    });
    assert.equal(local, 2, 'token strings answered by the gateway');
    const messages = (i) => [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: `${TEXT} ${i}` }];
    // (documents are not a member of vLLM's tokenize chat form: ignored, as vLLM ignores them)
    local = await untilLocal(workers, (i) => post(port, '/tokenize', { model: LLAMA, messages: messages(i),
      documents: [{ title: 'ignored', text: 'x' }] }), async (i) => {
      const ids = (await ref.chat({ messages: messages(i) })).ids;
      return { count: ids.length, max_model_len: 32768, tokens: ids, token_strs: null };
    });
    assert.equal(local, 2, 'the chat form answered by the gateway');
    local = await untilLocal(workers, (i) => post(port, '/tokenize', { model: LLAMA, messages: messages(i),
      add_generation_prompt: false }), async (i) => {
      const ids = (await ref.chat({ messages: messages(i), add_generation_prompt: false })).ids;
      return { count: ids.length, max_model_len: 32768, tokens: ids, token_strs: null };
    });
    assert.equal(local, 2);
  });

  test('/detokenize: special tokens kept, the clean-up learned from the engine (Llama-3 cleans up)', async () => {
    const ref = refs[LLAMA];
    const ids = await ref.encode('Hello , world . Isn \'t it ? <|eot_id|>', true);
    const raw = await ref.decode(ids, false, false);
    const cleaned = await ref.decode(ids, false, true);
    assert.notEqual(raw, cleaned, 'the input tells the two apart');
    const c0 = await engineCalls(workers);
    const first = await post(port, '/detokenize', { model: LLAMA, tokens: ids });
    assert.deepEqual(first.json, { prompt: cleaned }, 'the simulated engine cleans up, as transformers < 5.7 with this config');
    assert.equal(await engineCalls(workers), c0 + 1);
    const more = async (i) => ref.encode(`Text number ${i} , done .`, false);
    const local = await untilLocal(workers, async (i) => post(port, '/detokenize', { model: LLAMA, tokens: await more(i) }),
      async (i) => ({ prompt: await ref.decode(await more(i), false, true) }), 3);
    assert.equal(local, 3, 'answered by the gateway');
    const ev = await waitFor(async () => { const e = await events(gw, 'detokenize'); return e.answered >= 3 && e; });
    assert.ok(ev && ev.mismatched === 0, JSON.stringify(ev));
  });

  test('input the gateway does not compute is forwarded, and the engine\'s answer (or error) relayed', async () => {
    const f0 = (await events(gw, 'tokenize')).forwarded + (await events(gw, 'detokenize')).forwarded;
    const c0 = await engineCalls(workers);
    const cases = [
      ['/tokenize', { model: 'no-such-model', prompt: 'x' }, 404],
      ['/tokenize', { model: QWEN, prompt: 'x', messages: [] }, 400],
      ['/tokenize', { model: QWEN, prompt: 5 }, 400],
      ['/tokenize', { model: QWEN, prompt: 'x', add_special_tokens: 'yes' }, 400],
      ['/tokenize', { model: QWEN, messages: [{ role: 'user', content: 'hi' }], chat_template: '{{ 1 }}' }, 400],
      ['/detokenize', { model: QWEN, tokens: [-1] }, 400],
      ['/detokenize', { model: QWEN, tokens: [2 ** 32] }, 400],
      ['/detokenize', { model: QWEN, tokens: [1.5] }, 400],
      ['/detokenize', { model: QWEN, tokens: 'abc' }, 400],
      ['/tokenize', '{"model": "Qwen/Qwen3-8B", "prompt": ', 400],
      ['/tokenize', '[1,2,3]', 400],
      // A path vLLM does not serve, and a Content-Type it refuses, for a form already learned.
      ['/v1/tokenize', { model: QWEN, prompt: 'x' }, 404],
      ['/tokenize', { model: QWEN, prompt: 'x' }, 400, 'application/json ;charset=utf-8'],
      ['/tokenize', { model: QWEN, prompt: 'x' }, 400, 'text/plain'],
    ];
    for (const [p, body, status, ct] of cases) {
      const c = await engineCalls(workers);
      const r = await post(port, p, body, { 'content-type': ct ?? 'application/json' });
      assert.equal(r.status, status, `${p} ${JSON.stringify(body)}: ${r.text}`);
      // (vLLM serves no /v1/tokenize: its 404 is the engine's, not counted as a tokenize call)
      if (p !== '/v1/tokenize') assert.equal(await engineCalls(workers), c + 1, `${p} ${JSON.stringify(body)} reached an engine`);
      else assert.match(r.text, /Not Found|not found/i);
    }
    // (an unparsable body the gateway reads for nothing else: the engine's 400)
    const f1 = (await events(gw, 'tokenize')).forwarded + (await events(gw, 'detokenize')).forwarded;
    assert.equal(f1 - f0, cases.length);
    // A model the gateway has files for but the engines do not serve: the engine's 404 stops
    // the form (the gateway never answers for a model the engine does not serve).
    const gemma = 'google/gemma-3-4b-it';
    for (let i = 0; i < 300; i++) {  // (its 33 MB tokenizer loads meanwhile)
      const r = await post(port, '/tokenize', { model: gemma, prompt: 'x' });
      assert.equal(r.status, 404, r.text);
      if ((await events(gw, 'tokenize')).mismatched >= 1) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal((await events(gw, 'tokenize')).mismatched, 1);
    // A huge prompt, past the tokenizer's byte bound: forwarded, and right.
    const big = 'word '.repeat(40000);
    const r = await post(port, '/tokenize', { model: QWEN, prompt: big });
    assert.equal(r.json.count, (await refs[QWEN].encode(big, true)).length);
    // The gateway still answers afterwards.
    const ok = await post(port, '/tokenize', { model: QWEN, prompt: 'still fine' });
    assert.deepEqual(ok.json.tokens, await refs[QWEN].encode('still fine', true));
  });
});

test('kvTokenizeVerifyEvery: every n-th call is checked by the engine; kvTokenizeLocal off forwards all', async (t) => {
  const sim = await startSim(['--port', '0', '--models-dir', modelsDir, '--model', QWEN]);
  t.after(() => sim.stop());
  const gw = await gateway(t, ['--workers', '1', '--models-dir', modelsDir]);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: sim.workers, extraArgs: { kvTokenizeVerifyEvery: 4 } }));
  assert.equal(r.status, 200, r.text);
  const off = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: off, workers: sim.workers, extraArgs: { kvTokenizeLocal: 'off' } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: await freePort(), workers: sim.workers, extraArgs: { kvTokenizeLocal: 'always' } }));
  assert.equal(r.status, 400, r.text);
  // Until the tokenizer is loaded and one answer matched, calls go to the engine.
  for (let i = 0; i < 300; i++) {
    await post(port, '/tokenize', { model: QWEN, prompt: 'load' });
    if ((await events(gw, 'tokenize')).checked > 0) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  const c0 = await engineCalls(sim.workers);
  for (let i = 0; i < 12; i++) assert.equal((await post(port, '/tokenize', { model: QWEN, prompt: `n ${i}` })).status, 200);
  assert.equal(await engineCalls(sim.workers) - c0, 3, 'one call in four checked');
  const c1 = await engineCalls(sim.workers);
  for (let i = 0; i < 5; i++) assert.equal((await post(off, '/tokenize', { model: QWEN, prompt: `n ${i}` })).status, 200);
  assert.equal(await engineCalls(sim.workers) - c1, 5, 'off: all forwarded');
});

test('an engine answering differently: the gateway never answers that model itself', async (t) => {
  // An engine whose tokenizer differs (one id off) and whose detokenize never cleans up.
  let calls = 0;
  const srv = http.createServer((req, res) => {
    let b = '';
    req.on('data', (d) => { b += d; });
    req.on('end', () => {
      calls++;
      const j = JSON.parse(b);
      res.setHeader('content-type', 'application/json');
      if (req.url === '/tokenize') res.end(JSON.stringify({ count: 1, max_model_len: 8, tokens: [7], token_strs: null }));
      else res.end(JSON.stringify({ prompt: `text of ${j.tokens.length}` }));
    });
  });
  const { gw, port } = await gatewayInFrontOf(t, srv);
  for (let i = 0; i < 300; i++) {
    const a = await post(port, '/tokenize', { model: QWEN, prompt: 'hello' });
    assert.deepEqual(a.json.tokens, [7], 'the engine\'s answer, always');
    const d = await post(port, '/detokenize', { model: QWEN, tokens: [9707] });
    assert.deepEqual(d.json, { prompt: 'text of 1' });
    if ((await events(gw, 'tokenize')).mismatched && (await events(gw, 'detokenize')).mismatched) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  const t1 = await events(gw, 'tokenize');
  const d1 = await events(gw, 'detokenize');
  assert.equal(t1.mismatched, 1, JSON.stringify(t1));
  assert.equal(d1.mismatched, 1, JSON.stringify(d1));
  assert.equal(t1.answered + d1.answered, 0);
  const c = calls;
  for (let i = 0; i < 5; i++) await post(port, '/tokenize', { model: QWEN, prompt: 'hello' });
  assert.equal(calls - c, 5, 'forwarded from now on');
  assert.equal((await events(gw, 'tokenize')).mismatched, 1, 'and not checked again');
});

test('SGLang engines: /v1/tokenize and /v1/detokenize in SGLang\'s shapes (special tokens skipped, no clean-up)', async (t) => {
  const sim = await startSim(['--engine', 'sglang', '--port', '0', '--models-dir', modelsDir, '--model', LLAMA,
    '--max-model-len', '4096']);
  t.after(() => sim.stop());
  const gw = await gateway(t, ['--workers', '1', '--models-dir', modelsDir]);
  const port = await freePort();
  // SGLang ignores the request's model: the gateway answers only where the pool names it.
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, model: LLAMA, workers: sim.workers, extraArgs: { kvEngineType: 'sglang' } }));
  assert.equal(r.status, 200, r.text);
  const unnamed = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: unnamed, workers: sim.workers, extraArgs: { kvEngineType: 'sglang' } }));
  assert.equal(r.status, 200, r.text);
  const c0 = await engineCalls(sim.workers);
  for (let i = 0; i < 5; i++) assert.equal((await post(unnamed, '/v1/tokenize', { model: LLAMA, prompt: 'x' })).status, 200);
  assert.equal(await engineCalls(sim.workers) - c0, 5, 'no pool: every call forwarded');
  const ref = refs[LLAMA];
  const ids = await ref.encode('Hello , world . <|eot_id|>', true);
  let local = 0;
  for (let i = 0; i < 300 && local < 3; i++) {
    const c = await engineCalls(sim.workers);
    const tk = await post(port, '/v1/tokenize', { model: LLAMA, prompt: `${TEXT} ${i}` });
    const exp = await ref.encode(`${TEXT} ${i}`, true);
    assert.deepEqual(Object.keys(tk.json), ['tokens', 'count', 'max_model_len']);
    assert.deepEqual(tk.json, { tokens: exp, count: exp.length, max_model_len: 4096 });
    const dt = await post(port, '/v1/detokenize', { model: LLAMA, tokens: ids });
    assert.deepEqual(dt.json, { text: await ref.decode(ids, true, false) });
    if ((await engineCalls(sim.workers)) === c) local++;
    else await new Promise((res) => setTimeout(res, 100));
  }
  assert.ok(local >= 3, `answered by the gateway: ${local}`);
});

test('a chunked engine answer is checked like any; an HTTP/2 client gets the gateway\'s answer', async (t) => {
  // An engine in front of the simulator that answers in chunks (Transfer-Encoding: chunked).
  const sim = await startSim(['--port', '0', '--models-dir', modelsDir, '--model', QWEN]);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  let calls = 0;
  const srv = http.createServer((req, res) => {
    let b = '';
    req.on('data', (d) => { b += d; });
    req.on('end', async () => {
      calls++;
      const up = await fetch(`${w.url}${req.url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
      const text = await up.text();
      res.writeHead(up.status, { 'content-type': 'application/json' });
      res.write(text.slice(0, 7));
      setTimeout(() => res.end(text.slice(7)), 5);
    });
  });
  const { gw, port } = await gatewayInFrontOf(t, srv);
  const ref = refs[QWEN];
  let local = 0;
  for (let i = 0; i < 300 && local < 2; i++) {
    const c = calls;
    const a = await post(port, '/tokenize', { model: QWEN, prompt: `chunked ${i}` });
    const exp = await ref.encode(`chunked ${i}`, true);
    assert.deepEqual(a.json, { count: exp.length, max_model_len: 131072, tokens: exp, token_strs: null });
    if (calls === c) local++;
    else await new Promise((res) => setTimeout(res, 50));
  }
  assert.equal(local, 2, 'learned from chunked answers');
  const ev = await events(gw, 'tokenize');
  assert.equal(ev.mismatched, 0, JSON.stringify(ev));
  // HTTP/2 (h2c by prior knowledge): the same request path, answered by the gateway.
  const s = http2.connect(`http://127.0.0.1:${port}`);
  t.after(() => s.close());
  const c = calls;
  const body = await new Promise((resolve, reject) => {
    const q = s.request({ ':method': 'POST', ':path': '/tokenize', 'content-type': 'application/json' });
    let d = '';
    let status = 0;
    q.setEncoding('utf8');
    q.on('response', (h) => { status = h[':status']; });
    q.on('data', (x) => { d += x; });
    q.on('end', () => resolve({ status, d }));
    q.on('error', reject);
    q.end(JSON.stringify({ model: QWEN, prompt: 'over h2' }));
  });
  assert.equal(body.status, 200, body.d);
  const exp = await ref.encode('over h2', true);
  assert.deepEqual(JSON.parse(body.d), { count: exp.length, max_model_len: 131072, tokens: exp, token_strs: null });
  assert.equal(calls, c, 'answered by the gateway');
});
