// TLS terminated by the data plane (issue 14 §4, rules with security 1): certificates made by the
// openssl command line; curl and Node's TLS client verifying them; keep-alive, a JSON answer and
// an SSE stream relayed over TLS; a client that leaves mid-stream seen by the engine (the TLS
// watcher); plain HTTP and an unknown CA refused and counted; a renewed certificate served to new
// connections without a restart; a security 1 rule refused without a certificate.
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import tls from 'node:tls';
import { test } from 'node:test';
import { LB_BASE, api, freePort, makeCa, makeServerCert, rawRequest, rule, scrapeMetrics, sleep,
  startGateway, tempDir, waitFor } from './lib.mjs';

// An engine: JSON answers, and streams of 50 events 20 ms apart (it records aborted streams).
async function engine(t) {
  const seen = { aborted: 0, requests: 0 };
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      seen.requests++;
      const j = JSON.parse(body || '{}');
      if (!j.stream) {
        const out = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0,
          message: { role: 'assistant', content: 'hi over tls' }, finish_reason: 'stop' }] });
        const own = j.engine_sts ? { 'strict-transport-security': 'max-age=5' } : {};
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out), ...own });
        res.end(out);
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let closed = false;
      res.on('close', () => { if (!res.writableFinished) { closed = true; seen.aborted++; } });
      for (let i = 0; i < 50 && !closed; i++) {
        res.write(`data: {"choices":[{"delta":{"content":"t${i}"}}]}\n\n`);
        await sleep(20);
      }
      if (!closed) res.end('data: [DONE]\n\n');
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { srv.closeAllConnections(); return new Promise((r) => srv.close(r)); });
  return { seen, worker: { host: '127.0.0.1', port: srv.address().port } };
}

function post(port, ca, body, { agent, onFirst } = {}) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = https.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', ca,
      agent: agent ?? false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } },
    (res) => {
      const serial = res.socket.getPeerCertificate().serialNumber, localPort = res.socket.localPort;
      let text = '';
      res.on('data', (c) => { text += c; if (onFirst) { onFirst(req, res); onFirst = null; } });
      res.on('end', () => resolve({ status: res.statusCode, text, serial, localPort, headers: res.headers }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}

test('security 1: TLS terminated by the data plane', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const ca = makeCa(tmp.dir, 'ca');
  const other = makeCa(tmp.dir, 'other');
  const first = makeServerCert(tmp.dir, ca, 4001, 'dp1');
  const certFile = path.join(tmp.dir, 'dp.crt'), keyFile = path.join(tmp.dir, 'dp.key');
  writeFileSync(certFile, readFileSync(first.crt));
  writeFileSync(keyFile, readFileSync(first.key));
  const up = await engine(t);

  // Without a certificate a security 1 rule is refused, naming the field.
  const plainGw = await startGateway({ stateDir: path.join(tmp.dir, 'p') });
  t.after(() => plainGw.stop());
  let r = await api(plainGw.api, 'POST', LB_BASE, rule({ port: await freePort(), workers: [up.worker], extraArgs: { security: 1 } }));
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /security/);

  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'), extra: ['--tls-cert', certFile, '--tls-key', keyFile] });
  t.after(() => gw.stop());
  const port = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker], extraArgs: { security: 1, sse_mode: true } }));
  assert.equal(r.status, 200, r.text);
  const caPem = readFileSync(ca.cert);

  // curl, verifying against the CA (asynchronously: the engine runs in this process).
  const { stdout: out } = await promisify(execFile)('curl', ['-sS', '--max-time', '10', '--cacert', ca.cert,
    '-H', 'content-type: application/json', '-d', '{"model":"m1","messages":[]}',
    `https://127.0.0.1:${port}/v1/chat/completions`]);
  assert.match(out, /hi over tls/);

  // Keep-alive: two requests on one TLS connection.
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: caPem });
  t.after(() => agent.destroy());
  const a1 = await post(port, caPem, { model: 'm1', messages: [] }, { agent });
  const a2 = await post(port, caPem, { model: 'm1', messages: [] }, { agent });
  assert.equal(a1.status, 200);
  assert.equal(a2.status, 200);
  assert.equal(a1.localPort, a2.localPort, 'the same TLS connection served both');
  assert.equal(a1.serial, '0FA1');  // 4001

  // An SSE stream relayed over TLS, every event in order.
  const s = await post(port, caPem, { model: 'm1', stream: true, messages: [] });
  const events = s.text.split('\n\n').filter((e) => e.startsWith('data: '));
  assert.equal(events.length, 51);
  assert.equal(events.at(-1), 'data: [DONE]');

  // Clients that finish the handshake and leave at once (health checks; openssl s_time closes
  // right behind its Finished message, often in the same segment, with no close_notify) are
  // closed by the gateway too, not kept waiting for an edge that already came.
  agent.destroy();
  const openConns = async () => (await scrapeMetrics(gw.api))
    .find((m) => m.name === 'kvgate_active_client_connections')?.value;
  assert.ok(await waitFor(async () => (await openConns()) === 0, 5000), `idle: ${await openConns()} open`);
  await Promise.all(Array.from({ length: 30 }, (_, i) => new Promise((resolve, reject) => {
    const c = tls.connect({ host: '127.0.0.1', port, ca: caPem, servername: '127.0.0.1' }, () => {
      if (i % 2) c.end(); else c.destroy();
      resolve();
    });
    c.on('error', () => {});
    c.setTimeout(5000, () => reject(new Error('handshake timed out')));
  })));
  await promisify(execFile)('openssl', ['s_time', '-connect', `127.0.0.1:${port}`, '-new', '-time', '1']);
  assert.ok(await waitFor(async () => (await openConns()) === 0, 5000),
    `open client connections back to 0 (now ${await openConns()})`);

  // A client that leaves mid-stream: the gateway's TLS watcher sees it and the engine's request
  // is aborted well before its 50 events (1 s) would have ended it.
  const before = up.seen.aborted;
  await post(port, caPem, { model: 'm1', stream: true, messages: [] }, {
    onFirst: (req) => { req.destroy(); } }).catch(() => {});
  assert.ok(await waitFor(() => up.seen.aborted > before, 5000), 'the engine saw the abort');

  // Refused: plain HTTP on the TLS port, a client that trusts another CA; both counted as failed
  // handshakes, neither reaches the engine.
  const requests = up.seen.requests;
  const plain = await rawRequest(port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n', { waitMs: 1000 });
  assert.doesNotMatch(plain, /^HTTP\/1\.1/);
  await assert.rejects(post(port, readFileSync(other.cert), { model: 'm1', messages: [] }));
  assert.equal(up.seen.requests, requests);
  assert.ok(await waitFor(async () => {
    const ms = await scrapeMetrics(gw.api);
    const v = (res) => ms.find((m) => m.name === 'kvgate_tls_handshakes_total' && m.labels.result === res)?.value;
    return v('failed') >= 2 && v('ok') >= 4;
  }, 5000));

  // Renewal: new files renamed into place serve new connections (no restart).
  const second = makeServerCert(tmp.dir, ca, 5002, 'dp2');
  await sleep(1100);
  writeFileSync(`${keyFile}.new`, readFileSync(second.key));
  writeFileSync(`${certFile}.new`, readFileSync(second.crt));
  renameSync(`${keyFile}.new`, keyFile);
  renameSync(`${certFile}.new`, certFile);
  assert.ok(await waitFor(async () => (await post(port, caPem, { model: 'm1', messages: [] })).serial === '138A', 10000),
    'the renewed certificate serves new connections');
  // A renewal that keeps the key (only the certificate file changes) is picked up too.
  const csr = path.join(tmp.dir, 'same.csr'), crt = path.join(tmp.dir, 'same.crt');
  execFileSync('openssl', ['req', '-new', '-key', keyFile, '-subj', '/CN=127.0.0.1', '-out', csr], { stdio: 'pipe' });
  execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key, '-set_serial', '6003',
    '-days', '2', '-extfile', path.join(tmp.dir, 'dp2.ext'), '-out', crt], { stdio: 'pipe' });
  await sleep(1100);
  writeFileSync(`${certFile}.new`, readFileSync(crt));
  renameSync(`${certFile}.new`, certFile);
  assert.ok(await waitFor(async () => (await post(port, caPem, { model: 'm1', messages: [] })).serial === '1773', 10000),
    'a certificate renewed with the same key serves new connections');
});

// HSTS (hsts_enable on a TLS rule): every answer of the rule carries the configured
// Strict-Transport-Security header (RFC 6797 syntax), relayed answers, streams and the gateway's
// own errors alike; an engine's own header is replaced, never doubled; none over plain HTTP.
// Certificates by store id have no store in this build: security 2 rules naming one answer 501.
test('hsts_* on TLS rules; certificate-store ids with security 2 answered 501', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const ca = makeCa(tmp.dir, 'ca');
  const cert = makeServerCert(tmp.dir, ca, 4101, 'dp');
  const up = await engine(t);
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'), extra: ['--tls-cert', cert.crt, '--tls-key', cert.key] });
  t.after(() => gw.stop());
  const caPem = readFileSync(ca.cert);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { security: 1, hsts_enable: true, hsts_include_subdomains: true } }));
  assert.equal(r.status, 200, r.text);
  const want = 'max-age=31536000; includeSubDomains';
  const a = await post(port, caPem, { model: 'm1', messages: [] });
  assert.equal(a.status, 200);
  assert.equal(a.headers['strict-transport-security'], want);
  const own = await post(port, caPem, { model: 'm1', messages: [], engine_sts: true });
  assert.equal(own.headers['strict-transport-security'], want, 'the engine\'s header replaced, not doubled');
  const s = await post(port, caPem, { model: 'm1', stream: true, messages: [] });
  assert.equal(s.headers['strict-transport-security'], want);
  // max-age and preload as configured, on the gateway's own error (no engine listening).
  const deadPort = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: deadPort, workers: [{ host: '127.0.0.1', port: await freePort() }],
    extraArgs: { security: 1, hsts_enable: true, hsts_max_age: 600, hsts_preload: true } }));
  assert.equal(r.status, 200, r.text);
  const e = await post(deadPort, caPem, { model: 'm1', messages: [] });
  assert.ok(e.status >= 502 && e.status <= 503, e.text);
  assert.equal(e.headers['strict-transport-security'], 'max-age=600; preload');
  // Without hsts_enable: no header.
  const plainTls = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: plainTls, workers: [up.worker], extraArgs: { security: 1 } }));
  assert.equal(r.status, 200, r.text);
  assert.equal((await post(plainTls, caPem, { model: 'm1', messages: [] })).headers['strict-transport-security'], undefined);
  // Over plain HTTP browsers ignore HSTS (RFC 6797 §8.1): stored, served, no header.
  const plainPort = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: plainPort, workers: [up.worker], extraArgs: { hsts_enable: true } }));
  assert.equal(r.status, 200, r.text);
  const pr = await fetch(`http://127.0.0.1:${plainPort}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm1', messages: [] }) });
  assert.equal(pr.status, 200);
  assert.equal(pr.headers.get('strict-transport-security'), null);
  await pr.text();
  // TLS to the engines with a certificate named by store id: stored, 501 certificate_store
  // (never served without the certificate it asks for), with the rule's HSTS.
  const idPort = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: idPort, workers: [up.worker],
    extraArgs: { security: 2, backend_client_cert_id: 'cert-7', hsts_enable: true } }));
  assert.equal(r.status, 200, r.text);
  const n = await post(idPort, caPem, { model: 'm1', messages: [] });
  assert.equal(n.status, 501, n.text);
  assert.match(n.text, /certificate_store/);
  assert.equal(n.headers['strict-transport-security'], 'max-age=31536000');
});
