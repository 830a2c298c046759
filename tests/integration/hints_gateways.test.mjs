// Gateways that share one `kvgate index`: rules with kvIndexAddr take their Tier 1.5 overlaps
// from LookupRoute (the index follows the engines' KV events), so two gateway processes keep the
// prefix-cache hit rate of one on a shared-prefix workload. Hit rates are the simulator's own
// vllm:prefix_cache_hits_total / queries_total (tokens), compared with the same workload routed
// round-robin. A dead or stopped index costs nothing but the hint: requests are still served and
// the fall is counted (remote_error, remote_timeout).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, simMetrics, startKvgate, startSim, stop, tempDir,
  waitFor } from './lib.mjs';

async function complete(base, prompt) {
  const res = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }) });
  const text = await res.text();
  assert.equal(res.status, 200, text);
}

async function cacheTotals(workers) {
  let hits = 0; let queries = 0;
  for (const w of workers) {
    const m = await simMetrics(w);
    hits += m['vllm:prefix_cache_hits_total'] ?? 0;
    queries += m['vllm:prefix_cache_queries_total'] ?? 0;
  }
  return { hits, queries };
}

const fall = async (gw, reason) => (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_routing_fallthrough_total' &&
  s.labels.stage === 'kv_exact' && s.labels.reason === reason).reduce((a, s) => a + s.value, 0);

test('two gateways share one kvgate index and keep one gateway\'s hit rate', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.40-43', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const workers = sim.workers;
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const replicas = path.join(tmp.dir, 'replicas.json');
  fs.writeFileSync(replicas, JSON.stringify({ replicas: workers.map((w) => ({ id: `${w.host}:${w.port}`,
    model: 'sim-model', tenant: 'default', events: `tcp://${w.host}:${kvPort}` })) }));
  const { proc, ready } = await startKvgate(['index', '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0',
    '--replicas', replicas]);
  t.after(() => stop(proc));
  // Join every subscription of the index.
  let k = 1;
  for (const w of workers) {
    assert.ok(await waitFor(async () => {
      await complete(w.url, Array.from({ length: 16 }, (_, i) => 50000000 * k + i));
      k++;
      const text = await (await fetch(`${ready.metrics}/metrics`)).text();
      return new RegExp(`kvgate_kv_batches_total\\{[^}]*source="${w.host}:${kvPort}"[^}]*\\} [1-9]`).test(text);
    }, 15000, 100), `the index has no KV batch from ${w.host}`);
  }
  const g1 = await gateway(t, ['--workers', '1']);
  const g2 = await gateway(t, ['--workers', '1']);
  const shared = { kvExactMode: 3, kvIndexAddr: ready.grpc, kvIndexTimeoutMs: 50 };
  const ports = {};
  for (const [name, gw, extra] of [['g1', g1, shared], ['g2', g2, shared], ['rr1', g1, {}], ['rr2', g2, {}]]) {
    ports[name] = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port: ports[name], workers, extraArgs: extra }));
    assert.equal(r.status, 200, r.text);
  }
  // 7 prefixes of 6 blocks (7: round-robin over 4 workers does not cycle onto the same worker),
  // 6 rounds, a fresh 8-token tail each time; `via` picks the gateway.
  const run = async (base, via) => {
    const before = await cacheTotals(workers);
    let i = 0;
    for (let round = 0; round < 6; round++) {
      for (let p = 0; p < 7; p++) {
        const prompt = Array.from({ length: 96 }, (_, j) => base + p * 1000 + j)
          .concat(Array.from({ length: 8 }, (_, j) => base + 900000 + round * 100 + p * 10 + j));
        await complete(`http://127.0.0.1:${via(i++)}`, prompt);
        await new Promise((r) => setTimeout(r, 20));  // the stored blocks reach the index
      }
    }
    const after = await cacheTotals(workers);
    return (after.hits - before.hits) / (after.queries - before.queries);
  };
  const one = await run(1000000, () => ports.g1);
  const two = await run(3000000, (i) => (i % 2 ? ports.g2 : ports.g1));
  const rr = await run(5000000, (i) => (i % 2 ? ports.rr2 : ports.rr1));
  t.diagnostic(`hit rate: one gateway ${one.toFixed(3)}, two gateways ${two.toFixed(3)}, round-robin ${rr.toFixed(3)}`);
  // Perfect reuse is 5 of 6 rounds x 96 of 104 tokens = 0.77.
  assert.ok(one > 0.6, `one gateway: ${one}`);
  assert.ok(two >= one - 0.05, `two gateways ${two} vs one ${one}`);
  assert.ok(two > rr + 0.2, `two gateways ${two} vs round-robin ${rr}`);
  for (const gw of [g1, g2]) {
    const kv = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_selector_decisions_total' &&
      s.labels.selector === 'kv_exact').reduce((a, s) => a + s.value, 0);
    assert.ok(kv >= 15, `kv_exact decided ${kv} requests`);
  }

  // The index stopped (SIGSTOP): every call times out after kvIndexTimeoutMs; requests are
  // served by the fallback and the fall is counted.
  proc.kill('SIGSTOP');
  t.after(() => { try { proc.kill('SIGCONT'); } catch { /* gone */ } });
  const before = await fall(g1, 'remote_timeout');
  await complete(`http://127.0.0.1:${ports.g1}`, Array.from({ length: 40 }, (_, j) => 7000000 + j));
  const reasons = async () => (await scrapeMetrics(g1.api)).filter((s) => s.name === 'kvgate_routing_fallthrough_total')
    .map((s) => `${s.labels.rule}/${s.labels.stage}/${s.labels.reason}=${s.value}`).join(' ');
  assert.equal(await fall(g1, 'remote_timeout'), before + 1, await reasons());
  proc.kill('SIGCONT');
  // An index address nobody listens on: remote_error, served anyway.
  const deadPort = await freePort();
  const port = await freePort();
  const r = await api(g2.api, 'POST', LB_BASE, rule({ port, workers,
    extraArgs: { kvExactMode: 3, kvIndexAddr: `127.0.0.1:${deadPort}` } }));
  assert.equal(r.status, 200, r.text);
  await complete(`http://127.0.0.1:${port}`, Array.from({ length: 40 }, (_, j) => 8000000 + j));
  assert.ok((await fall(g2, 'remote_error')) + (await fall(g2, 'remote_timeout')) >= 1);
  // A rule asking with a tenant the index does not hold: UNKNOWN_TENANT, counted as
  // remote_unknown_key (a configuration mismatch made visible), served anyway.
  const port3 = await freePort();
  const r3 = await api(g2.api, 'POST', LB_BASE, rule({ port: port3, workers,
    extraArgs: { kvExactMode: 3, kvIndexAddr: ready.grpc, kvIndexTimeoutMs: 200, kvIndexTenant: 'nobody' } }));
  assert.equal(r3.status, 200, r3.text);
  const unknownBefore = await fall(g2, 'remote_unknown_key');
  await complete(`http://127.0.0.1:${port3}`, Array.from({ length: 40 }, (_, j) => 9000000 + j));
  assert.equal(await fall(g2, 'remote_unknown_key'), unknownBefore + 1);
  // A bad address is refused when the rule is stored.
  const bad = await api(g2.api, 'POST', LB_BASE, rule({ port: await freePort(), workers,
    extraArgs: { kvExactMode: 3, kvIndexAddr: 'no-port' } }));
  assert.equal(bad.status, 400);
  assert.match(bad.text, /kvIndexAddr/);
});
