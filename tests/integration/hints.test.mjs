// `kvgate index`: the LookupRoute service over real gRPC, driven by a client that is not ours
// (@grpc/grpc-js loading proto/inferencecache/v1alpha1/inferencecache.proto). Every reason code
// end to end; scores and picks are hand-computed from shared/reference/inference-cache.md §2-§4
// (ranking v2, the floors, the affinity formula with Python's hashlib), fingerprints from the
// golden vectors in tests/golden/xxh3_fingerprint.json.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';
import { buildModelsDir } from '../../scripts/models_dir.mjs';
import { freePort, makeCa, makeLeafCert, makeServerCert, parseMetrics, startKvgate, startSim, stop, tempDir,
  waitFor } from './lib.mjs';

const PROTO = path.resolve('proto/inferencecache/v1alpha1/inferencecache.proto');
const def = protoLoader.loadSync(PROTO, { keepCase: true, longs: String, enums: String, defaults: true,
  includeDirs: [path.resolve('proto')] });
const pb = grpc.loadPackageDefinition(def).inferencecache.v1alpha1;
const golden = JSON.parse(fs.readFileSync('tests/golden/xxh3_fingerprint.json', 'utf8'));
const vec = (name) => golden.vectors.find((v) => v.name === name);
const be = (h) => Buffer.from(h.be64_hex, 'hex');
const QWEN = 'Qwen/Qwen3-8B';

function client(addr) {
  const c = new pb.InferenceCache(addr, grpc.credentials.createInsecure());
  const call = (m, req, opts = {}) => new Promise((resolve, reject) =>
    c[m](req, opts, (e, r) => (e ? reject(e) : resolve(r))));
  const report = (msgs) => new Promise((resolve, reject) => {
    const s = c.ReportCacheState((e, ack) => (e ? reject(e) : resolve(ack)));
    for (const m of msgs) s.write(m);
    s.end();
  });
  return { c, call, report, close: () => c.close() };
}

async function startIndex(t, args) {
  const { proc, ready } = await startKvgate(['index', '--listen', '127.0.0.1:0',
    '--metrics-listen', '127.0.0.1:0', ...args]);
  t.after(() => stop(proc));
  return { proc, grpc: ready.grpc, metrics: ready.metrics };
}

async function metrics(ix) {
  const res = await fetch(`${ix.metrics}/metrics`);
  return parseMetrics(await res.text());
}

// A chain report of golden vector `name` for one replica.
const chainOf = (name) => {
  const v = vec(name);
  return { block_hashes: v.prefix_hashes.map(be), block_token_counts: v.prefix_hashes.map(() => v.block_size) };
};
const update = (replica, prefixes, extra = {}) => ({ replica_id: replica, model_id: 'm', tenant_id: 'acme',
  hash_scheme: 'vllm', prefixes, ...extra });
const lookup = (extra) => ({ model_id: 'm', tenant_id: 'acme', hash_scheme: 'vllm', ...extra });

describe('kvgate index: LookupRoute over gRPC', () => {
  let tmp; let modelsDir;
  before(async () => {
    tmp = tempDir();
    modelsDir = path.join(tmp.dir, 'models');
    await buildModelsDir(modelsDir);
  });
  after(() => tmp.remove());

  test('every reason code from a grpc-js client', async (t) => {
    const policy = path.join(tmp.dir, 'policy.json');
    fs.writeFileSync(policy, JSON.stringify({ spec: {} }));
    const ix = await startIndex(t, ['--policy', policy, '--models-dir', modelsDir]);
    const cl = client(ix.grpc);
    t.after(() => cl.close());

    // A cold index: NO_HINT, never UNKNOWN_*.
    let r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_0_63') }));
    assert.equal(r.reason_code, 'NO_HINT');
    assert.deepEqual(r.replica_scores, []);

    // r1 holds the 4 blocks of tokens 0..63, r2 the first 2, r3 tokens 1..16's block; r1 reports
    // stats (hit rate 0.5).
    const ack = await cl.report([
      update('r1', [chainOf('tokens_0_63')], { stats: { replica_id: 'r1', hit_rate: 0.5, pressure: 0 } }),
      update('r2', [{ block_hashes: chainOf('tokens_0_63').block_hashes.slice(0, 2), block_token_counts: [16, 16] }]),
      update('r3', [chainOf('tokens_1_16')]),
    ]);
    assert.deepEqual(ack, { accepted: true, reason_code: '' });

    // PREFIX_MATCH by chain: r1 matches 64 tokens; T = 3 serving replicas, one as deep: dp = 2/3,
    // score 64 x 2/3. r2 (32 tokens) is under the default 64-token floor.
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_0_63') }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');
    assert.equal(r.replica_scores.length, 1);
    assert.equal(r.replica_scores[0].replica_id, 'r1');
    assert.equal(r.replica_scores[0].matched_tokens, 64);
    assert.ok(Math.abs(r.replica_scores[0].score - 64 * 2 / 3) < 0.01, String(r.replica_scores[0].score));
    assert.ok(r.replica_scores[0].estimated_cache_hit_prob > 0.99);
    assert.equal(r.replica_scores[0].tier, 'CACHE_TIER_T1');
    assert.ok(Number(r.lookup_latency_us) >= 0);
    // The same prefix given as token ids: the server computes the golden fingerprints.
    r = await cl.call('LookupRoute', lookup({ token_ids: vec('tokens_0_63').tokens }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');
    assert.equal(r.replica_scores[0].replica_id, 'r1');
    assert.deepEqual(r.token_ids, []);  // echoed only for prompt_text

    // TENANT_HOT: an exact key nobody holds, r1's stats are fresh with hit rate 0.5 >= 0.1.
    r = await cl.call('LookupRoute', lookup({ prefix_hash: Buffer.from('0102030405060708', 'hex') }));
    assert.equal(r.reason_code, 'TENANT_HOT');
    assert.equal(r.replica_scores.length, 1);
    assert.equal(r.replica_scores[0].replica_id, 'r1');
    assert.equal(r.replica_scores[0].matched_tokens, 0);
    assert.ok(r.replica_scores[0].score > 0.49 && r.replica_scores[0].score <= 0.5);

    // AFFINITY_HINT: a novel chain [aa x 8, bb x 8]; sorted(r1, r2, r3)[SHA256 % 3] = index 0.
    r = await cl.call('LookupRoute', lookup({ block_hashes: [Buffer.alloc(8, 0xaa), Buffer.alloc(8, 0xbb)],
      block_token_counts: [16, 16], adapter_id: '' }));
    assert.equal(r.reason_code, 'AFFINITY_HINT');
    assert.deepEqual(r.replica_scores.map((s) => [s.replica_id, s.score, s.matched_tokens]), [['r1', 0, 0]]);

    // The miss classifier, outer key first.
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_1_32'), tenant_id: 'nobody' }));
    assert.equal(r.reason_code, 'UNKNOWN_TENANT');
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_1_32'), model_id: 'other' }));
    assert.equal(r.reason_code, 'UNKNOWN_MODEL');
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_1_32'), hash_scheme: 'vllm-v1' }));
    assert.equal(r.reason_code, 'UNKNOWN_HASH_SCHEME');
    // An empty scheme is not a domain.
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_0_63'), hash_scheme: '' }));
    assert.equal(r.reason_code, 'NO_HINT');

    // POLICY_REQUIRES_CHAIN after a policy reload (no restart).
    const reloads = async () => (await metrics(ix)).find((s) => s.name === 'kvgate_index_policy_reloads_total' &&
      s.labels.result === 'ok')?.value ?? 0;
    fs.writeFileSync(policy, JSON.stringify({ spec: { strategy: { requireChain: true } } }));
    assert.ok(await waitFor(async () => (await reloads()) >= 1, 10000), 'policy reloaded');
    r = await cl.call('LookupRoute', lookup({ prefix_hash: Buffer.from('0102030405060708', 'hex') }));
    assert.equal(r.reason_code, 'POLICY_REQUIRES_CHAIN');
    r = await cl.call('LookupRoute', lookup({ ...chainOf('tokens_0_63') }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');

    // TIMEOUT: a 1 ms budget cannot cover tokenizing half a megabyte of prompt.
    fs.writeFileSync(policy, JSON.stringify({ spec: { lookupTimeoutMs: 1 } }));
    assert.ok(await waitFor(async () => (await reloads()) >= 2, 10000), 'policy reloaded');
    r = await cl.call('LookupRoute', lookup({ model_id: QWEN, prompt_text: 'the cache '.repeat(50000) }));
    assert.equal(r.reason_code, 'TIMEOUT');
    assert.deepEqual(r.replica_scores, []);
    // A bad policy file keeps the one in force, and is counted.
    fs.writeFileSync(policy, '{"spec": {"eviction": "FIFO"}}');
    assert.ok(await waitFor(async () => ((await metrics(ix)).find((s) => s.name === 'kvgate_index_policy_reloads_total' &&
      s.labels.result === 'error')?.value ?? 0) >= 1, 10000));
    r = await cl.call('LookupRoute', lookup({ model_id: QWEN, prompt_text: 'the cache '.repeat(50000) }));
    assert.equal(r.reason_code, 'TIMEOUT');

    // prompt_text with the real tokenizer: tokens echoed (a chat with one user message).
    fs.writeFileSync(policy, JSON.stringify({ spec: {} }));
    assert.ok(await waitFor(async () => (await reloads()) >= 3, 10000), 'policy reloaded');
    r = await cl.call('LookupRoute', lookup({ model_id: QWEN, prompt_text: 'hello there, how are you today?' }));
    assert.ok(r.token_ids.length > 5, JSON.stringify(r));
    assert.equal(r.reason_code, 'UNKNOWN_MODEL');  // nothing reported for the Qwen model

    // The metrics: one call counted per answer, with the upstream names and labels.
    const m = await metrics(ix);
    const calls = (code, used) => m.filter((s) => s.name === 'inferencecache_lookup_route_calls_total' &&
      s.labels.reason_code === code && (used === undefined || s.labels.hint_used === used))
      .reduce((a, s) => a + s.value, 0);
    assert.equal(calls('PREFIX_MATCH', 'true'), 3);
    assert.equal(calls('TENANT_HOT', 'true'), 1);
    assert.equal(calls('AFFINITY_HINT', 'true'), 1);
    assert.equal(calls('NO_HINT', 'false'), 2);
    assert.equal(calls('UNKNOWN_TENANT'), 1);
    assert.equal(calls('UNKNOWN_MODEL'), 2);
    assert.equal(calls('UNKNOWN_HASH_SCHEME'), 1);
    assert.equal(calls('POLICY_REQUIRES_CHAIN', 'false'), 1);
    assert.equal(calls('TIMEOUT', 'false'), 2);
    assert.ok(m.find((s) => s.name === 'inferencecache_index_entries' && s.labels.model === 'm').value >= 5);
    assert.ok(m.some((s) => s.name === 'inferencecache_lookup_route_latency_seconds_bucket'));
  });

  test('ingest: events, GetCacheState, LookupPDRoute, RenderTemplate', async (t) => {
    const replicas = path.join(tmp.dir, 'replicas.json');
    fs.writeFileSync(replicas, JSON.stringify({ replicas: [
      { id: 'p1', model: 'm', tenant: 'acme', role: 'prefill', transport: 'NIXL' },
      { id: 'p2', model: 'm', tenant: 'acme', role: 'prefill', transport: 'Mooncake' },
      { id: 'd1', model: 'm', tenant: 'acme', role: 'decode' },
    ] }));
    const ix = await startIndex(t, ['--replicas', replicas, '--models-dir', modelsDir]);
    const cl = client(ix.grpc);
    t.after(() => cl.close());
    const key = be(vec('tokens_0_63').prefix_hashes[3]);
    let ack = await cl.report([update('p2', [{ prefix_hash: key, token_count: 64 }],
      { stats: { hit_rate: 0.25, pressure: 0.5, cache_memory_bytes: 1024 } })]);
    assert.equal(ack.accepted, true);

    // GetCacheState: the replica with its stats; one prefix key.
    let st = await cl.call('GetCacheState', { model_id: 'm', tenant_id: 'acme' });
    assert.equal(st.replicas.length, 1);
    assert.equal(st.replicas[0].replica_id, 'p2');
    assert.equal(st.replicas[0].hit_rate, 0.25);
    assert.equal(st.replicas[0].cache_memory_bytes, '1024');
    assert.equal(st.summary.total_prefixes, '1');

    // Pressure 0.5 halves the score: 64 x 1 x 0.5.
    let r = await cl.call('LookupRoute', lookup({ prefix_hash: key }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');
    assert.ok(Math.abs(r.replica_scores[0].score - 32) < 0.01, String(r.replica_scores[0].score));

    // LookupPDRoute: the prefill replica holding the prefix, the decode by affinity.
    let pd = await cl.call('LookupPDRoute', { model_id: 'm', tenant_id: 'acme', prefix_hash: key });
    assert.deepEqual(pd, { prefill_replica_id: 'p2', decode_replica_id: 'd1', transport_hint: 'Mooncake',
      reason_code: 'PREFIX_MATCH' });
    // A novel prefix: both by affinity; no prefix at all: NO_HINT.
    pd = await cl.call('LookupPDRoute', { model_id: 'm', tenant_id: 'acme', prefix_hash: Buffer.from('0102030405060708', 'hex') });
    assert.equal(pd.reason_code, 'AFFINITY_HINT');
    assert.equal(pd.prefill_replica_id, 'p2');  // sorted(p1, p2)[SHA256(01..08) % 2 = 1] (hashlib)
    assert.equal(pd.decode_replica_id, 'd1');
    pd = await cl.call('LookupPDRoute', { model_id: 'm', tenant_id: 'acme' });
    assert.equal(pd.reason_code, 'NO_HINT');

    // PublishEvent: PREFIX_EVICTED drops p2's copy; unknown types are refused with a code.
    ack = await cl.call('PublishEvent', { type: 'PREFIX_EVICTED', replica_id: 'p2', model_id: 'm', tenant_id: 'acme', prefix_hash: key });
    assert.equal(ack.accepted, true);
    r = await cl.call('LookupRoute', lookup({ prefix_hash: key }));
    assert.notEqual(r.reason_code, 'PREFIX_MATCH');
    ack = await cl.call('PublishEvent', { type: 99, replica_id: 'p2', model_id: 'm', tenant_id: 'acme' });
    assert.deepEqual(ack, { accepted: false, reason_code: 'UNKNOWN_EVENT_TYPE' });
    // ALL_CLEARED: the replica's holdings and stats go.
    await cl.report([update('p2', [{ prefix_hash: key, token_count: 64 }])]);
    ack = await cl.call('PublishEvent', { type: 'ALL_CLEARED', replica_id: 'p2', model_id: 'm', tenant_id: 'acme' });
    assert.equal(ack.accepted, true);
    st = await cl.call('GetCacheState', { model_id: 'm', tenant_id: 'acme' });
    assert.equal(st.summary.total_prefixes, '0');

    // RenderTemplate with the model's chat template.
    const rt = await cl.call('RenderTemplate', { template_ref: QWEN, variables: { prompt: 'hi' }, tenant_id: 'acme' });
    assert.equal(rt.reason_code, 'OK');
    assert.match(Buffer.from(rt.rendered_prompt).toString(), /<\|im_start\|>user\nhi<\|im_end\|>/);
    const missing = await cl.call('RenderTemplate', { template_ref: 'no/such-model', variables: { prompt: 'hi' } });
    assert.equal(missing.reason_code, 'TEMPLATE_NOT_FOUND');
  });

  // Replicas followed through their engines' KV events (the simulator publishes vLLM's ZMQ
  // events) beside one that reports over gRPC: one index, both kinds in one answer.
  test('engine KV events feed LookupRoute beside ReportCacheState', async (t) => {
    const kvPort = await freePort();
    const sim = await startSim(['--hosts', '127.0.0.30-31', '--port', '0', '--kv-events-port', String(kvPort)]);
    t.after(() => sim.stop());
    const [e1, e2] = sim.workers;
    const replicas = path.join(tmp.dir, 'events.json');
    fs.writeFileSync(replicas, JSON.stringify({ replicas: [
      { id: 'e1', model: 'sim-model', tenant: 'acme', events: `tcp://${e1.host}:${kvPort}` },
      { id: 'e2', model: 'sim-model', tenant: 'acme', events: `tcp://${e2.host}:${kvPort}` },
    ] }));
    const ix = await startIndex(t, ['--replicas', replicas]);
    const cl = client(ix.grpc);
    t.after(() => cl.close());
    const complete = async (w, first, n) => {
      const res = await fetch(`${w.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: Array.from({ length: n }, (_, i) => first + i), max_tokens: 1 }) });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
    };
    // Join both subscriptions (ZMQ drops what a SUB sends before it is connected).
    let k = 1;
    for (const w of [e1, e2]) {
      assert.ok(await waitFor(async () => {
        await complete(w, 10000000 * k++, 16);
        return ((await metrics(ix)).find((s) => s.name === 'kvgate_kv_batches_total' &&
          s.labels.source === `${w.host}:${kvPort}`)?.value ?? 0) > 0;
      }, 15000, 100), `no KV batch from ${w.host}`);
    }
    // e2 computes tokens 0..63; r9 reports the first two blocks over gRPC.
    await complete(e2, 0, 64);
    const v = vec('tokens_0_63');
    await cl.report([{ replica_id: 'r9', model_id: 'sim-model', tenant_id: 'acme', hash_scheme: 'vllm',
      prefixes: [{ block_hashes: v.prefix_hashes.slice(0, 2).map(be), block_token_counts: [16, 16] }] }]);
    const req = { model_id: 'sim-model', tenant_id: 'acme', hash_scheme: 'vllm', token_ids: v.tokens };
    const r = await waitFor(async () => {
      const x = await cl.call('LookupRoute', req);
      return x.reason_code === 'PREFIX_MATCH' && x.replica_scores[0]?.matched_tokens === 64 ? x : null;
    }, 10000, 100);
    assert.ok(r, 'e2\'s blocks did not arrive');
    // T = 3 serving (e1, e2 by events, r9 by report); only e2 at 64 tokens: dp 2/3. r9's 32
    // tokens are under the 64-token floor.
    assert.deepEqual(r.replica_scores.map((s) => s.replica_id), ['e2']);
    assert.ok(Math.abs(r.replica_scores[0].score - 64 * 2 / 3) < 0.01, String(r.replica_scores[0].score));
    // The event-fed scope is known to the classifier.
    assert.equal((await cl.call('LookupRoute', { ...req, hash_scheme: 'sglang' })).reason_code, 'UNKNOWN_HASH_SCHEME');
  });

  test('hostile input: a clear code, no crash', async (t) => {
    const ix = await startIndex(t, []);
    const cl = client(ix.grpc);
    t.after(() => cl.close());
    // Refused updates: the first refusal names the reason; nothing is indexed.
    let ack = await cl.report([update('r1', [{ prefix_hash: Buffer.alloc(8, 1), token_count: 64 }], { hash_scheme: '' })]);
    assert.deepEqual(ack, { accepted: false, reason_code: 'EMPTY_HASH_SCHEME' });
    ack = await cl.report([update('', [{ prefix_hash: Buffer.alloc(8, 1) }])]);
    assert.deepEqual(ack, { accepted: false, reason_code: 'EMPTY_REPLICA_ID' });
    // A malformed chain entry (lengths differ) and an enormous key are dropped: PARTIAL.
    ack = await cl.report([update('r1', [
      { block_hashes: [Buffer.alloc(8, 1), Buffer.alloc(8, 2)], block_token_counts: [16] },
      { prefix_hash: Buffer.alloc(100000, 7) },
      { prefix_hash: Buffer.alloc(8, 9), token_count: 64, tier: 99 },  // unknown tier: UNSPECIFIED -> T1
    ])]);
    assert.deepEqual(ack, { accepted: true, reason_code: 'PARTIAL' });
    let r = await cl.call('LookupRoute', lookup({ prefix_hash: Buffer.alloc(8, 9) }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');
    assert.equal(r.replica_scores[0].tier, 'CACHE_TIER_T1');
    // Chain arrays of different lengths: NO_HINT.
    r = await cl.call('LookupRoute', lookup({ block_hashes: [Buffer.alloc(8, 9)], block_token_counts: [16, 16] }));
    assert.equal(r.reason_code, 'NO_HINT');
    // An enormous token list (2^20 + 1 ids, 4 MiB on the wire): NO_HINT.
    r = await cl.call('LookupRoute', lookup({ token_ids: new Array(2 ** 20 + 1).fill(5) }));
    assert.equal(r.reason_code, 'NO_HINT');
    // prompt_text without --models-dir: fails open.
    r = await cl.call('LookupRoute', lookup({ prompt_text: 'hello' }));
    assert.equal(r.reason_code, 'NO_HINT');
    // Bytes that are not a LookupRouteRequest: a gRPC error, and the server carries on.
    const raw = new grpc.Client(ix.grpc, grpc.credentials.createInsecure());
    const err = await new Promise((resolve) => raw.makeUnaryRequest('/inferencecache.v1alpha1.InferenceCache/LookupRoute',
      (x) => x, (x) => x, Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]), (e) => resolve(e)));
    raw.close();
    assert.ok(err && err.code !== grpc.status.OK, String(err));
    // A string field with invalid UTF-8 (model_id = ff fe): refused by protobuf, counted as
    // undecodable rather than logged.
    const raw2 = new grpc.Client(ix.grpc, grpc.credentials.createInsecure());
    const err2 = await new Promise((resolve) => raw2.makeUnaryRequest('/inferencecache.v1alpha1.InferenceCache/LookupRoute',
      (x) => x, (x) => x, Buffer.from([0x0a, 0x02, 0xff, 0xfe]), (e) => resolve(e)));
    raw2.close();
    assert.ok(err2 && err2.code !== grpc.status.OK, String(err2));
    const undecodable = (await metrics(ix)).find((s) => s.name === 'kvgate_index_ingest_total' &&
      s.labels.kind === 'undecodable');
    assert.ok(undecodable && undecodable.value >= 1, JSON.stringify(undecodable));
    // Model ids the index does not hold are not metric labels: any number, any length.
    for (let i = 0; i < 5; i++) await cl.call('LookupRoute', lookup({ model_id: `junk-${i}-${'x'.repeat(1000)}`, prefix_hash: Buffer.alloc(8, 9) }));
    const labels = (await metrics(ix)).filter((s) => s.name === 'inferencecache_lookup_route_calls_total').map((s) => s.labels.model);
    assert.ok(!labels.some((m) => m.startsWith('junk-')), labels.join(','));
    assert.ok(labels.includes('other') && labels.includes('m'), labels.join(','));
    // Streams upstream never implemented answer UNIMPLEMENTED rather than hang.
    const se = await new Promise((resolve) => {
      const s = cl.c.StreamCacheEvents({ model_id: 'm' });
      s.on('error', resolve);
      s.on('data', () => {});
    });
    assert.equal(se.code, grpc.status.UNIMPLEMENTED);
    r = await cl.call('LookupRoute', lookup({ prefix_hash: Buffer.alloc(8, 9) }));
    assert.equal(r.reason_code, 'PREFIX_MATCH');
    // Unknown flags and bad files: exit 2 with a message.
    await assert.rejects(startKvgate(['index', '--bogus']), /unknown flag/);
    const bad = tempDir();
    t.after(() => bad.remove());
    fs.writeFileSync(path.join(bad.dir, 'p.json'), '{"minimumMatchedTokens": "x"}');
    await assert.rejects(startKvgate(['index', '--listen', '127.0.0.1:0', '--policy', path.join(bad.dir, 'p.json')]),
      /minimumMatchedTokens/);
  });

  // Issue 28 §1.8: the ingest RPCs accepted anyone. With --ingest-token-file they need the
  // bearer token (a wrong or missing one is UNAUTHENTICATED and changes nothing); with
  // --tls-client-ca every call needs a client certificate from that CA.
  test('ingest needs its bearer token; mTLS needs a client certificate', async (t) => {
    const dir = tempDir();
    t.after(() => dir.remove());
    const tokenFile = path.join(dir.dir, 'ingest.token');
    fs.writeFileSync(tokenFile, '# the writers token\nw-0123456789abcdef\n', { mode: 0o600 });
    const ix = await startIndex(t, ['--ingest-token-file', tokenFile]);
    const c = new pb.InferenceCache(ix.grpc, grpc.credentials.createInsecure());
    t.after(() => c.close());
    const md = (v) => { const m = new grpc.Metadata(); if (v) m.add('authorization', v); return m; };
    const publish = (m) => new Promise((resolve) => c.PublishEvent({ type: 'ALL_CLEARED', replica_id: 'r1',
      model_id: 'm', tenant_id: 'acme' }, m, (e, r) => resolve({ e, r })));
    const report = (m) => new Promise((resolve) => {
      const st = c.ReportCacheState(m, (e, r) => resolve({ e, r }));
      st.write(update('r1', [{ prefix_hash: Buffer.alloc(8, 7) }]));
      st.end();
    });
    for (const v of [undefined, 'Bearer wrong', 'Bearer w-0123456789abcde', 'w-0123456789abcdef']) {
      const p = await publish(md(v));
      assert.equal(p.e?.code, grpc.status.UNAUTHENTICATED, `${v}: ${p.e}`);
      const r = await report(md(v));
      assert.equal(r.e?.code, grpc.status.UNAUTHENTICATED, `${v}: ${r.e}`);
    }
    // Nothing was written: the index holds nothing and applied no update.
    const look = (p) => new Promise((resolve, reject) => c.LookupRoute(lookup({ prefix_hash: p }),
      (e, r) => (e ? reject(e) : resolve(r))));
    const ingested = async (kind) => (await metrics(ix)).find((x) => x.name === 'kvgate_index_ingest_total' &&
      x.labels.kind === kind).value;
    assert.equal((await look(Buffer.alloc(8, 7))).reason_code, 'NO_HINT');
    assert.equal(await ingested('updates'), 0);
    assert.equal(await ingested('events'), 0);
    const ok = await report(md('Bearer w-0123456789abcdef'));
    assert.equal(ok.e, null, String(ok.e));
    assert.equal(ok.r.accepted, true);
    assert.equal(await ingested('updates'), 1);
    assert.notEqual((await look(Buffer.alloc(8, 7))).reason_code, 'NO_HINT');
    assert.equal((await publish(md('Bearer w-0123456789abcdef'))).r.accepted, true);
    const refused = (await metrics(ix)).find((x) => x.name === 'kvgate_index_ingest_refused_total' &&
      x.labels.reason === 'unauthenticated');
    assert.equal(refused.value, 8);
    // A token file anyone may read is refused at start.
    fs.chmodSync(tokenFile, 0o644);
    await assert.rejects(startKvgate(['index', '--listen', '127.0.0.1:0', '--ingest-token-file', tokenFile]),
      /ingest-token-file/);

    // mTLS: a client without a certificate, or with one from another CA, gets no answer at all.
    const ca = makeCa(dir.dir, 'ix-ca');
    const server = makeServerCert(dir.dir, ca, 1, 'ix-server');
    const clientCa = makeCa(dir.dir, 'ix-client-ca');
    const good = makeLeafCert(dir.dir, clientCa, 2, 'ix-good', { cn: 'writer' });
    const stranger = makeLeafCert(dir.dir, makeCa(dir.dir, 'ix-stranger-ca'), 3, 'ix-stranger', { cn: 'writer' });
    const tls = await startIndex(t, ['--tls-cert', server.crt, '--tls-key', server.key, '--tls-client-ca', clientCa.cert]);
    const root = fs.readFileSync(ca.cert);
    const creds = (leaf) => (leaf ? grpc.credentials.createSsl(root, fs.readFileSync(leaf.key), fs.readFileSync(leaf.crt))
      : grpc.credentials.createSsl(root));
    const call = (leaf) => new Promise((resolve) => {
      const cl = new pb.InferenceCache(tls.grpc, creds(leaf));
      cl.PublishEvent({ type: 'ALL_CLEARED', replica_id: 'r1', model_id: 'm', tenant_id: 'acme' },
        { deadline: Date.now() + 5000 }, (e, r) => { cl.close(); resolve({ e, r }); });
    });
    assert.notEqual((await call(null)).e, null, 'no client certificate: no call');
    assert.notEqual((await call(stranger)).e, null, 'a certificate from another CA: no call');
    const mt = await call(good);
    assert.equal(mt.e, null, String(mt.e));
    assert.equal(mt.r.accepted, true);
    await assert.rejects(startKvgate(['index', '--listen', '127.0.0.1:0', '--tls-client-ca', clientCa.cert]),
      /needs --tls-cert/);
  });
});
