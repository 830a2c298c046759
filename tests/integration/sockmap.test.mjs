// Sockmap relay (issue 33 §2): a mode-4 rule with sockMapMode response/both has the rest of each
// large Content-Length response body spliced by the kernel from the engine's socket to the
// client's (src/sockmap), while the gateway reads every head: bodies byte for byte over
// keep-alive and pipelining, the engine connection pooled after a splice, ineligible rules
// refused with upstream's reasons, bytes beyond a body and a sockmapreset cutting the relay.
// (Runs as root, like CI: loading the sk_skb program needs CAP_BPF and CAP_NET_ADMIN.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  BIN, LB_BASE, api, freePort, gateway, scrapeMetrics, startKvgate, stop, tempDir, waitFor,
} from './lib.mjs';

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
const BIG = crypto.randomBytes(8 * 1024 * 1024 + 123);  // three 4 MiB windows, the last short
const SMALL = crypto.randomBytes(1000);

// A plain HTTP/1.1 service: /big and /small with Content-Length, /slow (the head and 100 KiB,
// then the rest after `slowMs`), counting the connections it accepted.
async function bodyServer(t, { slowMs = 3000 } = {}) {
  const s = http.createServer((req, res) => {
    if (req.url === '/small') {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': SMALL.length });
      res.end(SMALL);
    } else if (req.url === '/slow') {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BIG.length });
      res.write(BIG.subarray(0, 100 * 1024));
      const timer = setTimeout(() => res.end(BIG.subarray(100 * 1024)), slowMs);
      res.on('close', () => clearTimeout(timer));
    } else {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BIG.length });
      res.end(BIG);
    }
  });
  s.keepAliveTimeout = 60000;
  let connections = 0;
  s.on('connection', () => { connections++; });
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { s.closeAllConnections(); s.close(r); }));
  return { host: '127.0.0.1', port: s.address().port, connections: () => connections };
}

function sockmapRule(port, backend, args = {}) {
  return {
    serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4,
      sockMapMode: 'response', ...args },
    endpoints: [{ endpointIP: backend.host, targetPort: backend.port, weight: 1 }],
  };
}

// GET `path` on a keep-alive agent; the body as a Buffer.
function get(port, path, agent) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent }, (res) => {
      const parts = [];
      res.on('data', (c) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(parts), complete: res.complete }));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('aborted')));
    });
    req.on('error', reject);
  });
}

const sample = (m, name, labels = {}) => m.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value ?? 0;

test('sockMapMode response: large bodies spliced in the kernel byte for byte over keep-alive; small ones relayed by the gateway', async (t) => {
  const backend = await bodyServer(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, sockmapRule(port, backend));
  assert.equal(r.status, 200, r.text);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  for (const path of ['/big', '/big', '/small', '/big']) {
    const res = await get(port, path, agent);
    assert.equal(res.status, 200);
    const want = path === '/small' ? SMALL : BIG;
    assert.equal(res.body.length, want.length, `${path}: length`);
    assert.equal(sha(res.body), sha(want), `${path}: bytes differ`);
  }
  // One engine connection served all four: it went back to the pool after each splice.
  assert.equal(backend.connections(), 1);
  const m = await scrapeMetrics(gw.api);
  assert.equal(sample(m, 'kvgate_sockmap_available'), 1);
  // Each 8 MiB body: what came with its head relayed by the gateway, the rest (all but at most
  // the first read) spliced in one arming; the small body in userspace.
  assert.equal(sample(m, 'kvgate_sockmap_relays_total', { outcome: 'done' }), 3,
    JSON.stringify(m.filter((s) => s.name.startsWith('kvgate_sockmap'))));
  assert.ok(sample(m, 'kvgate_sockmap_bytes_total') >= 3 * (BIG.length - 1024 * 1024));
  assert.ok(sample(m, 'kvgate_sockmap_bytes_total') < 3 * BIG.length);
  assert.equal(sample(m, 'kvgate_sockmap_relays_total', { outcome: 'overrun' }), 0);
  assert.equal(sample(m, 'kvgate_sockmap_armed_bytes'), 0);
  assert.equal(sample(m, 'kvgate_sockmap_target_sockets'), 1);  // the client's, still open
});

// A kernel that refuses the relay's program (issue 33: "falling back to the userspace relay when
// the kernel refuses"): the gateway runs without CAP_BPF, CAP_SYS_ADMIN, CAP_PERFMON and
// CAP_NET_ADMIN (setpriv takes them out of its bounding set, so even as root its bpf() calls are
// refused, as in a container or on a kernel without the program types). The rule is accepted,
// the refusal logged once, kvgate_sockmap_available reads 0, and every body is relayed by the
// gateway byte for byte over keep-alive, nothing spliced.
test('sockMapMode where the kernel refuses the program: bodies relayed in userspace, byte for byte', async (t) => {
  const backend = await bodyServer(t);
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const wrap = path.join(tmp.dir, 'kvgate-without-bpf');
  writeFileSync(wrap, '#!/bin/sh\nexec /usr/bin/setpriv --bounding-set -bpf,-sys_admin,-perfmon,-net_admin ' +
    `-- ${path.resolve(BIN)} "$@"\n`, { mode: 0o755 });
  const { proc, ready } = await startKvgate(['serve', '--api-listen', '127.0.0.1:0', '--state-dir',
    path.join(tmp.dir, 'state'), '--workers', '1'], { bin: wrap });
  t.after(() => stop(proc));
  // (the wrapper really took the capabilities away)
  const status = readFileSync(`/proc/${proc.pid}/status`, 'utf8');
  assert.equal(BigInt(`0x${status.match(/^CapEff:\s+([0-9a-f]+)/m)[1]}`) & (1n << 39n), 0n, 'CAP_BPF dropped');
  const port = await freePort();
  const r = await api(ready.api, 'POST', LB_BASE, sockmapRule(port, backend));
  assert.equal(r.status, 200, r.text);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  for (const p of ['/big', '/small', '/big']) {
    const res = await get(port, p, agent);
    assert.equal(res.status, 200);
    const want = p === '/small' ? SMALL : BIG;
    assert.equal(res.body.length, want.length, `${p}: length`);
    assert.equal(sha(res.body), sha(want), `${p}: bytes differ`);
  }
  assert.equal(backend.connections(), 1);  // the engine connection pooled as usual
  const m = await scrapeMetrics(ready.api);
  assert.equal(m.find((s) => s.name === 'kvgate_sockmap_available')?.value, 0);
  assert.equal(sample(m, 'kvgate_sockmap_bytes_total'), 0);
  assert.equal(sample(m, 'kvgate_sockmap_relays_total', { outcome: 'done' }), 0);
  assert.match(proc.stderrText,
    /WARN sockmap sockmap relay unavailable \(load: Operation not permitted\): sockMapMode rules are relayed in userspace/);
});

test('sockMapMode: pipelined requests get their answers whole and in order after a splice', async (t) => {
  const backend = await bodyServer(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, sockmapRule(port, backend, { sockMapMode: 'both' }))).status, 200);
  const sock = net.connect(port, '127.0.0.1');
  t.after(() => sock.destroy());
  await new Promise((r) => sock.once('connect', r));
  const reqs = ['/big', '/small', '/big'].map((p) => `GET ${p} HTTP/1.1\r\nHost: x\r\n\r\n`).join('');
  sock.write(reqs);
  const want = [BIG, SMALL, BIG];
  const chunks = [];
  let total = 0;
  // Three answers: each head, then exactly its Content-Length.
  const got = await new Promise((resolve, reject) => {
    const bodies = [];
    const tryParse = () => {
      let buf = Buffer.concat(chunks);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        const len = Number(/content-length: *(\d+)/i.exec(head)?.[1]);
        if (buf.length < end + 4 + len) return;
        bodies.push({ head, body: buf.subarray(end + 4, end + 4 + len) });
        buf = buf.subarray(end + 4 + len);
        chunks.length = 0;
        chunks.push(buf);
        if (bodies.length === want.length) { resolve({ bodies, rest: buf.length }); return; }
      }
    };
    sock.on('data', (c) => { chunks.push(c); total += c.length; tryParse(); });
    sock.on('error', reject);
    sock.on('close', () => reject(new Error(`closed after ${total} bytes`)));
  });
  assert.equal(got.rest, 0);
  got.bodies.forEach((b, i) => {
    assert.match(b.head, /^HTTP\/1\.1 200/);
    assert.equal(sha(b.body), sha(want[i]), `answer ${i} differs`);
  });
  const m = await scrapeMetrics(gw.api);
  assert.equal(sample(m, 'kvgate_sockmap_relays_total', { outcome: 'done' }), 2);
});

test('sockMapMode: ineligible rules are refused with the reason; api_key_auth allows only response', async (t) => {
  const gw = await gateway(t, ['--workers', '1']);
  const backend = { host: '127.0.0.1', port: 9 };
  const refused = [
    [{ sse_mode: true }, /sse_mode/],
    [{ backend_protocol: 'http2' }, /HTTP\/2 is never accelerated/],
    [{ sockMapMode: 'request', api_key_auth: 'required' }, /only 'response'/],
    [{ sockMapMode: 'both', api_key_auth: 'required' }, /only 'response'/],
    [{ mode: 0 }, /mode 4/],
    [{ sockMapMode: 'sideways' }, /sockMapMode/],
  ];
  for (const [args, why] of refused) {
    const r = await api(gw.api, 'POST', LB_BASE, sockmapRule(await freePort(), backend, args));
    assert.equal(r.status, 400, `${JSON.stringify(args)}: ${r.text}`);
    assert.match(r.text, why);
  }
  const rules = await api(gw.api, 'GET', LB_BASE);
  assert.equal(JSON.parse(rules.text).lbAttr?.length ?? 0, 0, 'a refused rule was stored');
  const ok = await api(gw.api, 'POST', LB_BASE,
    sockmapRule(await freePort(), backend, { sockMapMode: 'response', api_key_auth: 'required' }));
  assert.equal(ok.status, 200, ok.text);
});

test('sockmapreset cuts the relays in flight; bytes an engine sends after its body never reach the client', async (t) => {
  const backend = await bodyServer(t, { slowMs: 4000 });
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, sockmapRule(port, backend))).status, 200);
  const bad = await api(gw.api, 'GET', '/netlox/v1/config/sockmapreset');
  assert.equal(bad.status, 405);
  const idle = await api(gw.api, 'POST', '/netlox/v1/config/sockmapreset');
  assert.equal(idle.status, 200);
  assert.deepEqual(JSON.parse(idle.text), { droppedConnections: 0 });
  // /slow: the head and 100 KiB, then nothing for 4 s: the relay is armed and waiting.
  const pending = get(port, '/slow', new http.Agent({ keepAlive: false })).then(
    (r) => ({ ok: r.complete && r.body.length === BIG.length }), (e) => ({ error: e.message }));
  assert.ok(await waitFor(async () =>
    sample(await scrapeMetrics(gw.api), 'kvgate_sockmap_armed_bytes') > 0, 3000),
    'the splice never began');
  const reset = await api(gw.api, 'POST', '/netlox/v1/config/sockmapreset');
  assert.equal(reset.status, 200);
  assert.deepEqual(JSON.parse(reset.text), { droppedConnections: 1 });
  const out = await pending;
  assert.ok(!out.ok, 'the reset relay still delivered a whole body');
  const m = await scrapeMetrics(gw.api);
  assert.equal(sample(m, 'kvgate_sockmap_relays_total', { outcome: 'reset' }), 1);

  // An engine that sends more than its Content-Length: the client gets exactly the body, never
  // the bytes after it, and that connection is not used again.
  let liarConnections = 0;
  const liar = net.createServer((c) => {
    liarConnections++;
    c.on('data', () => {
      const len = 512 * 1024;
      c.write(`HTTP/1.1 200 OK\r\nContent-Length: ${len}\r\n\r\n`);
      setTimeout(() => c.write(Buffer.concat([Buffer.alloc(len, 7), Buffer.from('HTTP/1.1 200 OK\r\n\r\nextra')])), 200);
    });
    c.on('error', () => {});
  });
  await new Promise((r) => liar.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => liar.close(r)));
  const lport = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE,
    sockmapRule(lport, { host: '127.0.0.1', port: liar.address().port }))).status, 200);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  for (let i = 0; i < 2; i++) {
    const lied = await get(lport, '/x', agent);
    assert.equal(lied.status, 200);
    assert.equal(lied.body.length, 512 * 1024);
    assert.ok(lied.body.every((b) => b === 7), 'bytes after the body reached the client');
  }
  assert.equal(liarConnections, 2, 'a connection that sent bytes after the body was reused');
});
