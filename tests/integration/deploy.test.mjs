// The operator files under deploy/ (issue 32 §2): the Grafana dashboard and the Prometheus alert
// rules. promtool checks the rules and runs their unit tests (deploy/prometheus/alerts_test.yml);
// every metric a dashboard query or an alert names is one a running gateway exports: a gateway in
// front of a simulated fleet with KV events, a Tier 1.5 rule, a stream through it and a Redis
// quota store, scraped live.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, startSim, waitFor } from './lib.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const DASHBOARD = path.join(ROOT, 'deploy/grafana/kvgate.json');
const ALERTS = path.join(ROOT, 'deploy/prometheus/alerts.yml');

// Our metric names in a PromQL expression (every family starts kvgate_ or loxilb_).
const namesIn = (expr) => [...expr.matchAll(/\b(?:kvgate|loxilb)_[a-z0-9_]+/g)].map((m) => m[0]);

test('promtool accepts the alert rules and their unit tests pass', () => {
  const check = execFileSync('promtool', ['check', 'rules', ALERTS]).toString();
  assert.match(check, /SUCCESS: 9 rules found/);
  const unit = execFileSync('promtool', ['test', 'rules', 'alerts_test.yml'],
    { cwd: path.dirname(ALERTS) }).toString();
  assert.match(unit, /SUCCESS/);
});

test('every metric the dashboard and the alerts name is exported by a running gateway', async (t) => {
  const dash = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));
  const wanted = new Map();  // name -> where
  for (const p of dash.panels) {
    assert.ok(p.targets?.length, `panel ${p.title} has no query`);
    for (const q of p.targets) {
      const names = namesIn(q.expr);
      assert.ok(names.length > 0, `panel ${p.title}: ${q.expr} names no kvgate metric`);
      for (const n of names) wanted.set(n, `dashboard panel "${p.title}"`);
    }
  }
  const alerts = fs.readFileSync(ALERTS, 'utf8');
  const exprs = [...alerts.matchAll(/expr: (\|\n(?:\s{10}.*\n)+|.*)/g)].map((m) => m[1]);
  assert.equal(exprs.length, 9);
  for (const e of exprs) for (const n of namesIn(e)) wanted.set(n, 'alerts.yml');

  // Redis for the quota store's metrics.
  const redisPort = await freePort();
  const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no'], { stdio: 'ignore' });
  t.after(() => new Promise((r) => { redis.once('exit', r); redis.kill('SIGKILL'); }));
  assert.ok(await waitFor(() => new Promise((resolve) => {
    const s = net.connect(redisPort, '127.0.0.1', () => s.write('PING\r\n'));
    s.on('data', (d) => { s.destroy(); resolve(/^\+PONG/.test(d.toString())); });
    s.on('error', () => resolve(false));
  }), 10000), 'redis-server answers');
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.54-55', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const gw = await gateway(t, ['--workers', '1', '--redis', `127.0.0.1:${redisPort}`]);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: sim.workers,
    extraArgs: { name: 'dash', kvExactMode: 3, kvZmqPort: kvPort, sse_mode: true } }));
  assert.equal(r.status, 200, r.text);
  const stream = async (first) => {
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', stream: true, max_tokens: 2,
        prompt: Array.from({ length: 96 }, (_, j) => first + j) }),
    });
    assert.equal(res.status, 200);
    await res.text();
  };
  let have = new Set();
  let k = 0;
  assert.ok(await waitFor(async () => {
    await stream(7000000 + 1000 * k++);  // streams until every family has shown up
    have = new Set((await scrapeMetrics(gw.api)).map((s) => s.name));
    return [...wanted.keys()].every((n) => have.has(n));
  }, 20000, 200), `not exported: ${[...wanted].filter(([n]) => !have.has(n)).map(([n, w]) => `${n} (${w})`).join(', ')}`);
});
