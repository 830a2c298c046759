// OpenTelemetry tracing (issue 32 §3): W3C trace context from clients (or started here), passed to
// the engines on every leg with the leg's own span, and spans exported as OTLP/HTTP JSON to a
// receiver this test runs, which decodes each payload; parentage and attributes are checked
// against what the client sent and what the engine received (the simulator's /sim/recent).
// Off by default; bounded and counted when the collector is slow; sampling by ratio.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';

import { LB_BASE, api, freePort, gateway, parseMetrics, rawRequest, rule, startSim, waitFor } from './lib.mjs';

// An OTLP/HTTP receiver: every POST /v1/traces body parsed; its spans flattened into `spans`.
async function otlpReceiver(t) {
  const got = { spans: [], posts: 0, resources: [] };
  const srv = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      got.posts++;
      assert.equal(req.method, 'POST');
      assert.equal(req.url, '/v1/traces');
      assert.match(req.headers['content-type'], /^application\/json/);
      const doc = JSON.parse(Buffer.concat(parts).toString());
      for (const rs of doc.resourceSpans) {
        got.resources.push(rs.resource);
        for (const ss of rs.scopeSpans) for (const s of ss.spans) got.spans.push(s);
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { got, url: `http://127.0.0.1:${srv.address().port}` };
}

const attr = (span, key) => {
  const a = span.attributes.find((x) => x.key === key);
  if (!a) return undefined;
  const v = a.value;
  return v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue;
};
const recent = async (w) => (await fetch(`http://${w.host}:${w.port}/sim/recent`)).json();
const lastLegOf = async (w, rid) => (await recent(w)).filter((r) => r.request_id === rid).at(-1);
const traceOf = (got, traceId) => got.spans.filter((s) => s.traceId === traceId);
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';

async function complete(port, rid, headers = {}, extra = {}) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': rid, ...headers },
    body: JSON.stringify({ model: 'sim-model', prompt: 'trace me through the gateway', max_tokens: 3, ...extra }),
  });
  return { status: res.status, text: await res.text() };
}

// A completion written byte by byte (repeated headers a fetch would merge), on its own connection.
function rawCompletion(rid, headerLines) {
  const body = JSON.stringify({ model: 'sim-model', prompt: 'x', max_tokens: 1 });
  return `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: ${rid}\r\n` +
    `${headerLines}Connection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
}

// A receiver, one simulated engine (fixed timing) and a gateway tracing to the receiver, all
// stopped with `t`; `gwArgs`: more serve flags.
async function tracedFleet(t, gwArgs = [], simArgs = ['--prefill-base-ms', '1', '--itl-ms', '1']) {
  const rcv = await otlpReceiver(t);
  const sim = await startSim(['--port', '0', '--timing', 'fixed', ...simArgs]);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  const gw = await gateway(t, ['--workers', '1', '--otlp-endpoint', rcv.url, '--otlp-interval-ms', '50', ...gwArgs]);
  return { rcv, w, gw, port: await freePort() };
}

test('tracing: client context, spans and their parentage, the engine\'s traceparent, usage', async (t) => {
  const { rcv, w, gw, port } = await tracedFleet(t, [], ['--prefill-base-ms', '5', '--itl-ms', '2']);
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [w], model: 'sim-model',
    extraArgs: { name: 'traced' } }));
  assert.equal(r.status, 200, r.text);

  // 1. A sampled client trace, streamed with usage.
  const res = await complete(port, 'trace-1', { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'vendor=1,x=y' },
    { stream: true, stream_options: { include_usage: true } });
  assert.equal(res.status, 200, res.text);
  const leg = await lastLegOf(w, 'trace-1');
  assert.ok(leg, 'the engine got the request');
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(leg.traceparent);
  assert.ok(m, `the engine's traceparent: ${leg.traceparent}`);
  assert.equal(m[1], TRACE, 'the client\'s trace goes on');
  assert.notEqual(m[2], PARENT, 'the engine\'s parent is our leg span, not the client\'s');
  assert.equal(leg.tracestate, 'vendor=1,x=y');
  await waitFor(() => traceOf(rcv.got, TRACE).length >= 3, 5000);
  const spans = traceOf(rcv.got, TRACE);
  const server = spans.find((s) => s.kind === 2);
  assert.ok(server, JSON.stringify(spans));
  assert.equal(server.parentSpanId, PARENT);
  assert.equal(server.name, 'POST /v1/completions');
  assert.equal(server.traceState, 'vendor=1,x=y');
  assert.equal(attr(server, 'http.request.method'), 'POST');
  assert.equal(attr(server, 'url.path'), '/v1/completions');
  assert.equal(attr(server, 'http.response.status_code'), '200');
  assert.equal(attr(server, 'gen_ai.request.model'), 'sim-model');
  assert.equal(attr(server, 'gen_ai.usage.output_tokens'), '3');  // max_tokens, as the engine reports
  assert.ok(Number(attr(server, 'gen_ai.usage.input_tokens')) > 0);
  assert.equal(attr(server, 'kvgate.request_id'), 'trace-1');
  assert.equal(attr(server, 'kvgate.rule'), 'traced');
  assert.deepEqual(server.status, {});
  const start = BigInt(server.startTimeUnixNano), end = BigInt(server.endTimeUnixNano);
  assert.ok(end > start);
  const nowNs = BigInt(Date.now()) * 1000000n;
  assert.ok(start > nowNs - 60n * 1000000000n && start <= nowNs, 'Unix time');
  const ft = server.events?.find((e) => e.name === 'first_token');
  assert.ok(ft && BigInt(ft.timeUnixNano) >= start && BigInt(ft.timeUnixNano) <= end, JSON.stringify(server.events));
  const route = spans.find((s) => s.name === 'route');
  assert.equal(route.parentSpanId, server.spanId);
  assert.equal(attr(route, 'kvgate.endpoint'), `${w.host}:${w.port}`);
  assert.ok(attr(route, 'kvgate.tier'));
  const up = spans.find((s) => s.name === 'upstream');
  assert.equal(up.kind, 3);
  assert.equal(up.parentSpanId, server.spanId);
  assert.equal(up.spanId, m[2], 'the engine\'s parent is the upstream span');
  assert.equal(attr(up, 'server.address'), `${w.host}:${w.port}`);
  for (const s of [route, up]) {
    assert.ok(BigInt(s.startTimeUnixNano) >= start && BigInt(s.endTimeUnixNano) <= end, `${s.name} within the request`);
  }
  assert.equal(spans.filter((s) => s.name === 'gates').length, 0, 'no gates on this rule');
  assert.equal(attr({ attributes: rcv.got.resources[0].attributes }, 'service.name'), 'kvgate');

  // 2. An unsampled client trace: nothing recorded, the client's header reaches the engine as sent.
  const unsampled = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-00`;
  assert.equal((await complete(port, 'trace-2', { traceparent: unsampled })).status, 200);
  assert.equal((await lastLegOf(w, 'trace-2')).traceparent, unsampled);

  // 3. No context: a trace starts here (a root span), and the engine gets its traceparent.
  assert.equal((await complete(port, 'trace-3')).status, 200);
  const l3 = await lastLegOf(w, 'trace-3');
  const m3 = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(l3.traceparent);
  assert.ok(m3, l3.traceparent);
  await waitFor(() => traceOf(rcv.got, m3[1]).some((s) => s.kind === 2), 5000);
  const root = traceOf(rcv.got, m3[1]).find((s) => s.kind === 2);
  assert.equal(root.parentSpanId, undefined, 'a root');
  assert.ok(root.events.some((e) => e.name === 'first_byte'), 'a whole answer: first_byte, not first_token');
  assert.equal(attr(root, 'kvgate.request_id'), 'trace-3');

  // 4. Hostile context: an invalid traceparent (upper case), two of them, an oversized or
  // control-character tracestate: a new trace, the client's values never reach the engine.
  const hostile = [
    ['trace-4a', { traceparent: `00-${TRACE.toUpperCase()}-${PARENT}-01` }],
    ['trace-4b', { traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: 'a='.padEnd(600, 'b') }],
    ['trace-4c', { traceparent: `00-${'0'.repeat(32)}-${PARENT}-01` }],
  ];
  for (const [rid, h] of hostile) {
    assert.equal((await complete(port, rid, h)).status, 200);
    const l = await lastLegOf(w, rid);
    assert.match(l.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, rid);
    if (rid !== 'trace-4b') assert.ok(!l.traceparent.includes(PARENT), rid);
    assert.equal(l.tracestate, '', `${rid}: no oversized tracestate passed on`);
  }
  // Two traceparent headers: invalid (the spec), a new trace.
  const raw = await rawRequest(port, rawCompletion('trace-5', `traceparent: 00-${TRACE}-${PARENT}-01\r\ntraceparent: 00-${TRACE}-${'c'.repeat(16)}-01\r\n`));
  assert.match(raw, /^HTTP\/1\.1 200/);
  const l5 = await lastLegOf(w, 'trace-5');
  assert.ok(!l5.traceparent.includes(TRACE), l5.traceparent);
  // Two tracestate headers are one list (the spec): joined, in order.
  const raw6 = await rawRequest(port, rawCompletion('trace-6', `traceparent: 00-${TRACE}-${PARENT}-01\r\ntracestate: a=1\r\ntracestate: b=2\r\n`));
  assert.match(raw6, /^HTTP\/1\.1 200/);
  assert.equal((await lastLegOf(w, 'trace-6')).tracestate, 'a=1,b=2');

  // The exporter's counters: every span the receiver got is counted exported (read in one poll,
  // once both sides agree), none dropped or failed.
  let samples = [];
  const val = (o) => samples.find((x) => x.name === 'kvgate_otlp_spans_total' && x.labels.outcome === o)?.value;
  await waitFor(async () => {
    samples = parseMetrics(await (await fetch(`${gw.api}/metrics`)).text());
    return val('exported') === rcv.got.spans.length;
  }, 5000);
  assert.equal(val('exported'), rcv.got.spans.length);
  assert.equal(val('dropped_queue_full'), 0);
  assert.equal(val('export_failed'), 0);
});

test('tracing: both P/D legs carry the trace, each with its own span', async (t) => {
  const rcv = await otlpReceiver(t);
  const sim = await startSim(['--port', '0', '--workers', '2', '--role', 'prefill,decode', '--timing', 'fixed',
    '--prefill-base-ms', '1', '--itl-ms', '1']);
  t.after(() => sim.stop());
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t, ['--workers', '1', '--otlp-endpoint', `${rcv.url}/`, '--otlp-interval-ms', '50']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, {
    serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, pd_disagg_mode: true,
      kvEngineType: 'vllm' },
    endpoints: [
      { endpointIP: prefill.host, targetPort: prefill.port, weight: 1, ep_role: 1, nixl_port: 5600 },
      { endpointIP: decode.host, targetPort: decode.port, weight: 1, ep_role: 2, nixl_port: 5601 },
    ],
  });
  assert.equal(r.status, 200, r.text);
  const res = await complete(port, 'pd-trace', { traceparent: `00-${TRACE}-${PARENT}-01` }, { stream: true });
  assert.equal(res.status, 200, res.text);
  const legs = [(await recent(prefill)).at(-1), (await recent(decode)).at(-1)];
  const ids = legs.map((l) => {
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(l.traceparent);
    assert.ok(m, JSON.stringify(l));
    assert.equal(m[1], TRACE);
    return m[2];
  });
  assert.notEqual(ids[0], ids[1], 'each leg has its span');
  await waitFor(() => traceOf(rcv.got, TRACE).filter((s) => s.name === 'upstream').length >= 2, 5000);
  const spans = traceOf(rcv.got, TRACE);
  const server = spans.find((s) => s.kind === 2);
  const ups = spans.filter((s) => s.name === 'upstream');
  assert.deepEqual(ups.map((s) => attr(s, 'kvgate.leg')).sort(), ['decode', 'prefill']);
  const byLeg = Object.fromEntries(ups.map((s) => [attr(s, 'kvgate.leg'), s]));
  assert.equal(byLeg.prefill.spanId, ids[0]);
  assert.equal(byLeg.decode.spanId, ids[1]);
  assert.equal(attr(byLeg.prefill, 'server.address'), `${prefill.host}:${prefill.port}`);
  assert.equal(attr(byLeg.decode, 'server.address'), `${decode.host}:${decode.port}`);
  for (const u of ups) assert.equal(u.parentSpanId, server.spanId);
  assert.ok(BigInt(byLeg.prefill.endTimeUnixNano) <= BigInt(byLeg.decode.endTimeUnixNano));
  const route = spans.find((s) => s.name === 'route');
  assert.equal(attr(route, 'kvgate.prefill_endpoint'), `${prefill.host}:${prefill.port}`);
});

test('tracing: off by default; a slow collector costs requests nothing, spans dropped and counted; ratio 0', async (t) => {
  const sim = await startSim(['--port', '0', '--timing', 'fixed', '--prefill-base-ms', '1', '--itl-ms', '1']);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  // Off: the client's header reaches the engine untouched and no tracing family is exported.
  const plain = await gateway(t, ['--workers', '1']);
  const p0 = await freePort();
  assert.equal((await api(plain.api, 'POST', LB_BASE, rule({ port: p0, workers: [w] }))).status, 200);
  const client = `00-${TRACE}-${PARENT}-01`;
  assert.equal((await complete(p0, 'off-1', { traceparent: client })).status, 200);
  assert.equal((await lastLegOf(w, 'off-1')).traceparent, client);
  assert.doesNotMatch(await (await fetch(`${plain.api}/metrics`)).text(), /kvgate_otlp_/);

  // A collector that accepts connections and never answers.
  const held = new Set();
  const hang = net.createServer((s) => { held.add(s); s.on('error', () => {}); });
  await new Promise((r) => hang.listen(0, '127.0.0.1', r));
  t.after(() => { for (const s of held) s.destroy(); return new Promise((r) => hang.close(r)); });
  const gw = await gateway(t, ['--workers', '1', '--otlp-endpoint', `http://127.0.0.1:${hang.address().port}`,
    '--otlp-queue-spans', '8', '--otlp-batch-spans', '4', '--otlp-interval-ms', '20', '--otlp-timeout-ms', '300',
    '--otlp-sample-ratio', '1']);
  const p1 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port: p1, workers: [w] }))).status, 200);
  for (let i = 0; i < 30; i++) assert.equal((await complete(p1, `slow-${i}`)).status, 200);
  const val = async (o) => parseMetrics(await (await fetch(`${gw.api}/metrics`)).text())
    .find((x) => x.name === 'kvgate_otlp_spans_total' && x.labels.outcome === o)?.value ?? 0;
  await waitFor(async () => (await val('dropped_queue_full')) > 0 && (await val('export_failed')) > 0, 10000);
  assert.ok(await val('dropped_queue_full') > 0);
  assert.ok(await val('export_failed') > 0);
  assert.equal(await val('exported'), 0);

  // Bad settings are refused at start.
  await assert.rejects(gateway(t, ['--otlp-endpoint', 'ftp://x']));
  await assert.rejects(gateway(t, ['--otlp-endpoint', 'http://127.0.0.1:1', '--otlp-sample-ratio', '1.5']));
});

test('tracing: ratio 0 samples no new trace, a sampled client trace still is', async (t) => {
  const { rcv, w, gw, port } = await tracedFleet(t, ['--otlp-sample-ratio', '0']);
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [w] }))).status, 200);
  for (let i = 0; i < 5; i++) assert.equal((await complete(port, `r0-${i}`)).status, 200);
  // Unsampled, no client context: the engine still gets our decision (flags 00), so it does not
  // sample on its own; an invalid client header is replaced the same way.
  const l0 = await lastLegOf(w, 'r0-4');
  assert.match(l0.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  assert.equal((await complete(port, 'r0-bad', { traceparent: `00-${TRACE.toUpperCase()}-${PARENT}-01` })).status, 200);
  const lb = await lastLegOf(w, 'r0-bad');
  assert.match(lb.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
  assert.ok(!lb.traceparent.toLowerCase().includes(TRACE), 'the invalid trace is not continued');
  assert.equal((await complete(port, 'r0-client', { traceparent: `00-${TRACE}-${PARENT}-01` })).status, 200);
  await waitFor(() => traceOf(rcv.got, TRACE).length >= 3, 5000);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(new Set(rcv.got.spans.map((s) => s.traceId)).size, 1, 'only the client\'s sampled trace');
});

test('tracing: the gates span (credentials, quota; a refusal is an error), and an HTTP/2 stream', async (t) => {
  const { rcv, w, gw, port } = await tracedFleet(t);
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [w], model: 'sim-model',
    extraArgs: { api_key_auth: 'required' } }))).status, 200);
  const k = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'acme', name: 't', tokens_per_min: 100000 });
  assert.equal(k.status, 201, k.text);
  const key = k.json.raw_key;
  const T1 = '1'.repeat(32), T2 = '2'.repeat(32), T3 = '3'.repeat(32);
  assert.equal((await complete(port, 'g-ok', { traceparent: `00-${T1}-${PARENT}-01`, 'x-api-key': key })).status, 200);
  assert.equal((await complete(port, 'g-no', { traceparent: `00-${T2}-${PARENT}-01` })).status, 401);
  await waitFor(() => traceOf(rcv.got, T1).length >= 4 && traceOf(rcv.got, T2).length >= 2, 5000);
  const ok = traceOf(rcv.got, T1);
  const gOk = ok.find((s) => s.name === 'gates');
  assert.equal(attr(gOk, 'kvgate.gates'), 'credentials,quota');
  assert.deepEqual(gOk.status, {});
  assert.equal(attr(ok.find((s) => s.kind === 2), 'kvgate.tenant'), 'acme');
  const refused = traceOf(rcv.got, T2);
  const gNo = refused.find((s) => s.name === 'gates');
  assert.equal(attr(gNo, 'kvgate.gates'), 'credentials');
  assert.equal(gNo.status.code, 2);
  assert.equal(refused.filter((s) => s.name === 'upstream' || s.name === 'route').length, 0, 'no leg ran');
  assert.equal(attr(refused.find((s) => s.kind === 2), 'http.response.status_code'), '401');

  // HTTP/2 (h2c): the stream's request carries the trace to the engine like HTTP/1.1's.
  const http2 = await import('node:http2');
  const session = http2.connect(`http://127.0.0.1:${port}`);
  t.after(() => session.close());
  const status = await new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': '/v1/completions', 'content-type': 'application/json',
      'x-request-id': 'h2-trace', 'x-api-key': key, traceparent: `00-${T3}-${PARENT}-01` });
    let st = 0;
    req.on('response', (h) => { st = h[':status']; });
    req.on('data', () => {});
    req.on('end', () => resolve(st));
    req.on('error', reject);
    req.end(JSON.stringify({ model: 'sim-model', prompt: 'h2', max_tokens: 2 }));
  });
  assert.equal(status, 200);
  const l = await lastLegOf(w, 'h2-trace');
  assert.match(l.traceparent, new RegExp(`^00-${T3}-[0-9a-f]{16}-01$`));
  await waitFor(() => traceOf(rcv.got, T3).some((s) => s.name === 'upstream'), 5000);
  assert.equal(traceOf(rcv.got, T3).find((s) => s.name === 'upstream').spanId, l.traceparent.slice(36, 52));
});

test('tracing: a failover is two upstream spans, the failed attempt an error, the engine parented to the second', async (t) => {
  const { rcv, w, gw, port } = await tracedFleet(t);
  const dead = await freePort();  // nothing listens: the connect is refused
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [{ host: '127.0.0.1', port: dead }, w] }))).status, 200);
  const T = '5'.repeat(32);
  // Round-robin: one of the first two requests starts on the dead endpoint.
  for (const rid of ['fo-1', 'fo-2']) {
    assert.equal((await complete(port, rid, { traceparent: `00-${T.slice(0, 31)}${rid.at(-1)}-${PARENT}-01` })).status, 200);
  }
  const traces = ['1', '2'].map((d) => T.slice(0, 31) + d);
  await waitFor(() => traces.every((id) => traceOf(rcv.got, id).some((s) => s.kind === 2)), 5000);
  const failed = traces.map((id) => traceOf(rcv.got, id)).find((sp) => sp.filter((s) => s.name === 'upstream').length === 2);
  assert.ok(failed, 'one request tried the dead endpoint first');
  const [first, second] = failed.filter((s) => s.name === 'upstream')
    .sort((a, b) => Number(BigInt(a.startTimeUnixNano) - BigInt(b.startTimeUnixNano)));
  assert.equal(attr(first, 'server.address'), `127.0.0.1:${dead}`);
  assert.equal(first.status.code, 2);
  assert.equal(attr(second, 'server.address'), `${w.host}:${w.port}`);
  assert.equal(attr(second, 'http.response.status_code'), '200');
  assert.deepEqual(second.status, {});
  assert.notEqual(first.spanId, second.spanId);
  const rid = attr(failed.find((s) => s.kind === 2), 'kvgate.request_id');
  const leg = await lastLegOf(w, rid);
  assert.equal(leg.traceparent.slice(36, 52), second.spanId, 'the engine is parented to the attempt that reached it');
});
