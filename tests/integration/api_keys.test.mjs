// API keys end to end (issue 14, first slice): keys through the management API, a rule with
// api_key_auth "required" in front of an upstream that records what it receives, the statuses
// and codes of upstream-gateway.md §2.4 (401 invalid_api_key, 403 model_not_allowed), the real
// OpenAI SDK sending its key as Authorization: Bearer, the key never reaching the engine, and the
// keys surviving kill -9 (SQLite in --state-dir).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import OpenAI from 'openai';
import { LB_BASE, api, freePort, rule, scrapeMetrics, startGateway, tempDir, waitFor } from './lib.mjs';

const KEYS = '/netlox/v1/config/ai/apikey';

// An OpenAI-shaped upstream that records each request's headers.
async function recordingUpstream(t) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      seen.push({ headers: req.headers, body });
      const out = JSON.stringify({ id: 'x', object: 'chat.completion', created: 0, model: 'm1',
        choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { seen, worker: { host: '127.0.0.1', port: srv.address().port } };
}

// A gateway on a fresh state dir and a recording upstream, both stopped when the test ends.
async function gatewayAndUpstream(t, extra = []) {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const gw = await startGateway({ stateDir: tmp.dir, extra });
  t.after(() => gw.stop());
  return { gw, up: await recordingUpstream(t) };
}

async function chat(port, headers, model = 'm1') {
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

test('api_key_auth required: keys, statuses, stripping, persistence', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  let gw = await startGateway({ stateDir: tmp.dir });
  t.after(() => gw.stop('SIGKILL'));
  const up = await recordingUpstream(t);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);

  // Create: 201 with the raw key once; bad bodies are 400 naming the field and create nothing.
  r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', name: 'ci', allowed_models: ['m1'] });
  assert.equal(r.status, 201, r.text);
  const { key_id: id, raw_key: raw } = r.json;
  assert.match(raw, /^kvg-[0-9a-f]{16}-[A-Za-z0-9_-]{43}$/);
  assert.equal(raw.slice(4, 20), id);
  for (const [body, field] of [[{ name: 'x' }, 'tenant_id'], [{ tenant_id: '' }, 'tenant_id'],
    [{ tenant_id: 'a', allowed_models: 'm1' }, 'allowed_models'], [{ tenant_id: 'a', bogus: 1 }, 'bogus'],
    [{ tenant_id: 'a', tokens_per_min: -1 }, 'tokens_per_min'], [{ tenant_id: 'a', expires_at: 'soon' }, 'expires_at'],
    [{ tenant_id: 'a', enabled: 'yes' }, 'enabled'],
    [{ tenant_id: 'a', expires_at: '1970-01-01T00:00:00Z' }, 'expires_at'],  // 0 would mean never
    [{ tenant_id: 'a', expires_at: '2027-02-30T00:00:00Z' }, 'expires_at'],
    [{ tenant_id: 'a', expires_at: '2027-01-31T00:00:00Zjunk' }, 'expires_at'],
    [{ tenant_id: 'a', expires_at: '2027-1-31T00:00:00Z' }, 'expires_at']]) {
    const bad = await api(gw.api, 'POST', KEYS, body);
    assert.equal(bad.status, 400, `${JSON.stringify(body)}: ${bad.text}`);
    assert.equal(bad.json.result, field);
  }
  assert.equal((await api(gw.api, 'POST', KEYS, '{"tenant_id":')).status, 400);
  r = await api(gw.api, 'GET', KEYS);
  assert.equal(r.status, 200);
  assert.equal(r.json.length, 1);
  assert.deepEqual(Object.keys(r.json[0]).sort(), ['allowed_models', 'burst_size', 'created_at', 'enabled',
    'expires_at', 'key_id', 'name', 'rate_limit_rps', 'tenant_id', 'tokens_per_min']);
  assert.ok(!r.text.includes(raw.slice(21)), 'the secret is never listed');
  assert.equal((await api(gw.api, 'GET', `${KEYS}?tenant_id=other`)).json.length, 0);
  assert.equal((await api(gw.api, 'GET', `${KEYS}/${id}`)).json.tenant_id, 'acme');
  assert.equal((await api(gw.api, 'GET', `${KEYS}/0000000000000000`)).status, 404);

  // The data plane: 401 without, with a wrong or malformed key; 200 with X-Api-Key, the key
  // stripped before the engine.
  r = await chat(port, {});
  assert.equal(r.status, 401, r.text);
  assert.equal(r.json.error.code, 'invalid_api_key');
  const wrong = `${raw.slice(0, 21)}${'A'.repeat(43)}`;
  assert.equal((await chat(port, { 'x-api-key': wrong })).status, 401);
  assert.equal((await chat(port, { 'x-api-key': 'sk-not-ours' })).status, 401);
  assert.equal(up.seen.length, 0, 'refused requests never reach the engine');
  r = await chat(port, { 'x-api-key': raw });
  assert.equal(r.status, 200, r.text);
  assert.equal(up.seen.length, 1);
  assert.equal(up.seen[0].headers['x-api-key'], undefined);
  // A model the key may not use: 403 model_not_allowed.
  r = await chat(port, { 'x-api-key': raw }, 'm2');
  assert.equal(r.status, 403, r.text);
  assert.equal(r.json.error.code, 'model_not_allowed');

  // X-Model cannot carry a request past the allowlist: a body naming another model is refused.
  r = await chat(port, { 'x-api-key': raw, 'x-model': 'm1' }, 'm2');
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.error.code, 'model_mismatch');
  // A key in both headers: neither reaches the engine.
  assert.equal((await chat(port, { 'x-api-key': raw, authorization: `Bearer ${raw}` })).status, 200);
  assert.equal(up.seen.at(-1).headers.authorization, undefined);
  assert.equal(up.seen.at(-1).headers['x-api-key'], undefined);
  // A body that is not JSON (an upload) has no model: a key limited to models refuses it (403),
  // not a 400 invalid_json before the key is even read.
  const upload = await fetch(`http://127.0.0.1:${port}/v1/files`, { method: 'POST',
    headers: { 'content-type': 'multipart/form-data; boundary=x', 'x-api-key': raw }, body: '--x\r\n\r\nhi\r\n--x--\r\n' });
  assert.equal(upload.status, 403, await upload.text());

  // The real OpenAI SDK: its key goes as Authorization: Bearer; the engine sees neither.
  const client = new OpenAI({ apiKey: raw, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const done = await client.chat.completions.create({ model: 'm1', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(done.choices[0].message.content, 'hi');
  const last = up.seen.at(-1).headers;
  assert.equal(last.authorization, undefined);
  assert.equal(last['x-api-key'], undefined);
  const bad = new OpenAI({ apiKey: wrong, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'm1', messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 401 && e.code === 'invalid_api_key');

  // PATCH: disabled, then expired; DELETE: unknown. Each a 401.
  assert.equal((await api(gw.api, 'PATCH', `${KEYS}/${id}`, { enabled: false })).status, 204);
  r = await chat(port, { 'x-api-key': raw });
  assert.equal(r.status, 401);
  assert.match(r.json.error.message, /disabled/);
  assert.equal((await api(gw.api, 'PATCH', `${KEYS}/${id}`, { enabled: true, expires_at: '2001-01-01T00:00:00Z' })).status, 204);
  r = await chat(port, { 'x-api-key': raw });
  assert.equal(r.status, 401);
  assert.match(r.json.error.message, /expired/);
  assert.equal((await api(gw.api, 'PATCH', `${KEYS}/${id}`, { expires_at: 0 })).status, 204);
  assert.equal((await chat(port, { 'x-api-key': raw })).status, 200);

  // Acknowledged keys survive kill -9; the store holds a salted hash, never the key.
  r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', allowed_models: [] });
  const raw2 = r.json.raw_key;
  await gw.stop('SIGKILL');
  const dump = execFileSync('sqlite3', [path.join(tmp.dir, 'governance.db'), '.dump'], { encoding: 'utf8' });
  assert.ok(!dump.includes(raw.slice(21)) && !dump.includes(raw2.slice(21)), 'no secret in the database');
  gw = await startGateway({ stateDir: tmp.dir });
  assert.equal((await chat(port, { 'x-api-key': raw })).status, 200);
  assert.equal((await chat(port, { authorization: `Bearer ${raw2}` }, 'any-model')).status, 200);
  const upload2 = await fetch(`http://127.0.0.1:${port}/v1/files`, { method: 'POST',
    headers: { 'content-type': 'multipart/form-data; boundary=x', 'x-api-key': raw2 }, body: '--x\r\n\r\nhi\r\n--x--\r\n' });
  assert.equal(upload2.status, 200, 'a key for every model passes a body without a model');
  assert.equal((await api(gw.api, 'DELETE', `${KEYS}/${id}`)).status, 204);
  assert.equal((await api(gw.api, 'DELETE', `${KEYS}/${id}`)).status, 404);
  assert.equal((await chat(port, { 'x-api-key': raw })).status, 401);
  const m = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_api_key_checks_total');
  const count = (o) => m.find((s) => s.labels.outcome === o)?.value ?? -1;
  assert.ok(count('ok') >= 2 && count('unknown') >= 1, JSON.stringify(m));
});

test('rate_limit_rps of a key: 429 with Retry-After past the burst, per key', async (t) => {
  const { gw, up } = await gatewayAndUpstream(t, ['--access-log']);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { api_key_auth: 'required' } }))).status, 200);
  // One request per 100 s after a burst of 2: the third within 100 s is refused, whatever the
  // machine's speed.
  const created = (await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', rate_limit_rps: 0.01, burst_size: 2 })).json;
  const slow = created.raw_key;
  const free = (await api(gw.api, 'POST', KEYS, { tenant_id: 'acme' })).json.raw_key;
  assert.equal((await chat(port, { 'x-api-key': slow })).status, 200);
  assert.equal((await chat(port, { 'x-api-key': slow })).status, 200);
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': slow },
    body: JSON.stringify({ model: 'm1', messages: [] }) });
  assert.equal(res.status, 429);
  assert.equal((await res.json()).error.code, 'rate_limit_exceeded');
  const retry = Number(res.headers.get('retry-after'));
  assert.ok(retry >= 1 && retry <= 100, `Retry-After ${retry}`);
  assert.equal(up.seen.length, 2, 'the refused request never reached the engine');
  // Another key of the same tenant is not limited by this one's bucket.
  for (let i = 0; i < 5; i++) assert.equal((await chat(port, { 'x-api-key': free })).status, 200);
  // The access log names who was admitted: the key's id and tenant, never the key.
  const admitted = () => gw.proc.stderrText.split('\n').filter((l) => l.includes(' access ') &&
    l.includes(`api_key=${created.key_id}`) && l.includes('tenant=acme'));
  assert.ok(await waitFor(() => admitted().length >= 2, 5000), gw.proc.stderrText.slice(-2000));
  assert.ok(!gw.proc.stderrText.includes(slow.slice(21)), 'the secret is never logged');
  const m = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'loxilb_ai_rate_limit_hits_total');
  assert.equal(m.find((s) => s.labels.tenant === 'acme' && s.labels.reason === 'key_rps')?.value, 1, JSON.stringify(m));
});

test('api_key_auth disabled strips X-Api-Key; omitted passes it through', async (t) => {
  const { gw, up } = await gatewayAndUpstream(t);
  const p1 = await freePort();
  const p2 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port: p1, workers: [up.worker],
    extraArgs: { api_key_auth: 'disabled' } }))).status, 200);
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port: p2, workers: [up.worker] }))).status, 200);
  assert.equal((await chat(p1, { 'x-api-key': 'engine-key', authorization: 'Bearer engine' })).status, 200);
  assert.equal(up.seen[0].headers['x-api-key'], undefined);
  assert.equal(up.seen[0].headers.authorization, 'Bearer engine');
  assert.equal((await chat(p2, { 'x-api-key': 'engine-key' })).status, 200);
  assert.equal(up.seen[1].headers['x-api-key'], 'engine-key');
  // A jwt rule naming a profile that does not exist fails closed (503), never open.
  const p3 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port: p3, workers: [up.worker],
    extraArgs: { api_key_auth: 'jwt', jwt_auth_profile: 'p' } }))).status, 200);
  const r = await chat(p3, {});
  assert.equal(r.status, 503);
  assert.equal(r.json.error.code, 'policy_store_unavailable');
  assert.equal(up.seen.length, 2);
});

test('model pools behind keys: /v1/models needs a key and lists what it may use', async (t) => {
  const { gw, up } = await gatewayAndUpstream(t);
  const port = await freePort();
  for (const model of ['m1', 'm2'])
    assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, model, workers: [up.worker],
      extraArgs: { api_key_auth: 'required' } }))).status, 200);
  const { raw_key: raw } = (await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', allowed_models: ['m1'] })).json;
  let r = await fetch(`http://127.0.0.1:${port}/v1/models`);
  assert.equal(r.status, 401);
  r = await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { 'x-api-key': raw } });
  assert.equal(r.status, 200);
  assert.deepEqual((await r.json()).data.map((m) => m.id), ['m1']);
  assert.equal((await chat(port, { 'x-api-key': raw }, 'm1')).status, 200);
  assert.equal((await chat(port, { 'x-api-key': raw }, 'm2')).status, 403);
  // X-Model naming a pool and a body naming another: refused, not routed by the header.
  r = await chat(port, { 'x-api-key': raw, 'x-model': 'm1' }, 'm2');
  assert.equal(r.status, 400);
  assert.equal(up.seen.length, 1);
});

// kill -9 in the middle of key churn (creates, patches and deletes in flight, issue 14 §6): every
// change the API acknowledged is there after the restart, and every key that was acknowledged as
// created (and not deleted) still authenticates.
test('kill -9 during key churn loses no acknowledged change', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  let gw = await startGateway({ stateDir: tmp.dir });
  t.after(() => gw.stop('SIGKILL'));
  const up = await recordingUpstream(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { api_key_auth: 'required' } }))).status, 200);
  const created = new Map();  // key_id -> raw key (acknowledged 201)
  const deleted = new Set();  // acknowledged 204
  const deleting = new Set();  // a DELETE was sent (it may have committed without an answer)
  const renamed = new Map();  // key_id -> name acknowledged by PATCH 204
  let stop = false;
  const churn = async (w) => {
    for (let i = 0; !stop; i++) {
      try {
        const r = await api(gw.api, 'POST', KEYS, { tenant_id: `t${w}`, name: `k${i}` });
        if (r.status !== 201) continue;
        created.set(r.json.key_id, r.json.raw_key);
        if (i % 3 === 1) {
          const p = await api(gw.api, 'PATCH', `${KEYS}/${r.json.key_id}`, { name: `renamed${i}` });
          if (p.status === 204) renamed.set(r.json.key_id, `renamed${i}`);
        } else if (i % 3 === 2) {
          deleting.add(r.json.key_id);
          const d = await api(gw.api, 'DELETE', `${KEYS}/${r.json.key_id}`);
          if (d.status === 204) deleted.add(r.json.key_id);
        }
      } catch { return; }  // the gateway is gone
    }
  };
  const workers = [churn(0), churn(1), churn(2)];
  // Kill once some changes are acknowledged, while requests are still in flight.
  assert.ok(await waitFor(() => created.size >= 30, 20000), `created ${created.size}`);
  stop = true;
  await gw.stop('SIGKILL');
  await Promise.all(workers);
  gw = await startGateway({ stateDir: tmp.dir });
  const listed = new Map((await api(gw.api, 'GET', KEYS)).json.map((k) => [k.key_id, k]));
  for (const [id] of created) {
    if (deleted.has(id)) assert.ok(!listed.has(id), `deleted key ${id} is back`);
    else if (!deleting.has(id)) assert.ok(listed.has(id), `acknowledged key ${id} lost`);
  }
  for (const [id, name] of renamed) if (!deleted.has(id)) assert.equal(listed.get(id)?.name, name);
  // The keys still authenticate through the restarted gateway (the rule was restored too).
  const alive = [...created].filter(([id]) => !deleting.has(id)).slice(0, 5);
  for (const [, raw] of alive) assert.equal((await chat(port, { 'x-api-key': raw })).status, 200);
});
