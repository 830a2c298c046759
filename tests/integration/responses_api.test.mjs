// The OpenAI Responses API through the gateway (issue 31): the official `openai` npm SDK
// (responses.create, streaming) against `kvgate serve` in front of `kvgate sim`, which serves
// /v1/responses as vLLM does (its chat form, its events, its usage; no response store). Expected
// figures are the engine's own (asked directly) or worked out by hand in the comments.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { LB_BASE, api, freePort, gateway, rawRequest, rule, scrapeMetrics, settledSample, simBehindGateway, startSim } from './lib.mjs';
import { tokenizedFleet } from './tokenized_fleet.mjs';

const KEYS = '/netlox/v1/config/ai/apikey';
const metric = (ms, name, labels) => ms.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
const sentTo = (ms, w) => ms.filter((s) => s.name === 'kvgate_requests_total' &&
  s.labels.endpoint === `${w.host}:${w.port}`).reduce((x, s) => x + s.value, 0);

test('the openai SDK through the gateway: responses.create, streaming, quota and errors', async (t) => {
  const { w, gw, port } = await simBehindGateway(t, { ruleArgs: { api_key_auth: 'required' } });
  const r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', tokens_per_min: 100000 });
  assert.equal(r.status, 201, r.text);
  const client = new OpenAI({ apiKey: r.json.raw_key, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const request = { model: 'sim-model', instructions: 'You are terse.', input: 'Tell me about prefix caches.' };

  // What the engine itself reports for this prompt (asked directly).
  const direct = await (await fetch(`${w.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...request, max_output_tokens: 4 }) })).json();
  const inputTokens = direct.usage.input_tokens;
  assert.ok(inputTokens > 0);

  const resp = await client.responses.create({ ...request, max_output_tokens: 4 });
  assert.equal(resp.object, 'response');
  // (it stopped at max_output_tokens: vLLM's status incomplete, with the reason)
  assert.equal(resp.status, 'incomplete');
  assert.equal(resp.incomplete_details.reason, 'max_output_tokens');
  assert.equal(resp.output_text.split(' ').length, 4);
  assert.equal(resp.usage.input_tokens, inputTokens);
  assert.equal(resp.usage.output_tokens, 4);

  // A stream: every event of the engine's order reaches the SDK; the last carries the usage.
  const stream = await client.responses.create({ ...request, max_output_tokens: 3, stream: true });
  const types = [];
  let completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.completed') completed = ev.response;
  }
  assert.deepEqual(types, ['response.created', 'response.in_progress', 'response.output_item.added',
    'response.content_part.added', 'response.output_text.delta', 'response.output_text.delta',
    'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
    'response.output_item.done', 'response.completed']);
  assert.equal(completed.usage.output_tokens, 3);

  // Charged what the engine reported: (input + 4) + (input + 3); nothing estimated.
  const ms = await scrapeMetrics(gw.api);
  assert.equal(await settledSample(gw.api, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }, 2 * inputTokens + 7),
    2 * inputTokens + 7);
  assert.equal(metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' }) ?? 0, 0);
  assert.equal(metric(ms, 'kvgate_api_requests_total', { api: 'responses' }), 2);

  // previous_response_id: the engine (vLLM without its store) answers 404, relayed as the SDK's
  // NotFoundError; the gateway's own refusals keep OpenAI's shape on this path.
  let err = await client.responses.create({ ...request, previous_response_id: 'resp_missing' }).catch((e) => e);
  assert.ok(err instanceof OpenAI.NotFoundError, String(err));
  assert.match(err.message, /resp_missing/);
  const bad = new OpenAI({ apiKey: 'nope', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  err = await bad.responses.create(request).catch((e) => e);
  assert.ok(err instanceof OpenAI.AuthenticationError, String(err));
  assert.equal(err.code, 'invalid_api_key');
});

test('Responses requests: hostile and malformed bodies are routed unkeyed and answered by the engine', async (t) => {
  const { gw, port } = await simBehindGateway(t, { ruleArgs: { kvExactMode: 3, kvExactApiMode: 'both' } });
  const post = (body) => fetch(`http://127.0.0.1:${port}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) })
    .then(async (res) => ({ status: res.status, text: await res.text() }));
  for (const body of [
    { model: 'sim-model', input: 5 },
    { model: 'sim-model', input: [{ type: 'function_call', call_id: 1, name: 'f', arguments: '' }] },
    { model: 'sim-model', input: [{ role: 'user' }] },
    { model: 'sim-model', input: 'x', tools: [{ type: 'function', name: 'f', parameters: [] }] },
    { model: 'sim-model', input: 'x', reasoning: { effort: 3 } },
  ]) {
    const res = await post(body);
    assert.equal(res.status, 400, `${JSON.stringify(body)} -> ${res.text}`);
  }
  // 100,000 levels of nesting in an input item: refused, the gateway keeps serving.
  const deep = `{"model":"sim-model","input":[{"role":"user","content":${'['.repeat(100000)}${']'.repeat(100000)}}]}`;
  assert.equal((await post(deep)).status, 400);
  // 5,000 function tools: converted and answered.
  const tools = Array.from({ length: 5000 }, (_, i) => ({ type: 'function', name: `t${i}`, parameters: { type: 'object' } }));
  assert.equal((await post({ model: 'sim-model', input: 'x', max_output_tokens: 1, tools })).status, 200);
  const ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'kvgate_api_prompt_total', { api: 'responses', result: 'unconvertible' }), 6);
  assert.equal(metric(ms, 'kvgate_api_prompt_total', { api: 'responses', result: 'converted' }), 1);
  assert.equal(metric(ms, 'kvgate_internal_errors_total', {}), 0);
});

// previous_response_id: the engine keeps a response's history in its own memory (vLLM with its
// store on: `kvgate sim --responses-store`), so a request continuing it must reach that engine. The
// gateway remembers which endpoint answered each response it relayed and pins the continuation
// there; a response whose endpoint left the rule is a clear 503, not an engine's 404.
test('previous_response_id: continuations go to the endpoint holding the response', async (t) => {
  const sim = await startSim(['--workers', '2', '--port', '0', '--responses-store']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '2']);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [a, b] }));  // round-robin
  assert.equal(r.status, 200, r.text);
  const client = new OpenAI({ apiKey: 'x', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const first = await client.responses.create({ model: 'sim-model', input: 'Start a story.', max_output_tokens: 2 });
  const m0 = await scrapeMetrics(gw.api);
  const home = sentTo(m0, a) === 1 ? a : b;
  const other = home === a ? b : a;
  // Four continuations (each answered: without the pin, round-robin would send half to the
  // endpoint that does not hold the response, which answers 404).
  for (let i = 0; i < 4; i++) {
    const next = await client.responses.create({ model: 'sim-model', input: `Go on (${i}).`,
      previous_response_id: first.id, max_output_tokens: 2 });
    assert.equal(next.object, 'response');
  }
  const mLoop = await scrapeMetrics(gw.api);
  assert.equal(sentTo(mLoop, home) - sentTo(m0, home), 4, 'every continuation went to the home');
  // A streamed answer's id (from response.created) is remembered too.
  const stream = await client.responses.create({ model: 'sim-model', input: 'Another.', max_output_tokens: 2, stream: true });
  let streamedId = null;
  for await (const ev of stream) if (ev.type === 'response.created') streamedId = ev.response.id;
  const cont = await client.responses.create({ model: 'sim-model', input: 'More.', previous_response_id: streamedId,
    max_output_tokens: 2 });
  assert.equal(cont.object, 'response');
  const post = (p, body) => fetch(`http://127.0.0.1:${p}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    .then(async (res) => ({ status: res.status, text: await res.text() }));
  const m1 = await scrapeMetrics(gw.api);
  const events = (e) => metric(m1, 'kvgate_responses_previous_total', { event: e });
  assert.equal(events('pinned'), 5);
  assert.equal(events('remembered'), 7);  // every answer relayed: 1 + 4 + 1 + 1
  // A client that chooses its response's id (vLLM's request_id, which the simulator honours too)
  // cannot move the home: the first answer with an id wins. Two such answers, one of them from
  // the other endpoint (round-robin), then two continuations: both at the home.
  for (let i = 0; i < 2; i++) {
    const hijack = await post(port, { model: 'sim-model', input: 'mine', request_id: first.id, max_output_tokens: 1 });
    assert.equal(hijack.status, 200, hijack.text);
  }
  const mHijack = await scrapeMetrics(gw.api);
  for (let i = 0; i < 2; i++)
    await client.responses.create({ model: 'sim-model', input: 'still mine?', previous_response_id: first.id, max_output_tokens: 1 });
  assert.equal(sentTo(await scrapeMetrics(gw.api), home) - sentTo(mHijack, home), 2, 'the home did not move');
  // An id this gateway never relayed is routed as any request; the engine answers 404.
  const err = await client.responses.create({ model: 'sim-model', input: 'x', previous_response_id: 'resp_unknown' })
    .catch((e) => e);
  assert.ok(err instanceof OpenAI.NotFoundError, String(err));
  assert.equal(metric(await scrapeMetrics(gw.api), 'kvgate_responses_previous_total', { event: 'unknown' }), 1);
  // A retrieve (GET /v1/responses/{id}) and a cancel (POST .../{id}/cancel) name the stored
  // response by their path: pinned to its endpoint too. Four retrieves, each answered with the
  // stored response (round-robin would send half to the endpoint without it: 404); a cancel of a
  // finished response is the engine's own 400, not the other endpoint's 404.
  const mGet = await scrapeMetrics(gw.api);
  for (let i = 0; i < 4; i++) {
    const got = await client.responses.retrieve(first.id);
    assert.equal(got.id, first.id);
    assert.equal(got.object, 'response');
    assert.equal(got.status, 'incomplete');  // (stopped at max_output_tokens)
    assert.ok(got.output[0].content[0].text.length > 0);  // (the hijack above rewrote its text: vLLM too)
  }
  const cancelErr = await client.responses.cancel(first.id).catch((e) => e);
  assert.ok(cancelErr instanceof OpenAI.BadRequestError, String(cancelErr));
  assert.match(cancelErr.message, /Cannot cancel a synchronous response/);
  const mGot = await scrapeMetrics(gw.api);
  assert.equal(sentTo(mGot, home) - sentTo(mGet, home), 5, 'every retrieve and the cancel went to the home');
  assert.equal(metric(mGot, 'kvgate_responses_previous_total', { event: 'pinned' }) -
    metric(mGet, 'kvgate_responses_previous_total', { event: 'pinned' }), 5);
  // A retrieve of an id the gateway did not relay is routed as any request: the engine's 404.
  const unknownGet = await client.responses.retrieve('resp_notrelayed').catch((e) => e);
  assert.ok(unknownGet instanceof OpenAI.NotFoundError, String(unknownGet));
  // The endpoint holding the first response leaves the rule: its continuation is a clear 503.
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [other] }));
  assert.equal(r.status, 200, r.text);
  const gone = await fetch(`http://127.0.0.1:${port}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', input: 'again', previous_response_id: first.id }) });
  assert.equal(gone.status, 503);
  const body = await gone.json();
  assert.equal(body.error.code, 'previous_response_unavailable');
  assert.equal(body.error.message, `response '${first.id}' is stored on an endpoint that is no longer in this service; its history cannot be used elsewhere`);
  assert.equal(metric(await scrapeMetrics(gw.api), 'kvgate_responses_previous_total', { event: 'refused' }), 1);
  // ... and so is a retrieve or cancel of it (the other endpoint would answer 404).
  for (const [method, path] of [['GET', `/v1/responses/${first.id}`], ['POST', `/v1/responses/${first.id}/cancel`]]) {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { method });
    assert.equal(res.status, 503, path);
    const b = await res.json();
    assert.equal(b.error.code, 'response_unavailable');
    assert.equal(b.error.param, 'response_id');
    assert.equal(b.error.message, `response '${first.id}' is stored on an endpoint that is no longer in this service; it cannot be read or cancelled elsewhere`);
  }
  assert.equal(metric(await scrapeMetrics(gw.api), 'kvgate_responses_previous_total', { event: 'refused' }), 3);
});

// An engine newer than the gateway: an event type nobody knows after response.completed (with an
// output count of its own) passes to the SDK untouched, and the usage charged is still the one
// response.completed reports.
test('Responses: an unknown event type from the engine passes; the usage is still charged', async (t) => {
  const { gw, port } = await simBehindGateway(t, { simArgs: ['--unknown-events'], ruleArgs: { api_key_auth: 'required' } });
  const r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', tokens_per_min: 100000 });
  assert.equal(r.status, 201, r.text);
  const client = new OpenAI({ apiKey: r.json.raw_key, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const stream = await client.responses.create({ model: 'sim-model', input: 'Hi there.', max_output_tokens: 2, stream: true });
  const types = [];
  let completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.completed') completed = ev.response;
  }
  assert.deepEqual(types.slice(-2), ['response.completed', 'response.kvgate_sim_unknown']);
  assert.equal(types[0], 'response.created');
  const ms = await scrapeMetrics(gw.api);
  assert.equal(await settledSample(gw.api, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' },
    completed.usage.total_tokens), completed.usage.total_tokens);
  assert.equal(metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' }) ?? 0, 0);
});

// A stored response belongs to the principal whose request produced it: another key can neither
// continue, read nor cancel it through the gateway (404, never forwarded: vLLM itself does not
// check who asks). A retrieve or cancel generates nothing, so it reserves no output tokens: with
// --quota-max-tokens far above the key's budget, a body-less retrieve used to hold the whole
// bucket and was refused (429) once any token had been spent.
test('stored responses: another key gets 404, a retrieve reserves nothing', async (t) => {
  const { w, gw, port } = await simBehindGateway(t, { simArgs: ['--responses-store'],
    ruleArgs: { api_key_auth: 'required' }, gatewayArgs: ['--workers', '1', '--quota-max-tokens', '100000'] });
  // (60 tokens a minute: one back a second, so what the first create spends is still missing
  // when the retrieve asks)
  const keyA = await api(gw.api, 'POST', KEYS, { tenant_id: 'a', tokens_per_min: 60 });
  const keyB = await api(gw.api, 'POST', KEYS, { tenant_id: 'b', tokens_per_min: 1000 });
  assert.equal(keyA.status, 201, keyA.text);
  assert.equal(keyB.status, 201, keyB.text);
  const sdk = (key) => new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const a = sdk(keyA.json.raw_key), b = sdk(keyB.json.raw_key);
  const first = await a.responses.create({ model: 'sim-model', input: 'Hello there.', max_output_tokens: 2 });
  // Key A spent some of its 1,000 tokens a minute; its retrieve and its cancel still pass.
  const got = await a.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  const cancelA = await a.responses.cancel(first.id).catch((e) => e);
  assert.ok(cancelA instanceof OpenAI.BadRequestError, String(cancelA));  // (the engine's: finished)
  const before = await scrapeMetrics(gw.api);
  // Key B knows the id: every way of using it is the gateway's 404, and the engine sees nothing.
  for (const call of [() => b.responses.retrieve(first.id), () => b.responses.cancel(first.id),
    () => b.responses.create({ model: 'sim-model', input: 'x', previous_response_id: first.id, max_output_tokens: 1 })]) {
    const err = await call().catch((e) => e);
    assert.ok(err instanceof OpenAI.NotFoundError, String(err));
    assert.equal(err.error.code, 'response_not_found');
    assert.equal(err.error.message, `Response with id '${first.id}' not found.`);
  }
  // Other methods and paths under the id (DELETE, input_items) are checked too, and a create
  // that names the id as its request_id (vLLM would replace the stored response) is refused.
  const raw = (method, path, body) => fetch(`http://127.0.0.1:${port}${path}`, { method,
    headers: { authorization: `Bearer ${keyB.json.raw_key}`, 'content-type': 'application/json' }, body })
    .then(async (res) => ({ status: res.status, json: await res.json().catch(() => null) }));
  let res = await raw('DELETE', `/v1/responses/${first.id}`);
  assert.equal(res.status, 404);
  res = await raw('GET', `/v1/responses/${first.id}/input_items`);
  assert.equal(res.status, 404);
  res = await raw('POST', '/v1/responses', JSON.stringify({ model: 'sim-model', input: 'mine now', request_id: first.id }));
  assert.equal(res.status, 400);
  assert.equal(res.json.error.code, 'request_id_in_use');
  // ... or whose X-Request-Id the engine would turn into that id ("resp_" and it).
  assert.ok(first.id.startsWith('resp_'));
  res = await fetch(`http://127.0.0.1:${port}/v1/responses`, { method: 'POST', headers: {
    authorization: `Bearer ${keyB.json.raw_key}`, 'content-type': 'application/json', 'x-request-id': first.id.slice(5) },
  body: JSON.stringify({ model: 'sim-model', input: 'mine now' }) }).then(async (r) => ({ status: r.status, json: await r.json() }));
  assert.equal(res.status, 400);
  assert.equal(res.json.error.code, 'request_id_in_use');
  // A HEAD gets the head alone: the next request on the same connection is read right.
  const pipelined = await rawRequest(port,
    `HEAD /v1/responses/${first.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${keyB.json.raw_key}\r\n\r\n` +
    `GET /v1/responses/${first.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${keyB.json.raw_key}\r\n\r\n`);
  const heads = pipelined.split('\r\n').filter((l) => l.startsWith('HTTP/1.1 '));
  assert.deepEqual(heads, ['HTTP/1.1 404 Not Found', 'HTTP/1.1 404 Not Found'], pipelined);
  assert.equal(pipelined.split('not found.').length - 1, 1, 'one body: the GET\'s, not the HEAD\'s');
  const after = await scrapeMetrics(gw.api);
  assert.equal(sentTo(after, w), sentTo(before, w), 'nothing of key B reached the engine');
  assert.equal(metric(after, 'kvgate_responses_previous_total', { event: 'foreign' }), 9);
  // Key A: the first create and the continuation below are the only tokens charged.
  const next = await a.responses.create({ model: 'sim-model', input: 'More.', previous_response_id: first.id, max_output_tokens: 2 });
  assert.equal(next.object, 'response');
  // (the charge settles when the request ends on the gateway's side, which may trail the
  // client's end of the answer: a fresh run read 19 of 37 at once)
  const want = first.usage.total_tokens + next.usage.total_tokens;
  assert.equal(await settledSample(gw.api, 'loxilb_ai_tokens_consumed_total', { tenant: 'a' }, want), want);
});

// Tier 1.5 keys a Responses request by the chat form its engine renders (instructions first, input
// items as messages): requests sharing long instructions go to the worker holding them, and the
// Responses form of a conversation a worker cached from the chat API lands there too.
test('Tier 1.5: Responses requests go to the worker holding their prefix', async (t) => {
  const MODEL = 'Qwen/Qwen3-8B';
  const { a, b, gw, url, post, blocks, fall, settled } = await tokenizedFleet(t,
    { hosts: '127.0.0.16-17', model: MODEL, ruleArgs: { kvExactApiMode: 'both' } });
  // The tokenizer loads off the request path: warm it until a short prompt misses as `shallow`.
  for (let i = 0; i < 150 && (await fall('shallow')) === 0; i++)
    await post(url, '/v1/responses', { model: MODEL, max_output_tokens: 1, input: 'hi' });
  assert.ok((await fall('shallow')) > 0, 'the gateway never loaded the tokenizer');

  const rules = Array.from({ length: 60 }, (_, i) => `Rule ${i}: answer politely and cite sources.`).join(' ');
  const ask = (q) => ({ model: MODEL, max_output_tokens: 1, instructions: rules,
    input: [{ role: 'user', content: [{ type: 'input_text', text: q }] }] });
  let before = await blocks(b);
  assert.equal((await post(b.url, '/v1/responses', ask('first question'))).status, 200);
  for (let i = 0; i < 100 && (await blocks(b)) < before + 20; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok((await blocks(b)) >= before + 20, 'b\'s blocks did not arrive');
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 5; i++) {
    const res = await post(url, '/v1/responses', ask(`question ${i}?`));
    assert.equal(res.status, 200, res.text);
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 5, 'every Responses request sharing the instructions goes to b');

  // a holds a chat conversation; its Responses form (instructions, an assistant turn as an
  // output message item, a new question) lands on a.
  const doc = Array.from({ length: 80 }, (_, i) => `Clause ${i} of the shared contract applies.`).join(' ');
  before = await blocks(a);
  const chat = await post(a.url, '/v1/chat/completions', { model: MODEL, max_tokens: 1, messages: [
    { role: 'system', content: doc }, { role: 'user', content: 'Summarise the contract.' },
    { role: 'assistant', content: 'It has 80 clauses.' }, { role: 'user', content: 'And clause 3?' }] });
  assert.equal(chat.status, 200, chat.text);
  for (let i = 0; i < 100 && (await blocks(a)) < before + 20; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok((await blocks(a)) >= before + 20, 'a\'s blocks did not arrive');
  for (let i = 0; i < 3; i++) {
    const res = await post(url, '/v1/responses', { model: MODEL, max_output_tokens: 1, instructions: doc, input: [
      { role: 'user', content: 'Summarise the contract.' },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'It has 80 clauses.', annotations: [] }] },
      { role: 'user', content: `And clause ${10 + i}?` }] });
    assert.equal(res.status, 200, res.text);
  }
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m2, a) - sentTo(m1, a), 3, 'the Responses form of a chat conversation goes to a');
  assert.equal(metric(m2, 'kvgate_api_prompt_total', { api: 'responses', result: 'unconvertible' }), 0);
  assert.ok(metric(m2, 'kvgate_api_prompt_total', { api: 'responses', result: 'converted' }) >= 9);

  // A conversation through the SDK and the gateway alone (the history sent back as input items,
  // the answers' output messages among them): every later turn goes to the first turn's worker.
  const client = new OpenAI({ apiKey: 'x', baseURL: `${url}/v1`, maxRetries: 0 });
  const guide = Array.from({ length: 70 }, (_, i) => `Guideline ${i}: keep the tool output short.`).join(' ');
  const input = [{ role: 'user', content: 'Plan the refactor.' }];
  const held = await settled();  // (what grows next is this conversation's)
  const m3 = await scrapeMetrics(gw.api);
  const first = await client.responses.create({ model: MODEL, max_output_tokens: 3, instructions: guide, input });
  const m4 = await scrapeMetrics(gw.api);
  const home = sentTo(m4, a) - sentTo(m3, a) === 1 ? a : b;
  assert.equal(sentTo(m4, home) - sentTo(m3, home), 1);
  const heldBefore = home === a ? held.a : held.b;
  for (let i = 0; i < 100 && (await blocks(home)) < heldBefore + 20; i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok((await blocks(home)) >= heldBefore + 20, 'the first turn\'s blocks did not arrive');
  input.push(...first.output);
  for (let i = 0; i < 3; i++) {
    input.push({ role: 'user', content: `Step ${i}?` });
    const next = await client.responses.create({ model: MODEL, max_output_tokens: 3, instructions: guide, input });
    input.push(...next.output);
  }
  const m5 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m5, home) - sentTo(m4, home), 3, 'every later turn went to the first turn\'s worker');
});
