// HTTP/2 to the engines (issue 30 §2, `backend_protocol: http2`): engines are Node http2 servers
// (h2c by prior knowledge, or h2 over TLS by ALPN) answering the OpenAI shapes; they record their
// connections and streams. Multiplexing over one connection, SSE relayed event by event, a client's
// cancel resetting only its own stream, the engine's stream limit, GOAWAY with the unprocessed
// stream sent again, resets, flow control with large bodies both ways, reconnects, TLS with ALPN
// and hostile engines. (P/D legs over HTTP/2: pd.test.mjs, through HTTP/2 fronts of the simulator.)
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import { test } from 'node:test';
import tls from 'node:tls';

import {
  api, freePort, gateway, LB_BASE, makeCa, makeServerCert, parseMetrics, rule, sleep, tempDir, waitFor,
} from './lib.mjs';

const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR } = http2.constants;

// An engine speaking HTTP/2. Paths: /v1/chat/completions (JSON with content-length, or SSE of
// `events` chunks every 20 ms when the body says stream: true), /v1/slow (SSE until the stream
// closes), /v1/big?n=BYTES (a body of n bytes, no content-length), /v1/echo (the request body's
// length and sha256), /v1/reset (RST_STREAM before any answer), /v1/cut (a head and half the
// declared body, then RST_STREAM). `onStream(stream, headers, session)` may take a stream first
// (return true).
async function h2Engine(t, { settings = {}, tlsCert, onStream, serverOpts = {} } = {}) {
  const seen = { sessions: 0, streams: 0, maxOpen: 0, heads: [], closed: [], bodies: [] };
  const opts = { settings, ...serverOpts };
  const srv = tlsCert
    ? http2.createSecureServer({ ...opts, key: readFileSync(tlsCert.key), cert: readFileSync(tlsCert.crt) })
    : http2.createServer(opts);
  const sessions = new Set();
  srv.on('session', (s) => {
    seen.sessions++;
    sessions.add(s);
    s.kvOpen = 0;
    s.on('close', () => sessions.delete(s));
  });
  srv.on('stream', (stream, headers) => {
    const session = stream.session;
    seen.streams++;
    session.kvOpen++;
    seen.maxOpen = Math.max(seen.maxOpen, session.kvOpen);
    seen.heads.push(headers);
    stream.on('close', () => { session.kvOpen--; seen.closed.push({ path: headers[':path'], rst: stream.rstCode }); });
    stream.on('error', () => {});
    if (onStream && onStream(stream, headers, session)) return;
    const chunks = [];
    stream.on('data', (c) => chunks.push(c));
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.bodies.push(body.length);
      const p = headers[':path'];
      if (stream.destroyed || stream.closed) return;
      if (p === '/v1/reset') {
        stream.close(NGHTTP2_INTERNAL_ERROR);
      } else if (p === '/v1/cut') {
        stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': '1000' });
        stream.write('x'.repeat(500));
        setTimeout(() => stream.close(NGHTTP2_INTERNAL_ERROR), 50);
      } else if (p === '/v1/echo') {
        const out = JSON.stringify({ length: body.length, sha256: createHash('sha256').update(body).digest('hex') });
        stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': String(out.length) });
        stream.end(out);
      } else if (p.startsWith('/v1/big')) {
        const n = Number(new URL(p, 'http://x').searchParams.get('n'));
        stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
        const block = Buffer.alloc(64 * 1024);
        for (let i = 0; i < block.length; i++) block[i] = (i * 7) & 255;
        let sent = 0;
        const pump = () => {
          while (sent < n) {
            const k = Math.min(block.length, n - sent);
            sent += k;
            if (!stream.write(block.subarray(0, k))) return stream.once('drain', pump);
          }
          stream.end();
        };
        pump();
      } else if (p === '/v1/slow') {
        stream.respond({ ':status': 200, 'content-type': 'text/event-stream' });
        let i = 0;
        const tick = setInterval(() => {
          if (stream.closed || stream.destroyed) return clearInterval(tick);
          stream.write(`data: {"i":${i++}}\n\n`);
        }, 20);
        stream.on('close', () => clearInterval(tick));
      } else {
        const req = body.length ? JSON.parse(body) : {};
        if (req.stream) {
          stream.respond({ ':status': 200, 'content-type': 'text/event-stream' });
          let i = 0;
          const n = req.events ?? 5;
          const tick = setInterval(() => {
            if (stream.closed || stream.destroyed) return clearInterval(tick);
            if (i < n) {
              stream.write(`data: {"choices":[{"index":0,"delta":{"content":"t${i}"}}]}\n\n`);
              i++;
            } else {
              clearInterval(tick);
              stream.end('data: [DONE]\n\n');
            }
          }, 20);
        } else {
          const out = JSON.stringify({ object: 'chat.completion', model: req.model,
            choices: [{ index: 0, message: { role: 'assistant', content: `h2 answer to ${req.messages?.[0]?.content}` },
              finish_reason: 'stop' }] });
          stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(out)) });
          stream.end(out);
        }
      }
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => {
    for (const s of sessions) s.destroy();
    return new Promise((r) => srv.close(r));
  });
  return { srv, seen, sessions, worker: { host: '127.0.0.1', port: srv.address().port } };
}

// An HTTP/1.1 request through the gateway; resolves with {status, headers, body (Buffer)}.
// `ca`: HTTPS to the gateway, its certificate checked against `ca`.
function h1(port, { method = 'POST', path = '/v1/chat/completions', body, headers = {}, ca } = {}) {
  return new Promise((resolve, reject) => {
    const req = (ca ? https : http).request({ host: '127.0.0.1', port, method, path, agent: false, ca,
      headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}
const chat = (content, extra = {}) =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: 4, ...extra });

async function gwMetric(gw, name, labels = {}) {
  const text = await (await fetch(`${gw.api}/metrics`)).text();
  let v = 0;
  for (const m of parseMetrics(text))
    if (m.name === name && Object.entries(labels).every(([k, x]) => m.labels[k] === x)) v += m.value;
  return v;
}

async function h2Rule(gw, workers, extraArgs = {}) {
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers, extraArgs: { backend_protocol: 'http2', ...extraArgs } }));
  assert.equal(r.status, 200, r.text);
  return port;
}

test('HTTP/1.1 and HTTP/2 clients reach an h2c engine over one multiplexed connection', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  const got = await Promise.all(Array.from({ length: 20 }, (_, i) => h1(port, { body: chat(`q${i}`) })));
  got.forEach((r, i) => {
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(JSON.parse(r.body).choices[0].message.content, `h2 answer to q${i}`);
    assert.equal(r.headers['content-length'], String(r.body.length));  // the engine's length kept
  });
  assert.equal(eng.seen.sessions, 1, 'one worker, one HTTP/2 connection for all twenty');
  assert.equal(eng.seen.streams, 20);
  const h = eng.seen.heads[0];
  assert.equal(h[':method'], 'POST');
  assert.equal(h[':scheme'], 'http');
  assert.equal(h[':authority'], `127.0.0.1:${port}`);
  assert.equal(h[':path'], '/v1/chat/completions');
  assert.ok(h['x-request-id'], 'the gateway names the request');
  assert.equal(h.connection, undefined);
  assert.equal(h.host, undefined);
  // An HTTP/2 client: both sides multiplexed.
  const c = http2.connect(`http://127.0.0.1:${port}`);
  t.after(() => c.close());
  const one = (q) => new Promise((resolve, reject) => {
    const s = c.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
    let body = '';
    let status;
    s.on('response', (x) => { status = x[':status']; });
    s.setEncoding('utf8');
    s.on('data', (d) => { body += d; });
    s.on('end', () => resolve({ status, body }));
    s.on('error', reject);
    s.end(chat(q));
  });
  const both = await Promise.all(['a', 'b', 'c'].map(one));
  both.forEach((r, i) => {
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).choices[0].message.content, `h2 answer to ${'abc'[i]}`);
  });
  assert.equal(eng.seen.sessions, 1);
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_sessions'), 1);
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'opened' }), 23);
});

test('SSE is relayed event by event; a client that leaves resets only its own stream', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  // A whole stream: every event, in order, framed for the HTTP/1.1 client as chunked.
  const r = await h1(port, { body: chat('s', { stream: true, events: 6 }) });
  assert.equal(r.status, 200);
  assert.equal(r.headers['transfer-encoding'], 'chunked');
  const datas = r.body.toString().split('\n\n').filter(Boolean);
  assert.equal(datas.length, 7);
  assert.equal(datas[6], 'data: [DONE]');
  assert.match(datas[5], /"t5"/);
  // A stream left after two events: its engine stream is reset (CANCEL), the connection stays
  // and serves the next request.
  const events = [];
  await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/slow', agent: false }, (res) => {
      res.on('data', (d) => {
        events.push(d.toString());
        if (events.join('').split('\n\n').length > 2) { req.destroy(); resolve(); }
      });
    });
    req.on('error', () => {});
    req.on('close', resolve);
    req.end('{}');
    setTimeout(() => reject(new Error('no events')), 10000);
  });
  const closed = await waitFor(() => eng.seen.closed.find((x) => x.path === '/v1/slow'), 5000);
  assert.ok(closed, 'the engine saw its stream end');
  assert.equal(closed.rst, NGHTTP2_CANCEL);
  const again = await h1(port, { body: chat('after') });
  assert.equal(again.status, 200);
  assert.equal(eng.seen.sessions, 1, 'the cancel reset a stream, not the connection');
  // Our own cancels are not counted as the engine's resets.
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'reset' }), 0);
});

test("the engine's stream limit: more connections, no request refused", async (t) => {
  const eng = await h2Engine(t, { settings: { maxConcurrentStreams: 2 } });
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  // Eight streams of 6 events at 20 ms at once: each connection takes two.
  const got = await Promise.all(Array.from({ length: 8 }, () => h1(port, { body: chat('x', { stream: true, events: 6 }) })));
  for (const r of got) {
    assert.equal(r.status, 200);
    assert.match(r.body.toString(), /data: \[DONE\]/);
  }
  // (Node refuses a stream past its limit itself: what counts is that the gateway never had one
  // refused, so no request was delayed by a retry, and that it opened connections to fit)
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'refused' }), 0);
  assert.ok(eng.seen.sessions >= 4, `at least four connections (saw ${eng.seen.sessions})`);
  assert.equal(eng.seen.streams, 8, 'each request sent once');
});

test("GOAWAY: a stream the engine did not process is sent again on a new connection", async (t) => {
  let first = null;
  const processed = [];
  const eng = await h2Engine(t, {
    onStream(stream, headers, session) {
      if (headers[':path'] !== '/v1/goaway') return false;
      if (first === null) first = session;
      if (session === first && stream.id > 1) {
        // The second stream on the first connection: GOAWAY naming stream 1 the last processed.
        session.goaway(NGHTTP2_NO_ERROR, 1);
        return true;
      }
      stream.resume();
      stream.on('end', () => {
        processed.push(stream.id);
        const delay = session === first ? 300 : 0;
        setTimeout(() => {
          if (stream.closed || stream.destroyed) return;
          stream.respond({ ':status': 200, 'content-type': 'application/json' });
          stream.end(`{"stream":${stream.id}}`);
        }, delay);
      });
      return true;
    },
  });
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  const a = h1(port, { path: '/v1/goaway', body: '{}' });
  await waitFor(() => processed.length === 1, 5000);
  const b = h1(port, { path: '/v1/goaway', body: '{}' });
  const [ra, rb] = await Promise.all([a, b]);
  assert.equal(ra.status, 200, ra.body.toString());
  assert.equal(rb.status, 200, rb.body.toString());
  assert.deepEqual(JSON.parse(ra.body), { stream: 1 });
  assert.deepEqual(JSON.parse(rb.body), { stream: 1 }, 'the refused request ran as the first stream of a new connection');
  assert.equal(eng.seen.sessions, 2);
  assert.equal(processed.length, 2, 'each request processed once');
  assert.ok(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'refused' }) >= 1);
});

test('REFUSED_STREAM is sent again; a request the engine may be running is never sent twice', async (t) => {
  let refused = 0;
  const got = { kept: 0 };
  const eng = await h2Engine(t, {
    onStream(stream, headers) {
      const p = headers[':path'];
      if (p === '/v1/refuse-once' && refused++ === 0) {
        stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
        return true;
      }
      if (p === '/v1/drop') {
        // The request reached the engine; the connection dies before any answer.
        got.kept++;
        stream.resume();
        stream.on('end', () => stream.session.destroy());
        return true;
      }
      return false;
    },
  });
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  const r = await h1(port, { path: '/v1/refuse-once', body: chat('again') });
  assert.equal(r.status, 200, r.body.toString());
  assert.equal(refused, 2, 'refused once, then processed');
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'refused' }), 1);
  const d = await h1(port, { path: '/v1/drop', body: chat('once') });
  assert.equal(d.status, 502);
  assert.equal(got.kept, 1, 'the engine saw the request once: no resend after its HEADERS went out');
});

test('engine resets: before the answer 502, during it the client sees the answer cut', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  const r = await h1(port, { path: '/v1/reset', body: '{}' });
  assert.equal(r.status, 502);
  assert.match(r.body.toString(), /upstream/);
  const cut = await h1(port, { path: '/v1/cut', body: '{}' }).catch((e) => ({ error: e }));
  assert.ok(cut.error || cut.body.length < 1000, 'a cut answer never completes');
  const ok = await h1(port, { body: chat('still') });
  assert.equal(ok.status, 200);
  assert.equal(eng.seen.sessions, 1, 'stream resets leave the connection up');
  assert.ok(await gwMetric(gw, 'kvgate_upstream_h2_streams_total', { event: 'reset' }) >= 2);
});

test('flow control: large bodies both ways, through a slow reader', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1', '--max-body-bytes', '4000000']);
  const port = await h2Rule(gw, [eng.worker]);
  const big = Buffer.alloc(1_500_000);
  for (let i = 0; i < big.length; i++) big[i] = (i * 13) & 255;
  const e = await h1(port, { path: '/v1/echo', body: big, headers: { 'content-type': 'application/octet-stream' } });
  assert.equal(e.status, 200);
  assert.deepEqual(JSON.parse(e.body), { length: big.length, sha256: createHash('sha256').update(big).digest('hex') });
  // 3 MB back, read slowly (paused in between): every byte, in order.
  const n = 3_000_000;
  const got = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'GET', path: `/v1/big?n=${n}`, agent: false }, (res) => {
      const chunks = [];
      let paused = 0;
      res.on('data', (c) => {
        chunks.push(c);
        if (paused++ < 5) { res.pause(); setTimeout(() => res.resume(), 200); }
      });
      res.on('end', () => resolve(Buffer.concat(chunks)));
    });
    req.on('error', reject);
    req.end();
  });
  assert.equal(got.length, n);
  for (let i = 0; i < n; i += 9973) assert.equal(got[i], ((i % 65536) * 7) & 255, `byte ${i}`);
});

test('an engine that closes its connection: the next request reconnects', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  assert.equal((await h1(port, { body: chat('one') })).status, 200);
  for (const s of eng.sessions) s.destroy();
  await waitFor(async () => (await gwMetric(gw, 'kvgate_upstream_h2_sessions')) === 0, 5000);
  assert.equal((await h1(port, { body: chat('two') })).status, 200);
  assert.equal(eng.seen.sessions, 2);
  // A graceful GOAWAY with nothing open: the same.
  for (const s of eng.sessions) s.goaway(NGHTTP2_NO_ERROR, 0);
  await sleep(100);
  assert.equal((await h1(port, { body: chat('three') })).status, 200);
  assert.equal(eng.seen.sessions, 3);
});

test('h2 over TLS by ALPN; an engine that does not choose h2 is refused clearly', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const ca = makeCa(tmp.dir, 'engine-ca');
  const cert = makeServerCert(tmp.dir, ca, 7001, 'engine');
  const eng = await h2Engine(t, { tlsCert: cert });
  // An https engine speaking HTTP/1.1 only (no ALPN h2).
  const h1srv = https.createServer({ key: readFileSync(cert.key), cert: readFileSync(cert.crt) }, (req, res) => {
    res.end('{}');
  });
  await new Promise((r) => h1srv.listen(0, '127.0.0.1', r));
  t.after(() => { h1srv.closeAllConnections(); return new Promise((r) => h1srv.close(r)); });
  // security 2 terminates TLS at the gateway too: its own certificate, from another CA.
  const gwCa = makeCa(tmp.dir, 'gw-ca');
  const dp = makeServerCert(tmp.dir, gwCa, 7002, 'dp');
  const gwCaPem = readFileSync(gwCa.cert);
  const gw = await gateway(t, ['--workers', '1', '--tls-cert', dp.crt, '--tls-key', dp.key]);
  const tls = { security: 2, mtls_backend: { verify_server_cert: true, backend_ca_path: ca.cert } };
  const port = await h2Rule(gw, [eng.worker], tls);
  const r = await h1(port, { body: chat('tls'), ca: gwCaPem });
  assert.equal(r.status, 200, r.body.toString());
  assert.equal(JSON.parse(r.body).choices[0].message.content, 'h2 answer to tls');
  assert.equal(eng.seen.heads[0][':scheme'], 'https');
  const sse = await h1(port, { body: chat('s', { stream: true, events: 3 }), ca: gwCaPem });
  assert.match(sse.body.toString(), /"t2"[\s\S]*\[DONE\]/);
  assert.equal(eng.seen.sessions, 1);
  const bad = await h2Rule(gw, [{ host: '127.0.0.1', port: h1srv.address().port }], tls);
  const rb = await h1(bad, { body: chat('x'), ca: gwCaPem });
  assert.equal(rb.status, 502);
  assert.match(rb.body.toString(), /HTTP\/2 by ALPN/);
});

test('hostile engines: not HTTP/2, oversized heads', async (t) => {
  // An HTTP/1.1 server on an http2 rule: its answer is no SETTINGS frame.
  const h1only = net.createServer((s) => {
    s.on('data', () => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}'));
    s.on('error', () => {});
  });
  await new Promise((r) => h1only.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => h1only.close(r)));
  // A head of four 20 KiB fields: past the gateway's 64 KiB bound (each field under HPACK's own).
  const big = await h2Engine(t, {
    serverOpts: { maxSendHeaderBlockLength: 256 * 1024 },
    onStream(stream, headers) {
      stream.on('error', () => {});
      stream.resume();
      stream.on('end', () => {
        if (headers[':path'] === '/v1/interims') {  // more 1xx heads than the gateway takes
          for (let i = 0; i < 20; i++) stream.additionalHeaders({ ':status': 103, link: `</s${i}>` });
          stream.respond({ ':status': 200 });
          return stream.end('{}');
        }
        if (headers[':path'] !== '/v1/big-head') {
          stream.respond({ ':status': 200, 'content-type': 'application/json' });
          return stream.end('{"small":true}');
        }
        const h = { ':status': 200 };
        for (let i = 0; i < 4; i++) h[`x-big-${i}`] = 'a'.repeat(20 * 1024);
        stream.respond(h);
        stream.end('{}');
      });
      return true;
    },
  });
  big.srv.on('sessionError', () => {});
  const gw = await gateway(t, ['--workers', '1']);
  const p1 = await h2Rule(gw, [{ host: '127.0.0.1', port: h1only.address().port }]);
  const r1 = await h1(p1, { body: chat('x') });
  assert.equal(r1.status, 502);
  assert.match(r1.body.toString(), /answered in HTTP\/1\.1 \(the rule's backend_protocol is http2; both would fall back\)/);
  const p2 = await h2Rule(gw, [big.worker]);
  const errorsBefore = await gwMetric(gw, 'kvgate_upstream_h2_protocol_errors_total');
  const r2 = await h1(p2, { path: '/v1/big-head', body: chat('x') });
  assert.equal(r2.status, 502, 'a head over 64 KiB is never relayed');
  assert.equal(r2.body.toString().includes('a'.repeat(1000)), false);
  assert.match(r2.body.toString(), /bad_upstream_response/);
  const r3 = await h1(p2, { path: '/v1/interims', body: chat('x') });
  assert.equal(r3.status, 502, 'over 16 interim heads');
  assert.match(r3.body.toString(), /interim/);
  // Only those streams were reset: the connection serves the next request.
  const small = await h1(p2, { path: '/v1/small', body: chat('x') });
  assert.equal(small.status, 200);
  assert.deepEqual(JSON.parse(small.body), { small: true });
  assert.equal(big.seen.sessions, 1);
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_protocol_errors_total'), errorsBefore);
  // The gateway is fine afterwards.
  const eng = await h2Engine(t);
  const p3 = await h2Rule(gw, [eng.worker]);
  assert.equal((await h1(p3, { body: chat('ok') })).status, 200);
});

// backend_protocol both: each engine is spoken to in what it speaks. An HTTP/1.1-only engine
// answers the h2c preface once (in HTTP/1.1: learned, nothing blamed, the request goes over
// HTTP/1.1), then gets HTTP/1.1 only; over TLS the engine's ALPN choice decides.
test('backend_protocol both: HTTP/2 where the engine speaks it, HTTP/1.1 where it does not', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const eng = await h2Engine(t);
  // An HTTP/1.1-only engine: counts its connections, requests and the preface it refused.
  const seen1 = { conns: 0, requests: 0, refused: 0 };
  const h1srv = http.createServer((req, res) => {
    seen1.requests++;
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content: 'h1 answer' } }] }));
    });
  });
  h1srv.on('connection', () => { seen1.conns++; });
  h1srv.on('clientError', (err, sock) => {  // the h2c preface is no HTTP/1.1 request
    seen1.refused++;
    // (answered late: the requests behind the first connect wait for it, then go HTTP/1.1)
    setTimeout(() => sock.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n'), 150);
  });
  await new Promise((r) => h1srv.listen(0, '127.0.0.1', r));
  t.after(() => { h1srv.closeAllConnections(); return new Promise((r) => h1srv.close(r)); });
  const gw = await gateway(t, ['--workers', '1']);
  const both = { backend_protocol: 'both' };
  const p2 = await h2Rule(gw, [eng.worker], both);
  const got2 = await Promise.all(Array.from({ length: 5 }, (_, i) => h1(p2, { body: chat(`b${i}`) })));
  got2.forEach((r, i) => assert.equal(JSON.parse(r.body).choices[0].message.content, `h2 answer to b${i}`));
  assert.equal(eng.seen.sessions, 1, 'an h2c engine: one multiplexed connection');
  assert.equal(eng.seen.streams, 5);
  // The HTTP/1.1 engine, ten requests at once on a gateway that has not met it yet.
  const p1 = await h2Rule(gw, [{ host: '127.0.0.1', port: h1srv.address().port }], both);
  const got1 = await Promise.all(Array.from({ length: 10 }, () => h1(p1, { body: chat('x') })));
  for (const r of got1) {
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(JSON.parse(r.body).choices[0].message.content, 'h1 answer');
  }
  assert.equal(seen1.refused, 1, 'the preface was tried once, by the first connect');
  assert.equal(seen1.requests, 10);
  const conns = seen1.conns;
  for (let i = 0; i < 5; i++) assert.equal((await h1(p1, { body: chat('y') })).status, 200);
  assert.equal(seen1.refused, 1, 'learned: no preface again');
  assert.equal(seen1.conns, conns, 'kept-alive HTTP/1.1 connections reused');
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_protocol_errors_total'), 0);
  assert.equal(await gwMetric(gw, 'kvgate_upstream_h2_sessions'), 1, 'only the h2c engine\'s');
  assert.equal(await gwMetric(gw, 'kvgate_upstream_protocol_learned_total', { protocol: 'http1', how: 'h2c_answered_http1' }), 1);
  assert.equal(await gwMetric(gw, 'kvgate_upstream_protocol_learned_total', { protocol: 'http2', how: 'h2c' }), 1);
  // Over TLS: ALPN offers h2 and http/1.1; each engine chooses.
  const ca = makeCa(tmp.dir, 'engine-ca');
  const cert = makeServerCert(tmp.dir, ca, 7011, 'engine');
  const tlsEng = await h2Engine(t, { tlsCert: cert });
  const tlsH1 = https.createServer({ key: readFileSync(cert.key), cert: readFileSync(cert.crt) }, (req, res) => {
    req.resume();
    req.on('end', () => res.end(JSON.stringify({ alpn: req.socket.alpnProtocol || 'none' })));
  });
  await new Promise((r) => tlsH1.listen(0, '127.0.0.1', r));
  t.after(() => { tlsH1.closeAllConnections(); return new Promise((r) => tlsH1.close(r)); });
  const tlsArgs = { backend_protocol: 'both', security: 2,
    mtls_backend: { verify_server_cert: true, backend_ca_path: ca.cert } };
  const gwCa = makeCa(tmp.dir, 'gw-ca');
  const dp = makeServerCert(tmp.dir, gwCa, 7012, 'dp');
  const gw2 = await gateway(t, ['--workers', '1', '--tls-cert', dp.crt, '--tls-key', dp.key]);
  const gwCaPem = readFileSync(gwCa.cert);
  const pt2 = await h2Rule(gw2, [tlsEng.worker], tlsArgs);
  const rt2 = await h1(pt2, { body: chat('t'), ca: gwCaPem });
  assert.equal(JSON.parse(rt2.body).choices[0].message.content, 'h2 answer to t');
  assert.equal(tlsEng.seen.heads[0][':scheme'], 'https');
  const pt1 = await h2Rule(gw2, [{ host: '127.0.0.1', port: tlsH1.address().port }], tlsArgs);
  for (let i = 0; i < 3; i++) {
    const r = await h1(pt1, { body: chat('u'), ca: gwCaPem });
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(JSON.parse(r.body).alpn, 'http/1.1', 'the engine chose HTTP/1.1 by ALPN');
  }
  assert.equal(await gwMetric(gw2, 'kvgate_upstream_protocol_learned_total', { protocol: 'http2', how: 'alpn' }), 1);
  // A TLS pass-through that picks h2 by ALPN in front of an HTTP/1.1 server: a failure (502),
  // never a request sent again without TLS.
  const liarConns = { tcp: 0, tls: 0 };
  const liar = tls.createServer({ key: readFileSync(cert.key), cert: readFileSync(cert.crt), ALPNProtocols: ['h2'] },
    (sock) => {
      liarConns.tls++;
      sock.on('error', () => {});
      sock.once('data', () => sock.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n'));
    });
  liar.on('connection', () => { liarConns.tcp++; });
  liar.on('tlsClientError', () => {});
  await new Promise((r) => liar.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => liar.close(r)));
  const pl = await h2Rule(gw2, [{ host: '127.0.0.1', port: liar.address().port }], tlsArgs);
  const rl = await h1(pl, { body: chat('v'), ca: gwCaPem });
  assert.equal(rl.status, 502, rl.body.toString());
  assert.ok(liarConns.tcp >= 1);
  assert.equal(liarConns.tls, liarConns.tcp, 'every connection to it was TLS');
  assert.equal(await gwMetric(gw2, 'kvgate_upstream_protocol_learned_total', { protocol: 'http1', how: 'alpn' }), 1,
    'one connect chose HTTP/1.1; the next requests reused it');
});

// Health probes speak the rule's protocol: HTTP/2 on http2 rules (an h2c-only engine, which an
// HTTP/1.1 probe could never reach, is up while its /health answers 200 and down once it
// answers 503), and on both rules what each engine speaks.
test('health probes over HTTP/2 (http2 and both rules)', async (t) => {
  let healthy = true;
  const probes = { h2: 0 };
  const eng = await h2Engine(t, {
    onStream(stream, headers) {
      if (headers[':path'] !== '/health') return false;
      probes.h2++;
      stream.on('error', () => {});
      stream.respond({ ':status': healthy ? 200 : 503 });
      stream.end();
      return true;
    },
  });
  const h1probes = { n: 0, prefaces: 0 };
  const h1srv = http.createServer((req, res) => {
    if (req.url === '/health') h1probes.n++;
    res.end('{}');
  });
  h1srv.on('clientError', (err, sock) => {
    h1probes.prefaces++;
    sock.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
  });
  await new Promise((r) => h1srv.listen(0, '127.0.0.1', r));
  t.after(() => { h1srv.closeAllConnections(); return new Promise((r) => h1srv.close(r)); });
  const gw = await gateway(t, ['--workers', '1', '--probe-interval-ms', '100', '--probe-timeout-ms', '1000']);
  const probe = { probetype: 'http', probereq: '/health', probeRetries: 2 };
  await h2Rule(gw, [eng.worker], probe);
  await h2Rule(gw, [{ host: '127.0.0.1', port: h1srv.address().port }], { ...probe, backend_protocol: 'both' });
  const up = async (port) => gwMetric(gw, 'kvgate_endpoint_up', { endpoint: `127.0.0.1:${port}` });
  assert.ok(await waitFor(() => probes.h2 >= 3, 10000), 'HTTP/2 probes reach the h2c engine');
  assert.equal(await up(eng.worker.port), 1);
  assert.ok(await waitFor(() => h1probes.n >= 3, 10000), 'the both rule probes its HTTP/1.1 engine in HTTP/1.1');
  assert.equal(await up(h1srv.address().port), 1);
  assert.equal(h1probes.prefaces, 1, 'learned: the h2c preface tried once, then HTTP/1.1 probes');
  healthy = false;
  assert.ok(await waitFor(async () => (await up(eng.worker.port)) === 0, 10000), '503 probes: down');
  healthy = true;
  assert.ok(await waitFor(async () => (await up(eng.worker.port)) === 1, 10000), 'up again');
});

test('a drain (SIGTERM) lets the HTTP/2 streams running finish', async (t) => {
  const eng = await h2Engine(t);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await h2Rule(gw, [eng.worker]);
  const running = h1(port, { body: chat('d', { stream: true, events: 20 }) });
  await waitFor(() => eng.seen.streams === 1, 5000);
  await sleep(60);
  gw.proc.kill('SIGTERM');
  const r = await running;
  assert.equal(r.status, 200);
  const events = r.body.toString().split('\n\n').filter(Boolean);
  assert.equal(events.length, 21, 'every event and the end');
  assert.equal(events[20], 'data: [DONE]');
  const closed = await waitFor(() => eng.seen.closed[0], 5000);
  assert.equal(closed.rst, 0, 'the engine saw its stream end cleanly');
});
