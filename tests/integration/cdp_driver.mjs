// A headless Chromium driven over the DevTools protocol, for page tests (ui.test.mjs). Run as
// `node --experimental-websocket cdp_driver.mjs` (Node 20's WebSocket is behind that flag); it
// takes one JSON command a line on stdin and answers one JSON line on stdout:
//   {"cmd":"open","url":U,"width":W,"height":H}  -> {"ok":true}
//   {"cmd":"eval","expr":E}                       -> {"value":V}  (E's value, awaited, by value)
//   {"cmd":"shot","file":F}                       -> {"ok":true}  (a PNG of the viewport)
//   {"cmd":"errors"}                              -> {"errors":[...]} (console errors, exceptions)
//   {"cmd":"close"}                               -> {"ok":true}, and the browser ends
// A failure answers {"error":message}. The browser gets a profile of its own in a temp dir.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

const profile = mkdtempSync(path.join(os.tmpdir(), 'kvgate-chromium-'));
const browser = spawn('chromium', ['--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-extensions', '--disable-background-networking', '--remote-debugging-port=0',
  `--user-data-dir=${profile}`, 'about:blank'], { stdio: ['ignore', 'ignore', 'pipe'] });
// (the profile goes once the browser has ended: it writes there until then)
const cleanup = () => {
  try { browser.kill('SIGKILL'); } catch { /* gone */ }
  try { rmSync(profile, { recursive: true, force: true }); } catch { /* still in use: the OS temp */ }
};
process.on('exit', cleanup);
const ended = new Promise((resolve) => browser.once('exit', resolve));

const wsUrl = await new Promise((resolve, reject) => {
  let err = '';
  const timer = setTimeout(() => reject(new Error(`chromium did not start: ${err.slice(-2000)}`)), 30000);
  browser.stderr.on('data', (d) => {
    err += d;
    const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
    if (m) { clearTimeout(timer); resolve(m[1]); }
  });
  browser.on('exit', (code) => reject(new Error(`chromium exited with ${code}: ${err.slice(-2000)}`)));
  browser.on('error', (e) => reject(new Error(`chromium could not start: ${e.message}`)));
});

const ws = new WebSocket(wsUrl);
await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error('DevTools socket')); });
let nextId = 1;
const pending = new Map();
const errors = [];
ws.onmessage = (ev) => {
  const m = JSON.parse(ev.data);
  if (m.id && pending.has(m.id)) {
    const { resolve, reject } = pending.get(m.id);
    pending.delete(m.id);
    if (m.error) reject(new Error(m.error.message)); else resolve(m.result);
    return;
  }
  if (m.method === 'Runtime.exceptionThrown')
    errors.push(`exception: ${m.params.exceptionDetails.exception?.description ?? m.params.exceptionDetails.text}`);
  if (m.method === 'Runtime.consoleAPICalled' && (m.params.type === 'error' || m.params.type === 'assert'))
    errors.push(`console.${m.params.type}: ${m.params.args.map((a) => a.value ?? a.description).join(' ')}`);
  if (m.method === 'Log.entryAdded' && m.params.entry.level === 'error')
    errors.push(`log: ${m.params.entry.text} ${m.params.entry.url ?? ''}`);
};
const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
  const id = nextId++;
  pending.set(id, { resolve, reject });
  ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
});

let session = null;
async function run(c) {
  switch (c.cmd) {
    case 'open': {
      const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
      ({ sessionId: session } = await send('Target.attachToTarget', { targetId, flatten: true }));
      await send('Runtime.enable', {}, session);
      await send('Log.enable', {}, session);
      await send('Page.enable', {}, session);
      await send('Emulation.setDeviceMetricsOverride',
        { width: c.width ?? 1400, height: c.height ?? 1000, deviceScaleFactor: 1, mobile: false }, session);
      await send('Page.navigate', { url: c.url }, session);
      return { ok: true };
    }
    case 'eval': {
      const r = await send('Runtime.evaluate', { expression: c.expr, awaitPromise: true, returnByValue: true }, session);
      if (r.exceptionDetails) return { error: r.exceptionDetails.exception?.description ?? r.exceptionDetails.text };
      return { value: r.result.value };
    }
    case 'shot': {
      const r = await send('Page.captureScreenshot', { format: 'png' }, session);
      writeFileSync(c.file, Buffer.from(r.data, 'base64'));
      return { ok: true };
    }
    case 'errors':
      return { errors };
    case 'close':
      browser.kill('SIGKILL');
      await ended;
      // (the browser's helper processes may write there a moment longer: a fresh run failed on
      // ENOTEMPTY; retried, and what is still left goes with the OS temp, not the test)
      try {
        rmSync(profile, { recursive: true, force: true, maxRetries: 20, retryDelay: 100 });
      } catch { /* still in use */ }
      setTimeout(() => process.exit(0), 10);
      return { ok: true };
    default:
      return { error: `unknown command ${c.cmd}` };
  }
}

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  let out;
  try { out = await run(JSON.parse(line)); } catch (e) { out = { error: String(e.message ?? e) }; }
  process.stdout.write(`${JSON.stringify(out)}\n`);
}
process.exit(0);
