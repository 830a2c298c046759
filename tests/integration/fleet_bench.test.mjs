// `kvgate bench fleet` end to end on a tiny simulated fleet: two workers, two arms, one load
// step; the output file has the documented shape and every request succeeded.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { BIN } from './lib.mjs';

const run = promisify(execFile);

test('bench fleet: three arms (oracle included), two workers, one step; JSON and Markdown as documented', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-fleet-test-'));
  try {
    const out = join(dir, 'fleet.json');
    const md = join(dir, 'fleet.md');
    await run(BIN, ['bench', 'fleet', '--workload', 'gsp', '--wl', 'num_groups=6', '--wl', 'prompts_per_group=6',
      '--wl', 'system_prompt_len=256', '--wl', 'question_len=32', '--wl', 'output_len=4', '--workers', '2',
      '--arms', 'rr,kv-hard,oracle', '--qps', '20', '--requests', '48', '--warmup', '12', '--speedup', '5', '--out', out, '--md', md,
      '--work', join(dir, 'work')], { timeout: 120000 });
    const doc = JSON.parse(readFileSync(out, 'utf8'));
    assert.equal(doc.workload, 'gsp');
    assert.equal(doc.workload_params.num_groups, 6);
    assert.equal(doc.fleet.workers, 2);
    assert.deepEqual(doc.arms.map((a) => a.arm), ['rr', 'kv-hard', 'oracle']);
    for (const arm of doc.arms) {
      assert.equal(arm.steps.length, 1);
      const s = arm.steps[0];
      for (const k of ['qps', 'ttft_p50_ms', 'ttft_p90_ms', 'ttft_p99_ms', 'itl_p50_ms', 'itl_p99_ms', 'output_tok_s',
        'hit_rate', 'requests', 'errors']) assert.equal(typeof s[k], 'number', `${arm.arm}.${k}`);
      assert.equal(s.qps, 20);
      assert.equal(s.requests, 48);
      assert.equal(s.warmup_requests, 12);
      assert.equal(s.hit_rate_source, 'usage');  // from each answer's cached_tokens
      assert.equal(s.errors, 0, JSON.stringify(s.error_kinds));
      assert.ok(s.ttft_p50_ms > 0 && s.ttft_p50_ms <= s.ttft_p90_ms && s.ttft_p90_ms <= s.ttft_p99_ms);
      assert.ok(s.hit_rate > 0 && s.hit_rate <= 1, `${arm.arm} hit rate ${s.hit_rate}`);
      // Every request (warm-up included) went to a worker and the workers counted them all.
      assert.equal(s.load_per_worker.reduce((a, b) => a + b, 0), 60);
      assert.ok(s.output_tok_s > 0);
    }
    // The same prompts reach a fleet whose caches were emptied before each arm: routing by cache
    // state keeps each group on one worker, round-robin copies it onto both.
    const [rr, kv] = doc.arms.map((a) => a.steps[0].hit_rate);
    // The oracle's requests bypass the gateway: no gateway CPU is attributed to them.
    assert.equal(doc.arms[2].steps[0].gateway_cpu_us_per_req, -1);
    assert.ok(kv >= rr - 0.02, `kv-hard hit rate ${kv} below round-robin's ${rr}`);
    const table = readFileSync(md, 'utf8');
    assert.match(table, /^\| arm \| qps \| TTFT p50 ms/m);
    assert.match(table, /^\| kv-hard \| 20\.00 \|/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('bench fleet: bad options are refused with a clear message', async () => {
  await assert.rejects(run(BIN, ['bench', 'fleet', '--arms', 'rr,teleport']), /unknown arm teleport/);
  await assert.rejects(run(BIN, ['bench', 'fleet', '--workload', 'gsp', '--wl', 'num_groupz=3']), /unknown workload parameter num_groupz/);
  await assert.rejects(run(BIN, ['bench', 'fleet', '--qps', '0']), /bad value '0' for --qps/);
});
