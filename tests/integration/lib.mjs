// Shared helpers for the integration tests: start real kvgate processes, talk to them, stop them.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { buildLauncher, expandSyscallSets } from './syscall_filter.mjs';

export const BIN = process.env.KVGATE_BIN || path.resolve('build/kvgate');

// KVGATE_SECCOMP=1: every `kvgate serve` of the suite runs under the Debian unit's system-call
// set (@system-service, others EPERM) through syscall_filter.mjs's launcher, built once.
let seccompLauncher = null;
function seccompWrap(bin, args) {
  if (process.env.KVGATE_SECCOMP !== '1' || args[0] !== 'serve') return [bin, args];
  if (!seccompLauncher) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-seccomp-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    seccompLauncher = buildLauncher(dir, expandSyscallSets(['@system-service']));
  }
  return [seccompLauncher, [bin, ...args]];
}
const children = new Set();

function killAll() {
  for (const c of children) {
    try { c.kill('SIGKILL'); } catch { /* already gone */ }
  }
}
process.on('exit', killAll);

// Spawns `kvgate <args>` and resolves with {proc, ready} once it prints its ready JSON line.
export function startKvgate(args, { timeoutMs = 15000, env = {}, bin = BIN } = {}) {
  return new Promise((resolve, reject) => {
    const [exe, argv] = seccompWrap(bin, args);
    const proc = spawn(exe, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    children.add(proc);
    // A child left running by a failed test must not keep this file's process alive forever:
    // unreferenced, the process can end, and its 'exit' handler kills what is left.
    proc.unref();
    proc.stdout.unref();
    proc.stderr.unref();
    proc.stderrText = '';
    proc.stderr.on('data', (d) => { proc.stderrText += d.toString(); });
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`kvgate ${args.join(' ')} not ready in ${timeoutMs} ms; stderr:\n${proc.stderrText}`));
    }, timeoutMs);
    proc.on('exit', (code) => {
      children.delete(proc);
      clearTimeout(timer);
      reject(new Error(`kvgate ${args.join(' ')} exited with ${code}; stderr:\n${proc.stderrText}`));
    });
    const rl = readline.createInterface({ input: proc.stdout });
    rl.on('line', (line) => {
      try {
        const j = JSON.parse(line);
        if (j.event === 'ready') {
          clearTimeout(timer);
          resolve({ proc, ready: j });
        }
      } catch { /* not our line */ }
    });
  });
}

export async function stop(proc, signal = 'SIGTERM') {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const done = new Promise((r) => proc.once('exit', r));
  proc.kill(signal);
  const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
  await done;
  clearTimeout(t);
  children.delete(proc);
}

export async function startSim(extra = []) {
  const { proc, ready } = await startKvgate(['sim', '--engine', 'vllm', ...extra]);
  return { proc, ready, workers: ready.workers, stop: () => stop(proc) };
}

export function tempDir() {
  const d = mkdtempSync(path.join(os.tmpdir(), 'kvgate-test-'));
  return { dir: d, remove: () => rmSync(d, { recursive: true, force: true }) };
}

export async function startGateway({ stateDir, extra = [], env = {} } = {}) {
  const { proc, ready } = await startKvgate(
    ['serve', '--api-listen', '127.0.0.1:0', '--state-dir', stateDir, '--workers', '2', ...extra], { env });
  return { proc, api: ready.api, stop: (sig) => stop(proc, sig) };
}

// A port that is free on `host` right now.
export function freePort(host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function api(base, method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text, headers: res.headers };
}

export function rule({ vip = '127.0.0.1', port, sel = 0, model, workers, extraArgs = {}, weights }) {
  const serviceArguments = { externalIP: vip, port, protocol: 'tcp', sel, mode: 4, ...extraArgs };
  if (model !== undefined) serviceArguments.model_name = model;
  return {
    serviceArguments,
    endpoints: workers.map((w, i) => ({ endpointIP: w.host, targetPort: w.port, weight: weights ? weights[i] : 1 })),
  };
}

export async function simMetrics(worker) {
  // One retry: a simulator with a short --keepalive-timeout-ms may close the pooled keep-alive
  // connection just as fetch reuses it ("other side closed"); the retry opens a new one.
  const res = await fetch(`${worker.url}/metrics`).catch(() => fetch(`${worker.url}/metrics`));
  const text = await res.text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([^\s{]+)(\{[^}]*\})?\s+(\S+)/);
    if (m) out[m[1]] = (out[m[1]] || 0) + Number(m[3]);
  }
  return out;
}

// Requests each simulated worker has received (kvgate_sim_requests_total), in worker order.
export function requestCounts(workers) {
  return Promise.all(workers.map(async (w) => (await simMetrics(w)).kvgate_sim_requests_total || 0));
}
export const delta = (before, after) => after.map((x, i) => x - before[i]);

// Raw HTTP/1.1 exchange over a TCP socket: sends `data`, returns everything read until the peer
// closes or `waitMs` of silence.
export function rawRequest(port, data, { host = '127.0.0.1', waitMs = 1500 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, host);
    let buf = '';
    let timer;
    const finish = () => { clearTimeout(timer); sock.destroy(); resolve(buf); };
    const arm = () => { clearTimeout(timer); timer = setTimeout(finish, waitMs); };
    sock.on('connect', () => { sock.write(data); arm(); });
    sock.on('data', (d) => { buf += d.toString('latin1'); arm(); });
    sock.on('close', finish);
    sock.on('error', finish);
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Prometheus text exposition -> [{name, labels: {k: v}, value}] (comments and blank lines skipped).
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([^\s{]+)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([^=,\s]+)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// The samples of GET /metrics on a gateway's management API.
export async function scrapeMetrics(apiBase) {
  return parseMetrics(await (await fetch(`${apiBase}/metrics`)).text());
}

// (import declarations are hoisted: this one serves the helpers below)
import { readdirSync as procReaddir, readFileSync as procRead, readlinkSync as procReadlink } from 'node:fs';

// Resident set size of a process in kB (VmRSS of /proc/<pid>/status); NaN once it is gone.
export function rssKb(pid) {
  try {
    const m = procRead(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)\s+kB/m);
    return m ? Number(m[1]) : NaN;
  } catch { return NaN; }
}

// TCP sockets owned by process `pid` (its fds matched against /proc/<pid>/net/tcp{,6} inodes):
// [{localPort, remotePort, state}] with the kernel's state names (ESTABLISHED, CLOSE_WAIT, ...).
const TCP_STATES = { '01': 'ESTABLISHED', '02': 'SYN_SENT', '03': 'SYN_RECV', '04': 'FIN_WAIT1',
  '05': 'FIN_WAIT2', '06': 'TIME_WAIT', '07': 'CLOSE', '08': 'CLOSE_WAIT', '09': 'LAST_ACK',
  '0A': 'LISTEN', '0B': 'CLOSING' };
export function tcpSocketsOf(pid) {
  const inodes = new Set();
  let fds = [];
  try { fds = procReaddir(`/proc/${pid}/fd`); } catch { return []; }
  for (const fd of fds) {
    try {
      const m = procReadlink(`/proc/${pid}/fd/${fd}`).match(/^socket:\[(\d+)\]$/);
      if (m) inodes.add(m[1]);
    } catch { /* closed meanwhile */ }
  }
  const out = [];
  for (const f of ['tcp', 'tcp6']) {
    let text = '';
    try { text = procRead(`/proc/${pid}/net/${f}`, 'utf8'); } catch { continue; }
    for (const line of text.split('\n').slice(1)) {
      const p = line.trim().split(/\s+/);
      if (p.length < 10 || !inodes.has(p[9])) continue;
      out.push({
        localPort: parseInt(p[1].split(':')[1], 16),
        remotePort: parseInt(p[2].split(':')[1], 16),
        state: TCP_STATES[p[3].toUpperCase()] || p[3],
      });
    }
  }
  return out;
}

// ---- per-test gateways and waiting (t: the node:test context)

// (import declarations are hoisted: this one serves the helpers below)
import assert from 'node:assert/strict';

// The management API's path of the load-balancer rules.
export const LB_BASE = '/netlox/v1/config/loadbalancer';

// A gateway for one test (startGateway on a fresh state dir, `extra` more arguments of serve),
// stopped with `stopSignal` (stop() kills it after 5 s) and its state dir removed when the test ends.
export async function gateway(t, extra = [], { stopSignal = 'SIGTERM', env = {} } = {}) {
  const tmp = tempDir();
  let gw;
  try {
    gw = await startGateway({ stateDir: tmp.dir, extra, env });
  } catch (e) {
    tmp.remove();
    throw e;
  }
  t.after(async () => { await gw.stop(stopSignal); tmp.remove(); });
  return gw;
}

// One simulated worker (`kvgate sim --port 0 ...simArgs`) behind a fresh gateway with one rule
// over it (rule({port, workers: [w], extraArgs: ruleArgs})); everything stops when the test ends.
export async function simBehindGateway(t, { simArgs = [], ruleArgs = {}, gatewayArgs = ['--workers', '1'] } = {}) {
  const sim = await startSim(['--port', '0', ...simArgs]);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  const gw = await gateway(t, gatewayArgs);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [w], extraArgs: ruleArgs }));
  if (r.status !== 200) throw new Error(`the rule was refused: ${r.status} ${r.text}`);
  return { sim, w, gw, port };
}

// Creates (or replaces) the rule rule({port, ...opts}) on a fresh VIP port, or on `opts.port` when
// given; asserts the API took it; returns the port.
export async function service(gw, opts) {
  const port = opts.port ?? await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, ...opts }));
  assert.equal(r.status, 200, r.text);
  return port;
}

// Deletes the rule of VIP 127.0.0.1:`port`; resolves with api()'s answer.
export const deleteService = (gw, port) =>
  api(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);

// Polls `fn` (may be async) until it returns a truthy value or `ms` pass; returns the last value.
// The value of the sample `name`{labels} once it equals `want`, or its last value after `ms`: a
// figure the gateway settles when a request ends on its side (a quota charge after a stream's
// last byte) may trail the client's end of the stream by a moment.
export async function settledSample(api, name, labels, want, ms = 5000) {
  let got;
  await waitFor(async () => {
    got = (await scrapeMetrics(api)).find((s) => s.name === name &&
      Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    return got === want;
  }, ms);
  return got;
}

export async function waitFor(fn, ms = 5000, every = 50) {
  const end = Date.now() + ms;
  let v;
  while (!(v = await fn()) && Date.now() < end) await sleep(every);
  return v;
}

// Resolves with {code, signal, at} (at: Date.now() then) when the process exits (at once if it
// already has).
export function exitOf(proc) {
  if (proc.exitCode !== null || proc.signalCode !== null)
    return Promise.resolve({ code: proc.exitCode, signal: proc.signalCode, at: Date.now() });
  return new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal, at: Date.now() })));
}

// `p`'s value, or null when `ms` pass first (the timer does not outlive the race).
export function within(p, ms) {
  let timer;
  const timeout = new Promise((r) => { timer = setTimeout(() => r(null), ms); });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

// Test certificates made by the openssl command line: a CA (`makeCa`), and a server certificate
// for 127.0.0.1 signed by it with serial `serial` (`makeServerCert`: {key, crt} paths), and any
// other leaf (`makeLeafCert`).
export function makeCa(dir, name) {
  const key = path.join(dir, `${name}.key`), cert = path.join(dir, `${name}.pem`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj',
    `/CN=${name}`, '-keyout', key, '-out', cert], { stdio: 'pipe' });
  return { key, cert };
}
export function makeServerCert(dir, ca, serial, stem) {
  return makeLeafCert(dir, ca, serial, stem, { cn: '127.0.0.1', ext: 'subjectAltName=IP:127.0.0.1', keyType: 'rsa' });
}
// A certificate signed by `ca` with subject CN `cn` and the openssl x509 extension lines `ext`
// ({key, crt} paths); EC P-256 keys unless keyType 'rsa'.
export function makeLeafCert(dir, ca, serial, stem, { cn, ext = '', keyType = 'ec' }) {
  const key = path.join(dir, `${stem}.key`), csr = path.join(dir, `${stem}.csr`);
  const crt = path.join(dir, `${stem}.crt`), extFile = path.join(dir, `${stem}.ext`);
  writeFileSync(extFile, `${ext}\n`);
  const keyArgs = keyType === 'rsa' ? ['-newkey', 'rsa:2048'] : ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256'];
  execFileSync('openssl', ['req', ...keyArgs, '-nodes', '-subj', `/CN=${cn}`, '-keyout', key, '-out', csr], { stdio: 'pipe' });
  execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key,
    '-set_serial', String(serial), '-days', '2', '-extfile', extFile, '-out', crt], { stdio: 'pipe' });
  return { key, crt };
}
