// The Anthropic Messages API through the gateway (issue 31): the official @anthropic-ai/sdk
// (messages.create, messages.stream, messages.countTokens) against `kvgate serve` in front of
// `kvgate sim`, which serves /v1/messages as vLLM does (its chat form, its events, its usage).
// Expected figures are the engine's own (what the simulator reports when asked directly) or worked
// out by hand in the comments; routing claims read the gateway's per-endpoint request counters.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, settledSample, simBehindGateway, startSim, waitFor } from './lib.mjs';
import { tokenizedFleet } from './tokenized_fleet.mjs';

const KEYS = '/netlox/v1/config/ai/apikey';
const metric = (ms, name, labels) => ms.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
const sentTo = (ms, w) => ms.filter((s) => s.name === 'kvgate_requests_total' &&
  s.labels.endpoint === `${w.host}:${w.port}`).reduce((x, s) => x + s.value, 0);
const post = (url, p, body, headers = {}) => fetch(`${url}${p}`, {
  method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body),
}).then(async (res) => ({ status: res.status, text: await res.text(), headers: res.headers }));

async function newKey(gw, tenant, extra = {}) {
  const r = await api(gw.api, 'POST', KEYS, { tenant_id: tenant, ...extra });
  assert.equal(r.status, 201, r.text);
  return r.json.raw_key;
}

test('the Anthropic SDK through the gateway: create, stream, countTokens, keys, quota and errors', async (t) => {
  const { w, gw, port } = await simBehindGateway(t, { ruleArgs: { api_key_auth: 'required' } });
  const key = await newKey(gw, 'acme', { tokens_per_min: 100000 });  // (a TPM bucket: settled)
  const baseURL = `http://127.0.0.1:${port}`;
  const client = new Anthropic({ apiKey: key, baseURL, maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Tell me about prefix caches.' }];
  const system = 'You are a terse assistant.';

  // What the engine itself reports for this prompt (asked directly, no gateway).
  const direct = JSON.parse((await post(w.url, '/v1/messages', { model: 'sim-model', max_tokens: 4, system, messages })).text);
  assert.equal(direct.type, 'message');
  const inputTokens = direct.usage.input_tokens;
  assert.ok(inputTokens > 0);

  // messages.create: the SDK sends its key as x-api-key; the answer is the engine's.
  const msg = await client.messages.create({ model: 'sim-model', max_tokens: 4, system, messages });
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'text');
  assert.equal(msg.content[0].text.split(' ').length, 4);
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.deepEqual(msg.usage, { input_tokens: inputTokens, output_tokens: 4 });

  // messages.stream: every event of the engine's order reaches the SDK.
  const stream = client.messages.stream({ model: 'sim-model', max_tokens: 3, system, messages });
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta',
    'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  assert.equal(final.usage.output_tokens, 3);
  assert.equal(final.usage.input_tokens, inputTokens);
  assert.equal(final.content[0].text.split(' ').length, 3);

  // messages.countTokens: the engine's count of the same prompt.
  const counted = await client.messages.countTokens({ model: 'sim-model', system, messages });
  assert.equal(counted.input_tokens, inputTokens);

  // The quota was charged what the engine reported: (input + 4) + (input + 3); count_tokens
  // generates nothing and is charged nothing.
  const ms = await scrapeMetrics(gw.api);
  assert.equal(await settledSample(gw.api, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }, 2 * inputTokens + 7),
    2 * inputTokens + 7);
  assert.equal(metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' }) ?? 0, 0);

  // The gateway's own refusals, in Anthropic's error shape, as the SDK's typed errors.
  const bad = new Anthropic({ apiKey: 'kvg-0000000000000000-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', baseURL, maxRetries: 0 });
  let err = await bad.messages.create({ model: 'sim-model', max_tokens: 1, messages }).catch((e) => e);
  assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
  assert.equal(err.status, 401);
  assert.equal(err.error.type, 'error');
  assert.equal(err.error.error.type, 'authentication_error');
  assert.match(err.error.error.message, /API key/);

  const limited = await newKey(gw, 'acme', { allowed_models: ['other-model'] });
  err = await new Anthropic({ apiKey: limited, baseURL, maxRetries: 0 })
    .messages.create({ model: 'sim-model', max_tokens: 1, messages }).catch((e) => e);
  assert.ok(err instanceof Anthropic.PermissionDeniedError, String(err));
  assert.equal(err.error.error.type, 'permission_error');
  assert.equal(err.error.error.message, "this API key may not use model 'sim-model'");

  // One request a second (burst 1): the second at once is a 429 rate_limit_error with Retry-After.
  const slow = await newKey(gw, 'acme', { rate_limit_rps: 1, burst_size: 1 });
  const slowClient = new Anthropic({ apiKey: slow, baseURL, maxRetries: 0 });
  await slowClient.messages.create({ model: 'sim-model', max_tokens: 1, messages });
  err = await slowClient.messages.create({ model: 'sim-model', max_tokens: 1, messages }).catch((e) => e);
  assert.ok(err instanceof Anthropic.RateLimitError, String(err));
  assert.equal(err.error.error.type, 'rate_limit_error');
  assert.ok(Number(err.headers.get('retry-after')) >= 1);

  // The same refusal on the OpenAI path keeps OpenAI's shape.
  const oa = await post(baseURL, '/v1/chat/completions', { model: 'sim-model', messages }, { 'x-api-key': 'nope' });
  assert.equal(oa.status, 401);
  assert.equal(JSON.parse(oa.text).error.code, 'invalid_api_key');
});

// An engine that reports usage as Anthropic's own API does (message_start: the input count and
// 1 output token; message_delta: the cumulative output count only) and that sends an event type
// nobody knows after message_delta (with an output count of its own): the SDK sees every event, and the quota is charged input +
// output as reported (not the estimate, not message_start's 1 output token). And the gateway's
// own 503 in Anthropic's shape (overloaded_error) when the service has no endpoint.
test('Messages: Anthropic-shaped usage and unknown events from the engine; the gateway\'s 503', async (t) => {
  const { w, gw, port } = await simBehindGateway(t, { simArgs: ['--anthropic-usage', '--unknown-events'],
    ruleArgs: { api_key_auth: 'required' } });
  const key = await newKey(gw, 'acme', { tokens_per_min: 100000 });
  const baseURL = `http://127.0.0.1:${port}`;
  const client = new Anthropic({ apiKey: key, baseURL, maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Tell me about prefix caches.' }];
  const direct = JSON.parse((await post(w.url, '/v1/messages', { model: 'sim-model', max_tokens: 4, messages })).text);
  const inputTokens = direct.usage.input_tokens;
  assert.ok(inputTokens > 0);
  const stream = client.messages.stream({ model: 'sim-model', max_tokens: 5, messages });
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(types, ['message_start', 'content_block_start', 'content_block_delta',
    'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta',
    'content_block_stop', 'message_delta', 'kvgate_sim_unknown', 'message_stop']);
  assert.equal(final.usage.output_tokens, 5);
  assert.equal(final.usage.input_tokens, inputTokens);
  let ms = await scrapeMetrics(gw.api);
  assert.equal(await settledSample(gw.api, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }, inputTokens + 5),
    inputTokens + 5);
  assert.equal(metric(ms, 'loxilb_ai_tokens_estimated_total', { tenant: 'acme' }) ?? 0, 0);
  // The service loses its endpoints: the gateway's own 503, as the SDK's typed error.
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [], extraArgs: { api_key_auth: 'required' } }));
  assert.equal(r.status, 200, r.text);
  const err = await client.messages.create({ model: 'sim-model', max_tokens: 1, messages }).catch((e) => e);
  assert.ok(err instanceof Anthropic.InternalServerError, String(err));
  assert.equal(err.status, 503);
  assert.equal(err.error.type, 'error');
  assert.equal(err.error.error.type, 'overloaded_error');
  assert.match(err.error.error.message, /^service /);  // (the gateway's own words)
  ms = await scrapeMetrics(gw.api);
  assert.equal(metric(ms, 'loxilb_ai_tokens_consumed_total', { tenant: 'acme' }), inputTokens + 5, 'a refusal is charged nothing');
});

// Model pools read the model from a Messages or Responses body as from a chat one: two pools on
// one listener, one worker each; each request reaches its model's pool.
test('Messages and Responses requests pick the model pool their body names', async (t) => {
  const sim = await startSim(['--workers', '2', '--port', '0', '--model', 'sim-model', '--model', 'other']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  for (const [model, w] of [['sim-model', a], ['other', b]]) {
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port, model, workers: [w] }));
    assert.equal(r.status, 200, r.text);
  }
  const client = new Anthropic({ apiKey: 'x', baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
  const messages = [{ role: 'user', content: 'hi' }];
  for (const [model, w] of [['other', b], ['sim-model', a], ['other', b]]) {
    const before = await scrapeMetrics(gw.api);
    const msg = await client.messages.create({ model, max_tokens: 1, messages });
    assert.equal(msg.model, model);
    const res = await post(`http://127.0.0.1:${port}`, '/v1/responses', { model, input: 'hi', max_output_tokens: 1 });
    assert.equal(res.status, 200, res.text);
    assert.equal(JSON.parse(res.text).model, model);
    assert.equal(sentTo(await scrapeMetrics(gw.api), w) - sentTo(before, w), 2, `both went to ${model}'s pool`);
  }
});

test('Messages requests: hostile and malformed bodies get clear errors and change nothing', async (t) => {
  const { w, gw, port } = await simBehindGateway(t, { ruleArgs: { kvExactMode: 3, kvExactApiMode: 'both' } });
  const url = `http://127.0.0.1:${port}`;
  const ok = { model: 'sim-model', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
  // Wrong types: the engine's validation answers (400), relayed; the gateway routed it unkeyed.
  for (const body of [
    { ...ok, messages: 5 },
    { ...ok, messages: [{ role: 'user', content: 7 }] },
    { ...ok, system: { not: 'a list' }, messages: [{ role: 'user', content: [{ text: 'no type' }] }] },
  ]) {
    const res = await post(url, '/v1/messages', body);
    assert.equal(res.status, 400, `${JSON.stringify(body)} -> ${res.text}`);
  }
  // Members of another type than the engine's model declares, inside blocks (each made an
  // earlier conversion throw, leaking the connection): not converted, the engine answers 400.
  for (const content of [
    [{ type: 'tool_use', id: 1, name: 'x', input: {} }],
    [{ type: 'image', source: { type: 'url', url: 5 } }],
    [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: null }] }],
    [{ type: 'text', text: { nested: true } }],
  ]) {
    const res = await post(url, '/v1/messages', { ...ok, messages: [{ role: 'user', content }] });
    assert.equal(res.status, 400, `${JSON.stringify(content)} -> ${res.text}`);
  }
  // Not JSON at all: the gateway's own 400, in Anthropic's shape.
  let res = await post(url, '/v1/messages', '{"model":');
  assert.equal(res.status, 400);
  assert.deepEqual(JSON.parse(res.text), { type: 'error', error: { type: 'invalid_request_error', message: 'request body is not valid JSON' } });
  // A content array 100,000 levels deep: refused (by the gateway's or the engine's depth bound).
  const deep = `{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":${'['.repeat(100000)}${']'.repeat(100000)}}]}`;
  res = await post(url, '/v1/messages', deep);
  assert.equal(res.status, 400, res.text);
  // 5,000 tools with schemas: converted and routed; the engine answers.
  const tools = Array.from({ length: 5000 }, (_, i) => ({ name: `tool_${i}`, description: `does ${i}`,
    input_schema: { type: 'object', properties: { x: { type: 'string' } } } }));
  res = await post(url, '/v1/messages', { ...ok, tools });
  assert.equal(res.status, 200, res.text.slice(0, 200));
  // A body over 2 MiB is not converted (counted too_large) and goes to the engine, which
  // refuses a prompt longer than its context.
  res = await post(url, '/v1/messages', { ...ok, messages: [{ role: 'user', content: 'word '.repeat(600000) }] });
  assert.equal(res.status, 400, res.text.slice(0, 200));
  assert.match(res.text, /maximum context length/);
  // Duplicate "model" members: the gateway cannot read the model as the engine would... but no
  // rule here depends on the model, so the request is forwarded as it is (as on the chat path).
  res = await post(url, '/v1/messages', '{"model":"sim-model","model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"x"}]}');
  assert.equal(res.status, 200, res.text);
  // The gateway still serves, and its counters saw every request.
  res = await post(url, '/v1/messages', ok);
  assert.equal(res.status, 200);
  const ms = await scrapeMetrics(gw.api);
  assert.equal(sentTo(ms, w), 12);
  // Of the JSON bodies, eight could not be converted (the three wrong types, the four typed
  // members, the deep one: routed unkeyed), one was too large, three were converted.
  assert.equal(metric(ms, 'kvgate_api_prompt_total', { api: 'messages', result: 'unconvertible' }), 8);
  assert.equal(metric(ms, 'kvgate_api_prompt_total', { api: 'messages', result: 'too_large' }), 1);
  assert.equal(metric(ms, 'kvgate_api_prompt_total', { api: 'messages', result: 'converted' }), 3);
  assert.equal(metric(ms, 'kvgate_api_requests_total', { api: 'messages' }), 13);
  assert.equal(metric(ms, 'kvgate_internal_errors_total', {}), 0);
});

// Tier 1.5 keys a Messages request by the prompt its engine renders: the chat form (system first,
// blocks as parts) through the model's chat template. A request whose conversation a worker holds
// lands there, whether that worker cached it from a Messages request or from the same conversation
// sent as a chat completion.
test('Tier 1.5: Messages conversations go to the worker holding their prefix', async (t) => {
  const MODEL = 'Qwen/Qwen3-8B';
  const { a, b, gw, port, post, blocks, fall, settled } = await tokenizedFleet(t,
    { hosts: '127.0.0.14-15', model: MODEL, ruleArgs: { kvExactApiMode: 'both' } });
  // The tokenizer loads off the request path: warm it until a short prompt misses as `shallow`.
  assert.ok(await waitFor(async () => {
    await post(`http://127.0.0.1:${port}`, '/v1/messages', { model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
    return (await fall('shallow')) > 0;
  }, 15000, 100), 'the gateway never loaded the tokenizer');

  // b holds a long system prompt from a Messages request sent to it directly (system as blocks).
  const rules = Array.from({ length: 60 }, (_, i) => `Rule ${i}: answer politely and cite sources.`).join(' ');
  const msgs = (q) => ({ model: MODEL, max_tokens: 1, system: [{ type: 'text', text: rules }],
    messages: [{ role: 'user', content: [{ type: 'text', text: q }] }] });
  let before = await blocks(b);
  assert.equal((await post(b.url, '/v1/messages', msgs('first question'))).status, 200);
  assert.ok(await waitFor(async () => (await blocks(b)) >= before + 20, 10000), 'b\'s blocks did not arrive');
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 5; i++) {
    const res = await post(`http://127.0.0.1:${port}`, '/v1/messages', msgs(`question ${i}?`));
    assert.equal(res.status, 200, res.text);
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 5, 'every Messages request sharing the system prompt goes to b');

  // a holds another conversation, cached from the chat API; the same conversation as a Messages
  // request (system string, a second turn) lands on a: the two APIs render the same prompt.
  const doc = Array.from({ length: 80 }, (_, i) => `Clause ${i} of the shared contract applies.`).join(' ');
  const turns = [{ role: 'user', content: 'Summarise the contract.' }, { role: 'assistant', content: 'It has 80 clauses.' }];
  before = await blocks(a);
  const chat = await post(a.url, '/v1/chat/completions', { model: MODEL, max_tokens: 1,
    messages: [{ role: 'system', content: doc }, ...turns, { role: 'user', content: 'And clause 3?' }] });
  assert.equal(chat.status, 200, chat.text);
  assert.ok(await waitFor(async () => (await blocks(a)) >= before + 20, 10000), 'a\'s blocks did not arrive');
  for (let i = 0; i < 3; i++) {
    const res = await post(`http://127.0.0.1:${port}`, '/v1/messages', { model: MODEL, max_tokens: 1, system: doc,
      messages: [...turns, { role: 'user', content: `And clause ${10 + i}?` }] });
    assert.equal(res.status, 200, res.text);
  }
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m2, a) - sentTo(m1, a), 3, 'the Messages form of a chat conversation goes to a');

  // A conversation through the SDK and the gateway alone: its first turn lands on some worker;
  // every later turn (the history grown by the answer) goes to that worker.
  const client = new Anthropic({ apiKey: 'x', baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 });
  const guide = Array.from({ length: 70 }, (_, i) => `Guideline ${i}: keep the tool output short.`).join(' ');
  const history = [{ role: 'user', content: 'Plan the refactor.' }];
  const m3 = await scrapeMetrics(gw.api);
  const held = await settled();  // (what grows next is this conversation's)
  const first = await client.messages.create({ model: MODEL, max_tokens: 3, system: guide, messages: history });
  const m4 = await scrapeMetrics(gw.api);
  const home = sentTo(m4, a) - sentTo(m3, a) === 1 ? a : b;
  assert.equal(sentTo(m4, home) - sentTo(m3, home), 1);
  const heldBefore = home === a ? held.a : held.b;
  assert.ok(await waitFor(async () => (await blocks(home)) >= heldBefore + 20, 10000), 'the first turn\'s blocks did not arrive');
  history.push({ role: 'assistant', content: first.content[0].text });
  for (let i = 0; i < 3; i++) {
    history.push({ role: 'user', content: `Step ${i}?` });
    const next = await client.messages.create({ model: MODEL, max_tokens: 3, system: guide, messages: history });
    history.push({ role: 'assistant', content: next.content[0].text });
  }
  const m5 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m5, home) - sentTo(m4, home), 3, 'every later turn went to the first turn\'s worker');
});
