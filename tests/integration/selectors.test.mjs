// Key-based selectors against a simulated fleet: CHWBL affinity and bounded-load spill, gpuaware,
// wrr-hash weights, persist stickiness by header/cookie/query, source hash.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, freePort, gateway, rule, scrapeMetrics, simMetrics, startGateway, startSim, tempDir, requestCounts, delta, waitFor } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';
const SYSTEM = 'You are a meticulous assistant. '.repeat(50);  // > 1 KiB: the whole prefix key

describe('key-based selectors', () => {
  let sim; let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    sim = await startSim(['--workers', '3', '--port', '0', '--timing', 'fixed', '--itl-ms', '0', '--prefill-us-per-token', '0']);
    gw = await startGateway({ stateDir: tmp.dir });
  });
  after(async () => { await gw.stop(); await sim.stop(); tmp.remove(); });

  const counts = () => requestCounts(sim.workers);
  async function service(opts) {
    const port = await freePort();
    const created = await api(gw.api, 'POST', BASE, rule({ port, workers: sim.workers, ...opts }));
    assert.equal(created.status, 200, created.text);
    return { url: `http://127.0.0.1:${port}`, remove: () => api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`) };
  }
  const chat = (url, system, user, extra = {}, headers = {}) => fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'sim-model', max_tokens: 1, messages: [{ role: 'system', content: system }, { role: 'user', content: user }], ...extra }),
  }).then(async (r) => { assert.equal(r.status, 200); await r.arrayBuffer(); });

  test('chwbl: one shared prefix stays on one worker; different prefixes spread', async () => {
    const svc = await service({ sel: 8 });
    let c0 = await counts();
    for (let i = 0; i < 12; i++) await chat(svc.url, SYSTEM, `question ${i}`);
    let d = delta(c0, await counts());
    assert.equal(d.filter((x) => x > 0).length, 1, `same prefix spread over ${d}`);
    assert.equal(Math.max(...d), 12);
    c0 = await counts();
    for (let g = 0; g < 30; g++) await chat(svc.url, `group ${g} ${SYSTEM}`, 'q');
    d = delta(c0, await counts());
    assert.equal(d.filter((x) => x > 0).length, 3, `30 prefixes reached only ${d}`);
    await svc.remove();
  });

  test('chwbl: a hot prefix spills past its bounded-load cap under concurrency', async () => {
    const slow = await startSim(['--workers', '3', '--port', '0', '--timing', 'fixed', '--itl-ms', '50']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, sel: 8, workers: slow.workers, extraArgs: { name: 'hot' } }))).status, 200);
    const before = await requestCounts(slow.workers);
    // 12 concurrent requests with one prefix, each in flight ~0.5 s: the home endpoint takes
    // requests while it is under ceil(1.75 * (in_flight + 1) / 3); the rest spill.
    const reqs = [];
    for (let i = 0; i < 12; i++) {
      reqs.push(fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', max_tokens: 10, messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: `q${i}` }] }),
      }).then((r) => r.arrayBuffer()));
      await new Promise((r) => setTimeout(r, 20));
    }
    await Promise.all(reqs);
    const after = await requestCounts(slow.workers);
    const d = delta(before, after);
    // Hand calculation, all 12 in flight together (arrivals 20 ms apart, each lasts ~0.5 s):
    // request r sees T = r - 1 in flight and cap = ceil(1.75 * (T + 1) / 3) = 1,2,2,3,3,4,5,5,6,6,7,7;
    // it goes home while home < cap, else to the ring's next endpoint (never full here):
    // home takes r1,2,4,6,7,9,11 = 7, the next endpoint r3,5,8,10,12 = 5, the third none.
    assert.deepEqual([...d].sort((a, b) => a - b), [0, 5, 7], `distribution ${d}`);
    // The 5 requests that left the home endpoint are counted as spills.
    const m = await (await fetch(`${gw.api}/metrics`)).text();
    assert.match(m, /^kvgate_selector_spills_total\{rule="hot"\} 5$/m);
    assert.match(m, /^kvgate_selector_decisions_total\{rule="hot",selector="chwbl",key="prefix"\} 12$/m);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await slow.stop();
  });

  test('chwbl behind a model pool parses the body once for the model and the prefix key', async () => {
    const svc = await service({ sel: 8, model: 'sim-model' });
    const c0 = await counts();
    for (let i = 0; i < 6; i++) await chat(svc.url, SYSTEM, `q${i}`);
    const d = delta(c0, await counts());
    assert.equal(Math.max(...d), 6, `same prefix split: ${d}`);
    const unknown = await fetch(`${svc.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"other","messages":[]}' });
    assert.equal(unknown.status, 503);
    const broken = await fetch(`${svc.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"sim-model","messages":[' });
    assert.equal(broken.status, 400);
    assert.equal((await broken.json()).error.code, 'invalid_json');
    await svc.remove();
  });

  test('hash (sel 1): one client address always reaches the same worker', async () => {
    const svc = await service({ sel: 1 });
    const c0 = await counts();
    for (let i = 0; i < 9; i++) await chat(svc.url, `p${i}`, 'q');
    const d = delta(c0, await counts());
    assert.equal(Math.max(...d), 9, `source hash split: ${d}`);
    await svc.remove();
  });

  test('gpuaware and wrr-hash keep a prefix on one worker; wrr-hash honours weight 0', async () => {
    for (const [sel, weights] of [[9, undefined], [10, [1, 1, 0]]]) {
      const svc = await service({ sel, weights });
      let c0 = await counts();
      for (let i = 0; i < 6; i++) await chat(svc.url, SYSTEM, `q${i}`);
      const d = delta(c0, await counts());
      assert.equal(Math.max(...d), 6, `sel ${sel}: ${d}`);
      if (weights) {
        c0 = await counts();
        for (let g = 0; g < 30; g++) await chat(svc.url, `g${g} ${SYSTEM}`, 'q');
        assert.equal(delta(c0, await counts())[2], 0, 'weight 0 took traffic');
      }
      await svc.remove();
    }
  });

  test('persist: header, cookie and query sessions stick; conversation id keys chwbl', async () => {
    for (const [name, send] of [
      ['x-session', (url, v) => chat(url, 'x', 'y', {}, { 'x-session': v })],
      ['cookie:sid', (url, v) => chat(url, 'x', 'y', {}, { cookie: `a=1; sid=${v}; b=2` })],
      ['query:s', (url, v) => fetch(`${url}/v1/completions?s=${v}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"sim-model","prompt":"a","max_tokens":1}' }).then((r) => r.arrayBuffer())],
    ]) {
      const svc = await service({ sel: 3, extraArgs: { session_header_name: name } });
      const used = new Set();
      for (let s = 0; s < 8; s++) {
        const c0 = await counts();
        for (let i = 0; i < 4; i++) await send(svc.url, `session-${s}`);
        const d = delta(c0, await counts());
        assert.equal(Math.max(...d), 4, `${name} session ${s} split: ${d}`);
        used.add(d.indexOf(4));
      }
      assert.ok(used.size >= 2, `${name}: 8 sessions all on one worker`);
      await svc.remove();
    }
    const bad = await api(gw.api, 'POST', BASE, rule({ port: await freePort(), sel: 3, workers: sim.workers, extraArgs: { session_header_name: 'bad header' } }));
    assert.equal(bad.status, 400);
    assert.match(bad.json.result, /session_header_name/);
    // Without a prefix (no messages/prompt), CHWBL keys on X-Conversation-Id.
    const svc = await service({ sel: 8 });
    const c0 = await counts();
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${svc.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-conversation-id': 'conv-1' }, body: '{"model":"sim-model","input":"a"}' });
      await r.arrayBuffer();
    }
    const d = delta(c0, await counts());
    assert.equal(Math.max(...d), 5, `conversation split: ${d}`);
    await svc.remove();
  });
});

// The smg selector (SMG's current cache_aware) reads the engines' queues and KV usage: a rule
// with it makes the gateway scrape its endpoints' /metrics (kvgate_endpoint_engine_requests),
// and a repeated prompt goes back to the endpoint that served it first.
test('the smg selector scrapes its engines and follows a repeated prompt', async (t) => {
  const sim = await startSim(['--workers', '2', '--port', '0']);
  t.after(() => sim.stop());
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', BASE, rule({ port, workers: sim.workers, extraArgs: { selector: 'smg' } }));
  assert.equal(r.status, 200, r.text);
  const waiting = (m, w) => m.find((s) => s.name === 'kvgate_endpoint_engine_requests' &&
    s.labels.endpoint === `${w.host}:${w.port}` && s.labels.state === 'waiting')?.value;
  assert.ok(await waitFor(async () => {
    const m = await scrapeMetrics(gw.api);
    return sim.workers.every((w) => waiting(m, w) === 0);
  }, 10000, 100), 'the engines were not scraped');
  const send = () => fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: 'You are a careful assistant. '.repeat(20), max_tokens: 1 }),
  }).then(async (res) => { assert.equal(res.status, 200); await res.arrayBuffer(); });
  const c0 = await requestCounts(sim.workers);
  for (let i = 0; i < 4; i++) await send();
  const d = delta(c0, await requestCounts(sim.workers));
  assert.equal(Math.max(...d), 4, `a repeated prompt split: ${d}`);
});
