// Regressions on the request path: each test fails on the gateway before its fix and passes
// after it. Fake upstreams are raw TCP servers that write HTTP/1.1 by hand, so every byte, every
// pause and every reset is under the test's control.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import {
  api, deleteService, gateway, rawRequest, scrapeMetrics, service, sleep, startKvgate, stop, tempDir,
  waitFor,
} from './lib.mjs';
import { echoUpstream, hangingEndpoint, oneShot, RawClient, rawUpstream, reply } from './fake_upstream.mjs';

// The value of one endpoint-labelled metric, or undefined when the series is absent.
async function endpointMetric(gw, name, label) {
  const s = (await scrapeMetrics(gw.api)).find((x) => x.name === name && x.labels.endpoint === label);
  return s?.value;
}

// ---- bug 1: interim 1xx responses

const LINK = '</style.css>; rel=preload; as=style';
const EARLY_HINTS = `HTTP/1.1 103 Early Hints\r\nLink: ${LINK}\r\n\r\n`;
const PROCESSING = 'HTTP/1.1 102 Processing\r\n\r\n';

test('bug 1: interim 1xx responses are relayed (HTTP/1.1) or dropped (HTTP/1.0), never taken as final', async (t) => {
  // The upstream answers GET /hint/*, /processing/* and /two/* with interim heads first (50 ms
  // apart) and the final 200 300 ms after the last one; every body echoes its request path so a
  // mix-up is visible.
  const up = await rawUpstream({
    onRequest: async (req, sock) => {
      const interims = req.path.startsWith('/hint/') ? [EARLY_HINTS]
        : req.path.startsWith('/processing/') ? [PROCESSING]
          : req.path.startsWith('/two/') ? [PROCESSING, EARLY_HINTS] : [];
      for (const [i, head] of interims.entries()) {
        if (i) await sleep(50);
        if (!sock.destroyed) sock.write(head);
      }
      if (interims.length) await sleep(300);
      reply(sock, 200, `echo:${req.path}`, { reason: 'OK' });
    },
  });
  t.after(up.close);
  // One worker and one endpoint: requests share that worker's pool of upstream connections.
  const gw = await gateway(t, ['--workers', '1']);
  const port = await service(gw, { sel: 0, workers: [up] });
  const c1 = await RawClient.open(port);
  t.after(() => c1.close());
  const c2 = await RawClient.open(port);
  t.after(() => c2.close());

  const expectFinal = (r, path, interims) => {
    assert.deepEqual(r.interims.map((i) => i.status), interims, `interim statuses for ${path}: ${r.raw}`);
    assert.equal(r.status, 200, `final status for ${path}: ${r.raw}`);
    assert.equal(r.body, `echo:${path}`, `body for ${path}`);
    return r;
  };
  // `a` asks for `path` and gets its first interim response; while its final response is still
  // pending, `b` asks for `other` and must get its own answer (the upstream connection that carries
  // `path` is still busy, not back in the pool). Then `a` gets its interims and final response,
  // and a next request on `a` its own answer.
  const interleaved = async (a, path, interims, b, other, next) => {
    a.send(path);
    await a.waitFor(new RegExp(`^HTTP/1\\.1 ${interims[0]} `, 'm'), `interim ${interims[0]} for ${path}`);
    expectFinal(await b.get(other), other, []);
    const r = expectFinal(await a.readResponse(), path, interims);
    expectFinal(await a.get(next), next, []);
    return r;
  };

  // 103 Early Hints, with its Link header.
  let r = await interleaved(c1, '/hint/1', [103], c2, '/plain/2', '/plain/3');
  assert.equal(r.interims[0].headers.link, LINK);
  // 102 Processing.
  await interleaved(c2, '/processing/4', [102], c1, '/plain/5', '/plain/6');
  // Two interim responses in a row.
  r = await interleaved(c1, '/two/7', [102, 103], c2, '/plain/8', '/plain/9');
  assert.equal(r.interims[1].headers.link, LINK);

  // An HTTP/1.0 client sees only the final response.
  const get10 = (path) => rawRequest(port, `GET ${path} HTTP/1.0\r\nHost: kvgate.test\r\n\r\n`, { waitMs: 3000 });
  for (const path of ['/hint/10', '/two/11', '/plain/12']) {
    const raw = await get10(path);
    assert.doesNotMatch(raw, /^HTTP\/1\.\d 1\d\d/m, `HTTP/1.0 client got an interim response: ${raw}`);
    assert.match(raw, /^HTTP\/1\.\d 200 /, raw);
    assert.ok(raw.endsWith(`\r\n\r\necho:${path}`), raw);
  }
  expectFinal(await c1.get('/plain/13'), '/plain/13', []);
  expectFinal(await c2.get('/plain/14'), '/plain/14', []);
});

// ---- bug 2: leaked half-open breaker trial

test('bug 2: a half-open trial that fails at send releases the trial; the endpoint recovers', async (t) => {
  // Modes: 'fail' answers 500 and closes (nothing pooled, so the trial needs a fresh connection);
  // 'reset' accepts, never reads, and resets the connection 100 ms later; 'ok' answers 200.
  let mode = 'fail';
  let resets = 0;
  const up = await rawUpstream({
    onConnection: (sock) => {
      if (mode !== 'reset') return false;
      setTimeout(() => { resets++; sock.resetAndDestroy(); }, 100);
      return true;
    },
    onRequest: (req, sock) => (mode === 'fail'
      ? reply(sock, 500, 'boom', { close: true })
      : reply(sock, 200, 'ok', { reason: 'OK' })),
  });
  t.after(up.close);
  const gw = await gateway(t, ['--cb-open-ms', '300']);
  const port = await service(gw, { sel: 0, workers: [up], extraArgs: { cb_enable: true } });
  const send = (body = '{"model":"x","prompt":"a"}') => oneShot(port, '/v1/completions', body);

  // Three origin 500s open the breaker.
  for (let i = 0; i < 3; i++) assert.equal((await send()).status, 500);
  assert.equal(await endpointMetric(gw, 'kvgate_endpoint_breaker_state', up.label), 1, 'breaker should be open');
  assert.equal((await send()).status, 503);

  // Past the open window the next request is the half-open trial. It connects, then fails while
  // the gateway is still writing its 16 MB body (the upstream never reads and resets).
  await sleep(600);
  mode = 'reset';
  const trial = await send(`{"model":"x","prompt":"${'a'.repeat(16 * 1024 * 1024)}"}`);
  assert.ok(trial.status >= 500, `trial answered ${trial.status}: ${trial.body}`);
  assert.ok(resets >= 1, 'the upstream never reset the trial connection');
  t.diagnostic(`failed trial answered ${trial.status}: ${trial.body}`);

  // The upstream recovers: after another open window, traffic must flow again.
  mode = 'ok';
  await sleep(600);
  const statuses = [];
  const ok = await waitFor(async () => {
    const r = await send();
    statuses.push(r.status);
    return r.status === 200;
  }, 5000, 100);
  assert.ok(ok, `endpoint never recovered after the failed trial; statuses: ${statuses.join(',')}`);
});

// ---- bug 3: endpoint state never freed

test('bug 3: removed endpoints leave /metrics; a re-added endpoint starts with a fresh breaker', async (t) => {
  let failing = false;
  const mk = () => rawUpstream({
    onRequest: (req, sock) => (failing ? reply(sock, 500, 'boom') : reply(sock, 200, 'ok', { reason: 'OK' })),
  });
  const e1 = await mk();
  t.after(e1.close);
  const e2 = await mk();
  t.after(e2.close);
  const gw = await gateway(t);  // default --cb-open-ms (30 s): an open breaker stays open here
  const endpointSeries = async (label) => (await scrapeMetrics(gw.api))
    .filter((s) => s.name.startsWith('kvgate_endpoint_') && s.labels.endpoint === label)
    .map((s) => s.name);
  const send = (port) => oneShot(port, '/v1/completions', '{}');

  const spec = { sel: 0, extraArgs: { cb_enable: true } };
  const port = await service(gw, { ...spec, workers: [e1, e2] });
  assert.equal((await send(port)).status, 200);
  assert.equal((await send(port)).status, 200);
  assert.ok((await endpointSeries(e2.label)).includes('kvgate_endpoint_up'));

  // Update the rule without e2: its series go.
  await service(gw, { ...spec, port, workers: [e1] });
  assert.deepEqual(await endpointSeries(e2.label), [], 'removed endpoint still in /metrics');

  // Open e1's breaker, then delete the rule: its series go too.
  failing = true;
  for (let i = 0; i < 3; i++) assert.equal((await send(port)).status, 500);
  assert.equal(await endpointMetric(gw, 'kvgate_endpoint_breaker_state', e1.label), 1, 'breaker should be open');
  assert.equal((await deleteService(gw, port)).status, 200);
  assert.deepEqual(await endpointSeries(e1.label), [], 'endpoint of a deleted rule still in /metrics');

  // Re-created with the same (now healthy) endpoint: a fresh state, closed breaker, traffic flows.
  failing = false;
  await service(gw, { ...spec, port, workers: [e1] });
  const r = await send(port);
  assert.equal(r.status, 200, `first request after re-adding the endpoint: ${r.status} ${r.body}`);
  assert.equal(await endpointMetric(gw, 'kvgate_endpoint_breaker_state', e1.label), 0);
});

// ---- bug 6: valid JSON answered invalid_json

test('bug 6: valid JSON of an unexpected shape reaches the engine; only invalid JSON gets invalid_json', async (t) => {
  // The engine echoes the body it received.
  const up = await echoUpstream(t);
  const gw = await gateway(t);
  const port = await service(gw, { sel: 8, model: 'm', workers: [up] });
  const send = (body) => oneShot(port, '/v1/chat/completions', body);

  const odd = [
    '{"model":"m","messages":"hi"}',
    '{"model":"m","prompt":5}',
    '{"model":"m","messages":[1,"x",null]}',
    '{"model":"m","messages":[{"role":"user","content":7}]}',
  ];
  const wrong = [];
  for (const body of odd) {
    const r = await send(body);
    let echoed = null;
    try { echoed = JSON.parse(r.body).echo; } catch { /* not the engine's answer */ }
    if (r.status !== 200 || echoed !== body) wrong.push(`${body} -> ${r.status} ${r.body}`);
  }
  assert.deepEqual(wrong, [], 'valid JSON bodies not forwarded to the engine');

  const before = up.seen.requests.length;
  const r = await send('{"model":"m",');
  assert.equal(r.status, 400, r.body);
  assert.equal(JSON.parse(r.body).error.code, 'invalid_json');
  assert.equal(up.seen.requests.length, before, 'invalid JSON reached the upstream');
});

// ---- bug 7: in-flight counted late

test('bug 7: endpoint in-flight rises when the endpoint is picked, while still connecting', async (t) => {
  const hang = await hangingEndpoint();
  t.after(hang.close);
  const gw = await gateway(t);
  const port = await service(gw, { sel: 4, workers: [hang], extraArgs: { timeoutMemberConnect: 4000 } });
  const inflight = () => endpointMetric(gw, 'kvgate_endpoint_inflight_requests', hang.label);
  assert.equal(await inflight(), 0);

  let done = false;
  const pending = oneShot(port, '/v1/completions', '{}').finally(() => { done = true; });
  // The connect hangs for 4 s; look well inside that window, while the request is pending.
  let seen = 0;
  await waitFor(async () => {
    const v = await inflight();
    if (!done) seen = v;
    return done || v === 1;
  }, 2500);
  const stillPending = !done;
  const res = await pending;
  assert.ok(stillPending, `the request ended before in-flight was seen: ${res.status} ${res.body}`);
  assert.equal(seen, 1, 'in-flight while connecting to the picked endpoint');
  assert.ok([502, 503].includes(res.status), `${res.status} ${res.body}`);
  assert.ok(await waitFor(async () => (await inflight()) === 0, 3000), 'in-flight did not return to 0');
});

// ---- bug 11: management API on all interfaces

test('bug 11: the management API listens on 127.0.0.1:11111 by default; 0.0.0.0 warns', async (t) => {
  const tmp = tempDir();
  const procs = [];
  t.after(async () => { for (const p of procs) await stop(p); tmp.remove(); });
  const portFree = await new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(11111, '0.0.0.0', () => s.close(() => resolve(true)));
  });
  if (!portFree) {
    t.diagnostic('port 11111 is in use here: the default-address check is skipped');
  } else {
    const { proc, ready } = await startKvgate(['serve', '--state-dir', `${tmp.dir}/a`, '--workers', '1']);
    procs.push(proc);
    const listening = [];
    for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
      let text = '';
      try { text = readFileSync(f, 'utf8'); } catch { continue; }
      for (const line of text.split('\n').slice(1)) {
        const cols = line.trim().split(/\s+/);
        if (cols.length < 4 || cols[3] !== '0A') continue;  // LISTEN
        const [addr, p] = cols[1].split(':');
        if (parseInt(p, 16) !== 11111) continue;
        listening.push(addr.length === 8
          ? addr.match(/../g).reverse().map((b) => parseInt(b, 16)).join('.')
          : `ipv6:${addr}`);
      }
    }
    assert.deepEqual(listening, ['127.0.0.1'], 'listening addresses of port 11111');
    assert.equal(ready.api, 'http://127.0.0.1:11111');
    assert.equal((await api(ready.api, 'GET', '/netlox/v1/status')).status, 200);
    await stop(proc);
  }

  // An explicit 0.0.0.0 without a token file is refused; with --api-insecure it works, with a
  // warning (docs/configuration.md).
  await assert.rejects(startKvgate(['serve', '--api-listen', '0.0.0.0:0', '--state-dir', `${tmp.dir}/c`,
    '--workers', '1']), /--api-insecure/);
  const { proc, ready } = await startKvgate(
    ['serve', '--api-listen', '0.0.0.0:0', '--state-dir', `${tmp.dir}/b`, '--workers', '1', '--api-insecure']);
  procs.push(proc);
  assert.equal((await api(ready.api, 'GET', '/netlox/v1/status')).status, 200);
  assert.ok(await waitFor(() => /no authentication/i.test(proc.stderrText), 2000),
    `no warning on stderr:\n${proc.stderrText}`);
});

// ---- pooled connections: bytes an upstream sends after its response

test('bytes an upstream sends on an idle pooled connection are never read as the next answer', async (t) => {
  // /stray/* is answered in full, then 100 ms later the upstream writes a bogus second response on
  // the same connection while it sits idle in the worker's pool. The gateway's own readiness
  // (http/readiness.h) skips the reuse check only when no byte came since its last read: here an
  // edge came, so the check runs and the connection is discarded, and the next request gets its
  // own answer over a new connection. Plain requests in a row still reuse one connection.
  const up = await rawUpstream({
    onRequest: async (req, sock) => {
      reply(sock, 200, `echo:${req.path}`, { reason: 'OK' });
      if (req.path.startsWith('/stray/')) {
        await sleep(100);
        if (!sock.destroyed) sock.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY');
      }
    },
  });
  t.after(up.close);
  const gw = await gateway(t, ['--workers', '1']);  // one worker: one pool
  const port = await service(gw, { sel: 0, workers: [up] });
  const c = await RawClient.open(port);
  t.after(() => c.close());
  for (const p of ['/plain/1', '/plain/2', '/plain/3']) assert.equal((await c.get(p)).body, `echo:${p}`);
  assert.equal(up.seen.connections, 1, 'requests in a row did not reuse the pooled connection');
  assert.equal((await c.get('/stray/4')).body, 'echo:/stray/4');
  await sleep(400);  // the stray bytes have arrived and the worker has polled since
  for (const p of ['/plain/5', '/plain/6']) {
    const r = await c.get(p);
    assert.equal(r.status, 200, r.raw);
    assert.equal(r.body, `echo:${p}`, `a stray response was relayed: ${r.raw}`);
  }
  assert.equal(up.seen.connections, 2, 'the connection that carried stray bytes was reused');
});
