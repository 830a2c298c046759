// Resource limits (issue 28 §2): a gateway at its open-files limit keeps new connections in the
// backlog instead of spinning on accept, says so (log line, kvgate_accept_failures_total), and
// serves them once descriptors free up. The limit is lowered on the running gateway with
// prlimit (util-linux), then client connections are held open until it is reached.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';
import { gateway, scrapeMetrics, service, sleep, startSim, waitFor } from './lib.mjs';

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
  socks.splice(0, 40).forEach((s) => s.destroy());
  assert.ok(await waitFor(() => answer.startsWith('HTTP/1.1 200'), 10000),
    `the waiting connection is served once descriptors are free; got ${JSON.stringify(answer.slice(0, 80))}`);
});
