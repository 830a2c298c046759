// The engine simulator speaks vLLM's dialect: prefix-cache accounting, metrics, SSE shape, layout.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { simMetrics, startSim } from './lib.mjs';

describe('kvgate sim (vLLM dialect)', () => {
  let sim;
  // The default timing (the continuous-batching step model), 20x faster than real time.
  before(async () => { sim = await startSim(['--workers', '2', '--port', '0', '--speedup', '20', '--block-size', '16']); });
  after(async () => { await sim.stop(); });

  const complete = async (w, prompt, extra = {}) => {
    const r = await fetch(`${w.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2, ...extra }),
    });
    assert.equal(r.status, 200);
    return r.json();
  };
  const range = (a, b) => Array.from({ length: b - a }, (_, i) => a + i);

  test('cached_tokens follows vLLM: full blocks only, last prompt token always recomputed', async () => {
    const w = sim.workers[0];
    // Hand calculation with block size 16:
    let r = await complete(w, range(1, 41));            // 40 tokens, cold
    assert.deepEqual([r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens], [40, 0]);
    r = await complete(w, range(1, 41));                // 2 full blocks present, floor(39/16)=2
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 32);
    r = await complete(w, range(1, 33));                // 32 tokens, both blocks present, cap floor(31/16)=1
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 16);
    r = await complete(w, [...range(1, 17), ...range(100, 120)]);  // shares only block 0
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 16);
    r = await complete(w, [...range(500, 516), ...range(17, 33), 7]);  // block 1's tokens after another block 0
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    const m = await simMetrics(w);
    assert.equal(m['vllm:prefix_cache_queries_total'], 40 + 40 + 32 + 36 + 33);
    assert.equal(m['vllm:prefix_cache_hits_total'], 32 + 16 + 16);
    assert.equal(m['vllm:cache_config_info'], 1);
    // The other worker has its own cache.
    r = await complete(sim.workers[1], range(1, 41));
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    // reset_prefix_cache forgets everything not in use.
    assert.equal((await fetch(`${w.url}/reset_prefix_cache`, { method: 'POST' })).status, 200);
    r = await complete(w, range(1, 41));
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  });

  test('streaming with include_usage has vLLM framing', async () => {
    const r = await fetch(`${sim.workers[0].url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true, stream_options: { include_usage: true } }),
    });
    assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    const events = (await r.text()).split('\n\n').filter(Boolean);
    assert.equal(events.at(-1), 'data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
    // vLLM: a role chunk (empty content), one chunk per token, then the usage chunk.
    assert.equal(chunks.length, 5);
    assert.equal(chunks[0].object, 'chat.completion.chunk');
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    assert.equal(chunks[3].choices[0].finish_reason, 'length');
    for (const c of chunks.slice(0, 4)) assert.equal(c.usage, null);
    assert.deepEqual(chunks[4].choices, []);
    assert.equal(chunks[4].usage.completion_tokens, 3);
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  });

  test('metrics use vLLM names and --hosts lays one worker per loopback address', async () => {
    const text = await (await fetch(`${sim.workers[0].url}/metrics`)).text();
    for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
      'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total', 'vllm:cache_config_info',
      'kvgate_sim_requests_aborted_total', 'vllm:num_preemptions_total', 'kvgate_sim_steps_total',
      'kvgate_sim_timer_slip_seconds_total', 'kvgate_sim_timer_slip_max_seconds']) {
      assert.match(text, new RegExp(`^# TYPE ${name.replace(/_total$/, '(_total)?')} `, 'm'), name);
    }
    assert.match(text, /vllm:cache_config_info\{[^}]*block_size="16"[^}]*num_gpu_blocks="31250"/);
    const fleet = await startSim(['--hosts', '127.0.0.20-22', '--port', '0']);
    assert.deepEqual(fleet.workers.map((w) => w.host), ['127.0.0.20', '127.0.0.21', '127.0.0.22']);
    assert.equal(new Set(fleet.workers.map((w) => w.port)).size, 1);
    for (const w of fleet.workers) assert.equal((await fetch(`${w.url}/health`)).status, 200);
    await fleet.stop();
  });

  test('step model: one step per token, the true cache state, KV capacity and timing flags', async () => {
    const s2 = await startSim(['--workers', '2', '--port', '0', '--speedup', '20', '--num-blocks', '8']);
    const [w0, w1] = s2.workers;
    const prompt = range(1, 65);  // 4 blocks of 16
    const m0 = await simMetrics(w0);
    await complete(w0, prompt, { max_tokens: 4 });
    let r = await complete(w0, prompt, { max_tokens: 4 });
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 48);
    // Sequential requests never share a step: each is one prefill step plus 3 decode steps.
    const m1 = await simMetrics(w0);
    assert.equal(m1.kvgate_sim_steps_total - m0.kvgate_sim_steps_total, 8);
    assert.ok(m1.kvgate_sim_timer_slip_seconds_total >= 0);
    // The true cache state: worker 0 holds all 4 leading blocks of this prompt, worker 1 none;
    // a prompt sharing the first 2 blocks only.
    const state = async (p) => (await fetch(`${w1.url}/sim/cache_state`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: p, max_tokens: 1 }),
    })).json();
    let st = await state(prompt);
    assert.equal(st.prompt_blocks, 4);
    assert.deepEqual(st.workers.map((w) => [w.worker, w.blocks]), [[0, 4], [1, 0]]);
    // Every block each cache holds (the oracle's cold-start test): worker 1 has served nothing.
    assert.ok(st.workers[0].cached_blocks >= 4, `cached_blocks ${st.workers[0].cached_blocks}`);
    assert.equal(st.workers[1].cached_blocks, 0);
    st = await state([...range(1, 33), ...range(900, 932)]);
    assert.deepEqual(st.workers.map((w) => w.blocks), [2, 0]);
    const bad = await fetch(`${w1.url}/sim/cache_state`, { method: 'POST', body: '{"prompt":' });
    assert.equal(bad.status, 400);
    // 8 blocks of 16 = 128 tokens of KV: 120 prompt + 16 output tokens can never fit.
    const big = await fetch(`${w0.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: range(1, 121), max_tokens: 16 }),
    });
    assert.equal(big.status, 400);
    assert.match((await big.json()).message, /needs 136 tokens of KV cache but the engine holds 128/);
    await s2.stop();
    // A knob of the other timing model is an error, not silently ignored.
    await assert.rejects(startSim(['--port', '0', '--itl-ms', '5']), /--itl-ms belongs to --timing fixed/);
    await assert.rejects(startSim(['--port', '0', '--timing', 'fixed', '--max-num-seqs', '5']), /--max-num-seqs belongs to --timing step/);
  });
});
