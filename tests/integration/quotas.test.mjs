// Quotas end to end (issue 14 §2): the limit routes of upstream-gateway.md §1.6 (tenant, user,
// defaults) in SQLite surviving kill -9; tenant token-per-minute buckets charged from the engine's
// usage, going into debt and refusing with 429 + Retry-After; a tenant+model bucket; the shared
// VIP bucket of keyless traffic; a stream asked for usage on the client's behalf with the usage
// chunk hidden from it; settlement by estimate when the client cancels a stream. Expected figures
// are worked out by hand in the comments (the refill of a 60-token-per-minute bucket is 1 token/s,
// so the one-sided bounds below hold on a slow machine).
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import { test } from 'node:test';
import OpenAI from 'openai';
import { LB_BASE, api, freePort, rawRequest, rule, scrapeMetrics, sleep, startGateway, tempDir, waitFor } from './lib.mjs';

const KEYS = '/netlox/v1/config/ai/apikey';
const TENANT = '/netlox/v1/config/ai/tenant/ratelimit';
const USER = '/netlox/v1/config/ai/user/ratelimit';
const DEFAULTS = '/netlox/v1/config/ai/ratelimit/defaults';

// An OpenAI-shaped engine: non-streaming answers report `usage.total_tokens = opts.total`;
// streams send `opts.chunks` content chunks (every `opts.gapMs`), and a usage chunk only when
// the request asked for it (as vLLM and OpenAI do), with "usage":null on the others.
async function engine(t, opts) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      const j = JSON.parse(body || '{}');
      seen.push(j);
      if (req.url === '/v1/responses') return responsesApi(j, res, opts);
      if (req.url.startsWith('/v1/responses/')) {  // a stored response, with the usage it had
        const out = JSON.stringify({ id: 'resp_1', object: 'response', status: 'completed', output: [],
          usage: { input_tokens: 6, output_tokens: 4, total_tokens: 10 } });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
        return;
      }
      if (!j.stream && opts.hang) return;  // an answer that never comes (the client cancels)
      if (j.stream && opts.hangStream) return;  // a stream that never begins
      if (!j.stream) {
        const out = JSON.stringify({ id: 'x', object: 'chat.completion', model: j.model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 3, completion_tokens: opts.total - 3, total_tokens: opts.total } });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
        return;
      }
      const usage = j.stream_options?.include_usage === true;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const tail = usage ? ',"usage":null' : '';
      for (let i = 0; i < opts.chunks; i++) {
        if (res.destroyed) return;
        res.write(`data: {"id":"s","choices":[{"index":0,"delta":{"content":"t${i}"}}]${tail}}\n\n`);
        if (opts.gapMs) await sleep(opts.gapMs);
      }
      if (usage)
        res.write(`data: {"id":"s","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":${opts.chunks},"total_tokens":${opts.chunks + 4}}}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { srv.closeAllConnections(); return new Promise((r) => srv.close(r)); });
  return { seen, worker: { host: '127.0.0.1', port: srv.address().port } };
}

// The Responses API as OpenAI and vLLM answer it: usage as input/output tokens, at the top level
// of an answer; a stream's usage only inside response.completed's "response" object (earlier
// events carry "usage":null there), with no include_usage option.
let sentStream = '';  // the last Responses stream the engine wrote, byte for byte
async function responsesApi(j, res, opts) {
  const usage = { input_tokens: 6, input_tokens_details: { cached_tokens: 0 }, output_tokens: opts.chunks ?? 1,
    output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 6 + (opts.chunks ?? 1) };
  const response = (status, u) => ({ id: 'resp_1', object: 'response', status, model: j.model, output: [], usage: u });
  if (!j.stream) {
    const out = JSON.stringify(response('completed', usage));
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let seq = 0;
  sentStream = '';
  const send = (type, data) => {
    const ev = `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`;
    sentStream += ev;
    res.write(ev);
  };
  send('response.created', { response: response('in_progress', null) });
  for (let i = 0; i < (opts.chunks ?? 1); i++) send('response.output_text.delta', { delta: `t${i}` });
  send('response.completed', { response: response('completed', usage) });
  res.end();
}

async function setup(t, engineOpts, ruleArgs = { api_key_auth: 'required' }) {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const gw = await startGateway({ stateDir: tmp.dir, extra: ['--access-log'] });
  t.after(() => gw.stop());
  const up = await engine(t, engineOpts);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker], extraArgs: ruleArgs }));
  assert.equal(r.status, 200, r.text);
  return { gw, up, port };
}

async function newKey(gw, tenant, extra = {}) {
  const r = await api(gw.api, 'POST', KEYS, { tenant_id: tenant, ...extra });
  assert.equal(r.status, 201, r.text);
  return r.json.raw_key;
}

async function chat(port, headers, body) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm1', messages: [{ role: 'user', content: 'hello' }], ...body }) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* a stream */ }
  return { status: res.status, json, text, retry: res.headers.get('retry-after') };
}

const metric = (ms, name, labels) => ms.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

test('limit routes: validation, 404s naming the row, replace semantics, kill -9', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  let gw = await startGateway({ stateDir: tmp.dir });
  t.after(() => gw.stop('SIGKILL'));

  let r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', rps: 50, tokens_per_min: 2000,
    burst_pct: 150, model_limits: [{ model: 'llama', tokens_per_min: 100 }] });
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'GET', `${TENANT}/acme`);
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { tenant_id: 'acme', rps: 50, tokens_per_min: 2000, burst_pct: 150,
    model_limits: [{ model: 'llama', tokens_per_min: 100 }] });
  // Tenant POST without model_limits keeps them; the rest of the row is replaced.
  r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', rps: 5 });
  assert.equal(r.status, 204);
  r = await api(gw.api, 'GET', `${TENANT}/acme`);
  assert.equal(r.json.tokens_per_min, 0);
  assert.equal(r.json.model_limits.length, 1);

  // User rows: POST replaces model_limits wholesale; list per tenant; 404 names the row.
  r = await api(gw.api, 'POST', USER, { tenant_id: 'acme', user_id: 'bob', rps: 7, burst_size: 14,
    tokens_per_min: 900, model_limits: [{ model: 'a', tokens_per_min: 1 }, { model: 'b', tokens_per_min: 2 }] });
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'POST', USER, { tenant_id: 'acme', user_id: 'bob', rps: 7,
    model_limits: [{ model: 'a', tokens_per_min: 3 }] });
  assert.equal(r.status, 204);
  r = await api(gw.api, 'GET', `${USER}/acme/bob`);
  assert.deepEqual(r.json.model_limits, [{ model: 'a', tokens_per_min: 3 }]);
  r = await api(gw.api, 'GET', `${USER}/acme`);
  assert.deepEqual(r.json.map((u) => u.user_id), ['bob']);
  r = await api(gw.api, 'GET', `${USER}/nobody`);
  assert.deepEqual(r.json, []);
  r = await api(gw.api, 'GET', `${USER}/acme/absent`);
  assert.equal(r.status, 404);
  assert.match(r.json.result, /user rate-limit row/);

  // Defaults: global ignores rule_ident on GET/DELETE; rule rows select by it; a POST replaces.
  r = await api(gw.api, 'POST', DEFAULTS, { scope: 'global', default_user_rps: 3, vip_shared_tpm: 900 });
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'POST', DEFAULTS, { scope: 'rule', rule_ident: '127.0.0.1:9', default_tenant_tpm: 5 });
  assert.equal(r.status, 204, r.text);
  r = await api(gw.api, 'GET', `${DEFAULTS}/global?rule_ident=stray`);
  assert.equal(r.status, 200);
  assert.equal(r.json.default_user_rps, 3);
  r = await api(gw.api, 'GET', `${DEFAULTS}/rule?rule_ident=127.0.0.1:9`);
  assert.equal(r.json.default_tenant_tpm, 5);
  r = await api(gw.api, 'GET', `${DEFAULTS}/rule?rule_ident=absent`);
  assert.equal(r.status, 404);
  assert.match(r.json.result, /rate-limit defaults row/);
  r = await api(gw.api, 'POST', DEFAULTS, { scope: 'global', vip_shared_rps: 9 });
  r = await api(gw.api, 'GET', `${DEFAULTS}/global`);
  assert.equal(r.json.default_user_rps, 0, 'a POST replaces the whole row');
  assert.equal(r.json.vip_shared_rps, 9);

  // Bad bodies: 400 naming the field, nothing changes.
  for (const [p, body, field] of [
    [TENANT, { tenant_id: 'bad|tenant', rps: 1 }, 'tenant_id'],
    [TENANT, { tenant_id: 'acme', rps: -1 }, 'rps'],
    [TENANT, { tenant_id: 'acme', bogus: 1 }, 'bogus'],
    [USER, { tenant_id: 'acme', user_id: 'uq:victim', rps: 1 }, 'user_id'],
    [USER, { tenant_id: 'acme', rps: 1 }, 'user_id'],
    [USER, { tenant_id: 'acme', user_id: 'x', model_limits: [{ model: 'bad|model', tokens_per_min: 1 }] }, 'model_limits.model'],
    [DEFAULTS, { scope: 'global' }, 'body'],
    [DEFAULTS, { scope: 'rule', default_user_rps: 1 }, 'rule_ident'],
    [DEFAULTS, { scope: 'global', rule_ident: 'x', default_user_rps: 1 }, 'rule_ident'],
    [DEFAULTS, { scope: 'rule', rule_ident: 'v:svc', default_user_rps: 1 }, 'rule_ident']]) {
    const bad = await api(gw.api, 'POST', p, body);
    assert.equal(bad.status, 400, `${JSON.stringify(body)}: ${bad.text}`);
    assert.equal(bad.json.result, field, bad.text);
  }
  for (const junk of ['{', '[1,2', '"x"', '{"tenant_id":' + '['.repeat(5000)]) {
    const res = await fetch(`${gw.api}${TENANT}`, { method: 'POST', body: junk });
    assert.equal(res.status, 400, junk.slice(0, 20));
  }
  r = await api(gw.api, 'GET', `${TENANT}/acme`);
  assert.equal(r.json.rps, 5, 'refused bodies changed nothing');

  // kill -9: every acknowledged row is back.
  await gw.stop('SIGKILL');
  gw = await startGateway({ stateDir: tmp.dir });
  assert.equal((await api(gw.api, 'GET', `${TENANT}/acme`)).json.rps, 5);
  assert.equal((await api(gw.api, 'GET', `${USER}/acme/bob`)).json.rps, 7);
  assert.equal((await api(gw.api, 'GET', `${DEFAULTS}/global`)).json.vip_shared_rps, 9);
  assert.equal((await api(gw.api, 'GET', `${DEFAULTS}/rule?rule_ident=127.0.0.1:9`)).json.default_tenant_tpm, 5);
  // DELETE: 204, then 404.
  assert.equal((await api(gw.api, 'DELETE', `${USER}/acme/bob`)).status, 204);
  assert.equal((await api(gw.api, 'DELETE', `${USER}/acme/bob`)).status, 404);
  assert.equal((await api(gw.api, 'DELETE', `${DEFAULTS}/global?rule_ident=stray`)).status, 204);
  assert.equal((await api(gw.api, 'GET', `${DEFAULTS}/global`)).status, 404);
  assert.equal((await api(gw.api, 'DELETE', `${TENANT}/acme`)).status, 204);
  assert.equal((await api(gw.api, 'GET', `${TENANT}/acme`)).status, 404);
});

test('tenant TPM: usage settles, debt refuses with Retry-After, other tenants unaffected', async (t) => {
  // The engine reports 500 tokens per answer; acme may spend 60 per minute (1 token/s).
  const { gw, up, port } = await setup(t, { total: 500 });
  const acme = await newKey(gw, 'acme');
  const other = await newKey(gw, 'other');
  let r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 60 });
  assert.equal(r.status, 204);

  // 1st: reserves prompt (~8 bytes / 4 = 2) + max_tokens 10 out of a full bucket of 60: admitted.
  // Settled at 500: the bucket drops to 60 - 500 = -440.
  r = await chat(port, { 'x-api-key': acme }, { max_tokens: 10 });
  assert.equal(r.status, 200, r.text);
  // 2nd: in debt, refused before the engine; Retry-After is the time to refill to the ~12
  // tokens it reserves: (12 + 440) / 1 s, minus the seconds that passed (at most a few).
  r = await chat(port, { 'x-api-key': acme }, { max_tokens: 10 });
  assert.equal(r.status, 429, r.text);
  assert.equal(r.json.error.code, 'token_quota_exceeded');
  assert.ok(Number(r.retry) >= 300 && Number(r.retry) <= 460, `Retry-After ${r.retry}`);
  assert.equal(up.seen.length, 1, 'the refused request never reached the engine');
  // Another tenant has no limit.
  assert.equal((await chat(port, { 'x-api-key': other }, {})).status, 200);

  assert.ok(await waitFor(async () => metric(await scrapeMetrics(gw.api), 'loxilb_ai_requests_total',
    { model: 'm1', tenant: 'other', status: '200', outcome: 'completed' }) === 1, 5000));
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_rate_limit_hits_total', { tenant: 'acme', reason: 'tenant_tpm' }), 1);
  assert.equal(metric(ms, 'loxilb_ai_token_quota_denied_total', { tenant: 'acme' }), 1);
  assert.equal(metric(ms, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }), 500);
  assert.equal(metric(ms, 'loxilb_ai_token_quota_limit_tokens', { tenant: 'acme' }), 60);
  assert.ok(metric(ms, 'loxilb_ai_token_quota_utilization', { tenant: 'acme' }) > 5, 'in debt: over 1');
  // loxilb_ai_requests_total: the engine's answers completed, the quota's refusal denied, by
  // model and tenant; a bad key is denied without a tenant; a malformed request the gateway
  // answers itself failed.
  const ai = (labels) => metric(ms, 'loxilb_ai_requests_total', labels);
  assert.equal(ai({ model: 'm1', tenant: 'acme', status: '200', outcome: 'completed' }), 1);
  assert.equal(ai({ model: 'm1', tenant: 'acme', status: '429', outcome: 'denied' }), 1);
  assert.equal(ai({ model: 'm1', tenant: 'other', status: '200', outcome: 'completed' }), 1);
  assert.equal((await chat(port, { 'x-api-key': 'sk-not-a-key' }, {})).status, 401);
  assert.match(await rawRequest(port, 'GARBAGE\r\n\r\n'), /^HTTP\/1\.1 400/);
  assert.match(await rawRequest(port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n' +
    'Content-Length: 99999999999\r\n\r\n'), /^HTTP\/1\.1 413/);
  assert.ok(await waitFor(async () => metric(await scrapeMetrics(gw.api), 'loxilb_ai_requests_total',
    { model: '', tenant: '', status: '400', outcome: 'failed' }) === 1, 5000));
  const ms2 = await scrapeMetrics(gw.api);
  // (no credential vouched for the model of the refused request: no model label)
  assert.equal(metric(ms2, 'loxilb_ai_requests_total', { model: '', tenant: '', status: '401', outcome: 'denied' }), 1);
  assert.equal(metric(ms2, 'loxilb_ai_requests_total', { model: '', tenant: '', status: '400', outcome: 'failed' }), 1);
  assert.equal(metric(ms2, 'loxilb_ai_requests_total', { model: '', tenant: '', status: '413', outcome: 'failed' }), 1);
  // The access log carries what was charged.
  assert.ok(await waitFor(() => gw.proc.stderrText.includes('quota_tokens=500'), 5000));

  // The OpenAI SDK sees the 429 as a RateLimitError (no retries asked).
  const client = new OpenAI({ apiKey: acme, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  await assert.rejects(client.chat.completions.create({ model: 'm1', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 429);

  // Raising the limit applies at once: 60000 per minute refills the debt within a second or so,
  // and the lowered level is clamped to the new capacity.
  r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 600000 });
  assert.ok(await waitFor(async () => (await chat(port, { 'x-api-key': acme }, { max_tokens: 10 })).status === 200, 10000));
});

test('tenant+model TPM refuses that model only; the key TPM bucket applies too', async (t) => {
  const { gw, port } = await setup(t, { total: 100 });
  const acme = await newKey(gw, 'acme');
  let r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme',
    model_limits: [{ model: 'm1', tokens_per_min: 60 }] });
  assert.equal(r.status, 204);
  assert.equal((await chat(port, { 'x-api-key': acme }, { max_tokens: 5 })).status, 200);  // -> 60-100 = -40
  r = await chat(port, { 'x-api-key': acme }, { max_tokens: 5 });
  assert.equal(r.status, 429);
  assert.match(r.json.error.message, /tenant_model_tpm/);
  // Another model of the same tenant passes.
  assert.equal((await chat(port, { 'x-api-key': acme }, { model: 'm2', max_tokens: 5 })).status, 200);
  // A key's own tokens_per_min: 30 per minute, a request reserving 100 + prompt passes a full
  // bucket once, then the bucket is in debt.
  const small = await newKey(gw, 'beta', { tokens_per_min: 30 });
  assert.equal((await chat(port, { 'x-api-key': small }, { model: 'm2', max_tokens: 100 })).status, 200);
  r = await chat(port, { 'x-api-key': small }, { model: 'm2', max_tokens: 100 });
  assert.equal(r.status, 429);
  assert.match(r.json.error.message, /key_tpm/);
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_rate_limit_hits_total', { tenant: 'acme', reason: 'tenant_model_tpm' }), 1);
  assert.equal(metric(ms, 'loxilb_ai_rate_limit_hits_total', { tenant: 'beta', reason: 'key_tpm' }), 1);
});

test('keyless traffic: the rule\'s shared VIP buckets', async (t) => {
  const { gw, up, port } = await setup(t, { total: 10 }, {});
  // 0.01 requests per second (capacity 1) for this rule's keyless traffic.
  let r = await api(gw.api, 'POST', DEFAULTS, { scope: 'rule', rule_ident: `127.0.0.1:${port}`, vip_shared_rps: 0.01 });
  assert.equal(r.status, 204, r.text);
  assert.equal((await chat(port, {}, {})).status, 200);
  r = await chat(port, {}, {});
  assert.equal(r.status, 429, r.text);
  assert.equal(r.json.error.code, 'rate_limit_exceeded');
  assert.ok(Number(r.retry) >= 50, `Retry-After ${r.retry}`);
  assert.equal(up.seen.length, 1);
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_rate_limit_hits_total', { tenant: '', reason: 'vip_rps' }), 1);
  // Removing the row lifts the limit.
  assert.equal((await api(gw.api, 'DELETE', `${DEFAULTS}/rule?rule_ident=127.0.0.1:${port}`)).status, 204);
  assert.equal((await chat(port, {}, {})).status, 200);
});

// The SSE events of a stream's text ("data: ..." payloads).
const events = (text) => text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));

test('streams: usage asked on the client\'s behalf is charged and hidden; a client that asked sees it', async (t) => {
  const { gw, up, port } = await setup(t, { chunks: 5 });
  const acme = await newKey(gw, 'acme');
  let r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 100000 });
  assert.equal(r.status, 204);

  r = await chat(port, { 'x-api-key': acme }, { stream: true });
  assert.equal(r.status, 200);
  assert.deepEqual(up.seen.at(-1).stream_options, { include_usage: true }, 'the gateway asked for usage');
  const ev = events(r.text);
  assert.equal(ev.length, 6, r.text);  // five content chunks and [DONE]: no usage chunk
  assert.equal(ev.at(-1), '[DONE]');
  assert.ok(!r.text.includes('usage'), `the client sees no usage member: ${r.text}`);
  for (const e of ev.slice(0, 5)) assert.ok(JSON.parse(e).choices.length === 1);

  // A client that asked for usage gets it, unchanged.
  r = await chat(port, { 'x-api-key': acme }, { stream: true, stream_options: { include_usage: true } });
  const ev2 = events(r.text);
  assert.equal(ev2.length, 7);
  assert.equal(JSON.parse(ev2.at(-2)).usage.total_tokens, 9);

  // The OpenAI SDK streams through the re-framed body.
  const client = new OpenAI({ apiKey: acme, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  let text = '';
  for await (const c of await client.chat.completions.create({ model: 'm1', stream: true,
    messages: [{ role: 'user', content: 'x' }] })) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, 't0t1t2t3t4');

  // All three were charged the engine's usage (4 + 5 each): 27 tokens, none estimated.
  assert.ok(await waitFor(async () => metric(await scrapeMetrics(gw.api), 'loxilb_ai_active_streams',
    { model: 'm1' }) === 0, 5000), 'every stream closed');
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }), 27);
  assert.equal(metric(ms, 'loxilb_ai_tokens_missing_total', { tenant: 'acme' }) ?? 0, 0);
  // HTTP/1.0 client: the re-framed stream is sent as it is and ends at the close (no chunked
  // framing, no Content-Length), still without the usage chunk.
  const body = JSON.stringify({ model: 'm1', stream: true, messages: [{ role: 'user', content: 'x' }] });
  const raw = await rawRequest(port, `POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n` +
    `Content-Type: application/json\r\nX-Api-Key: ${acme}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  const [head, rest] = [raw.slice(0, raw.indexOf('\r\n\r\n')), raw.slice(raw.indexOf('\r\n\r\n') + 4)];
  assert.match(head, /^HTTP\/1\.1 200/);
  assert.doesNotMatch(head, /transfer-encoding|content-length/i);
  assert.equal(events(rest).length, 6, rest);
  assert.ok(!rest.includes('usage'));
  assert.ok(rest.endsWith('data: [DONE]\n\n'), JSON.stringify(rest.slice(-40)));
});

test('Responses API: usage read from response.completed, nothing injected, the stream unchanged', async (t) => {
  const { gw, up, port } = await setup(t, { chunks: 4 });
  const acme = await newKey(gw, 'acme');
  let r = await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 100000 });
  assert.equal(r.status, 204);
  const post = async (body) => {
    const res = await fetch(`http://127.0.0.1:${port}/v1/responses`, { method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': acme },
      body: JSON.stringify({ model: 'm1', input: 'hello', max_output_tokens: 50, ...body }) });
    return { status: res.status, text: await res.text() };
  };
  // A stream: sent as the client wrote it (no stream_options added), relayed byte for byte
  // (response.created keeps its "usage":null), charged 6 + 4 from response.completed.
  r = await post({ stream: true });
  assert.equal(r.status, 200, r.text);
  assert.equal(up.seen.at(-1).stream_options, undefined, 'nothing injected into a Responses request');
  assert.equal(r.text, sentStream, 'relayed byte for byte');
  const datas = r.text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
  assert.deepEqual(datas.map((d) => d.type), ['response.created', 'response.output_text.delta',
    'response.output_text.delta', 'response.output_text.delta', 'response.output_text.delta', 'response.completed']);
  assert.equal(datas[0].response.usage, null, 'the client sees response.created as the engine sent it');
  assert.equal(datas.at(-1).response.usage.total_tokens, 10);
  // A plain answer: charged its top-level usage (input 6 + output 4 = total 10).
  r = await post({});
  assert.equal(r.status, 200, r.text);
  assert.equal(JSON.parse(r.text).usage.total_tokens, 10);
  // Fetching a stored response (no body: it generates nothing) is not charged its usage again.
  const stored = await fetch(`http://127.0.0.1:${port}/v1/responses/resp_1`, { headers: { 'x-api-key': acme } });
  assert.equal(stored.status, 200);
  assert.equal((await stored.json()).usage.total_tokens, 10);
  // (settlement runs as the exchange ends, just after the client has its last byte)
  assert.ok(await waitFor(async () => metric(await scrapeMetrics(gw.api), 'loxilb_ai_requests_total',
    { model: '', tenant: 'acme', status: '200', outcome: 'completed' }) === 1, 5000));  // (no body: no model)
  assert.ok(await waitFor(async () => metric(await scrapeMetrics(gw.api), 'loxilb_ai_tokens_consumed_total',
    { tenant: 'acme' }) === 20, 5000));
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_tokens_missing_total', { tenant: 'acme' }) ?? 0, 0);
});

test('a stream the client cancels is settled by estimate', async (t) => {
  // 200 chunks 20 ms apart, the client leaves after a few: no usage ever arrives.
  const { gw, port } = await setup(t, { chunks: 200, gapMs: 20 });
  const acme = await newKey(gw, 'acme');
  assert.equal((await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 100000 })).status, 204);
  const ac = new AbortController();
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', signal: ac.signal,
    headers: { 'content-type': 'application/json', 'x-api-key': acme },
    body: JSON.stringify({ model: 'm1', stream: true, max_tokens: 1000, messages: [{ role: 'user', content: 'hello' }] }) });
  const reader = res.body.getReader();
  let got = '';
  while (events(got).length < 3) got += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  // Settled: missing usage counted once; charged the prompt estimate plus the events relayed,
  // at least the 3 seen, far below the 1000 + prompt reserved.
  let ms = [];
  assert.ok(await waitFor(async () => {
    ms = await scrapeMetrics(gw.api);
    return metric(ms, 'loxilb_ai_tokens_missing_total', { tenant: 'acme' }) === 1;
  }, 10000), JSON.stringify(ms.filter((s) => s.name.startsWith('loxilb_ai_tokens'))));
  const est = metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' });
  assert.ok(est >= 3 && est < 300, `estimated ${est}`);
  // The bucket got its reservation back: utilization is the estimate's share, not 1000's.
  const util = metric(ms, 'loxilb_ai_token_quota_utilization', { tenant: 'acme' });
  assert.ok(util < 0.01, `utilization ${util}`);
});

// A request (extra body members `extra`) sent to an engine that never answers it, the client
// leaving once the engine has it: the tokens its tenant was charged by estimate.
async function chargedWhenCancelled(t, engineOpts, extra) {
  const { gw, up, port } = await setup(t, engineOpts);
  const acme = await newKey(gw, 'acme');
  assert.equal((await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 100000 })).status, 204);
  const ac = new AbortController();
  const pending = fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', signal: ac.signal,
    headers: { 'content-type': 'application/json', 'x-api-key': acme },
    body: JSON.stringify({ model: 'm1', max_tokens: 1000, messages: [{ role: 'user', content: 'hello' }], ...extra }) });
  pending.catch(() => {});
  assert.ok(await waitFor(() => up.seen.length === 1, 10000), 'the engine got the request');
  ac.abort();
  let ms = [];
  assert.ok(await waitFor(async () => {
    ms = await scrapeMetrics(gw.api);
    return metric(ms, 'loxilb_ai_tokens_missing_total', { tenant: 'acme' }) === 1;
  }, 15000), JSON.stringify(ms.filter((s) => s.name.startsWith('loxilb_ai_tokens'))));
  return metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' });
}

// Issue 28 §1.3: a non-streamed request cancelled just before completion was charged only its
// prompt estimate, although the engine may have generated all of max_tokens by then (its answer
// comes whole at the end). It is charged its reservation: (prompt + max_tokens) x n, where the
// prompt estimate of {"role":"user","content":"hello"} is its rendering "user" 0x1F "hello" 0x1E,
// 11 bytes, / 4 rounded up = 3 tokens: (3 + 1000) x 1 = 1003.
test('a non-streamed request the client cancels is charged its reservation', async (t) => {
  assert.equal(await chargedWhenCancelled(t, { hang: true }, {}), 1003);
});

// Review of issue 28 §1.3: a stream the client leaves before it began was charged the whole
// reservation (the gateway learned it was a stream only from the head); it pays the prompt
// estimate, 3 tokens here (see above), as documented.
test('a stream the client cancels before it begins is charged its prompt estimate', async (t) => {
  assert.equal(await chargedWhenCancelled(t, { hangStream: true }, { stream: true }), 3);
});

test('over HTTP/2: each stream is keyed, reserved, charged and refused on its own', async (t) => {
  // acme may spend 60 tokens per minute; a stream of 60 chunks reports 64 tokens (60 + 4).
  const { gw, up, port } = await setup(t, { total: 500, chunks: 60 });
  const acme = await newKey(gw, 'acme');
  const other = await newKey(gw, 'other');
  assert.equal((await api(gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 60 })).status, 204);
  const c = http2.connect(`http://127.0.0.1:${port}`);
  t.after(() => c.close());
  const h2chat = (key, body = {}) => new Promise((resolve, reject) => {
    const s = c.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json',
      'x-api-key': key });
    let h = {};
    let text = '';
    s.setEncoding('utf8');
    s.on('response', (x) => { h = x; });
    s.on('data', (d) => { text += d; });
    s.on('end', () => resolve({ status: h[':status'], retry: h['retry-after'], text }));
    s.on('error', reject);
    s.end(JSON.stringify({ model: 'm1', messages: [{ role: 'user', content: 'hello' }], max_tokens: 10, ...body }));
  });
  // A stream charged from the usage asked on the client's behalf, which the client never sees.
  let r = await h2chat(acme, { stream: true });
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /data: \[DONE\]/);
  assert.doesNotMatch(r.text, /"usage":\{/, 'the usage chunk asked for the client is hidden from it');
  assert.equal(up.seen[0].stream_options?.include_usage, true);
  // acme is in debt now (60 - 64): the next acme stream on the same connection is refused before the
  // engine, while another tenant's stream beside it goes through.
  const [refused, fine] = await Promise.all([h2chat(acme), h2chat(other)]);
  assert.equal(refused.status, 429, refused.text);
  assert.equal(JSON.parse(refused.text).error.code, 'token_quota_exceeded');
  assert.ok(Number(refused.retry) >= 1, `Retry-After ${refused.retry}`);
  assert.equal(fine.status, 200, fine.text);
  assert.equal(up.seen.length, 2, 'the refused stream never reached the engine');
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }), 64, 'charged the stream\'s usage');
  assert.equal(metric(ms, 'loxilb_ai_token_quota_denied_total', { tenant: 'acme' }), 1);
  // A missing key on one stream: 401 on that stream only.
  const s = await new Promise((resolve) => {
    const q = c.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
    q.on('response', (x) => resolve(x[':status']));
    q.resume();
    q.end('{"model":"m1","messages":[]}');
  });
  assert.equal(s, 401);
  assert.equal((await h2chat(other)).status, 200, 'the connection still serves');
});
