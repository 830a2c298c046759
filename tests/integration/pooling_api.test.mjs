// Pooling requests (embeddings, rerank, score, classify; issue 31): no prefix to follow, so a
// round-robin rule places them on the least-loaded endpoint by default (kvPoolingLb auto), not by
// its own selector; kvPoolingLb "rule" restores the rule's pipeline. (A key-based selector keeps
// its affinity under auto: selectors.test.mjs, chwbl's X-Conversation-Id on /v1/embeddings.)
// Load is the gateway's own requests in flight: slow streams held open on one endpoint.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, startSim, waitFor } from './lib.mjs';

const sentTo = (ms, w) => ms.filter((s) => s.name === 'kvgate_requests_total' &&
  s.labels.endpoint === `${w.host}:${w.port}`).reduce((x, s) => x + s.value, 0);

test('pooling requests go to the least-loaded endpoint; kvPoolingLb rule keeps the rule\'s selector', async (t) => {
  // Fixed timing: each token 40 ms, so a 300-token stream stays open ~12 s.
  const sim = await startSim(['--workers', '2', '--port', '0', '--timing', 'fixed', '--prefill-base-ms', '1',
    '--itl-ms', '40']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [a, b] }));  // sel 0: round-robin
  assert.equal(r.status, 200, r.text);
  const port2 = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: port2, workers: [a, b], extraArgs: { kvPoolingLb: 'rule' } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: await freePort(), workers: [a, b], extraArgs: { kvPoolingLb: 'nearest' } }));
  assert.equal(r.status, 400, r.text);

  // Three slow streams, round-robin: a, b, a (two in flight on a, one on b).
  const aborts = [];
  t.after(() => aborts.forEach((c) => c.abort()));
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 3; i++) {
    const c = new AbortController();
    aborts.push(c);
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', signal: c.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', stream: true, max_tokens: 300, messages: [{ role: 'user', content: `slow ${i}` }] }) });
    assert.equal(res.status, 200);
    res.body.getReader().read().catch(() => {});  // (headers came: it is in flight)
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, a) - sentTo(m0, a), 2, 'two streams on a (counted at their head)');
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 1);
  const embed = (p, i) => fetch(`http://127.0.0.1:${p}/v1/embeddings`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sim-model', input: [`text ${i}`, 'more'] }) })
    .then(async (res) => { assert.equal(res.status, 200, await res.text()); });
  for (let i = 0; i < 4; i++) await embed(port, i);
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m2, b) - sentTo(m1, b), 4, 'every embedding goes to b, the less loaded');
  assert.equal(sentTo(m2, a) - sentTo(m1, a), 0);
  // The same on the rule that keeps its own selector (round-robin): two and two.
  for (let i = 0; i < 4; i++) await embed(port2, i);
  const m3 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m3, a) - sentTo(m2, a), 2);
  assert.equal(sentTo(m3, b) - sentTo(m2, b), 2);
  assert.equal(m3.find((s) => s.name === 'kvgate_api_requests_total' && s.labels.api === 'pooling')?.value, 8);
  // The pooling pipeline's decisions carry its label.
  // The pooling pipeline's decisions carry its label: the four of the least_loaded rule.
  assert.equal(m3.filter((s) => s.name === 'kvgate_selector_decisions_total' && s.labels.selector === 'pooling:min_load')
    .reduce((x, s) => x + s.value, 0), 4);
});

// The pooling APIs through model pools and quotas (issue 31): embeddings, rerank, score and
// classify each reach the pool their body's model names (two pools on one listener, one worker
// each), and a key is charged what the engine reports (usage.total_tokens: a batch's inputs
// together; rerank and score count each query-document pair). The reservation is the body's bytes
// / 4 with no output: a batch of ~8,000 bytes (about 2,000 tokens) cannot pass a 1,000-token
// bucket that is no longer full, while a small request still does.
test('pooling APIs: model pools, rerank/score/classify, quota charged from usage, batches reserved', async (t) => {
  const sim = await startSim(['--workers', '2', '--port', '0', '--model', 'embed-a', '--model', 'embed-b']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  for (const [model, w] of [['embed-a', a], ['embed-b', b]]) {
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port, model, workers: [w], extraArgs: { api_key_auth: 'required' } }));
    assert.equal(r.status, 200, r.text);
  }
  const k = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'pool', tokens_per_min: 1000 });
  assert.equal(k.status, 201, k.text);
  const call = (path, body) => fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${k.json.raw_key}` }, body: JSON.stringify(body) })
    .then(async (res) => ({ status: res.status, json: await res.json().catch(() => null) }));
  const m0 = await scrapeMetrics(gw.api);
  const calls = [
    ['/v1/embeddings', { model: 'embed-a', input: ['the first text', 'a second one', 'and a third'] }, a],
    ['/v1/rerank', { model: 'embed-b', query: 'prefix caching', documents: ['KV cache reuse', 'gardening tips'] }, b],
    ['/score', { model: 'embed-a', text_1: 'prefix caching', text_2: ['KV cache reuse', 'gardening'] }, a],
    ['/classify', { model: 'embed-b', input: ['great product', 'terrible'] }, b],
  ];
  let reported = 0;
  for (const [path, body, w] of calls) {
    const before = await scrapeMetrics(gw.api);
    const res = await call(path, body);
    assert.equal(res.status, 200, `${path}: ${JSON.stringify(res.json)}`);
    assert.equal(res.json.model, body.model);
    assert.ok(res.json.usage.total_tokens > 0, path);
    reported += res.json.usage.total_tokens;
    assert.equal(sentTo(await scrapeMetrics(gw.api), w) - sentTo(before, w), 1, `${path} went to ${body.model}'s pool`);
    if (path === '/v1/embeddings') assert.equal(res.json.data.length, 3);
    if (path === '/v1/rerank') assert.deepEqual(res.json.results.map((x) => x.index).sort(), [0, 1]);
    if (path === '/score') assert.equal(res.json.data.length, 2);
    if (path === '/classify') assert.equal(res.json.data[1].num_classes, 2);
  }
  const m1 = await scrapeMetrics(gw.api);
  const consumed = (ms) => ms.find((s) => s.name === 'loxilb_ai_tokens_consumed_total' && s.labels.tenant === 'pool')?.value ?? 0;
  assert.equal(consumed(m1) - consumed(m0), reported, 'charged what the engines reported');
  assert.equal(m1.find((s) => s.name === 'kvgate_api_requests_total' && s.labels.api === 'pooling')?.value, 4);
  // Reservations, with a key of 60 tokens a minute (one a second back): a request reporting ~30
  // tokens leaves about 30; a batch of ~8,000 bytes then reserves the whole bucket (its ~2,000
  // tokens, capped at the capacity) and is refused, while a small request (~15) still passes.
  const k2 = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'small', tokens_per_min: 60 });
  assert.equal(k2.status, 201, k2.text);
  const call2 = (body) => fetch(`http://127.0.0.1:${port}/v1/embeddings`, { method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${k2.json.raw_key}` }, body: JSON.stringify(body) })
    .then(async (res) => ({ status: res.status, json: await res.json().catch(() => null) }));
  const spend = await call2({ model: 'embed-a', input: 'word '.repeat(30) });
  assert.equal(spend.status, 200);
  assert.ok(spend.json.usage.total_tokens >= 25 && spend.json.usage.total_tokens <= 45, JSON.stringify(spend.json.usage));
  const big = await call2({ model: 'embed-a', input: Array.from({ length: 100 }, (_, i) => `${'word '.repeat(14)}${i}`) });
  assert.equal(big.status, 429, JSON.stringify(big.json));
  const small = await call2({ model: 'embed-a', input: 'small' });
  assert.equal(small.status, 200, JSON.stringify(small.json));
  // Hostile bodies on a pooling path: the engine's 400, nothing charged for them.
  const m2 = await scrapeMetrics(gw.api);
  for (const body of [{ model: 'embed-b', query: ['not', 'a string'], documents: ['x'] },
    { model: 'embed-b', query: 'q', documents: 'not a list' }, { model: 'embed-b', query: 'q', documents: [{ deep: [[[[1]]]] }] }]) {
    const res = await call('/rerank', body);
    assert.equal(res.status, 400, JSON.stringify(body));
  }
  assert.equal(consumed(await scrapeMetrics(gw.api)), consumed(m2), 'a refused body is charged nothing');
});
