// Issue 28 §1.1 and §1.2: the gateway never authorizes or routes on a model or a path it read
// differently from the engine. The engine here is tests/interop/reading_standin.py, which reads
// requests as the Python engines do (json.loads: the last duplicate key wins, lone surrogates
// accepted; uvicorn: the path percent-decoded) and answers with what it read, so each assertion
// compares the gateway's decision with the engine's reading. Every request below that the old
// gateway let through was confirmed to reach the stand-in as the protected model or path.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RawClient } from './fake_upstream.mjs';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics } from './lib.mjs';

const STANDIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../interop/reading_standin.py');
const KEYS = '/netlox/v1/config/ai/apikey';

async function standin(t) {
  const proc = spawn('/usr/bin/python3', [STANDIN], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => proc.kill('SIGKILL'));
  const port = await new Promise((resolve, reject) => {
    proc.once('exit', (c) => reject(new Error(`stand-in exited ${c}`)));
    readline.createInterface({ input: proc.stdout }).once('line', (l) => resolve(JSON.parse(l).port));
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    worker: { host: '127.0.0.1', port },
    seen: async () => (await fetch(`${base}/seen`)).json(),
  };
}

// One request on a fresh connection, written byte for byte (the target and body are sent as given).
async function send(port, { method = 'POST', target, host = 'kvgate.test', headers = {}, body = '' }) {
  const c = await RawClient.open(port);
  try {
    let h = `${method} ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n`;
    if (!Object.keys(headers).some((k) => k.toLowerCase() === 'content-type'))
      h += 'Content-Type: application/json\r\n';
    for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
    c.write(`${h}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    return await c.readResponse(10000);
  } finally {
    c.close();
  }
}

const refused = async (gw, reason) => {
  const s = (await scrapeMetrics(gw.api)).find((x) => x.name === 'kvgate_requests_refused_total' &&
    x.labels.reason === reason);
  return s ? s.value : 0;
};

// The body the review found: Python reads "secret" (the last key), the old walk stopped at the
// undecodable key and kept "allowed".
const SMUGGLE = String.raw`{"model":"allowed","\ud800":0,"model":"secret","prompt":"hi"}`;

test('a body whose model the engine reads differently is never authorized as another model', async (t) => {
  const eng = await standin(t);
  const gw = await gateway(t);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [eng.worker],
    extraArgs: { api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', allowed_models: ['allowed'] });
  assert.equal(r.status, 201, r.text);
  const key = { 'X-Api-Key': r.json.raw_key };

  // The independent reading: sent straight to the engine, the body names "secret".
  const direct = await send(eng.worker.port, { target: '/v1/completions', body: SMUGGLE });
  assert.equal(direct.json.model, 'secret');
  const before = (await eng.seen()).length;

  for (const headers of [key, { ...key, 'X-Model': 'allowed' }]) {
    r = await send(port, { target: '/v1/completions', headers, body: SMUGGLE });
    assert.equal(r.status, 400, r.body);
    assert.equal(r.json.error.code, 'ambiguous_model');
    assert.equal(r.json.error.param, 'model');
  }
  // Plain duplicates, an escaped duplicate name, an undecodable model: refused too.
  for (const body of [`{"model":"allowed","model":"allowed"}`, String.raw`{"model":"allowed","mod\u0065l":"secret"}`,
    String.raw`{"model":"allowed\ud800"}`]) {
    r = await send(port, { target: '/v1/completions', headers: key, body });
    assert.equal(r.status, 400, `${body}: ${r.body}`);
    assert.equal(r.json.error.code, 'ambiguous_model');
  }
  assert.equal((await eng.seen()).length, before, 'no refused request reached the engine');

  // An undecodable key alone no longer stops the walk: the model after it is the one checked.
  r = await send(port, { target: '/v1/completions', headers: key, body: String.raw`{"\ud800":0,"model":"secret"}` });
  assert.equal(r.status, 403, r.body);
  assert.equal(r.json.error.code, 'model_not_allowed');
  r = await send(port, { target: '/v1/completions', headers: key, body: String.raw`{"\ud800":0,"model":"allowed"}` });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.model, 'allowed', 'the engine read the model the key was checked against');
  // Python also reads NaN (not JSON to the gateway's validator): the walk reads the model past
  // it, as Python does, so neither X-Model nor the key's list is fooled.
  r = await send(port, { target: '/v1/completions', headers: { ...key, 'X-Model': 'allowed' },
    body: '{"temperature":NaN,"model":"secret"}' });
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.code, 'model_mismatch');
  r = await send(port, { target: '/v1/completions', headers: key, body: '{"temperature":NaN,"model":"secret"}' });
  assert.equal(r.status, 403, r.body);
  assert.equal(r.json.error.code, 'model_not_allowed');
  // A JSON body the gateway cannot parse at all is refused where credentials are checked.
  r = await send(port, { target: '/v1/completions', headers: { ...key, 'X-Model': 'allowed' },
    body: '{"model":"allowed",' });
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.code, 'invalid_json');
  // A form upload's model is read from the form, as the engine reads it: X-Model cannot vouch
  // for another one.
  r = await send(port, { target: '/v1/audio/transcriptions',
    headers: { ...key, 'X-Model': 'allowed', 'Content-Type': 'multipart/form-data; boundary=x' },
    body: '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nsecret\r\n--x--\r\n' });
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.code, 'model_mismatch');
  // X-Model with a body that names no model (or null): the engine would serve its default model.
  for (const body of ['{"prompt":"hi"}', '{"model":null,"prompt":"hi"}']) {
    r = await send(port, { target: '/v1/completions', headers: { ...key, 'X-Model': 'allowed' }, body });
    assert.equal(r.status, 400, `${body}: ${r.body}`);
    assert.equal(r.json.error.code, 'model_mismatch');
  }
  // A form's model field is read as the engine reads it: named, the key's list applies to it.
  r = await send(port, { target: '/v1/audio/transcriptions',
    headers: { ...key, 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'model=secret&x=1' });
  assert.equal(r.status, 403, r.body);
  assert.equal(r.json.error.code, 'model_not_allowed');
  r = await send(port, { target: '/v1/audio/transcriptions',
    headers: { ...key, 'Content-Type': 'multipart/form-data; boundary=x' },
    body: '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nallowed\r\n--x--\r\n' });
  assert.equal(r.status, 200, r.body);
  // A UTF-8 byte order mark: JSON to Python, so to the gateway too.
  r = await send(port, { target: '/v1/completions', headers: key, body: '\ufeff{"model":"allowed"}' });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.model, 'allowed');
  // The ordinary request still works.
  r = await send(port, { target: '/v1/completions', headers: key, body: '{"model":"allowed","prompt":"hi"}' });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.model, 'allowed');
  assert.ok(await refused(gw, 'ambiguous_model') >= 5);
  assert.ok(await refused(gw, 'body_unreadable') >= 1);
});

test('model pools: an ambiguous model never picks a pool', async (t) => {
  const eng = await standin(t);
  const gw = await gateway(t);
  const port = await freePort();
  // "allowed" is open, "secret" needs a key; both pools are served by the same engine.
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, model: 'allowed', workers: [eng.worker] }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, model: 'secret', workers: [eng.worker],
    extraArgs: { api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);
  r = await send(port, { target: '/v1/completions', body: SMUGGLE });
  assert.equal(r.status, 400, r.body);
  assert.equal(r.json.error.code, 'ambiguous_model');
  r = await send(port, { target: '/v1/completions', body: '{"model":"secret"}' });
  assert.equal(r.status, 401, r.body);
  r = await send(port, { target: '/v1/completions', body: '{"model":"allowed"}' });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.model, 'allowed');
  assert.equal((await eng.seen()).length, 1);
  // A form body naming the keyed pool's model, with or without X-Model naming the open pool
  // (the review's bypass: routed by the header, served as the form's model).
  for (const [ct, body] of [['multipart/form-data; boundary=x',
    '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nsecret\r\n--x--\r\n'],
  ['application/x-www-form-urlencoded', 'model=secret']]) {
    for (const extra of [{ 'X-Model': 'allowed' }, {}]) {
      r = await send(port, { target: '/v1/audio/transcriptions', headers: { 'Content-Type': ct, ...extra }, body });
      assert.ok(r.status === 400 || r.status === 401, `${ct} ${JSON.stringify(extra)}: ${r.status} ${r.body}`);
    }
  }
  assert.equal((await eng.seen()).length, 1, 'no form reached the engine');
});

test('paths and hosts are matched as the engine reads them, and forwarded so', async (t) => {
  const eng = await standin(t);
  const gw = await gateway(t);
  const port = await freePort();
  // /v1/chat needs a key; everything else on the listener is open; host api.test needs a key.
  for (const extra of [{ path_prefix: '/v1/chat', path_match_mode: 'prefix', api_key_auth: 'required' },
    {}, { host: 'api.test', api_key_auth: 'required' },
    { path_prefix: '/v1/embeddings', path_match_mode: 'exact', api_key_auth: 'required' }]) {
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [eng.worker], extraArgs: extra }));
    assert.equal(r.status, 200, r.text);
  }
  const body = '{"model":"m","messages":[]}';
  // The independent reading: uvicorn serves /v1/%63hat/completions as /v1/chat/completions.
  const direct = await send(eng.worker.port, { target: '/v1/%63hat/completions', body });
  assert.equal(direct.json.path, '/v1/chat/completions');

  for (const target of ['/v1/%63hat/completions', '/v1/%63%68%61%74/completions', '//v1/chat/completions',
    '/v1//chat/completions', '/v1/x/../chat/completions', '/v1/./chat/completions', '/v1/x/%2e%2E/chat/completions',
    '/v1/chat/completions', '/v1/embeddings', '/v1//embeddings', '/v1/%65mbeddings']) {
    const r = await send(port, { target, body });
    assert.equal(r.status, 401, `${target}: ${r.status} ${r.body}`);
  }
  for (const target of ['/v1%2Fchat/completions', '/v1%2fchat/completions', '/v1/%5cchat', '/v1/%zz',
    '/v1/%00', 'http://kvgate.test/v1/chat/completions', '/v1/chat/completions#x', '/v1/embeddings#x',
    '/v1/%63hat/completions#frag', '/x/..#f']) {
    const r = await send(port, { target, body });
    assert.equal(r.status, 400, `${target}: ${r.status} ${r.body}`);
    assert.equal(r.json.error.code, 'bad_path');
  }
  assert.equal((await eng.seen()).length, 1, 'only the direct request reached the engine');

  // Open paths still pass, and the engine gets the normalized target (and the query as given).
  let r = await send(port, { target: '/v1/%63ompletions/./x?a=%2F', body });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.target, '/v1/completions/x?a=%2F');
  assert.equal(r.json.path, '/v1/completions/x');
  r = await send(port, { target: '/v1/models%3Ax', body });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.json.target, '/v1/models%3Ax', 'reserved escapes are kept');

  // A trailing dot or upper case in Host names the same host: the keyed rule, not the open one.
  for (const host of ['api.test', 'api.test.', 'API.TEST.', 'api.test.:8080']) {
    r = await send(port, { target: '/v1/completions', host, body });
    assert.equal(r.status, 401, `${host}: ${r.body}`);
  }
  assert.ok(await refused(gw, 'bad_path') >= 9);
});
