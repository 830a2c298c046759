// /metrics on the management port: Prometheus text that promtool accepts, with the counts of what
// was sent (requests by endpoint and status, answers before routing, histograms, gauges).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { api, freePort, rawRequest, rule, sleep, startGateway, startSim, tempDir } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';

describe('metrics', () => {
  let sim; let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    sim = await startSim(['--workers', '2', '--port', '0', '--timing', 'fixed', '--itl-ms', '0']);
    gw = await startGateway({ stateDir: tmp.dir, extra: ['--access-log'] });
  });
  after(async () => { await gw.stop(); await sim.stop(); tmp.remove(); });

  test('exposition is promtool-clean and counts what happened', async () => {
    const port = await freePort();
    const r = await api(gw.api, 'POST', BASE, rule({ port, workers: sim.workers, model: 'sim-model', extraArgs: { name: 'm1' } }));
    assert.equal(r.status, 200);
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"sim-model","prompt":"a","max_tokens":1}' });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
    }
    const stream = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"sim-model","prompt":"a","max_tokens":2,"stream":true}' });
    await stream.text();
    const unknown = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"nope","prompt":"a"}' });
    assert.equal(unknown.status, 503);
    assert.match(await rawRequest(port, 'GET / HTTP/1.1\r\nHost: a\r\nA: b\r\n c\r\n\r\n'), /^HTTP\/1.1 400/);

    const res = await fetch(`${gw.api}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/plain; version=0.0.4/);
    const text = await res.text();
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
    const total = (re) => [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
    // 6 + 1 stream answered 200 by the two endpoints of rule m1 (round-robin: 4 and 3).
    assert.equal(total(/^kvgate_requests_total\{rule="m1",model="sim-model",endpoint="[^"]+",status="200"\} (\d+)$/gm), 7);
    const perEp = [...text.matchAll(/^kvgate_requests_total\{rule="m1",model="sim-model",endpoint="[^"]+",status="200"\} (\d+)$/gm)].map((m) => Number(m[1])).sort();
    assert.deepEqual(perEp, [3, 4]);
    assert.match(text, new RegExp(`^kvgate_requests_unrouted_total\\{listener="127.0.0.1:${port}",status="503"\\} 1$`, 'm'));
    assert.match(text, new RegExp(`^kvgate_requests_unrouted_total\\{listener="127.0.0.1:${port}",status="400"\\} 1$`, 'm'));
    assert.match(text, /^kvgate_upstream_response_seconds_count\{rule="m1"\} 7$/m);
    assert.match(text, /^kvgate_stream_ttft_seconds_count\{rule="m1"\} 1$/m);
    assert.match(text, /^kvgate_selector_decisions_total\{rule="m1",selector="rr",key="rr"\} 7$/m);
    assert.match(text, /^kvgate_active_streams 0$/m);
    assert.match(text, /^kvgate_rules 1$/m);
    // Every family is declared once with HELP and TYPE.
    for (const fam of ['kvgate_requests_total', 'kvgate_selector_spills_total', 'kvgate_endpoint_inflight_requests']) {
      assert.equal(text.split('\n').filter((l) => l.startsWith(`# TYPE ${fam} `)).length, 1, fam);
    }
    assert.equal((await fetch(`${gw.api}/metrics`, { method: 'POST' })).status, 405);
    // One structured access-log line per proxied request (written off the event loop: poll).
    const accessLines = () => gw.proc.stderrText.split('\n').filter((l) => l.includes(' access ') && l.includes(`listener=127.0.0.1:${port}`));
    for (let i = 0; i < 100 && accessLines().length < 9; ++i) await sleep(50);
    const lines = accessLines();
    assert.equal(lines.length, 9);  // 7 answered 200, the 503 for the unknown model, the 400
    assert.ok(lines.some((l) => /status=503/.test(l) && /model=nope/.test(l)));
    assert.match(lines[0], /id=[0-9a-f]{32} listener=127\.0\.0\.1:\d+ rule=m1 model=sim-model endpoint=127\.0\.0\.1:\d+ selector=rr tier=rr key=rr status=200 bytes=\d+ ttfb_ms=[\d.]+ dur_ms=[\d.]+/);
    // A body the gateway refuses while reading it (a malformed chunk) is answered and logged too,
    // under the client's X-Request-Id.
    assert.match(await rawRequest(port, 'POST /v1/completions HTTP/1.1\r\nHost: a\r\nX-Request-Id: bad-chunk-1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'), /^HTTP\/1.1 400/);
    for (let i = 0; i < 100 && accessLines().length < 10; ++i) await sleep(50);
    assert.ok(accessLines().some((l) => /id=bad-chunk-1 /.test(l) && /status=400/.test(l)), accessLines().join('\n'));
  });
});

// Issue 34: each data-plane worker's event-loop lag is a histogram fed every 100 ms, so a stall is
// visible in production. Two workers (startGateway's --workers 2); after a second each has
// ticked (one-sided: at least 3 ticks, on a busy machine too).
test('the event-loop lag histogram ticks on every worker', async () => {
  const tmp = tempDir();
  const gw = await startGateway({ stateDir: tmp.dir });
  try {
    await sleep(1000);
    const text = await (await fetch(`${gw.api}/metrics`)).text();
    for (const w of ['0', '1']) {
      const count = Number(text.match(new RegExp(`^kvgate_worker_loop_lag_seconds_count\\{worker="${w}"\\} (\\S+)`, 'm'))?.[1]);
      assert.ok(count >= 3, `worker ${w} ticked ${count} times in 1 s`);
      const inf = Number(text.match(new RegExp(`^kvgate_worker_loop_lag_seconds_bucket\\{worker="${w}",le="\\+Inf"\\} (\\S+)`, 'm'))?.[1]);
      assert.equal(inf, count, 'every tick lands in a bucket');
      // Stalls are counted by cause (every cause exported, from 0), and the worker's CPU time is
      // read from the scheduler's accounting (positive once it has run a second).
      for (const cause of ['busy', 'cpu_wait', 'steal', 'blocked', 'unknown'])
        assert.match(text, new RegExp(`^kvgate_worker_loop_stalls_total\\{worker="${w}",cause="${cause}"\\} \\d+$`, 'm'));
      const cpu = Number(text.match(new RegExp(`^kvgate_worker_cpu_seconds_total\\{worker="${w}"\\} (\\S+)`, 'm'))?.[1]);
      assert.ok(cpu > 0, `worker ${w} cpu ${cpu}`);
      assert.match(text, new RegExp(`^kvgate_worker_cpu_wait_seconds_total\\{worker="${w}"\\} \\S+$`, 'm'));
    }
    // The worker threads carry their names (top -H, perf and ps -L show them).
    const names = readdirSync(`/proc/${gw.proc.pid}/task`).map((t) => {
      try { return readFileSync(`/proc/${gw.proc.pid}/task/${t}/comm`, 'utf8').trim(); } catch { return ''; }  // (a thread that ended)
    });
    assert.ok(names.includes('kvgate-w0') && names.includes('kvgate-w1'), names.join(','));
  } finally {
    await gw.stop();
    tmp.remove();
  }
});
