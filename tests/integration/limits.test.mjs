// Resource limits (issue 28 §2): a gateway at its open-files limit keeps new connections in the
// backlog instead of spinning on accept, says so (log line, kvgate_accept_failures_total), and
// serves them once descriptors free up. The limit is lowered on the running gateway with
// prlimit (util-linux), then client connections are held open until it is reached.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, service, sleep, startGateway, startSim, waitFor } from './lib.mjs';

const cpuTicks = (pid) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(f[11]) + Number(f[12]);  // utime + stime, in clock ticks
};
const fdCount = (pid) => fs.readdirSync(`/proc/${pid}/fd`).length;

test('at the open-files limit the gateway pauses accepting, then recovers', async (t) => {
  const sim = await startSim(['--workers', '1', '--port', '0']);
  t.after(() => sim.stop());
  const gw = await gateway(t);
  const port = await service(gw, { workers: sim.workers });
  const ok = await fetch(`http://127.0.0.1:${port}/v1/models`);
  assert.equal(ok.status, 200);
  await ok.text();
  const pid = gw.proc.pid;
  const limit = fdCount(pid) + 20;
  execFileSync('prlimit', ['--pid', String(pid), `--nofile=${limit}:${limit}`]);
  // Hold more connections open than the limit leaves room for.
  const socks = [];
  t.after(() => socks.forEach((s) => s.destroy()));
  for (let i = 0; i < 60; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    socks.push(s);
  }
  const failures = async () => (await scrapeMetrics(gw.api))
    .find((s) => s.name === 'kvgate_accept_failures_total' && s.labels.reason === 'descriptors')?.value ?? 0;
  assert.ok(await waitFor(async () => (await failures()) > 0, 10000), 'accept failures counted');
  // Paused, not spinning: over 2 s the gateway uses well under a core (a spinning accept loop
  // uses one per worker). One-sided and wide: under half a core.
  const hz = 100;  // (Linux's USER_HZ)
  const before = cpuTicks(pid);
  await sleep(2000);
  const used = (cpuTicks(pid) - before) / hz;
  assert.ok(used < 1.0, `the gateway used ${used} s of CPU in 2 s at its descriptor limit`);
  assert.match(gw.proc.stderrText, /accept failed \(Too many open files\): new connections wait in the backlog/);
  // A new connection, with its request, waits in the backlog; descriptors free up; it is served.
  let answer = '';
  const waiting = net.connect(port, '127.0.0.1', () =>
    waiting.write('GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
  waiting.on('data', (d) => { answer += d.toString(); });
  waiting.on('error', () => {});
  t.after(() => waiting.destroy());
  await sleep(300);
  assert.equal(answer, '', 'not served while the gateway has no descriptor for it');
  socks.forEach((s) => s.destroy());
  assert.ok(await waitFor(() => answer.startsWith('HTTP/1.1 200'), 10000),
    `the waiting connection is served once descriptors are free; got ${JSON.stringify(answer.slice(0, 80))}`);
});

// No descriptor left for the upstream socket: the gateway's shortage, not the engine's. The client
// gets 503 gateway_out_of_resources (after 1 s of retries), the endpoint is not charged a connect
// failure, and once descriptors return the next request is served.
test('no descriptor for the upstream socket: 503 of the gateway, the engine not blamed', async (t) => {
  const sim = await startSim(['--workers', '1', '--port', '0']);
  t.after(() => sim.stop());
  const gw = await gateway(t);
  const port = await service(gw, { workers: sim.workers });
  const pid = gw.proc.pid;
  // Exactly one descriptor free: the client connection takes it, the upstream socket finds none.
  // (The limit bounds descriptor numbers: the second free number below it is the limit.)
  const open = new Set(fs.readdirSync(`/proc/${pid}/fd`).map(Number));
  let limit = 0;
  for (let n = 0, free = 0; ; n++) if (!open.has(n) && ++free === 2) { limit = n; break; }
  // (The soft limit only: lowering the hard one could not be undone without CAP_SYS_RESOURCE.)
  const soft = fs.readFileSync(`/proc/${pid}/limits`, 'utf8').match(/Max open files\s+(\d+)/)[1];
  execFileSync('prlimit', ['--pid', String(pid), `--nofile=${limit}:`]);
  const body = JSON.stringify({ model: 'sim-model', prompt: 'hi', max_tokens: 2 });
  const r = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', connection: 'close' }, body });
  const text = await r.text();
  assert.equal(r.status, 503, text);
  assert.match(text, /gateway_out_of_resources/);
  assert.equal(r.headers.get('retry-after'), '1');
  execFileSync('prlimit', ['--pid', String(pid), `--nofile=${soft}:`]);
  const m = await scrapeMetrics(gw.api);
  const starved = m.find((s) => s.name === 'kvgate_upstream_socket_failures_total' && s.labels.reason === 'descriptors');
  assert.ok(starved && starved.value >= 1, 'counted as the gateway\'s shortage');
  const blamed = m.filter((s) => s.name === 'kvgate_endpoint_connect_failures_total').reduce((a, s) => a + s.value, 0);
  assert.equal(blamed, 0, 'the engine is not charged a connect failure');
  const ok = await fetch(`http://127.0.0.1:${port}/v1/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body });
  assert.equal(ok.status, 200, await ok.text());
});

// A full state disk (issue 28 §2): the state dir on a small tmpfs (root only: mount(8)), filled
// to the last byte. A rule change is refused with 507 and a message naming the disk, the rule
// set, the data plane and the saved file stay as they were, and once space returns the same change
// is taken and survives a restart.
test('a full state disk refuses changes with 507, changes nothing, and recovers', async (t) => {
  if (process.getuid() !== 0) return t.skip('needs root to mount a tmpfs');
  const dir = fs.mkdtempSync('/tmp/kvgate-fulldisk-');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { stdio: 'ignore' });
  } catch {
    fs.rmdirSync(dir);
    return t.skip('mount -t tmpfs is not permitted here');
  }
  t.after(() => { execFileSync('umount', ['-l', dir]); fs.rmdirSync(dir); });
  const sim = await startSim(['--workers', '1', '--port', '0']);
  t.after(() => sim.stop());
  let gw = await startGateway({ stateDir: dir });
  t.after(() => gw.stop());
  const served = await service(gw, { workers: sim.workers });
  // Fill the disk: 4 KiB writes until the kernel says no.
  const filler = `${dir}/filler`;
  const fd = fs.openSync(filler, 'w');
  const page = Buffer.alloc(4096, 0x61);
  let full = false;
  for (let i = 0; i < 100000 && !full; i++) {
    try { fs.writeSync(fd, page); } catch (e) { assert.equal(e.code, 'ENOSPC'); full = true; }
  }
  fs.closeSync(fd);
  assert.ok(full, 'the tmpfs filled up');
  const saved = fs.readFileSync(`${dir}/rules.json`, 'utf8');
  const newPort = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port: newPort, workers: sim.workers }));
  assert.equal(r.status, 507, r.text);
  assert.match(r.text, /No space left on device/);
  const list = await api(gw.api, 'GET', `${LB_BASE}/all`);
  const ports = list.json.lbAttr.map((a) => a.serviceArguments.port);
  assert.deepEqual(ports, [served], 'the refused rule is not in the rule set');
  assert.equal(fs.readFileSync(`${dir}/rules.json`, 'utf8'), saved, 'the saved file is untouched');
  assert.ok(!fs.existsSync(`${dir}/rules.json.tmp`), 'no half-written file holds the space');
  await assert.rejects(fetch(`http://127.0.0.1:${newPort}/v1/models`), 'the refused VIP does not listen');
  assert.ok(!gw.proc.stderrText.includes(`listening on 127.0.0.1:${newPort}`),
    'the data plane never saw the refused rule (the file is written before it applies)');
  const ok = await fetch(`http://127.0.0.1:${served}/v1/models`);
  assert.equal(ok.status, 200, 'the data plane serves on');
  await ok.text();
  // A governance write on the full disk: SQLite says SQLITE_FULL, the API 507, and no key exists.
  const KEYS = '/netlox/v1/config/ai/apikey';
  const key = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', name: 'full' });
  assert.equal(key.status, 507, key.text);
  assert.match(key.text, /database or disk is full/);
  assert.deepEqual((await api(gw.api, 'GET', KEYS)).json, [], 'the refused key is not in the key set');
  const logged = /rules not saved, change refused: write .*No space left on device/;
  assert.ok(await waitFor(() => logged.test(gw.proc.stderrText), 5000), gw.proc.stderrText);
  // Space returns: the same change is taken, and kept across a restart.
  fs.unlinkSync(filler);
  const again = await api(gw.api, 'POST', LB_BASE, rule({ port: newPort, workers: sim.workers }));
  assert.equal(again.status, 200, again.text);
  const key2 = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', name: 'full' });
  assert.equal(key2.status, 201, key2.text);
  await gw.stop();
  gw = await startGateway({ stateDir: dir });
  const after = await api(gw.api, 'GET', `${LB_BASE}/all`);
  assert.deepEqual(after.json.lbAttr.map((a) => a.serviceArguments.port).sort(), [served, newPort].sort());
  assert.deepEqual((await api(gw.api, 'GET', KEYS)).json.map((k) => k.name), ['full'], 'the key taken once space returned is kept');
});
