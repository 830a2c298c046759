// The gateway's KV event plane against the simulator's real ZMQ publisher: a kvExactMode 3 rule
// makes the gateway follow each endpoint's KV events at endpointIP:kvZmqPort; the /metrics
// families kvgate_kv_* show what its index mirrors. Rules that would make one inventory two
// things are refused; Tier 1.5 routes by what the index holds. Loopback only, free ports,
// everything stopped at the end.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, rule, scrapeMetrics, startSim, waitFor } from './lib.mjs';
import { tokenizedFleet } from './tokenized_fleet.mjs';

const kvSample = (samples, name, source, extra = {}) => samples.find((s) => s.name === name &&
  s.labels.source === source && Object.entries(extra).every(([k, v]) => s.labels[k] === v));

// Throwaway prompts to each worker until the gateway has applied a KV batch from each (PUB/SUB
// joins asynchronously); `base` keeps different tests' prompts apart.
async function joinSubscriptions(gw, workers, kvPort, base) {
  let k = 1;
  for (const w of workers) {
    assert.ok(await waitFor(async () => {
      await complete(w, base + 10000000 * k++, 16);
      return (kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_batches_total', `${w.host}:${kvPort}`)?.value ?? 0) > 0;
    }, 15000, 100), `no KV batch from ${w.host}`);
  }
}

// Requests the gateway answered through worker `w` (kvgate_requests_total, all statuses).
const sentTo = (metrics, w) => metrics.filter((s) => s.name === 'kvgate_requests_total' &&
  s.labels.endpoint === `${w.host}:${w.port}`).reduce((x, s) => x + s.value, 0);

async function complete(worker, first, n) {
  const prompt = Array.from({ length: n }, (_, i) => first + i);
  const res = await fetch(`${worker.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }),
  });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
}

test('a kvExactMode 3 rule follows its endpoints\' KV events; conflicting rules are refused', async (t) => {
  const sim = await startSim(['--workers', '1', '--port', '0', '--kv-events']);
  t.after(() => sim.stop());
  const w = sim.workers[0];
  assert.ok(w.kv_events_port > 0, JSON.stringify(w));
  const source = `${w.host}:${w.kv_events_port}`;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [w], extraArgs: { kvExactMode: 3, kvZmqPort: w.kv_events_port } }));
  assert.equal(r.status, 200, r.text);

  // PUB/SUB joins asynchronously: throwaway prompts until the gateway has applied a batch.
  let k = 1;
  const joined = await waitFor(async () => {
    await complete(w, 100000 * k++, 16);
    const b = kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_batches_total', source);
    return b && b.value > 0;
  }, 15000, 100);
  assert.ok(joined, 'the gateway never applied a KV-event batch');
  const before = kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', source).value;
  await complete(w, 0, 64);  // four new blocks
  assert.ok(await waitFor(async () =>
    kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', source).value === before + 4, 10000),
    'the four blocks of the prompt did not reach the gateway');
  const m = await scrapeMetrics(gw.api);
  assert.equal(kvSample(m, 'kvgate_kv_rejected_total', source, { reason: 'decode' }).value, 0);
  assert.equal(kvSample(m, 'kvgate_kv_skipped_total', source, { reason: 'orphan' }).value, 0);
  assert.ok(m.find((s) => s.name === 'kvgate_kv_index_bytes').value > 0);

  // Another rule naming the same publisher with another block size: refused, nothing changes.
  const port2 = await freePort();
  const bad = await api(gw.api, 'POST', LB_BASE, rule({ port: port2, workers: [w],
    extraArgs: { kvExactMode: 3, kvZmqPort: w.kv_events_port, kvBlockSize: 32 } }));
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.text, /one inventory/);
  const all = await api(gw.api, 'GET', `${LB_BASE}/all`);
  assert.equal(all.json.lbAttr.length, 1);

  // Deleting the rule stops following the publisher: its series go.
  const del = await api(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
  assert.equal(del.status, 200, del.text);
  assert.ok(await waitFor(async () =>
    !kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', source), 5000));
});

// Tier 1.5 end to end: two simulated vLLM workers on their own addresses publish KV events; the
// gateway's kvExactMode 3 rule (fallback round-robin) sends prompts that one worker has cached to
// that worker, and counts the decisions under the kv_exact stage.
test('Tier 1.5: requests go to the worker that holds their prefix', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.10-11', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  // The seed's hard law as upstream runs it (its counters below: no spills, no cold seeds).
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvLbMode: 'hard' } }));
  assert.equal(r.status, 200, r.text);
  // Join both subscriptions: throwaway prompts to each worker until each has a batch applied.
  let k = 1;
  for (const w of [a, b]) {
    const source = `${w.host}:${kvPort}`;
    assert.ok(await waitFor(async () => {
      await complete(w, 200000 * k++, 16);
      const s = kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_batches_total', source);
      return s && s.value > 0;
    }, 15000, 100), `no KV batch from ${source}`);
  }
  // Warm worker b with a 4-block prompt (tokens 0..63), directly.
  const bBlocks = () => scrapeMetrics(gw.api).then((m) => kvSample(m, 'kvgate_kv_blocks', `${b.host}:${kvPort}`).value);
  const before = await bBlocks();
  await complete(b, 0, 64);
  assert.ok(await waitFor(async () => (await bBlocks()) >= before + 4, 10000), 'b\'s blocks did not arrive');
  // Through the gateway: the same prompt plus a different tail each time: all to b.
  for (let i = 0; i < 6; i++) {
    const prompt = Array.from({ length: 64 }, (_, j) => j).concat([90000 + i, 90100 + i]);
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }),
    });
    assert.equal(res.status, 200, await res.text());
  }
  const m = await scrapeMetrics(gw.api);
  const kvDecisions = m.filter((s) => s.name === 'kvgate_selector_decisions_total' && s.labels.selector === 'kv_exact')
    .reduce((x, s) => x + s.value, 0);
  assert.equal(kvDecisions, 6, JSON.stringify(m.filter((s) => s.name.startsWith('kvgate_selector_decisions') || s.name.startsWith('kvgate_routing_fallthrough'))));
  assert.equal(sentTo(m, b), 6, 'not every request went to the warm worker');
  // The other way round: a different prefix cached on a (the first endpoint) goes to a.
  const aBlocks = () => scrapeMetrics(gw.api).then((mm) => kvSample(mm, 'kvgate_kv_blocks', `${a.host}:${kvPort}`).value);
  const aBefore = await aBlocks();
  await complete(a, 5000, 64);
  assert.ok(await waitFor(async () => (await aBlocks()) >= aBefore + 4, 10000), 'a\'s blocks did not arrive');
  for (let i = 0; i < 4; i++) {
    const prompt = Array.from({ length: 64 }, (_, j) => 5000 + j).concat([91000 + i]);
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m2, a), 4);
  // A prompt nobody holds is a miss: counted as no_worker, then the rule's round-robin decides.
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => 70000 + j), max_tokens: 1 }),
  });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const shallow = (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_routing_fallthrough_total' &&
    s.labels.stage === 'kv_exact' && s.labels.reason === 'no_worker');
  assert.equal(shallow?.value, 1);
  // The same under upstream's Tier 1.5 names.
  const m3 = await scrapeMetrics(gw.api);
  const t15 = (name, labels = {}) => m3.find((s) => s.name === name &&
    Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
  assert.equal(t15('loxilb_pd_kv_tier15_hits_total'), 10);
  assert.equal(t15('loxilb_pd_kv_tier15_miss_reason_total', { reason: 'no_worker' }), 1);
  assert.equal(t15('loxilb_pd_kv_tier15_fallthrough_total'), 1);
  assert.equal(t15('loxilb_pd_kv_tier15_spills_total'), 0);
  assert.equal(t15('loxilb_pd_kv_tier15_cold_seeds_total'), 0);
  // Blocks per rule endpoint under upstream's name, memory-cap evictions and event lag.
  const pd = (ep) => m3.find((s) => s.name === 'loxilb_pd_kv_blocks' && s.labels.ep_idx === ep)?.value;
  assert.ok(pd('1') >= 4, `b's blocks ${pd('1')}`);
  assert.equal(pd('1'), kvSample(m3, 'kvgate_kv_blocks', `${b.host}:${kvPort}`).value);
  assert.equal(kvSample(m3, 'kvgate_kv_evicted_blocks_total', `${b.host}:${kvPort}`).value, 0);
  const lag = kvSample(m3, 'kvgate_kv_event_lag_seconds', `${b.host}:${kvPort}`).value;
  assert.ok(lag >= 0 && lag < 60, `lag ${lag}`);
});

// Text and chat prompts: the simulated engines tokenize with the model's real tokenizer and chat
// template (as vLLM does) and publish those token ids; the gateway tokenizes the same way, so a
// chat that shares a long system prompt with what a worker cached lands there.
test('Tier 1.5: chat and text prompts are tokenized and routed by the cache', async (t) => {
  const MODEL = 'Qwen/Qwen3-8B';
  const { a, b, gw, port, post, blocks, fall } = await tokenizedFleet(t, { hosts: '127.0.0.12-13', model: MODEL });
  // A long system prompt cached on b, directly.
  const system = Array.from({ length: 60 }, (_, i) => `Rule ${i}: answer politely and cite sources.`).join(' ');
  const chat = (q) => ({ model: MODEL, max_tokens: 1, messages: [{ role: 'system', content: system }, { role: 'user', content: q }] });
  const before = await blocks(b);
  assert.equal((await post(b.url, '/v1/chat/completions', chat('first question'))).status, 200);
  assert.ok(await waitFor(async () => (await blocks(b)) >= before + 20, 10000), 'b\'s blocks did not arrive');
  // The tokenizer loads off the request path: the first request may miss with reason tokenize.
  // Warm it with a prompt under one block (cached nowhere): once loaded, the miss is `shallow`.
  assert.ok(await waitFor(async () => {
    await post(`http://127.0.0.1:${port}`, '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 1 });
    return (await fall('shallow')) > 0;
  }, 15000, 100), 'the gateway never loaded the tokenizer');
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 5; i++) {
    const res = await post(`http://127.0.0.1:${port}`, '/v1/chat/completions', chat(`question ${i}?`));
    assert.equal(res.status, 200, res.text);
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 5, 'every chat sharing the system prompt goes to b');
  // A completions text prompt cached on a goes to a.
  const text = Array.from({ length: 80 }, (_, i) => `line ${i} of the shared document`).join('\n');
  const aBefore = await blocks(a);
  assert.equal((await post(a.url, '/v1/completions', { model: MODEL, prompt: text, max_tokens: 1 })).status, 200);
  assert.ok(await waitFor(async () => (await blocks(a)) >= aBefore + 20, 10000), 'a\'s blocks did not arrive');
  for (let i = 0; i < 3; i++) {
    const res = await post(`http://127.0.0.1:${port}`, '/v1/completions', { model: MODEL, prompt: `${text}\nand then ${i}`, max_tokens: 1 });
    assert.equal(res.status, 200, res.text);
  }
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m2, a) - sentTo(m1, a), 3, 'every text prompt sharing the document goes to a');
  const ptok = (event) => m2.find((s) => s.name === 'kvgate_kv_prompt_tokenizer_total' && s.labels.event === event)?.value;
  assert.equal(ptok('loaded'), 1);
  assert.equal(ptok('load_failed'), 0);
  // Misses by reason: no model named; a model without tokenizer files.
  const modelEmpty = await fall('model_empty');
  assert.equal((await post(`http://127.0.0.1:${port}`, '/v1/completions', { prompt: text, max_tokens: 1 })).status, 200);
  assert.equal(await fall('model_empty'), modelEmpty + 1);
  const tokenize = await fall('tokenize');
  const res = await post(`http://127.0.0.1:${port}`, '/v1/completions', { model: 'no/such-model', prompt: text, max_tokens: 1 });
  assert.ok(res.status === 200 || res.status === 404, res.text);  // the engine answers an unknown model
  assert.equal(await fall('tokenize'), tokenize + 1);
});

// Lost events are replayed from the engine's replay socket; a restarted engine's inventory is
// cleared. The simulator keeps a replay buffer behind a ROUTER and has faults that drop batches
// from the live stream (still replayable) and restart the publisher.
test('KV events: a gap is replayed, a restart clears the worker', async (t) => {
  const kvPort = await freePort();
  const replayPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.14', '--port', '0', '--kv-events-port', String(kvPort),
    '--kv-events-replay-port', String(replayPort)]);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  assert.equal(w.kv_replay_port, replayPort);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [w], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvReplayPort: replayPort } }));
  assert.equal(r.status, 200, r.text);
  const source = `${w.host}:${kvPort}`;
  const metric = async (name, extra = {}) => kvSample(await scrapeMetrics(gw.api), name, source, extra)?.value ?? 0;
  let k = 1;
  assert.ok(await waitFor(async () => {
    await complete(w, 300000 * k++, 16);
    return (await metric('kvgate_kv_batches_total')) > 0;
  }, 15000, 100), 'no KV batch');
  assert.equal(await metric('loxilb_kv_subscriber_connected'), 1);
  assert.equal(await metric('loxilb_kv_subscriber_reconnect_total'), 0);
  const fault = (body) => fetch(`${w.url}/sim/fault`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  }).then(async (res) => { assert.equal(res.status, 200, await res.text()); });
  // The next two batches (4 blocks, then 2) never reach the gateway live; the third does.
  const blocks0 = await metric('kvgate_kv_blocks');
  await fault({ kv_drop_batches: 2 });
  await complete(w, 0, 64);
  await complete(w, 1000, 32);
  assert.equal(await metric('kvgate_kv_blocks'), blocks0, 'dropped batches arrived live');
  await complete(w, 2000, 16);
  assert.ok(await waitFor(async () => (await metric('kvgate_kv_replays_total', { outcome: 'ok' })) === 1, 10000),
    'the gap was not replayed');
  assert.ok(await waitFor(async () => (await metric('kvgate_kv_blocks')) === blocks0 + 7, 10000));
  assert.equal(await metric('kvgate_kv_replayed_batches_total'), 2);
  assert.equal(await metric('kvgate_kv_lost_batches_total'), 2);
  assert.equal(await metric('kvgate_kv_clears_total'), 0);
  // A restart: the engine's cache is empty and it numbers from 0 again.
  await fault({ kv_restart: true });
  await complete(w, 4000, 48);  // batch 0 of the new process: 3 blocks
  assert.ok(await waitFor(async () => (await metric('kvgate_kv_restarts_total')) === 1, 10000), 'no restart seen');
  assert.ok(await waitFor(async () => (await metric('kvgate_kv_blocks')) === 3, 10000),
    'the restarted worker\'s old blocks were not cleared');
  assert.equal(await metric('kvgate_kv_clears_total'), 1);
  // Bad fault values are refused.
  const bad = await fetch(`${w.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ kv_drop_batches: -1 }) });
  assert.equal(bad.status, 400);
  await bad.arrayBuffer();
});

// Interop: an independent publisher (tests/interop/vllm_kv_publisher.py, Python written from
// shared/reference/engines.md with Debian's zmq, msgpack and cbor2, a random root seed) plays the
// KV events of the second worker; a token-id prompt sharing its blocks is routed there.
test('interop: events from an independent Python publisher route requests', async (t) => {
  const kvPort = await freePort('127.0.0.19');
  const sim = await startSim(['--hosts', '127.0.0.18-19', '--port', '0']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const script = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../interop/vllm_kv_publisher.py');
  const py = spawn('/usr/bin/python3', [script, '--host', b.host, '--port', String(kvPort),
    '--first-token', '7000', '--blocks', '4', '--seconds', '120'], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => py.kill('SIGKILL'));
  const ready = await new Promise((resolve, reject) => {
    let out = '';
    py.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]));
    });
    py.on('exit', (c) => reject(new Error(`publisher exited ${c}`)));
  });
  assert.equal(ready.hashes.length, 4);
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { name: 'interop', kvExactMode: 3, kvZmqPort: kvPort } }));
  assert.equal(r.status, 200, r.text);
  assert.ok(await waitFor(async () => (kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${b.host}:${kvPort}`)?.value ?? 0) === 4,
    15000, 100), 'the publisher\'s 4 blocks did not arrive');
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 6; i++) {
    const prompt = Array.from({ length: 64 }, (_, j) => 7000 + j).concat([i]);
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 6, 'requests sharing the published blocks go to b');
  const st = kvSample(m1, 'kvgate_kv_rejected_total', `${b.host}:${kvPort}`, { reason: 'decode' });
  assert.equal(st?.value ?? 0, 0, 'the independent publisher\'s batches all decoded');
  // The inventory route lists the publisher's own hashes (compared as text: they exceed 2^53).
  const INV = '/netlox/v1/config/ai/kv/inventory';
  const inv = await fetch(`${gw.api}${INV}?service_id=interop&ep_idx=1`);
  assert.equal(inv.status, 200);
  const text = await inv.text();
  const body = JSON.parse(text);
  assert.equal(body.total, 4);
  assert.equal(body.hash_algo, 'sha256_cbor');
  assert.deepEqual(body.blocks.map((x) => x.block_idx), [0, 1, 2, 3]);
  assert.deepEqual([...text.matchAll(/"hash_uint64":(\d+)/g)].map((m) => m[1]), ready.hashes);
  const page = await (await fetch(`${gw.api}${INV}?service_id=interop&ep_idx=1&offset=2&limit=1`)).text();
  assert.deepEqual([...page.matchAll(/"hash_uint64":(\d+)/g)].map((m) => m[1]), [ready.hashes[2]]);
  const empty = await (await fetch(`${gw.api}${INV}?service_id=interop&ep_idx=0`)).json();
  assert.equal(empty.total, 0);  // followed, nothing published
  // Many calls in a row (a GCC 12 coroutine-capture bug freed a string twice on each call and
  // crashed the gateway within a few calls).
  for (let i = 0; i < 50; i++) {
    const res = await fetch(`${gw.api}${INV}?service_id=interop&ep_idx=${i % 2}&limit=2`);
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  for (const [q, status] of [['', 400], ['?service_id=interop', 400], ['?service_id=nope&ep_idx=0', 404],
    ['?service_id=interop&ep_idx=2', 404], ['?service_id=interop&ep_idx=1&limit=0', 400],
    ['?service_id=interop&ep_idx=1&dp_rank=1', 404], ['?service_id=interop&ep_idx=x', 400]]) {
    const res = await fetch(`${gw.api}${INV}${q}`);
    assert.equal(res.status, status, q);
    const e = await res.json();
    assert.equal(e.code, status);
  }
});

// The declared hash contract (LLB_KV_NONE_HASH_SEED): the simulator hashes as vLLM does with
// PYTHONHASHSEED "0"; a gateway declaring "0" verifies every stored block, one declaring "1" sees
// every block mismatch and stops trusting the publisher (Tier 1.5 misses: hash_contract).
test('KV events: a declared hash contract is checked', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.20', '--port', '0', '--kv-events-port', String(kvPort),
    '--kv-events-hash-seed', '0']);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  for (const [seed, good] of [['0', true], ['1', false]]) {
    const gw = await gateway(t, ['--workers', '1'], { env: { LLB_KV_NONE_HASH_SEED: seed } });
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE,
      rule({ port, workers: [w], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvHashAlgo: 'sha256_cbor' } }));
    assert.equal(r.status, 200, r.text);
    const source = `${w.host}:${kvPort}`;
    const m = async () => scrapeMetrics(gw.api);
    let k = 1;
    assert.ok(await waitFor(async () => {
      await complete(w, 400000 * k++ + (good ? 0 : 50000), 32);
      return (kvSample(await m(), 'kvgate_kv_batches_total', source)?.value ?? 0) > 0;
    }, 15000, 100), 'no KV batch');
    const base = good ? 8000 : 9000;  // a prompt the worker has not cached yet: 4 new blocks
    await complete(w, base, 64);
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => base + j), max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    const mm = await m();
    const checks = (result) => kvSample(mm, 'kvgate_kv_hash_checks_total', source, { result })?.value ?? 0;
    const miss = mm.find((s) => s.name === 'loxilb_pd_kv_tier15_miss_reason_total' && s.labels.reason === 'hash_contract')?.value ?? 0;
    if (good) {
      assert.ok(checks('ok') >= 4, `ok ${checks('ok')}`);
      assert.equal(checks('mismatch'), 0);
      assert.equal(kvSample(mm, 'kvgate_kv_hash_contract_broken', source).value, 0);
      assert.equal(miss, 0);
    } else {
      assert.equal(checks('ok'), 0);
      assert.ok(checks('mismatch') >= 4);
      assert.equal(kvSample(mm, 'kvgate_kv_hash_contract_broken', source).value, 1);
      assert.equal(miss, 1);
    }
    await gw.stop();
  }
  // An invalid declaration is a start error naming the variable.
  await assert.rejects(gateway(t, [], { env: { LLB_KV_NONE_HASH_SEED: 'x'.repeat(24) } }), /LLB_KV_NONE_HASH_SEED/);
});

// Speculative insert: a burst of requests sharing a prefix nobody holds yet, sent at once. The
// first misses and the rule's round-robin picks; its blocks are credited to that worker, so every
// sibling follows it before any KV event arrives. With LOXILB_KV_SPECULATIVE_TTL_MS=0 (off) the
// siblings race the first BlockStored (the split is printed, not asserted: it depends on timing).
test('Tier 1.5: speculative insert keeps a burst of siblings together', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.21-22', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const splits = {};
  for (const [arm, env] of [['on', {}], ['off', { LOXILB_KV_SPECULATIVE_TTL_MS: '0' }]]) {
    const gw = await gateway(t, ['--workers', '1'], { env });
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE,
      // (The seed's hard law, whose cap keeps a burst together; the default predict law weighs
      // each sibling's batch on the home and spreads a burst by design.)
      rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvLbMode: 'hard' } }));
    assert.equal(r.status, 200, r.text);
    await joinSubscriptions(gw, [a, b], kvPort, 500000 + (arm === 'on' ? 0 : 250000));
    const m0 = await scrapeMetrics(gw.api);
    const base = arm === 'on' ? 20000 : 30000;
    await Promise.all(Array.from({ length: 8 }, (_, i) => fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => base + j).concat([i]), max_tokens: 1 }),
    }).then(async (res) => { assert.equal(res.status, 200); await res.arrayBuffer(); })));
    const m1 = await scrapeMetrics(gw.api);
      splits[arm] = [sentTo(m1, a) - sentTo(m0, a), sentTo(m1, b) - sentTo(m0, b)];
    const tier15 = (m) => m.find((s) => s.name === 'loxilb_pd_kv_tier15_hits_total')?.value ?? 0;
    splits[arm].push(tier15(m1) - tier15(m0));
    if (arm === 'on') {
      // Every sibling is a Tier 1.5 hit; the hard law (cap = ceil(1.75 x (in-flight + 1) / 2))
      // may spill the last one or two of 8 concurrent requests to the other worker.
      assert.equal(splits.on[2], 7, `Tier 1.5 hits ${splits.on[2]}`);
      assert.ok(Math.max(splits.on[0], splits.on[1]) >= 6, `the burst split ${splits.on}`);
    }
    splits[arm].push(m1.find((s) => s.name === 'kvgate_kv_speculative_hits_total').value);
    await gw.stop();
  }
  t.diagnostic(`burst of 8 siblings, [worker a, worker b, Tier 1.5 hits, blocks matched via credits]: speculative insert on ${splits.on}, off ${splits.off}`);
});

// Engine load: the gateway scrapes the simulated vLLM's /metrics for the endpoints of kvExactMode
// rules (KV capacity from vllm:cache_config_info, running and waiting requests, KV usage); an
// endpoint's kvCapacityBlocks overrides the scraped capacity.
test('engine /metrics feed the selection law\'s capacity', async (t) => {
  const sim = await startSim(['--hosts', '127.0.0.23-24', '--port', '0', '--num-blocks', '3000']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1'], { env: { LOXILB_KV_METRICS_INTERVAL_MS: '100' } });
  const port = await freePort();
  const body = rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3 } });
  body.endpoints[1].kvCapacityBlocks = 1234;
  const r = await api(gw.api, 'POST', LB_BASE, body);
  assert.equal(r.status, 200, r.text);
  const cap = (m, w) => m.find((s) => s.name === 'kvgate_endpoint_kv_capacity_blocks' && s.labels.endpoint === `${w.host}:${w.port}`)?.value;
  let m;
  assert.ok(await waitFor(async () => {
    m = await scrapeMetrics(gw.api);
    return cap(m, a) === 3000;
  }, 10000, 100), 'the scraped capacity never showed');
  assert.equal(cap(m, b), 1234);
  const req = (w, state) => m.find((s) => s.name === 'kvgate_endpoint_engine_requests' &&
    s.labels.endpoint === `${w.host}:${w.port}` && s.labels.state === state)?.value;
  assert.equal(req(a, 'running'), 0);
  assert.equal(req(a, 'waiting'), 0);
  const usage = m.find((s) => s.name === 'kvgate_endpoint_kv_usage_ratio' && s.labels.endpoint === `${a.host}:${a.port}`);
  assert.ok(usage && usage.value >= 0 && usage.value <= 1);
  const ok = m.find((s) => s.name === 'kvgate_endpoint_scrapes_total' && s.labels.endpoint === `${a.host}:${a.port}` && s.labels.outcome === 'ok');
  assert.ok(ok.value >= 1);
});

// SGLang: the simulator publishes SGLang's events (positional, one event per page, signed page
// hashes); the gateway follows a kvEngineType sglang rule with the same ZMQ subscriber, routes by
// them, and with a declared contract verifies SGLang's page chain.
test('Tier 1.5 with SGLang events', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--engine', 'sglang', '--hosts', '127.0.0.25-26', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  assert.equal(sim.ready.engine, 'sglang');
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1'], { env: { LLB_KV_NONE_HASH_SEED: 'declared' } });
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvEngineType: 'sglang' } }));
  assert.equal(r.status, 200, r.text);
  await joinSubscriptions(gw, [a, b], kvPort, 600000);
  const blocks = async (w) => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${w.host}:${kvPort}`).value;
  const before = await blocks(b);
  await complete(b, 0, 64);
  assert.ok(await waitFor(async () => (await blocks(b)) >= before + 4, 10000), 'b\'s pages did not arrive');
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 4; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => j).concat([i]), max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 4, 'requests sharing b\'s pages go to b');
  const checks = (result) => kvSample(m1, 'kvgate_kv_hash_checks_total', `${b.host}:${kvPort}`, { result })?.value ?? 0;
  assert.ok(checks('ok') >= 4, `SGLang page hashes verified: ${checks('ok')}`);
  assert.equal(checks('mismatch'), 0);
});

// TensorRT-LLM: the simulator queues TensorRT-LLM's JSON events (v1 block keys) until POST
// /kv_cache_events drains them; the gateway polls every endpoint of a kvEngineType trtllm rule on
// its serving port, routes by what it drained and verifies the block keys under a declared
// contract.
test('Tier 1.5 with TensorRT-LLM\'s HTTP drain', async (t) => {
  const sim = await startSim(['--engine', 'trtllm', '--kv-events', '--hosts', '127.0.0.27-28', '--port', '0']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  assert.equal(a.kv_events_port, undefined);
  // The drain is destructive: a first call takes what is queued, a second finds nothing.
  await complete(a, 700000, 32);
  const d1 = await (await fetch(`${a.url}/kv_cache_events`, { method: 'POST' })).json();
  assert.equal(d1.length, 1);
  assert.equal(d1[0].data.type, 'stored');
  assert.equal(d1[0].data.blocks.length, 2);
  assert.deepEqual(await (await fetch(`${a.url}/kv_cache_events`, { method: 'POST' })).json(), []);
  const gw = await gateway(t, ['--workers', '1'], { env: { LLB_KV_NONE_HASH_SEED: 'declared' } });
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvEngineType: 'trtllm', kvBlockSize: 16 } }));
  assert.equal(r.status, 200, r.text);
  const src = (w) => `${w.host}:${w.port}`;
  const blocks = async (w) => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', src(w))?.value ?? -1;
  assert.ok(await waitFor(async () => (await blocks(b)) === 0, 10000), 'b is not followed');
  await complete(b, 0, 64);
  assert.ok(await waitFor(async () => (await blocks(b)) === 4, 10000), 'b\'s blocks were not drained');
  const m0 = await scrapeMetrics(gw.api);
  assert.equal(kvSample(m0, 'loxilb_kv_subscriber_connected', src(b)).value, 1);
  for (let i = 0; i < 4; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => j).concat([i]), max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 4, 'requests sharing b\'s blocks go to b');
  const checks = (result) => kvSample(m1, 'kvgate_kv_hash_checks_total', src(b), { result })?.value ?? 0;
  assert.ok(checks('ok') >= 4, `TensorRT-LLM block keys verified: ${checks('ok')}`);
  assert.equal(checks('mismatch'), 0);
  // A cache reset is drained as removals.
  assert.equal((await fetch(`${b.url}/reset_prefix_cache`, { method: 'POST' })).status, 200);
  assert.ok(await waitFor(async () => (await blocks(b)) === 0, 10000), 'the reset was not drained');
});

// Duplicate stores (vLLM's full report mode re-sends a request's cached blocks from block 0) and
// orphans (a store whose parent the gateway never saw: its batch was lost and there is no replay)
// change nothing they should not: the index keeps one copy of each block and skips orphans,
// counting both.
test('KV events: duplicate stores are idempotent, orphans are skipped', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.29-30', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const full = await startSim(['--hosts', '127.0.0.31', '--port', '0', '--kv-events-port', String(kvPort),
    '--kv-events-full-report']);
  t.after(() => full.stop());
  const [w] = full.workers;
  const [o] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [w, o], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort } }));
  assert.equal(r.status, 200, r.text);
  const metric = async (x, name, extra = {}) => kvSample(await scrapeMetrics(gw.api), name, `${x.host}:${kvPort}`, extra)?.value ?? 0;
  let k = 1;
  for (const x of [w, o]) {
    assert.ok(await waitFor(async () => {
      await complete(x, 800000 * k++, 16);
      return (await metric(x, 'kvgate_kv_batches_total')) > 0;
    }, 15000, 100), `no KV batch from ${x.host}`);
  }
  const base = await metric(w, 'kvgate_kv_blocks');
  await complete(w, 0, 64);  // 4 new blocks
  assert.ok(await waitFor(async () => (await metric(w, 'kvgate_kv_blocks')) === base + 4, 10000));
  const dup0 = await metric(w, 'kvgate_kv_skipped_total', { reason: 'duplicate_block' });
  await complete(w, 0, 64);  // the same prompt: full report re-sends its 4 blocks
  assert.ok(await waitFor(async () => (await metric(w, 'kvgate_kv_skipped_total', { reason: 'duplicate_block' })) === dup0 + 4, 10000),
    'the re-sent blocks were not counted as duplicates');
  assert.equal(await metric(w, 'kvgate_kv_blocks'), base + 4, 'a duplicate store changed the inventory');
  // Orphan: the store of a prompt's blocks 0-3 is lost (a gap of 1 without a replay port keeps
  // the inventory); the prompt extended by 2 blocks stores blocks 4-5 with parent block 3, which
  // the gateway never saw: skipped and counted, nothing added.
  const oBase = await metric(o, 'kvgate_kv_blocks');
  await (await fetch(`${o.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ kv_drop_batches: 1 }) })).arrayBuffer();
  await complete(o, 5000, 64);
  await complete(o, 5000, 96);
  assert.ok(await waitFor(async () => (await metric(o, 'kvgate_kv_skipped_total', { reason: 'orphan' })) === 1, 10000),
    'the orphan store was not counted');
  assert.equal(await metric(o, 'kvgate_kv_blocks'), oBase);
  assert.equal(await metric(o, 'kvgate_kv_lost_batches_total'), 1);
  assert.equal(await metric(o, 'kvgate_kv_clears_total'), 0);
});

// The seed's hard selection law end to end (kvLbMode hard; predict is the default of mode 3
// rules): with LOXILB_KV_MEAN_LOAD_FACTOR=100 (cap = ceil(L x cap_i / C))
// the warm worker holding one request in flight is at its cap (L = 1 + 1, cap = ceil(2 / 2) = 1),
// so the next request spills to the cold one; every 4th hit is a cold-start seed
// (LOXILB_KV_COLDSTART_SEED_Nth=4, MIN_BLOCKS=8); and misses are counted by reason.
test('Tier 1.5 spills over its cap, seeds cold workers and counts misses', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.32-33', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [warm, cold] = sim.workers;
  const gw = await gateway(t, ['--workers', '1'], {
    env: { LOXILB_KV_MEAN_LOAD_FACTOR: '100', LOXILB_KV_COLDSTART_SEED_Nth: '4', LOXILB_KV_COLDSTART_MIN_BLOCKS: '8',
      LOXILB_KV_SPECULATIVE_TTL_MS: '0' },
  });
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [warm, cold], extraArgs: { name: 'law', kvExactMode: 3, kvZmqPort: kvPort, kvExactApiMode: 'completions',
      kvLbMode: 'hard' } }));
  assert.equal(r.status, 200, r.text);
  await joinSubscriptions(gw, [warm, cold], kvPort, 900000);
  const blocks = async (w) => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${w.host}:${kvPort}`).value;
  const wb = await blocks(warm);
  await complete(warm, 0, 160);  // 10 blocks: the warm worker is not cold
  assert.ok(await waitFor(async () => (await blocks(warm)) >= wb + 10, 10000));
  assert.ok((await blocks(cold)) < 8);
  const send = (i, first = 0) => fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => first + j).concat([i]), max_tokens: 1 }),
  }).then(async (res) => { assert.equal(res.status, 200); await res.arrayBuffer(); });
  const t15 = (m, name, labels = {}) => m.find((s) => s.name === name && s.labels.service === 'law' &&
    Object.entries(labels).every(([a, b]) => s.labels[a] === b))?.value ?? 0;
  // Hits 1-3 go to the warm worker, hit 4 is seeded to the cold one.
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 4; i++) await send(i);
  const m1 = await scrapeMetrics(gw.api);
  assert.deepEqual([sentTo(m1, warm) - sentTo(m0, warm), sentTo(m1, cold) - sentTo(m0, cold)], [3, 1]);
  assert.equal(t15(m1, 'loxilb_pd_kv_tier15_cold_seeds_total'), 1);
  assert.equal(t15(m1, 'loxilb_pd_kv_tier15_hits_total'), 4);
  // Spill: a prefix only the warm worker holds (the seed gave the cold one the first); one request
  // stalls on the warm worker (stall_ms), the next finds it at its cap.
  const wb2 = await blocks(warm);
  await complete(warm, 3000, 64);
  assert.ok(await waitFor(async () => (await blocks(warm)) >= wb2 + 4, 10000));
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 1500 }) })).arrayBuffer();
  const stalled = send(10, 3000);
  assert.ok(await waitFor(async () => {
    const m = await scrapeMetrics(gw.api);
    return m.find((s) => s.name === 'kvgate_endpoint_inflight_requests' && s.labels.endpoint === `${warm.host}:${warm.port}`)?.value === 1;
  }, 5000, 20), 'the stalled request is not in flight');
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 0 }) })).arrayBuffer();
  const m2 = await scrapeMetrics(gw.api);
  await send(11, 3000);
  const m3 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m3, cold) - sentTo(m2, cold), 1, 'the request over the cap did not spill');
  assert.equal(t15(m3, 'loxilb_pd_kv_tier15_spills_total'), 1);
  await stalled;
  // Misses by reason: a chat request (kvExactApiMode completions), no prompt, token ids out of
  // range, a prompt under one block.
  const miss = async (reason) => t15(await scrapeMetrics(gw.api), 'loxilb_pd_kv_tier15_miss_reason_total', { reason });
  const before = {};
  for (const reason of ['api_mode', 'text_empty', 'hashes', 'shallow']) before[reason] = await miss(reason);
  const post = (path, body) => fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  }).then((res) => res.arrayBuffer());
  await post('/v1/chat/completions', { model: 'sim-model', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
  await post('/v1/completions', { model: 'sim-model', max_tokens: 1 });
  await post('/v1/completions', { model: 'sim-model', max_tokens: 1, prompt: [1, -2, 3].concat(Array(30).fill(4)) });
  await post('/v1/completions', { model: 'sim-model', max_tokens: 1, prompt: [1, 2, 3] });
  for (const reason of ['api_mode', 'text_empty', 'hashes', 'shallow'])
    assert.equal(await miss(reason), before[reason] + 1, reason);
});

// Blocks completed during decode (--kv-cache-decode): the prompt's tokens followed by the
// generated ones fill new blocks, which the simulated engine caches and publishes as vLLM does.
test('KV events: blocks completed during decode are published', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.34', '--port', '0', '--kv-events-port', String(kvPort), '--kv-cache-decode']);
  t.after(() => sim.stop());
  const [w] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [w], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort } }));
  assert.equal(r.status, 200, r.text);
  const blocks = async () => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${w.host}:${kvPort}`)?.value ?? 0;
  let k = 1;
  assert.ok(await waitFor(async () => {
    await complete(w, 1000000 * k++, 16);  // max_tokens 1: no block completes during decode
    return (kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_batches_total', `${w.host}:${kvPort}`)?.value ?? 0) > 0;
  }, 15000, 100), 'no KV batch');
  const before = await blocks();
  // A 32-token prompt (2 blocks) and 64 generated tokens: at least 2 more blocks complete.
  const res = await fetch(`${w.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 32 }, (_, j) => 3000000 + j), max_tokens: 64 }),
  });
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  assert.ok(await waitFor(async () => (await blocks()) >= before + 4, 10000),
    `decode blocks did not arrive: ${await blocks()} vs ${before} before`);
});

// Data parallelism: a worker with 2 DP engines (--kv-events-dp-ranks 2) publishes each rank's
// events on the event port + rank; the gateway follows both (kvDpRankCount 2) as separate
// inventories and scores the worker by its best rank.
test('KV events: DP ranks publish separately and the worker is scored by its best rank', async (t) => {
  let kvPort = await freePort('127.0.0.36');
  if (kvPort > 65000) kvPort = 40000 + (kvPort % 20000);
  const sim = await startSim(['--hosts', '127.0.0.35-36', '--port', '0', '--kv-events-port', String(kvPort),
    '--kv-events-dp-ranks', '2']);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvDpRankCount: 2 } }));
  assert.equal(r.status, 200, r.text);
  const source = (w) => `${w.host}:${kvPort}`;
  const m = async (w, name) => kvSample(await scrapeMetrics(gw.api), name, source(w))?.value ?? 0;
  // Requests alternate between the ranks: two throwaway prompts reach both.
  let k = 1;
  for (const w of [a, b]) {
    assert.ok(await waitFor(async () => {
      await complete(w, 4000000 + 1000 * k++, 16);
      return (await m(w, 'kvgate_kv_batches_total')) >= 2;
    }, 15000, 100), `no KV batches from both ranks of ${w.host}`);
  }
  // Two 4-block prompts on b: one lands on each rank (round-robin), both are mirrored.
  const before = await m(b, 'kvgate_kv_blocks');
  await complete(b, 0, 64);
  await complete(b, 100000, 64);
  assert.ok(await waitFor(async () => (await m(b, 'kvgate_kv_blocks')) >= before + 8, 10000), 'both ranks\' blocks');
  // Whichever rank holds each prefix, requests sharing it go to b.
  const m0 = await scrapeMetrics(gw.api);
  for (const first of [0, 100000]) {
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => first + j).concat([7]), max_tokens: 1 }),
    });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  }
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, b) - sentTo(m0, b), 2);
  // The engine's /metrics reports one cache per rank.
  const text = await (await fetch(`${b.url}/metrics`)).text();
  assert.equal((text.match(/^vllm:cache_config_info\{/gm) || []).length, 2);
});

// The ttft law (kvLbMode "ttft"): a stream's uncached blocks count as prefill queued on its
// endpoint from the pick to its first byte (kvgate_endpoint_pending_prefill_blocks; a
// non-streaming request is not counted: its first byte is its last); a sibling moves off a home
// whose queue costs more than its own prefill elsewhere. Numbers by hand, miss weight 1.
test('Tier 1.5 ttft law: queued prefill is counted until the first byte and moves a sibling', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.36-37', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [warm, cold] = sim.workers;
  const gw = await gateway(t, ['--workers', '1'], {
    env: { LOXILB_KV_TTFT_MISS_WEIGHT_PCT: '100', LOXILB_KV_COLDSTART_SEED_Nth: '0', LOXILB_KV_SPECULATIVE_TTL_MS: '0' },
  });
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [warm, cold],
    extraArgs: { name: 'ttft', kvExactMode: 3, kvZmqPort: kvPort, kvLbMode: 'ttft', sse_mode: true } }));
  assert.equal(r.status, 200, r.text);
  await joinSubscriptions(gw, [warm, cold], kvPort, 700000);
  const blocks = async (w) => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${w.host}:${kvPort}`).value;
  const wb = await blocks(warm);
  await complete(warm, 3000, 64);  // prefix A: 4 blocks, on the warm worker only
  assert.ok(await waitFor(async () => (await blocks(warm)) >= wb + 4, 10000));
  const gauge = (m, w) => m.find((s) => s.name === 'kvgate_endpoint_pending_prefill_blocks' &&
    s.labels.endpoint === `${w.host}:${w.port}`)?.value;
  const inflight = (m, w) => m.find((s) => s.name === 'kvgate_endpoint_inflight_requests' &&
    s.labels.endpoint === `${w.host}:${w.port}`)?.value;
  const prefixA = Array.from({ length: 64 }, (_, j) => 3000 + j);
  const send = (prompt, stream) => fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2, stream }),
  }).then(async (res) => { assert.equal(res.status, 200); return res.text(); });
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 2500 }) })).arrayBuffer();
  // A non-streaming request on prefix A (costs: warm 0, cold 4): stalled on warm, not counted.
  const plain = send(prefixA.concat([1]), false);
  assert.ok(await waitFor(async () => inflight(await scrapeMetrics(gw.api), warm) === 1, 5000, 20));
  assert.equal(gauge(await scrapeMetrics(gw.api), warm), 0);
  await plain;
  // A stream of prefix A + 640 new tokens (44 blocks; warm holds 4): warm costs 40, cold 44:
  // warm, with 40 blocks queued until its first byte.
  const m0 = await scrapeMetrics(gw.api);
  const long = send(prefixA.concat(Array.from({ length: 640 }, (_, j) => 50000 + j)), true);
  assert.ok(await waitFor(async () => gauge(await scrapeMetrics(gw.api), warm) === 40, 5000, 20),
    'the stream\'s 40 uncached blocks are not counted on the warm worker');
  // A sibling on prefix A (4 blocks, all on warm): warm 40 + 0 + 2 x 1 in flight = 42, cold
  // 0 + 4 + 0 = 4: it goes to the cold worker, a spill, and queues nothing there when it gets there
  // (the gauge counts its 4 blocks until its own first byte).
  await send(prefixA.concat([2]), true);
  const m1 = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m1, cold) - sentTo(m0, cold), 1, 'the sibling did not move off the busy home');
  const spills = (m) => m.find((s) => s.name === 'loxilb_pd_kv_tier15_spills_total' && s.labels.service === 'ttft')?.value ?? 0;
  assert.equal(spills(m1) - spills(m0), 1);
  assert.equal(gauge(m1, cold), 0);
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 0 }) })).arrayBuffer();
  assert.match(await long, /\[DONE\]/);
  const m2 = await scrapeMetrics(gw.api);
  assert.equal(gauge(m2, warm), 0, 'queued prefill leaked on the warm worker');
  assert.equal(gauge(m2, cold), 0);
});

// Issue 29 §1: a scoring profile (kvScoringProfile) replaces the law. A bad profile is a 400 naming
// its part and changes nothing; the rule's GET shows the profile with every default spelled out
// (and kvgate_rule_routing_info the same); a prefix-only profile sends every request of a prefix
// one worker holds to it, where round-robin would split them; a load-only profile with onMiss
// score places a prompt nobody holds itself (key `load`, not a Tier 1.5 miss).
test('a scoring profile routes Tier 1.5 end to end; a bad one is refused', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.50-51', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [warm, cold] = sim.workers;
  const gw = await gateway(t, ['--workers', '1'], { env: { LOXILB_KV_SPECULATIVE_TTL_MS: '0',
    LOXILB_KV_COLDSTART_SEED_Nth: '0' } });
  const port = await freePort();
  const args = (profile) => rule({ port, workers: [warm, cold], extraArgs: { name: 'prof', kvExactMode: 3,
    kvZmqPort: kvPort, kvExactApiMode: 'completions', kvScoringProfile: profile } });
  for (const [profile, culprit] of [
    [{ scorers: [{ name: 'prefix', weight: -1 }] }, /kvScoringProfile\.scorers\[0\]\.weight/],
    [{ scorers: [{ name: 'telepathy' }] }, /unknown scorer 'telepathy'/],
    [{ filters: [{ name: 'prefix_affinity', threshold: 2 }], scorers: [{ name: 'load' }] }, /threshold: must be a number in 0\.\.1/],
    ['llm-x', /unknown built-in profile/],
    [{ scorers: [] }, /at least one scorer/],
  ]) {
    const bad = await api(gw.api, 'POST', LB_BASE, args(profile));
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, culprit);
  }
  assert.equal((await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr.length, 0, 'a refused rule was stored');

  assert.equal((await api(gw.api, 'POST', LB_BASE, args({ scorers: [{ name: 'prefix' }] }))).status, 200);
  const got = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0];
  assert.deepEqual(got.effective.stages, ['kv_exact', 'rr']);
  assert.deepEqual(got.effective.kvScoringProfile,
    { filters: [], scorers: [{ name: 'prefix', weight: 1 }], picker: 'max', onMiss: 'score', coldStartSeeding: false });
  assert.equal(got.effective.coldstart_seed_nth, undefined, 'cold-start seeding shown where it is off');
  assert.equal(got.effective.mean_load_factor_pct, undefined, 'a law knob shown under a profile');
  assert.equal(got.effective.kvLbMode, undefined, 'a profile replaces the law');
  const info = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_rule_routing_info' && s.labels.rule === 'prof');
  assert.ok(info.some((s) => s.labels.knob === 'kvScoringProfile' && /"prefix"/.test(s.labels.value)), JSON.stringify(info));

  await joinSubscriptions(gw, [warm, cold], kvPort, 950000);
  const blocks = async (w) => kvSample(await scrapeMetrics(gw.api), 'kvgate_kv_blocks', `${w.host}:${kvPort}`).value;
  const wb = await blocks(warm);
  await complete(warm, 7000, 64);  // 4 blocks only the warm worker holds
  assert.ok(await waitFor(async () => (await blocks(warm)) >= wb + 4, 10000));
  const send = (i, first) => fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: 64 }, (_, j) => first + j).concat([i]), max_tokens: 1 }),
  }).then(async (res) => { assert.equal(res.status, 200); await res.arrayBuffer(); });
  const m0 = await scrapeMetrics(gw.api);
  for (let i = 0; i < 4; i++) await send(i, 7000);
  const m1 = await scrapeMetrics(gw.api);
  assert.deepEqual([sentTo(m1, warm) - sentTo(m0, warm), sentTo(m1, cold) - sentTo(m0, cold)], [4, 0]);

  // Load only, misses scored: a prompt nobody holds goes to the idle worker while the warm one
  // holds a stalled request, decided by kv_exact under key load.
  const load = got;
  load.serviceArguments.kvScoringProfile = { scorers: [{ name: 'load' }], onMiss: 'score' };
  assert.equal((await api(gw.api, 'POST', LB_BASE, load)).status, 200, 'GET output with a profile POSTs back');
  // (the stall outlasts the miss by seconds; the fault is cleared only after it)
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 8000 }) })).arrayBuffer();
  const stalled = send(20, 7000);
  assert.ok(await waitFor(async () => {
    const m = await scrapeMetrics(gw.api);
    return m.find((s) => s.name === 'kvgate_endpoint_inflight_requests' && s.labels.endpoint === `${warm.host}:${warm.port}`)?.value === 1;
  }, 5000, 20), 'the stalled request is not in flight');
  const m2 = await scrapeMetrics(gw.api);
  await send(21, 880000);  // nobody holds it
  const m3 = await scrapeMetrics(gw.api);
  await (await fetch(`${warm.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 0 }) })).arrayBuffer();
  assert.equal(sentTo(m3, cold) - sentTo(m2, cold), 1, 'the miss was not placed on the idle worker');
  const decided = (m, key) => m.filter((s) => s.name === 'kvgate_selector_decisions_total' && s.labels.rule === 'prof' &&
    s.labels.selector === 'kv_exact' && s.labels.key === key).reduce((x, s) => x + s.value, 0);
  assert.equal(decided(m3, 'load') - decided(m2, 'load'), 1, 'the miss was not keyed load by kv_exact');

  // The default law as a built-in profile: its parts spelled out, cold-start seeding on (as the
  // law's), the miss guard off (it places misses itself).
  load.serviceArguments.kvScoringProfile = 'predict-q';
  assert.equal((await api(gw.api, 'POST', LB_BASE, load)).status, 200);
  const pq = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0].effective;
  assert.equal(pq.kvScoringProfileBuiltin, 'predict-q');
  assert.deepEqual(pq.kvScoringProfile, { filters: [], scorers: [{ name: 'predict_q', weight: 1, decodeWeight: 0.5, batchOffset: 1, capacityShare: 1 }],
    picker: 'max', onMiss: 'score', coldStartSeeding: true });
  assert.equal(typeof pq.coldstart_seed_nth, 'number', 'cold-start seeding not shown');
  assert.equal(pq.min_match_tokens, undefined);
  await stalled;
});

// Issue 29 §2: load in tokens, measured online. Streams Tier 1.5 keyed (the default law, a
// prompt nobody holds placed by round-robin behind it) count their uncached tokens as prefill
// queued on their endpoint until the first byte, and each first byte samples the endpoint's
// prefill rate (tokens ahead + own / time to it): the gauges show the rate once streams have
// run, the queue back at 0, and the predicted wait 0 with nothing queued.
test('Tier 1.5 streams measure each endpoint\'s prefill rate online', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.52-53', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: sim.workers,
    extraArgs: { name: 'rate', kvExactMode: 3, kvZmqPort: kvPort, kvExactApiMode: 'completions', sse_mode: true } }));
  assert.equal(r.status, 200, r.text);
  await joinSubscriptions(gw, sim.workers, kvPort, 960000);
  for (let i = 0; i < 4; i++) {  // 160-token prompts nobody holds: 10 uncached blocks each
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', stream: true, max_tokens: 2,
        prompt: Array.from({ length: 160 }, (_, j) => 5000000 + 1000 * i + j) }),
    });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /\[DONE\]/);
  }
  // The gateway ends a stream's bookkeeping just after relaying its last byte (a fresh CI run
  // read one started stream still open): wait for the in-flight gauges to settle first.
  let m;
  const of = (name, w) => m.find((s) => s.name === name && s.labels.endpoint === `${w.host}:${w.port}`)?.value;
  await waitFor(async () => {
    m = await scrapeMetrics(gw.api);
    return sim.workers.every((w) => of('kvgate_endpoint_started_streams', w) === 0 &&
      of('kvgate_endpoint_pending_prefill_tokens', w) === 0);
  }, 5000);
  for (const w of sim.workers) {  // round-robin placed two on each
    assert.ok(of('kvgate_endpoint_prefill_rate_tokens_per_second', w) > 0, `no rate for ${w.host}`);
    assert.equal(of('kvgate_endpoint_pending_prefill_tokens', w), 0);
    assert.equal(of('kvgate_endpoint_prefill_wait_seconds', w), 0);
    assert.equal(of('kvgate_endpoint_started_streams', w), 0);
  }
  // A stream whose engine has not answered yet is queued prefill on its endpoint (10 blocks, 160
  // tokens), in flight but not started; once its first token is relayed it is a started stream
  // (decoding: the predict laws' decode weight) until it ends.
  for (const w of sim.workers)
    await (await fetch(`${w.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 6000 }) })).arrayBuffer();
  const answer = fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', stream: true, max_tokens: 1000,
      prompt: Array.from({ length: 160 }, (_, j) => 5100000 + j) }),
  });
  const sum = (mm, name) => sim.workers.reduce((x, w) => x +
    (mm.find((s) => s.name === name && s.labels.endpoint === `${w.host}:${w.port}`)?.value ?? 0), 0);
  let queued;  // (the engine answers nothing for 6 s from its receipt)
  assert.ok(await waitFor(async () => {
    queued = await scrapeMetrics(gw.api);
    return sum(queued, 'kvgate_endpoint_inflight_requests') === 1 &&
      sum(queued, 'kvgate_endpoint_pending_prefill_tokens') > 0;
  }, 5000, 20), 'the stream is not in flight');
  assert.equal(sum(queued, 'kvgate_endpoint_pending_prefill_tokens'), 160);
  assert.equal(sum(queued, 'kvgate_endpoint_started_streams'), 0);
  for (const w of sim.workers)
    await (await fetch(`${w.url}/sim/fault`, { method: 'POST', body: JSON.stringify({ stall_ms: 0 }) })).arrayBuffer();
  const res = await answer;
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);
  // (1,000 tokens, a simulator step apart: the stream stays open for seconds after its first)
  const open = await scrapeMetrics(gw.api);
  assert.equal(sum(open, 'kvgate_endpoint_started_streams'), 1, 'the started stream is not counted');
  assert.equal(sum(open, 'kvgate_endpoint_pending_prefill_tokens'), 0);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  assert.match(text, /\[DONE\]/);
  // (the request ends on the gateway's side a moment after the client's last byte)
  let after;
  assert.ok(await waitFor(async () => {
    after = await scrapeMetrics(gw.api);
    return sum(after, 'kvgate_endpoint_inflight_requests') === 0 &&
      sum(after, 'kvgate_endpoint_started_streams') === 0;
  }, 5000, 20), 'the stream is still in flight');
  assert.equal(sum(after, 'kvgate_endpoint_started_streams'), 0);
  assert.equal(sum(after, 'kvgate_endpoint_pending_prefill_tokens'), 0);
});

test('Tier 1.5 over HTTP/2: streams of one connection go to the worker holding their prefix', async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--hosts', '127.0.0.12-13', '--port', '0', '--kv-events-port', String(kvPort)]);
  t.after(() => sim.stop());
  const [a, b] = sim.workers;
  const gw = await gateway(t, ['--workers', '1']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE,
    rule({ port, workers: [a, b], extraArgs: { kvExactMode: 3, kvZmqPort: kvPort, kvLbMode: 'hard' } }));
  assert.equal(r.status, 200, r.text);
  await joinSubscriptions(gw, [a, b], kvPort, 300000);
  // b holds a 4-block prompt (tokens 0..63), a another (5000..5063).
  const blocks = (w) => scrapeMetrics(gw.api).then((m) => kvSample(m, 'kvgate_kv_blocks', `${w.host}:${kvPort}`).value);
  const [bBefore, aBefore] = [await blocks(b), await blocks(a)];
  await complete(b, 0, 64);
  await complete(a, 5000, 64);
  assert.ok(await waitFor(async () => (await blocks(b)) >= bBefore + 4 && (await blocks(a)) >= aBefore + 4, 10000));
  // Eight streams at once on one HTTP/2 connection, alternating the two prefixes.
  const c = http2.connect(`http://127.0.0.1:${port}`);
  t.after(() => c.close());
  const one = (first, i) => new Promise((resolve, reject) => {
    const s = c.request({ ':method': 'POST', ':path': '/v1/completions', 'content-type': 'application/json' });
    let status;
    s.on('response', (x) => { status = x[':status']; });
    s.resume();
    s.on('end', () => resolve(status));
    s.on('error', reject);
    const prompt = Array.from({ length: 64 }, (_, j) => first + j).concat([92000 + i]);
    s.end(JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }));
  });
  const before = await scrapeMetrics(gw.api);
  const statuses = await Promise.all(Array.from({ length: 8 }, (_, i) => one(i % 2 ? 5000 : 0, i)));
  assert.deepEqual(statuses, Array(8).fill(200));
  const m = await scrapeMetrics(gw.api);
  assert.equal(sentTo(m, b) - sentTo(before, b), 4, 'the prefix b holds went to b');
  assert.equal(sentTo(m, a) - sentTo(before, a), 4, 'the prefix a holds went to a');
});
