// The live dashboard (issue 32 §1): /ui on the management port, a page with everything in it,
// and /kvgate/v1/ui/stream, a snapshot a second (rules, the /metrics text, routing decisions)
// behind the API token, bounded in viewers and dropping a viewer that reads nothing. A gateway
// over two simulated engines, probed: traffic shows in the decisions, a killed engine goes down.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import readline from 'node:readline';
import { test } from 'node:test';

import { LB_BASE, api, freePort, parseMetrics, rule, startGateway, startSim, tempDir, waitFor } from './lib.mjs';

const TOKEN = 'ui-token-0123456789abcdef';

// Reads the SSE snapshots of a stream response into `out` until aborted.
async function collect(res, out) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, at);
        buf = buf.slice(at + 2);
        assert.match(ev, /^event: snapshot\ndata: /);
        out.push(JSON.parse(ev.slice(ev.indexOf('data: ') + 6)));
      }
    }
  } catch { /* aborted */ }
}

// Two simulated engines and a gateway with the API token and fast probes; all stop with `t`.
async function dashboardFleet(t) {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const tokens = path.join(tmp.dir, 'tokens');
  fs.writeFileSync(tokens, `${TOKEN}\n`, { mode: 0o600 });
  const simA = await startSim(['--port', '0']);
  t.after(() => simA.stop());
  const simB = await startSim(['--port', '0']);
  t.after(() => simB.stop());
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'),
    extra: ['--api-token-file', tokens, '--probe-interval-ms', '200', '--probe-timeout-ms', '1000'] });
  t.after(() => gw.stop());
  return { simA, simB, gw };
}

test('the dashboard: its page, its stream, decisions, an engine going down, the bounds', async (t) => {
  const { simA, simB, gw } = await dashboardFleet(t);
  const auth = { authorization: `Bearer ${TOKEN}` };
  const port = await freePort();
  const workers = [simA.workers[0], simB.workers[0]];
  const r = await fetch(`${gw.api}${LB_BASE}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify(rule({ port, workers, model: 'sim-model', extraArgs: { name: 'chat', probetype: 'http', probereq: '/health', probeRetries: 1 } })) });
  assert.equal(r.status, 200, await r.text());

  // The page: served without the token (it holds no data), with nothing from elsewhere.
  const page = await fetch(`${gw.api}/ui`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(page.headers.get('content-security-policy'), /default-src 'none'/);
  const html = await page.text();
  assert.match(html, /\/kvgate\/v1\/ui\/stream/);
  assert.doesNotMatch(html, /(src|href)=["']?(https?:)?\/\//i, 'no script, style or link from elsewhere');
  assert.doesNotMatch(html, /https?:\/\/(?!www\.w3\.org)/, 'no URL to any host');
  assert.equal((await fetch(`${gw.api}/ui`, { method: 'POST' })).status, 405);

  // The stream asks for the token.
  assert.equal((await fetch(`${gw.api}/kvgate/v1/ui/stream`)).status, 401);
  assert.equal((await fetch(`${gw.api}/kvgate/v1/ui/stream?interval_ms=5`, { headers: auth })).status, 400);
  const ac = new AbortController();
  t.after(() => ac.abort());
  const res = await fetch(`${gw.api}/kvgate/v1/ui/stream?interval_ms=500`, { headers: auth, signal: ac.signal });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/event-stream/);
  const snaps = [];
  collect(res, snaps);
  assert.ok(await waitFor(() => snaps.length >= 2, 5000), 'snapshots arrive');
  const s0 = snaps.at(-1);
  assert.ok(Math.abs(s0.t - Date.now()) < 60000);
  assert.deepEqual(s0.rules.map((x) => x.serviceArguments.name), ['chat']);
  const up = (snap, w) => parseMetrics(snap.metrics).find((m) => m.name === 'kvgate_endpoint_up' &&
    m.labels.endpoint === `${w.host}:${w.port}`)?.value;
  assert.ok(await waitFor(() => up(snaps.at(-1), workers[0]) === 1 && up(snaps.at(-1), workers[1]) === 1, 5000),
    'both engines up in the snapshot\'s metrics');

  // Traffic: each request's decision comes once, with its rule, model, endpoint and status.
  const ids = [];
  for (let i = 0; i < 6; i++) {
    const q = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': `ui-req-${i}` },
      body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: `hi ${i}` }], max_tokens: 2 }) });
    assert.equal(q.status, 200, await q.text());
    ids.push(`ui-req-${i}`);
  }
  const decisions = () => snaps.flatMap((s) => s.decisions).filter((d) => d.id.startsWith('ui-req-'));
  assert.ok(await waitFor(() => decisions().length >= 6, 5000), JSON.stringify(decisions()));
  assert.deepEqual(decisions().map((d) => d.id).sort(), ids, 'each decision once');
  const labels = workers.map((w) => `${w.host}:${w.port}`);
  for (const d of decisions()) {
    assert.equal(d.rule, 'chat');
    assert.equal(d.model, 'sim-model');
    assert.equal(d.status, 200);
    assert.ok(labels.includes(d.endpoint), d.endpoint);
    assert.equal(d.matched, -1, 'no Tier 1.5 on this rule: no matched blocks');
  }
  assert.equal(new Set(decisions().map((d) => d.endpoint)).size, 2, 'round-robin over both');
  // A rule without a name: the snapshot names it as the metrics do (its key), so the page
  // finds its series.
  const port2 = await freePort();
  const r2 = await fetch(`${gw.api}${LB_BASE}`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify(rule({ port: port2, workers: [workers[0]] })) });
  assert.equal(r2.status, 200, await r2.text());
  const q2 = await fetch(`http://127.0.0.1:${port2}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }) });
  assert.equal(q2.status, 200);
  assert.ok(await waitFor(() => {
    const s = snaps.at(-1);
    const unnamed = s.rules.find((x) => !x.serviceArguments.name);
    return unnamed && parseMetrics(s.metrics).some((m) => m.name === 'kvgate_requests_total' && m.labels.rule === unnamed.label);
  }, 5000), 'the unnamed rule\'s label is its metrics label');
  const named = snaps.at(-1).rules.find((x) => x.serviceArguments.name === 'chat');
  assert.equal(named.label, 'chat');

  // An engine killed: the snapshots show it down.
  await simB.stop();
  assert.ok(await waitFor(() => up(snaps.at(-1), workers[1]) === 0, 8000), 'the killed engine is down');
  assert.equal(up(snaps.at(-1), workers[0]), 1);

  // Bounds: 8 viewers at once (this one and 7 more), the ninth refused; a viewer that reads
  // nothing is dropped (its socket closed) and counted.
  const more = [];
  for (let i = 0; i < 7; i++) {
    const c = new AbortController();
    more.push(c);
    const x = await fetch(`${gw.api}/kvgate/v1/ui/stream`, { headers: auth, signal: c.signal });
    assert.equal(x.status, 200);
  }
  assert.equal((await fetch(`${gw.api}/kvgate/v1/ui/stream`, { headers: auth })).status, 503);
  for (const c of more) c.abort();
  const metric = async (name, labels = {}) => parseMetrics(await (await fetch(`${gw.api}/metrics`, { headers: auth })).text())
    .filter((m) => m.name === name && Object.entries(labels).every(([k, v]) => m.labels[k] === v))
    .reduce((a, m) => a + m.value, 0);
  assert.ok(await waitFor(async () => (await metric('kvgate_ui_viewers')) === 1, 10000), 'the aborted viewers are gone');
  const [h, p] = gw.api.replace('http://', '').split(':');
  const stalled = net.connect({ host: h, port: Number(p) });
  stalled.on('error', () => {});
  await new Promise((resolve) => stalled.once('connect', resolve));
  stalled.pause();  // reads nothing from here on
  stalled.write(`GET /kvgate/v1/ui/stream?interval_ms=500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`);
  const closed = new Promise((resolve) => stalled.once('close', resolve));
  assert.ok(await waitFor(async () => (await metric('kvgate_ui_snapshots_total', { outcome: 'viewer_dropped' })) === 1, 60000),
    'the stalled viewer is dropped');
  stalled.destroy();
  await closed;
  assert.ok(await waitFor(async () => (await metric('kvgate_ui_viewers')) === 1, 5000));
  // The data plane went on meanwhile.
  const q = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'after' }], max_tokens: 2 }) });
  assert.equal(q.status, 200);
  // Open streams per endpoint: one long stream (1,000 tokens: seconds) counts on its endpoint
  // while it is relayed, and no more once the client leaves.
  const sc = new AbortController();
  const long = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST', signal: sc.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'long' }], max_tokens: 1000, stream: true }) });
  assert.equal(long.status, 200);
  const rd = long.body.getReader();
  await rd.read();  // the stream is flowing
  assert.ok(await waitFor(async () => (await metric('kvgate_endpoint_active_streams')) === 1, 5000));
  const series = parseMetrics(await (await fetch(`${gw.api}/metrics`, { headers: auth })).text())
    .filter((m) => m.name === 'kvgate_endpoint_active_streams');
  const perEndpoint = workers.map((w) => series.find((m) => m.labels.endpoint === `${w.host}:${w.port}`)?.value);
  assert.deepEqual(perEndpoint.sort(), [0, 1], 'a series for each endpoint: 1 on the stream\'s, 0 on the other');
  const cuts = await metric('kvgate_relay_cuts_total', { reason: 'client' });
  sc.abort();  // the client leaves mid-stream
  assert.ok(await waitFor(async () => (await metric('kvgate_endpoint_active_streams')) === 0 &&
    (await metric('kvgate_relay_cuts_total', { reason: 'client' })) === cuts + 1, 5000), 'released when the client left');
  ac.abort();
  void api;
});

// The page itself in headless Chromium (Debian's chromium, driven over the DevTools protocol by
// cdp_driver.mjs): it loads with no console error, shows the fleet's endpoints, follows traffic
// and an engine's death. KVGATE_UI_SHOT=FILE keeps a screenshot (docs/img/dashboard.png).
test('the dashboard in headless Chromium', async (t) => {
  const { simA, simB, gw } = await dashboardFleet(t);
  const auth = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
  const port = await freePort();
  const workers = [simA.workers[0], simB.workers[0]];
  const r = await fetch(`${gw.api}${LB_BASE}`, { method: 'POST', headers: auth,
    body: JSON.stringify(rule({ port, workers, model: 'sim-model',
      extraArgs: { name: 'chat', probetype: 'http', probereq: '/health', probeRetries: 1 } })) });
  assert.equal(r.status, 200, await r.text());
  let stopLoad = false;
  const load = (async () => {
    while (!stopLoad) {
      await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, stream: true }) })
        .then((x) => x.text()).catch(() => {});
      await new Promise((res) => setTimeout(res, 30));
    }
  })();
  t.after(async () => { stopLoad = true; await load; });

  const driver = spawn(process.execPath, ['--experimental-websocket', path.join(import.meta.dirname, 'cdp_driver.mjs')],
    { stdio: ['pipe', 'pipe', 'inherit'] });
  const driverExit = new Promise((resolve) => driver.once('exit', resolve));
  t.after(async () => {  // (its stdin closed, the driver ends its browser and profile; else killed)
    driver.stdin.end();
    const timer = setTimeout(() => driver.kill('SIGKILL'), 10000);
    await driverExit;
    clearTimeout(timer);
  });
  const lines = readline.createInterface({ input: driver.stdout });
  const answers = [];
  let wake = null;
  lines.on('line', (l) => { answers.push(JSON.parse(l)); if (wake) wake(); });
  let driverGone = false;
  driverExit.then(() => { driverGone = true; if (wake) wake(); });
  const cmd = async (c) => {
    driver.stdin.write(`${JSON.stringify(c)}\n`);
    const until = Date.now() + 30000;
    while (!answers.length) {
      if (driverGone) throw new Error(`${c.cmd}: the browser driver ended (is Debian's chromium installed? scripts/setup.sh)`);
      if (Date.now() > until) throw new Error(`${c.cmd}: no answer from the browser driver in 30 s`);
      await new Promise((res) => { wake = res; setTimeout(res, 1000); });
    }
    const a = answers.shift();
    if (a.error) throw new Error(`${c.cmd}: ${a.error}`);
    return a;
  };
  const evaluate = async (expr) => (await cmd({ cmd: 'eval', expr })).value;
  await cmd({ cmd: 'open', url: `${gw.api}/ui#token=${TOKEN}` });
  assert.ok(await waitFor(() => evaluate('Number(document.body?.dataset.snapshots || 0) >= 3'), 20000, 200),
    'the page takes snapshots');
  const rows = () => evaluate(`[...document.querySelectorAll('#endpoints tbody tr')].map((r) => [r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent])`);
  const labels = workers.map((w) => `${w.host}:${w.port}`);
  assert.ok(await waitFor(async () => {
    const x = await rows();
    return x.length === 2 && labels.every((l) => x.some(([rule, ep, health]) => rule === 'chat' && ep === l && health === 'up'));
  }, 10000, 200), JSON.stringify(await rows()));
  // Traffic: a rate in the header, decisions in the feed naming the rule and an endpoint.
  assert.ok(await waitFor(async () => Number(await evaluate(`document.getElementById('k-rps').textContent`)) > 0, 15000, 200),
    'requests/s follows the traffic');
  const feed = () => evaluate(`[...document.querySelectorAll('#feed tbody tr')].map((r) => [r.cells[2].textContent, r.cells[3].textContent, r.cells[4].textContent])`);
  assert.ok(await waitFor(async () => (await feed()).some(([rule, model, ep]) => rule === 'chat' && model === 'sim-model' && labels.includes(ep)), 10000, 200),
    JSON.stringify(await feed()));
  assert.ok(await waitFor(async () => (await evaluate(`document.querySelector('#rules tbody tr').cells[4].textContent`)) !== '-', 15000, 200),
    'TTFT p50 shown once streams flowed');
  if (process.env.KVGATE_UI_SHOT) await cmd({ cmd: 'shot', file: process.env.KVGATE_UI_SHOT });
  // An engine killed: its row says down, the other's up.
  await simB.stop();
  assert.ok(await waitFor(async () => {
    const x = await rows();
    return x.some(([, ep, health]) => ep === labels[1] && health === 'down') &&
      x.some(([, ep, health]) => ep === labels[0] && health === 'up');
  }, 15000, 200), JSON.stringify(await rows()));
  assert.equal(await evaluate(`document.getElementById('k-up').textContent`), '1/2');
  // P/D pairs: a P/D rule over a prefill and a decode engine; its requests' pair is listed (at
  // least one of the three: a worker leaves a record out rather than wait for the feed's lock).
  const pdSim = await startSim(['--port', '0', '--workers', '2', '--role', 'prefill,decode', '--timing', 'fixed',
    '--prefill-base-ms', '1', '--itl-ms', '1']);
  t.after(() => pdSim.stop());
  const [pf, dc] = pdSim.workers;
  const pdPort = await freePort();
  const pr = await fetch(`${gw.api}${LB_BASE}`, { method: 'POST', headers: auth, body: JSON.stringify({
    serviceArguments: { externalIP: '127.0.0.1', port: pdPort, protocol: 'tcp', sel: 0, mode: 4, pd_disagg_mode: true,
      kvEngineType: 'vllm', name: 'pd' },
    endpoints: [
      { endpointIP: pf.host, targetPort: pf.port, weight: 1, ep_role: 1, nixl_port: 5600 },
      { endpointIP: dc.host, targetPort: dc.port, weight: 1, ep_role: 2, nixl_port: 5601 },
    ] }) });
  assert.equal(pr.status, 200, await pr.text());
  for (let i = 0; i < 3; i++) {
    const x = await fetch(`http://127.0.0.1:${pdPort}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'pair me', max_tokens: 2 }) });
    assert.equal(x.status, 200, await x.text());
  }
  const pairRows = () => evaluate(`[...document.querySelectorAll('#pairs tbody tr')].map((r) => [...r.cells].map((c) => c.textContent))`);
  assert.ok(await waitFor(async () => (await pairRows()).some(([rule, p, d, n]) =>
    rule === 'pd' && p === `${pf.host}:${pf.port}` && d === `${dc.host}:${dc.port}` && Number(n) >= 1), 15000, 200),
  JSON.stringify(await pairRows()));
  // The endpoints table has the open-streams column (a number for each endpoint).
  const openCol = await evaluate(`[...document.querySelectorAll('#endpoints tbody tr')].map((r) => r.cells[5].textContent)`);
  assert.ok(openCol.length >= 2 && openCol.every((v) => /^\d+$/.test(v)), JSON.stringify(openCol));
  const { errors } = await cmd({ cmd: 'errors' });
  assert.deepEqual(errors, [], 'no console error or exception');
  await cmd({ cmd: 'close' });
});
