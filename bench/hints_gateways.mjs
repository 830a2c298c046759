#!/usr/bin/env node
// Prefix-cache hit rate when 1, 2 or 4 gateway processes route through one `kvgate index`
// (rules with kvIndexAddr), against round-robin, on a shared-prefix workload over 4 simulated
// vLLM workers that publish KV events. Hit rate = the workers' vllm:prefix_cache_hits_total /
// queries_total (tokens) over the workload. Prints Markdown.
//   KVGATE_BIN=build/kvgate node bench/hints_gateways.mjs [--prefixes 7] [--rounds 8]
import fs from 'node:fs';
import path from 'node:path';
import { LB_BASE, api, freePort, rule, simMetrics, startGateway, startKvgate, startSim, stop, tempDir,
  waitFor } from '../tests/integration/lib.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const PREFIXES = Number(arg('--prefixes', 7));
const ROUNDS = Number(arg('--rounds', 8));

async function complete(base, prompt) {
  const res = await fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }) });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`status ${res.status}`);
}
async function totals(workers) {
  let hits = 0; let queries = 0;
  for (const w of workers) {
    const m = await simMetrics(w);
    hits += m['vllm:prefix_cache_hits_total'] ?? 0;
    queries += m['vllm:prefix_cache_queries_total'] ?? 0;
  }
  return { hits, queries };
}

const kvPort = await freePort();
const sim = await startSim(['--hosts', '127.0.0.50-53', '--port', '0', '--kv-events-port', String(kvPort)]);
const tmp = tempDir();
const cleanup = [];
try {
  const workers = sim.workers;
  const replicas = path.join(tmp.dir, 'replicas.json');
  fs.writeFileSync(replicas, JSON.stringify({ replicas: workers.map((w) => ({ id: `${w.host}:${w.port}`,
    model: 'sim-model', tenant: 'default', events: `tcp://${w.host}:${kvPort}` })) }));
  const ix = await startKvgate(['index', '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0', '--replicas', replicas]);
  cleanup.push(() => stop(ix.proc));
  let k = 1;
  for (const w of workers) {
    const ok = await waitFor(async () => {
      await complete(w.url, Array.from({ length: 16 }, (_, i) => 90000000 * k + i));
      k++;
      const text = await (await fetch(`${ix.ready.metrics}/metrics`)).text();
      return new RegExp(`kvgate_kv_batches_total\\{[^}]*source="${w.host}:${kvPort}"[^}]*\\} [1-9]`).test(text);
    }, 15000, 100);
    if (!ok) throw new Error(`index not joined to ${w.host}`);
  }
  const gws = [];
  for (let i = 0; i < 4; i++) {
    const dir = tempDir();
    const g = await startGateway({ stateDir: dir.dir, extra: ['--workers', '1'] });
    cleanup.push(async () => { await g.stop(); dir.remove(); });
    const shared = await freePort();
    const rr = await freePort();
    for (const [port, extra] of [[shared, { kvExactMode: 3, kvIndexAddr: ix.ready.grpc, kvIndexTimeoutMs: 50 }], [rr, {}]]) {
      const r = await api(g.api, 'POST', LB_BASE, rule({ port, workers, extraArgs: extra }));
      if (r.status !== 200) throw new Error(r.text);
    }
    gws.push({ shared, rr });
  }
  let base = 1000000;
  const run = async (ports) => {
    base += 10000000;
    const before = await totals(workers);
    let i = 0;
    for (let round = 0; round < ROUNDS; round++) {
      for (let p = 0; p < PREFIXES; p++) {
        const prompt = Array.from({ length: 96 }, (_, j) => base + p * 1000 + j)
          .concat(Array.from({ length: 8 }, (_, j) => base + 900000 + round * 100 + p * 10 + j));
        await complete(`http://127.0.0.1:${ports[i++ % ports.length]}`, prompt);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const after = await totals(workers);
    return (after.hits - before.hits) / (after.queries - before.queries);
  };
  const ideal = ((ROUNDS - 1) / ROUNDS) * (96 / 104);
  console.log(`${PREFIXES} prefixes of 96 tokens x ${ROUNDS} rounds, an 8-token fresh tail each request, ` +
    `requests spread over the gateways in turn; perfect reuse = ${ideal.toFixed(3)}.\n`);
  console.log('| gateways | hit rate, shared kvgate index | hit rate, round-robin |');
  console.log('|---|---|---|');
  for (const n of [1, 2, 4]) {
    const shared = await run(gws.slice(0, n).map((g) => g.shared));
    const rr = await run(gws.slice(0, n).map((g) => g.rr));
    console.log(`| ${n} | ${shared.toFixed(3)} | ${rr.toFixed(3)} |`);
  }
} finally {
  for (const c of cleanup.reverse()) await c();
  await sim.stop();
  tmp.remove();
}
