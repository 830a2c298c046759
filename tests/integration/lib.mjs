// Shared helpers for the integration tests: start real kvgate processes, talk to them, stop them.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

export const BIN = process.env.KVGATE_BIN || path.resolve('build/kvgate');
const children = new Set();

function killAll() {
  for (const c of children) {
    try { c.kill('SIGKILL'); } catch { /* already gone */ }
  }
}
process.on('exit', killAll);

// Spawns `kvgate <args>` and resolves with {proc, ready} once it prints its ready JSON line.
export function startKvgate(args, { timeoutMs = 15000, env = {} } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    children.add(proc);
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

export async function startGateway({ stateDir, extra = [] } = {}) {
  const { proc, ready } = await startKvgate(
    ['serve', '--api-listen', '127.0.0.1:0', '--state-dir', stateDir, '--workers', '2', ...extra]);
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
  const res = await fetch(`${worker.url}/metrics`);
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
