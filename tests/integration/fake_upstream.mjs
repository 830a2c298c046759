// Fake upstreams and raw clients for the integration tests. Both sides speak HTTP/1.1 by hand over
// node:net on 127.0.0.1 (port 0), so every byte, pause, close and reset is under the test's control.
//   rawUpstream(opts)       an upstream that hands each parsed request to the test, which answers it
//   reply(sock, ...)        writes a complete Content-Length response on an upstream socket
//   echoUpstream(t)         an upstream that answers 200 {"echo": <request body>}
//   sseUpstream(t)          an upstream whose streaming requests trickle SSE until the test ends them
//   hangingEndpoint()       an endpoint whose TCP connect never completes
//   RawClient               a client connection that writes raw bytes and reads responses strictly
//                           (interim 1xx, Content-Length, chunked, until close)
//   post(path, body, extra) the bytes of a POST with a JSON body
//   oneShot(port, ...)      one POST on a fresh connection (Connection: close), its response parsed
import { spawn } from 'node:child_process';
import net from 'node:net';

// Header lines ("Name: value") -> {name: value} with lower-case names.
function parseHeaders(lines) {
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  return headers;
}

// A raw HTTP/1.1 upstream on 127.0.0.1 (port 0). Each request (head plus Content-Length body) is
// handed to `onRequest(req, sock)`, which writes the answer itself; when it returns a promise, the
// next request on that connection waits for it (pipelined requests are answered in order, as an
// HTTP/1.1 server must). `req` is {method, path, headers, body, bodyLength, conn, seq}: `conn`
// numbers the connection (1, 2, ...) and `seq` the request on it (1, 2, ...); with
// keepBody: false the body bytes are only counted (req.body undefined; for huge bodies).
// `onConnection(sock)` runs before any byte is read and may take the connection over by returning
// true (the socket is then never read). `seen` records connections and requests.
// stopListening() closes the listening socket at once (a fresh connect is then refused) and keeps
// the open connections; close() destroys everything.
export async function rawUpstream({ onRequest, onConnection, keepBody = true } = {}) {
  const sockets = new Set();
  const seen = { connections: 0, requests: [] };
  const server = net.createServer({ pauseOnConnect: true }, (sock) => {
    sockets.add(sock);
    const conn = ++seen.connections;
    let seq = 0;
    sock.on('close', () => sockets.delete(sock));
    sock.on('error', () => {});
    if (onConnection && onConnection(sock)) return;
    let pending = Buffer.alloc(0);  // bytes of a head not complete yet
    let head = null;                // the request whose body is being read
    let parts = [];
    let got = 0;
    let queue = Promise.resolve();
    sock.on('data', (d) => {
      for (;;) {
        if (head === null) {
          pending = pending.length ? Buffer.concat([pending, d]) : d;
          const end = pending.indexOf('\r\n\r\n');
          if (end < 0) return;
          const lines = pending.subarray(0, end).toString('latin1').split('\r\n');
          const [method, path] = lines[0].split(' ');
          const headers = parseHeaders(lines.slice(1));
          head = { method, path, headers, length: Number(headers['content-length'] || 0) };
          d = pending.subarray(end + 4);
          pending = Buffer.alloc(0);
          parts = [];
          got = 0;
        }
        const take = Math.min(head.length - got, d.length);
        if (keepBody) parts.push(d.subarray(0, take));
        got += take;
        d = d.subarray(take);
        if (got < head.length) return;
        const req = {
          method: head.method, path: head.path, headers: head.headers, conn, seq: ++seq,
          body: keepBody ? Buffer.concat(parts).toString() : undefined, bodyLength: got,
        };
        head = null;
        parts = [];
        seen.requests.push(req);
        queue = queue.then(() => onRequest(req, sock));
      }
    });
    sock.resume();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  let listening = true;
  const stopListening = () => new Promise((r) => {
    if (!listening) return r();
    listening = false;
    server.close(() => r());  // the listening fd is closed now; the callback waits for sockets
  });
  return {
    host: '127.0.0.1',
    port,
    label: `127.0.0.1:${port}`,
    seen,
    stopListening: () => { stopListening(); },
    close: () => { for (const s of sockets) s.destroy(); return stopListening(); },
  };
}

// Writes a complete HTTP/1.1 response with a Content-Length body (close: then ends the connection).
export function reply(sock, status, body, { reason = 'X', headers = {}, close = false } = {}) {
  if (sock.destroyed) return;
  let h = `HTTP/1.1 ${status} ${reason}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}\r\n`;
  if (close) h += 'Connection: close\r\n';
  sock.write(`${h}\r\n${body}`);
  if (close) sock.end();
}

// An upstream that answers every request 200 with the JSON {"echo": <the request body>}; closed
// when the test `t` ends.
export async function echoUpstream(t) {
  const up = await rawUpstream({
    onRequest: (req, sock) => reply(sock, 200, JSON.stringify({ echo: req.body }),
      { reason: 'OK', headers: { 'Content-Type': 'application/json' } }),
  });
  t.after(up.close);
  return up;
}

// An upstream whose streaming requests (JSON body with "stream": true) get an SSE response that
// trickles one event every 100 ms until the test calls finish() on that stream (then
// `data: [DONE]` and the last chunk); any other request is answered 200 at once with a small
// JSON body. `streams` lists the streams in arrival order; nextStream() resolves with the next.
// Closed when the test `t` ends.
export async function sseUpstream(t) {
  const streams = [];
  const waiting = [];
  const up = await rawUpstream({
    onRequest: (req, sock) => {
      let stream = false;
      try { stream = JSON.parse(req.body).stream === true; } catch { /* not JSON */ }
      if (!stream) {
        reply(sock, 200, '{"ok":true}', { reason: 'OK', headers: { 'Content-Type': 'application/json' } });
        return undefined;
      }
      const chunk = (s) => {
        if (sock.destroyed) return;
        sock.write(`${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`);
      };
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n' +
        'Transfer-Encoding: chunked\r\n\r\n');
      const st = { req, sent: 0 };
      chunk(`data: {"n":${st.sent++}}\n\n`);
      st.timer = setInterval(() => chunk(`data: {"n":${st.sent++}}\n\n`), 100);
      const ended = new Promise((resolve) => {
        st.finish = () => {
          clearInterval(st.timer);
          chunk('data: [DONE]\n\n');
          if (!sock.destroyed) sock.write('0\r\n\r\n');
          resolve();
        };
      });
      sock.once('close', () => { clearInterval(st.timer); });
      streams.push(st);
      if (waiting.length) waiting.shift()(st);
      return ended;  // the connection's next request waits for the end of this stream
    },
  });
  t.after(async () => {
    for (const st of streams) clearInterval(st.timer);
    await up.close();
  });
  up.streams = streams;
  up.nextStream = () => new Promise((r) => waiting.push(r));
  return up;
}

// An endpoint whose TCP connect hangs: a listening socket with backlog 0 that never accepts,
// its accept queue filled by the script itself, so further SYNs are dropped.
const HANG_PY = `
import socket, sys, time
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(0)
port = srv.getsockname()[1]
fill = []
for i in range(3):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(('127.0.0.1', port))
    except BlockingIOError: pass
    fill.append(c)
time.sleep(0.3)
print(port, flush=True)
sys.stdin.read()  # lives until the test closes our stdin or kills us
`;
export async function hangingEndpoint() {
  const py = spawn('/usr/bin/python3', ['-c', HANG_PY], { stdio: ['pipe', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    py.stdout.once('data', (d) => resolve(Number(String(d).trim())));
    py.once('exit', (code) => reject(new Error(`hanging endpoint script exited with ${code}`)));
  });
  return {
    host: '127.0.0.1',
    port,
    label: `127.0.0.1:${port}`,
    close: () => { if (py.exitCode === null && py.signalCode === null) py.kill('SIGKILL'); },
  };
}

// A client connection that speaks HTTP/1.1 by hand and reads responses strictly: interim 1xx
// heads (other than 101) are collected, then the final head and its body (Content-Length,
// chunked, or until the connection closes). `transcript` keeps every byte received, `buf` what
// no readResponse() has consumed yet.
export class RawClient {
  static async open(port) {
    const c = new RawClient();
    c.sock = net.connect(port, '127.0.0.1');
    c.buf = '';
    c.transcript = '';
    c.mark = 0;
    c.closed = false;
    c.wake = null;
    c.sock.on('data', (d) => {
      c.buf += d.toString('latin1');
      c.transcript += d.toString('latin1');
      c.wake?.();
    });
    c.sock.on('close', () => { c.closed = true; c.wake?.(); });
    c.sock.on('error', () => {});
    await new Promise((resolve, reject) => { c.sock.once('connect', resolve); c.sock.once('error', reject); });
    return c;
  }

  close() { this.sock.destroy(); }

  // Sends raw bytes; what arrives from now on is `since()`.
  write(data) {
    this.mark = this.transcript.length;
    this.sock.write(data);
  }

  since() { return this.transcript.slice(this.mark); }

  // Sends a GET of `path` (no body).
  send(path) {
    this.write(`GET ${path} HTTP/1.1\r\nHost: kvgate.test\r\n\r\n`);
  }

  async get(path) {
    this.send(path);
    return this.readResponse();
  }

  // Waits until `cond()` holds; throws after `timeoutMs` (or when the connection closed first).
  async until(cond, what, timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    while (!cond()) await this.more(deadline, what);
  }

  // Waits until what arrived since the last write() matches `re`.
  waitFor(re, what, timeoutMs = 5000) {
    return this.until(() => re.test(this.since()), what, timeoutMs);
  }

  // Waits for more bytes (or the close) until `deadline`.
  async more(deadline, what) {
    const got = () => JSON.stringify(this.transcript.slice(-600));
    if (this.closed) throw new Error(`connection closed while waiting for ${what}; received: ${got()}`);
    const left = deadline - Date.now();
    let timer;
    const ok = await new Promise((resolve) => {
      this.wake = () => resolve(true);
      timer = setTimeout(() => resolve(false), Math.max(left, 0));
    });
    clearTimeout(timer);
    this.wake = null;
    if (!ok) throw new Error(`no ${what} within the timeout; received: ${got()}`);
  }

  // True when the peer closed the connection within `timeoutMs`.
  async waitClosed(timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed && Date.now() < deadline) {
      try { await this.more(deadline, 'close'); } catch { /* timed out or closed */ }
    }
    return this.closed;
  }

  // The next response: {interims: [{status, headers}], status, headers, body (de-chunked), json
  // (body parsed, or null), head (the final head), raw (every byte of it, interims included)}.
  async readResponse(timeoutMs = 5000) {
    const deadline = Date.now() + timeoutMs;
    const interims = [];
    let raw = '';
    const take = (n) => {
      const s = this.buf.slice(0, n);
      this.buf = this.buf.slice(n);
      raw += s;
      return s;
    };
    for (;;) {
      let end;
      while ((end = this.buf.indexOf('\r\n\r\n')) < 0) await this.more(deadline, 'response head');
      const head = take(end + 4).slice(0, end);
      const [statusLine, ...lines] = head.split('\r\n');
      const status = Number(statusLine.split(' ')[1]);
      const headers = parseHeaders(lines);
      if (status >= 100 && status < 200 && status !== 101) {
        interims.push({ status, headers });
        continue;
      }
      let body = '';
      if (headers['content-length'] !== undefined) {
        const len = Number(headers['content-length']);
        while (this.buf.length < len) await this.more(deadline, 'response body');
        body = take(len);
      } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
        for (;;) {
          let eol;
          while ((eol = this.buf.indexOf('\r\n')) < 0) await this.more(deadline, 'chunk size');
          const size = parseInt(this.buf.slice(0, eol), 16);
          if (size === 0) {  // the last chunk, then trailers (if any) and an empty line
            let t;
            while ((t = this.buf.indexOf('\r\n\r\n', eol)) < 0) await this.more(deadline, 'last chunk');
            take(t + 4);
            break;
          }
          while (this.buf.length < eol + 2 + size + 2) await this.more(deadline, 'chunk data');
          body += take(eol + 2 + size + 2).slice(eol + 2, eol + 2 + size);
        }
      } else {
        while (!this.closed) await this.more(deadline, 'end of an until-close body');
        body = take(this.buf.length);
      }
      let json = null;
      try { json = JSON.parse(body); } catch { /* not JSON */ }
      return { interims, status, headers, body, json, head, raw };
    }
  }
}

// The bytes of a POST of `body` (JSON) to `path`; `extra`: more header lines, each ending in \r\n.
export const post = (path, body, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: kvgate.test\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

// One POST on a fresh connection (Connection: close, so no keep-alive connection outlives a rule
// change): the response as readResponse() gives it; when none came within `timeoutMs` (or the
// connect failed, or the connection closed first), status 0 with `error` saying why and `body`
// what was received.
export async function oneShot(port, path, body, { extra = '', timeoutMs = 10000 } = {}) {
  let c = null;
  try {
    c = await RawClient.open(port);
    c.write(post(path, body, `Connection: close\r\n${extra}`));
    return await c.readResponse(timeoutMs);
  } catch (e) {
    const got = c ? c.transcript : '';
    return { interims: [], status: 0, headers: {}, body: got, json: null, head: '', raw: got, error: e.message };
  } finally {
    c?.close();
  }
}
