// The memory bound (issue 28 §2 "limits"; proxy/overload.h): with --max-heap-bytes set a little
// above the gateway's idle heap, SSE streams are opened until the heap passes 90 % of the bound.
// Then new requests get 503 gateway_overloaded with Retry-After (counted), the gateway does not
// crash, every stream already open completes, and once they end the heap falls and requests are
// served again.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { gateway, scrapeMetrics, service, sleep, startSim, waitFor } from './lib.mjs';

const metric = async (gw, name) =>
  (await scrapeMetrics(gw.api)).find((s) => s.name === name)?.value;

// One streamed completion of `tokens` events; resolves {status, done, body} when it ends.
function stream(port, tokens, agent) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ model: 'sim-model', prompt: 'p', max_tokens: tokens, stream: true });
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, done: text.includes('data: [DONE]'), body: text,
        retryAfter: res.headers['retry-after'] }));
      res.on('error', () => resolve({ status: res.statusCode, done: false, body: text }));
    });
    req.on('error', (e) => resolve({ status: 0, done: false, body: String(e) }));
    req.end(body);
  });
}

test('at its memory bound the gateway sheds new requests, finishes its streams, and recovers', async (t) => {
  const sim = await startSim(['--workers', '1', '--port', '0', '--timing', 'fixed', '--itl-ms', '250',
    '--prefill-base-ms', '0', '--prefill-us-per-token', '0', '--max-concurrency', '100000']);
  t.after(() => sim.stop());
  // The idle heap, measured on a gateway with a bound far away.
  const probe = await gateway(t, ['--max-heap-bytes', String(1 << 30)]);
  await service(probe, { workers: sim.workers });
  assert.ok(await waitFor(async () => (await metric(probe, 'kvgate_heap_bytes')) > 0, 5000));
  const idle = await metric(probe, 'kvgate_heap_bytes');
  await probe.stop();
  const bound = Math.max(16 << 20, idle + (4 << 20));
  const gw = await gateway(t, ['--max-heap-bytes', String(bound)]);
  const port = await service(gw, { workers: sim.workers });
  assert.equal(await metric(gw, 'kvgate_heap_limit_bytes'), bound);
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  t.after(() => agent.destroy());
  // The probe's connection is accepted now and kept: at the last level the listeners stop
  // accepting, but a request on an open connection is still answered (with the 503).
  const probeAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => probeAgent.destroy());
  const warm = await stream(port, 1, probeAgent);
  assert.equal(warm.status, 200, warm.body);
  // Open streams 50 at a time (each lasts 40 x 250 ms = 10 s; the ramp stays well inside it, so
  // none ends meanwhile) until the gateway sheds.
  const open = [];
  let shed = null;
  const rampEnd = Date.now() + 7000;  // (inside the streams' 10 s: none ends during the ramp)
  while (Date.now() < rampEnd && !shed) {
    for (let i = 0; i < 50; i++) open.push(stream(port, 40, agent));
    await sleep(60);
    if ((await metric(gw, 'kvgate_overload_state')) >= 1) shed = await stream(port, 1, probeAgent);
  }
  assert.ok(shed, `the heap never reached 90 % of ${bound} bytes with ${open.length} streams`);
  assert.equal(shed.status, 503, shed.body);
  assert.match(shed.body, /gateway_overloaded/);
  assert.equal(shed.retryAfter, '1');
  assert.ok((await metric(gw, 'kvgate_overload_shed_total')) >= 1);
  assert.match(gw.proc.stderrText, /WARN overload heap \d+ MiB of \d+ MiB \(--max-heap-bytes\): .*new requests get 503/);
  // Every stream admitted before the bound completes; those refused were refused cleanly.
  const results = await Promise.all(open);
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 503);
  assert.equal(ok.length + refused.length, results.length,
    `only 200 or 503: ${JSON.stringify(results.find((r) => r.status !== 200 && r.status !== 503))}`);
  assert.ok(ok.length > 0);
  assert.ok(ok.every((r) => r.done), 'every admitted stream reached [DONE]');
  refused.forEach((r) => assert.match(r.body, /gateway_overloaded/));
  // The streams gone, the heap falls under the bound and requests are served again.
  assert.ok(await waitFor(async () => (await metric(gw, 'kvgate_overload_state')) === 0, 10000),
    'back to normal');
  const after = await stream(port, 2, agent);
  assert.equal(after.status, 200, after.body);
  assert.ok(after.done);
  assert.ok(gw.proc.exitCode === null, 'the gateway is running');
  t.diagnostic(`idle heap ${idle} B, bound ${bound} B, ${ok.length} streams served, ${refused.length} refused`);
});
