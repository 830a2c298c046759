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
