// Faults between the gateway and its engines, the functional half (issue 28 §2): what a client
// sees and what the gateway holds after an engine cuts a stream, an engine is SIGKILLed
// mid-stream, and clients leave by the hundred. The same faults at scale, with packet loss,
// delay and resets in a network namespace, are bench/faults.sh (docs/reliability.md "Faults").
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { test } from 'node:test';
import { gateway, scrapeMetrics, service, simMetrics, sleep, startSim, waitFor } from './lib.mjs';

const SIM = ['--port', '0', '--timing', 'fixed', '--itl-ms', '50', '--prefill-base-ms', '0',
  '--prefill-us-per-token', '0', '--max-concurrency', '10000'];
const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;
const sum = (m, name, labels = {}) => m.filter((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);

// One streamed completion; `leaveAfter` data events, the client closes. Resolves with the status,
// the data events seen, whether [DONE] came, and whether the HTTP body ended cleanly.
function stream(port, tokens, { leaveAfter = -1, agent } = {}) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ model: 'sim-model', prompt: 'fault', max_tokens: tokens, stream: true });
    let events = 0, text = '', settled = false;
    const done = (r) => { if (!settled) { settled = true; resolve(r); } };
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        text += d;
        events = (text.match(/^data: \{/gm) || []).length;
        if (leaveAfter >= 0 && events >= leaveAfter) {
          req.destroy();
          done({ status: res.statusCode, events, left: true });
        }
      });
      res.on('end', () => done({ status: res.statusCode, events, finished: text.includes('data: [DONE]'), clean: true }));
      res.on('error', () => done({ status: res.statusCode, events, finished: false, clean: false }));
      res.on('aborted', () => done({ status: res.statusCode, events, finished: false, clean: false }));
    });
    req.on('error', (e) => done({ status: 0, events, finished: false, clean: false, error: String(e) }));
    req.end(body);
  });
}

test('an engine that cuts its stream: the client sees it cut, the gateway counts and logs it', async (t) => {
  const sim = await startSim(['--workers', '1', ...SIM, '--close-mid-stream-after', '3']);
  t.after(() => sim.stop());
  const gw = await gateway(t);
  const port = await service(gw, { workers: sim.workers });
  const r = await stream(port, 20);
  assert.equal(r.status, 200);
  assert.equal(r.events, 3, 'the events sent before the cut are relayed');
  assert.equal(r.finished, false);
  assert.equal(r.clean, false, 'the HTTP body does not end as if complete (no last chunk)');
  const m = await scrapeMetrics(gw.api);
  assert.equal(sum(m, 'kvgate_relay_cuts_total', { reason: 'upstream' }), 1);
  assert.equal(sum(m, 'kvgate_relay_cuts_total', { reason: 'client' }), 0);
  assert.equal(sum(m, 'kvgate_endpoint_inflight'), 0, 'the endpoint\'s in-flight slot is released');
  assert.ok(await waitFor(() => /cut by the upstream after \d+ bytes: the client's stream ends unfinished/
    .test(gw.proc.stderrText), 5000), gw.proc.stderrText);
});

test('an engine SIGKILLed mid-stream: its streams are cut, new ones go to the engine left', async (t) => {
  const a = await startSim(['--workers', '1', ...SIM]);
  const b = await startSim(['--workers', '1', ...SIM]);
  t.after(() => { a.stop(); b.stop(); });
  const gw = await gateway(t);
  const port = await service(gw, { workers: [...a.workers, ...b.workers] });
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  t.after(() => agent.destroy());
  // 40 streams of 60 x 50 ms (3 s), spread over both engines (round robin); kill one at ~1 s.
  const first = Array.from({ length: 40 }, () => stream(port, 60, { agent }));
  await sleep(1000);
  a.proc.kill('SIGKILL');
  const results = await Promise.all(first);
  const cut = results.filter((r) => !r.finished);
  const whole = results.filter((r) => r.finished);
  assert.ok(results.every((r) => r.status === 200), JSON.stringify(results.find((r) => r.status !== 200)));
  assert.ok(cut.length >= 10 && cut.length <= 30, `about half the streams were on the killed engine: ${cut.length}`);
  assert.ok(whole.every((r) => r.events === 60), 'every finished stream has all its events');
  assert.ok(cut.every((r) => r.events < 60 && !r.clean), 'every cut stream ends unfinished, visibly');
  // New streams find the engine left (a refused connect moves on to the next endpoint).
  const second = await Promise.all(Array.from({ length: 20 }, () => stream(port, 5, { agent })));
  assert.ok(second.every((r) => r.status === 200 && r.finished), JSON.stringify(second.find((r) => !r.finished)));
  const m = await scrapeMetrics(gw.api);
  assert.equal(sum(m, 'kvgate_relay_cuts_total', { reason: 'upstream' }), cut.length);
  assert.equal(sum(m, 'kvgate_endpoint_inflight'), 0);
  // (A connection is counted until its lingering close sees the client's FIN.)
  assert.ok(await waitFor(async () => sum(await scrapeMetrics(gw.api), 'kvgate_active_client_connections') === 0, 5000),
    'no client connection left open');
});

test('clients leaving by the hundred: every engine request is aborted, nothing is held', async (t) => {
  const sim = await startSim(['--workers', '2', ...SIM]);
  t.after(() => sim.stop());
  const gw = await gateway(t);
  const port = await service(gw, { workers: sim.workers });
  const base = fdCount(gw.proc.pid);
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  t.after(() => agent.destroy());
  const n = 300;
  const results = await Promise.all(Array.from({ length: n }, () => stream(port, 200, { leaveAfter: 2, agent })));
  assert.ok(results.every((r) => r.left && r.status === 200), JSON.stringify(results.find((r) => !r.left)));
  // The engines see every request aborted (200 tokens at 50 ms would run 10 s more).
  const running = async () => (await Promise.all(sim.workers.map(simMetrics)))
    .reduce((acc, x) => acc + (x['vllm:num_requests_running'] || 0), 0);
  assert.ok(await waitFor(async () => (await running()) === 0, 5000), 'no request left running on the engines');
  const aborted = (await Promise.all(sim.workers.map(simMetrics)))
    .reduce((acc, x) => acc + (x.kvgate_sim_requests_aborted_total || 0), 0);
  assert.equal(aborted, n, 'each left stream was aborted at the engine');
  const m = await scrapeMetrics(gw.api);
  assert.equal(sum(m, 'kvgate_relay_cuts_total', { reason: 'client' }), n);
  assert.equal(sum(m, 'kvgate_relay_cuts_total', { reason: 'upstream' }), 0);
  assert.equal(sum(m, 'kvgate_endpoint_inflight'), 0);
  assert.ok(await waitFor(() => fdCount(gw.proc.pid) <= base + 4, 5000),
    `descriptors back to ${base} (+4 for the metrics scrape), now ${fdCount(gw.proc.pid)}`);
});
