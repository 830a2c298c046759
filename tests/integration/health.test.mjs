// Health: active probes take a killed worker out and bring it back; the circuit breaker opens on
// origin 5xx streaks, admits one half-open trial after its window, and closes on success.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, freePort, simMetrics, sleep, startGateway, startSim, tempDir } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';
const body = '{"model":"sim-model","prompt":"a","max_tokens":1}';

describe('health and resilience', () => {
  let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    gw = await startGateway({ stateDir: tmp.dir, extra: ['--probe-interval-ms', '100', '--probe-timeout-ms', '300', '--cb-open-ms', '600'] });
  });
  after(async () => { await gw.stop(); tmp.remove(); });

  const metric = async (re) => {
    const m = (await (await fetch(`${gw.api}/metrics`)).text()).match(re);
    return m ? Number(m[1]) : null;
  };
  const waitFor = async (fn, ms = 5000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) { if (await fn()) return true; await sleep(50); }
    return false;
  };
  // kvgate_routing_filtered_total of the rule on `port` (candidate filters, routing/eligibility).
  const filtered = (port, filter) => metric(new RegExp(
    `^kvgate_routing_filtered_total\\{rule="[^"]*:${port}/[^"]*",filter="${filter}"\\} (\\d+)$`, 'm'));
  async function send(url, n) {
    const statuses = [];
    for (let i = 0; i < n; i++) {
      const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await r.arrayBuffer();
      statuses.push(r.status);
    }
    return statuses;
  }

  test('a killed worker leaves rotation on failed probes and returns when probes pass', async () => {
    const sims = [await startSim(['--port', '0']), await startSim(['--port', '0']), await startSim(['--port', '0'])];
    const ws = sims.map((s) => s.workers[0]);
    const port = await freePort();
    const r = await api(gw.api, 'POST', BASE, {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, sel: 0, probetype: 'http', probeRetries: 2 },
      endpoints: ws.map((w) => ({ endpointIP: w.host, targetPort: w.port, weight: 1, urlPath: '/health', expectedCodes: '200' })),
    });
    assert.equal(r.status, 200, r.text);
    const url = `http://127.0.0.1:${port}`;
    assert.deepEqual(await send(url, 30), Array(30).fill(200));
    const label = `127.0.0.1:${ws[1].port}`;
    const up = (v) => async () => (await metric(new RegExp(`^kvgate_endpoint_up\\{endpoint="${label.replace(/\./g, '\\.')}"\\} (\\d)$`, 'm'))) === v;
    await sims[1].stop();
    assert.ok(await waitFor(up(0)), 'probe never marked the killed worker down');
    assert.equal(await filtered(port, 'healthy'), 0);
    assert.deepEqual(await send(url, 20), Array(20).fill(200));
    // Each of the 20 requests had the down worker dropped by the `healthy` candidate filter.
    assert.equal(await filtered(port, 'healthy'), 20);
    assert.equal(await filtered(port, 'breaker'), null, 'no breaker filter on a rule without cb_enable');
    // Back on the same port: probes pass and it takes traffic again.
    sims[1] = await startSim(['--port', String(ws[1].port)]);
    assert.ok(await waitFor(up(1)), 'probe never brought the worker back');
    const before = (await simMetrics(ws[1])).kvgate_sim_requests_total || 0;
    assert.deepEqual(await send(url, 30), Array(30).fill(200));
    assert.equal(((await simMetrics(ws[1])).kvgate_sim_requests_total || 0) - before, 10);
    assert.equal(await filtered(port, 'healthy'), 20, 'a worker back up is not dropped');
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    for (const s of sims) await s.stop();
  });

  test('breaker: 3 origin 5xx open it, the open window passes, one trial closes it', async () => {
    const sim = await startSim(['--workers', '2', '--port', '0']);
    const [a, b] = sim.workers;
    const port = await freePort();
    const r = await api(gw.api, 'POST', BASE, {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, sel: 0, cb_enable: true },
      endpoints: [a, b].map((w) => ({ endpointIP: w.host, targetPort: w.port, weight: 1 })),
    });
    assert.equal(r.status, 200, r.text);
    const rules = (await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr;
    const eff = rules.find((x) => x.serviceArguments.port === port).effective;
    assert.deepEqual(eff.candidateFilters, ['healthy', 'breaker', 'controller']);
    const url = `http://127.0.0.1:${port}`;
    await fetch(`${a.url}/sim/fault`, { method: 'POST', body: '{"fail_requests":3,"fail_status":503}' });
    // Round-robin alternates a, b: a answers 503 three times (relayed, not retried).
    assert.deepEqual(await send(url, 6), [503, 200, 503, 200, 503, 200]);
    const labelA = `127.0.0.1:${a.port}`.replace(/\./g, '\\.');
    const state = () => metric(new RegExp(`^kvgate_endpoint_breaker_state\\{endpoint="${labelA}"\\} (\\d)$`, 'm'));
    assert.equal(await state(), 1, 'breaker should be open');
    // The sixth request came after the third 503 opened a's breaker: a was not its candidate.
    assert.equal(await filtered(port, 'breaker'), 1);
    const aBefore = (await simMetrics(a)).kvgate_sim_requests_total;
    assert.deepEqual(await send(url, 8), Array(8).fill(200));
    assert.equal((await simMetrics(a)).kvgate_sim_requests_total, aBefore, 'open breaker still sent traffic');
    // The `breaker` candidate filter dropped a from each of those 8 requests too (origin 5xx do
    // not mark it down: `healthy` dropped nothing).
    assert.equal(await filtered(port, 'breaker'), 9);
    assert.equal(await filtered(port, 'healthy'), 0);
    await sleep(700);  // --cb-open-ms 600
    assert.equal(await state(), 2, 'breaker should be half-open after its window');
    assert.deepEqual(await send(url, 8), Array(8).fill(200));
    assert.equal(await state(), 0, 'a successful trial should close the breaker');
    assert.equal(await filtered(port, 'breaker'), 9, 'a half-open endpoint is a candidate (its trial)');
    assert.ok((await simMetrics(a)).kvgate_sim_requests_total - aBefore >= 3, 'a is back in rotation');
    for (const [to, n] of [['open', 1], ['half_open', 1], ['closed', 1]]) {
      assert.equal(await metric(new RegExp(`^kvgate_endpoint_breaker_transitions_total\\{endpoint="${labelA}",to="${to}"\\} (\\d+)$`, 'm')), n, to);
    }
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await sim.stop();
  });
});
