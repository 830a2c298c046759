// P/D disaggregation end to end: seed 000's P/D rule (addresses moved to loopback) in front of a
// simulated prefill and decode worker speaking each engine's dialect (vLLM NIXL, SGLang
// bootstrap rooms, TensorRT-LLM context/generation). The simulator refuses a leg that is not
// its role's (kvgate_sim_pd_refused_total) and counts pulled transfers, so a wrong
// orchestration fails here. Also: the tier per request (access log, metric), a failing prefill
// or decode leg, the any-healthy rescue, and client cancellation of either leg.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import http from 'node:http';
import { test } from 'node:test';
import { LB_BASE, api, freePort, gateway, parseMetrics, scrapeMetrics, simMetrics, sleep, startSim,
  waitFor } from './lib.mjs';

// Seed 000's P/D example, on loopback; `extra` adds serviceArguments.
function pdRule(port, prefill, decode, extra = {}, more = []) {
  return {
    serviceArguments: {
      externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, host: '127.0.0.1',
      pd_disagg_mode: true, ...extra,
    },
    endpoints: [
      { endpointIP: prefill.host, targetPort: prefill.port, weight: 1, ep_role: 1, nixl_port: 5600 },
      { endpointIP: decode.host, targetPort: decode.port, weight: 1, ep_role: 2, nixl_port: 5601 },
      ...more,
    ],
  };
}

async function post(port, path, body, headers = {}) {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const tierCount = (samples, tier) => samples.find((s) => s.name === 'loxilb_ai_pd_tier_selected_total' &&
  s.labels.tier === tier)?.value ?? 0;
const accessLines = (gw) => gw.proc.stderrText.split('\n').filter((l) => l.includes('access'));

async function fleet(t, engine, roles = 'prefill,decode', workers = 2, extra = []) {
  const sim = await startSim(['--engine', engine, '--workers', String(workers), '--port', '0',
    '--role', roles, '--timing', 'fixed', '--prefill-base-ms', '1', '--itl-ms', '1', ...extra]);
  t.after(() => sim.stop());
  return sim;
}

for (const engine of ['vllm', 'sglang', 'trtllm']) {
  test(`seed P/D example, ${engine} dialect: chat and completions, plain and streamed`, async (t) => {
    const sim = await fleet(t, engine);
    const [prefill, decode] = sim.workers;
    assert.equal(prefill.role, 'prefill');
    assert.equal(decode.role, 'decode');
    const gw = await gateway(t, ['--access-log']);
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: engine }));
    assert.equal(r.status, 200, r.text);

    const before = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    const prompt = 'tell me about prefill and decode';
    const cases = [
      ['/v1/completions', { model: 'sim-model', prompt, max_tokens: 5 }],
      ['/v1/completions', { model: 'sim-model', prompt, max_tokens: 5, stream: true,
        stream_options: { include_usage: true } }],
      ['/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: prompt }], max_tokens: 4 }],
      ['/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: prompt }], max_tokens: 4,
        stream: true }],
    ];
    for (const [path, body] of cases) {
      const res = await post(port, path, body, { 'x-request-id': `client-${engine}` });
      assert.equal(res.status, 200, `${engine} ${path}: ${res.text}`);
      // The client keeps its id; both legs carried the P/D id naming the transfer addresses.
      assert.equal(res.headers.get('x-request-id'), `client-${engine}`);
      if (body.stream) {
        const events = res.text.split('\n\n').filter((e) => e.startsWith('data: '));
        assert.equal(events.at(-1), 'data: [DONE]');
        const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
        const words = chunks.filter((c) => c.choices.length > 0 &&
          (c.choices[0].text || c.choices[0].delta?.content)).length;
        assert.equal(words, body.max_tokens, 'the decode worker generated the whole answer');
        if (body.stream_options) assert.ok(chunks.at(-1).usage, 'the usage chunk survives (decode leg)');
      } else {
        const j = JSON.parse(res.text);
        const text = j.choices[0].text ?? j.choices[0].message.content;
        assert.equal(text.split(' ').length, body.max_tokens, text);
      }
    }
    const after = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    assert.equal(after[0].kvgate_sim_requests_total - before[0].kvgate_sim_requests_total, 4, 'one prefill leg each');
    assert.equal(after[1].kvgate_sim_pd_pulled_total - (before[1].kvgate_sim_pd_pulled_total ?? 0), 4,
      'every decode pulled its prefill');
    assert.equal(after[0].kvgate_sim_pd_refused_total, 0);
    assert.equal(after[1].kvgate_sim_pd_refused_total, 0);
    assert.equal(after[0].kvgate_sim_pd_held, 0, 'no prefilled blocks left waiting');
    // The tier that chose the prefill endpoint: Tier 2 (min-load), in the metric and the log.
    const m = await scrapeMetrics(gw.api);
    assert.equal(tierCount(m, 'tier2'), 4);
    assert.equal(tierCount(m, 'rescue'), 0);
    const lines = await waitFor(() => {
      const l = accessLines(gw).filter((x) => x.includes(`client-${engine}`));
      return l.length >= 4 ? l : null;
    });
    assert.ok(lines, gw.proc.stderrText);
    for (const l of lines) {
      assert.match(l, /tier=min_load/);
      assert.match(l, /leg_id=___prefill_addr_127\.0\.0\.1:5600___decode_addr_127\.0\.0\.1:5601_[0-9a-f]{32}/);
      assert.match(l, new RegExp(`prefill=127\\.0\\.0\\.1:${prefill.port}`));
      assert.match(l, new RegExp(`endpoint=127\\.0\\.0\\.1:${decode.port}`));
    }
    // The same P/D exchange over HTTP/2 (each stream runs the same request path: issue 30):
    // one prefill leg, one pulled decode, the whole answer streamed.
    const mid = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    const s = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const answer = await new Promise((resolve, reject) => {
        const q = s.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
        let h = {};
        let d = '';
        q.setEncoding('utf8');
        q.on('response', (x) => { h = x; });
        q.on('data', (c) => { d += c; });
        q.on('end', () => resolve({ status: h[':status'], body: d }));
        q.on('error', reject);
        q.end(JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: prompt }], max_tokens: 4, stream: true }));
      });
      assert.equal(answer.status, 200, answer.body);
      const events = answer.body.split('\n\n').filter((e) => e.startsWith('data: '));
      assert.equal(events.at(-1), 'data: [DONE]');
      const words = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)))
        .filter((c) => c.choices.length > 0 && c.choices[0].delta?.content).length;
      assert.equal(words, 4, 'the decode worker generated the whole answer over h2');
    } finally {
      s.close();
    }
    const end = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    assert.equal(end[0].kvgate_sim_requests_total - mid[0].kvgate_sim_requests_total, 1, 'one prefill leg (h2)');
    assert.equal(end[1].kvgate_sim_pd_pulled_total - mid[1].kvgate_sim_pd_pulled_total, 1, 'one pulled decode (h2)');
    // The simulator refuses a plain request on either role: a gateway that skipped the dialect
    // would fail this test.
    for (const w of [prefill, decode]) {
      const res = await fetch(`${w.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2 }),
      });
      assert.equal(res.status, 400);
      assert.match((await res.json()).message, new RegExp(`${w.role} worker`));
    }
  });
}

// An HTTP/2 (h2c) front for one simulated worker: each stream is forwarded to the worker over
// HTTP/1.1 and its answer streamed back, so a rule with backend_protocol http2 reaches the
// simulator's real P/D behaviour. Counts the streams it carried.
async function h2Front(t, worker) {
  const seen = { streams: 0, paths: [] };
  const srv = http2.createServer();
  srv.on('stream', (stream, headers) => {
    seen.streams++;
    seen.paths.push(headers[':path']);
    stream.on('error', () => {});
    const fwd = {};
    for (const [k, v] of Object.entries(headers)) if (!k.startsWith(':')) fwd[k] = v;
    const req = http.request({ host: worker.host, port: worker.port, method: headers[':method'],
      path: headers[':path'], headers: { ...fwd, host: headers[':authority'] } }, (res) => {
      const out = { ':status': res.statusCode };
      for (const [k, v] of Object.entries(res.headers))
        if (!['connection', 'keep-alive', 'transfer-encoding'].includes(k)) out[k] = v;
      if (stream.destroyed) return res.destroy();
      stream.respond(out);
      res.pipe(stream);
    });
    req.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    stream.on('close', () => req.destroy());
    stream.pipe(req);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { seen, host: '127.0.0.1', port: srv.address().port };
}

for (const engine of ['vllm', 'sglang', 'trtllm']) {
  test(`P/D legs over HTTP/2 to the engines (backend_protocol http2), ${engine} dialect`, async (t) => {
    const sim = await fleet(t, engine);
    const [prefill, decode] = sim.workers;
    const [pf, df] = [await h2Front(t, prefill), await h2Front(t, decode)];
    const gw = await gateway(t, ['--workers', '1']);
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE,
      pdRule(port, pf, df, { kvEngineType: engine, backend_protocol: 'http2' }));
    assert.equal(r.status, 200, r.text);
    const before = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    const prompt = 'prefill and decode over HTTP/2';
    const plain = await post(port, '/v1/completions', { model: 'sim-model', prompt, max_tokens: 5 });
    assert.equal(plain.status, 200, plain.text);
    assert.equal(JSON.parse(plain.text).choices[0].text.split(' ').length, 5);
    const streamed = await post(port, '/v1/chat/completions', { model: 'sim-model',
      messages: [{ role: 'user', content: prompt }], max_tokens: 4, stream: true });
    assert.equal(streamed.status, 200, streamed.text);
    const events = streamed.text.split('\n\n').filter((e) => e.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]');
    assert.equal(events.slice(0, -1).map((e) => JSON.parse(e.slice(6)))
      .filter((c) => c.choices.length > 0 && c.choices[0].delta?.content).length, 4);
    const after = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
    assert.equal(after[0].kvgate_sim_requests_total - before[0].kvgate_sim_requests_total, 2, 'one prefill leg each');
    assert.equal(after[1].kvgate_sim_pd_pulled_total - (before[1].kvgate_sim_pd_pulled_total ?? 0), 2,
      'every decode pulled its prefill');
    assert.equal(after[0].kvgate_sim_pd_refused_total, 0);
    assert.equal(after[1].kvgate_sim_pd_refused_total, 0);
    // Every leg went over HTTP/2: two streams on each front.
    assert.ok(pf.seen.streams >= 2 && df.seen.streams >= 2, JSON.stringify([pf.seen, df.seen]));
    const m = await scrapeMetrics(gw.api);
    const opened = m.find((x) => x.name === 'kvgate_upstream_h2_streams_total' && x.labels.event === 'opened')?.value;
    assert.ok(opened >= 4, `streams opened: ${opened}`);
  });
}

test('P/D failures: a refused prefill is relayed with no decode leg; a failing decode is reported', async (t) => {
  const sim = await fleet(t, 'vllm');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode))).status, 200);
  const body = { model: 'sim-model', prompt: 'failure paths', max_tokens: 3 };

  // The prefill engine answers 503: the client gets that answer; no decode leg runs.
  await api(prefill.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 503 });
  let before = await simMetrics(decode);
  let res = await post(port, '/v1/completions', body);
  assert.equal(res.status, 503, res.text);
  let after = await simMetrics(decode);
  assert.equal(after.kvgate_sim_requests_total, before.kvgate_sim_requests_total, 'no decode leg');

  // The decode engine fails after a good prefill: its answer reaches the client.
  await api(decode.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 500 });
  res = await post(port, '/v1/completions', body);
  assert.equal(res.status, 500, res.text);

  // The decode worker's connection is refused: 502 naming the decode leg and the prefill.
  const dead = await freePort();
  const port2 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE,
    pdRule(port2, prefill, { host: '127.0.0.1', port: dead }))).status, 200);
  res = await post(port2, '/v1/completions', body);
  assert.equal(res.status, 502, res.text);
  const err = JSON.parse(res.text).error;
  assert.equal(err.code, 'decode_failed');
  assert.match(err.message, new RegExp(`decode leg, after the prefill on 127\\.0\\.0\\.1:${prefill.port}`));
  // Then it is all back to normal.
  res = await post(port, '/v1/completions', body);
  assert.equal(res.status, 200, res.text);
});

test('P/D rescue: with no reachable prefill endpoint a role-less endpoint serves the request', async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,decode,both', 3);
  const [, decode, plain] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  const dead = { host: '127.0.0.1', port: await freePort() };
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, dead, decode, {},
    [{ endpointIP: plain.host, targetPort: plain.port, weight: 1 }]));
  assert.equal(r.status, 200, r.text);
  const before = await simMetrics(plain);
  const res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'rescue me', max_tokens: 2 });
  assert.equal(res.status, 200, res.text);
  const after = await simMetrics(plain);
  assert.equal(after.kvgate_sim_requests_total - before.kvgate_sim_requests_total, 1);
  const m = await scrapeMetrics(gw.api);
  assert.equal(tierCount(m, 'rescue'), 1);
  assert.equal(tierCount(m, 'tier2'), 0, 'counted once per request: by the tier that served it');
  // Without a role-less endpoint there is no rescue: 502 naming the prefill leg.
  const port2 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port2, dead, decode))).status, 200);
  const res2 = await post(port2, '/v1/completions', { model: 'sim-model', prompt: 'x', max_tokens: 1 });
  assert.equal(res2.status, 502, res2.text);
  assert.match(JSON.parse(res2.text).error.message, /^prefill leg: connect to/);
});

// Issue 28 §1.7: the first decode endpoint picked is unreachable. With a pull connector (NIXL:
// the decode takes the KV with the prefill's kv_transfer_params) the decode moves to the next
// endpoint and the legs' id names the one that served; with a push connector (P2P NCCL: the
// prefill sent the KV to the decode its request id named, and answers no kv_transfer_params)
// the prefill is redone under an id naming the next decode endpoint. The simulated engines
// refuse a decode whose id names another worker (P2P) and count every prefill and pull.
for (const connector of ['p2p', 'nixl'])
test(`P/D vLLM ${connector}: an unreachable decode endpoint is replaced and the id names the one that served`, async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,decode', 2, ['--pd-connector', connector]);
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t, ['--access-log']);
  const port = await freePort();
  const dead = await freePort();
  const rule = {
    serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, host: '127.0.0.1',
      pd_disagg_mode: true, kvEngineType: 'vllm' },
    endpoints: [
      { endpointIP: prefill.host, targetPort: prefill.port, weight: 1, ep_role: 1, nixl_port: prefill.port },
      // The first decode endpoint (min-load's first tie): nothing listens there.
      { endpointIP: '127.0.0.1', targetPort: dead, weight: 1, ep_role: 2, nixl_port: dead },
      { endpointIP: decode.host, targetPort: decode.port, weight: 1, ep_role: 2, nixl_port: decode.port },
    ],
  };
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule)).status, 200);
  const before = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  const res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'move the decode', max_tokens: 3 },
    { 'x-request-id': `moved-${connector}` });
  assert.equal(res.status, 200, res.text);
  assert.equal(JSON.parse(res.text).choices[0].text.split(' ').length, 3);
  const after = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  const prefills = after[0].kvgate_sim_requests_total - before[0].kvgate_sim_requests_total;
  assert.equal(prefills, connector === 'p2p' ? 2 : 1, 'a push connector\'s prefill is redone, a pull one\'s is not');
  assert.equal((after[1].kvgate_sim_pd_pulled_total ?? 0) - (before[1].kvgate_sim_pd_pulled_total ?? 0), 1);
  assert.equal(after[0].kvgate_sim_pd_refused_total ?? 0, 0);
  assert.equal(after[1].kvgate_sim_pd_refused_total ?? 0, 0, 'no decode leg named another worker');
  const m = await scrapeMetrics(gw.api);
  const redone = m.filter((s) => s.name === 'kvgate_pd_prefill_redone_total').reduce((a, s) => a + s.value, 0);
  assert.equal(redone, connector === 'p2p' ? 1 : 0);
  const line = await waitFor(() => accessLines(gw).find((l) => l.includes(`moved-${connector}`)));
  assert.ok(line, gw.proc.stderrText);
  assert.match(line, new RegExp(`leg_id=___prefill_addr_127\\.0\\.0\\.1:${prefill.port}___decode_addr_127\\.0\\.0\\.1:${decode.port}_[0-9a-f]{32}`));
  assert.match(line, new RegExp(`endpoint=127\\.0\\.0\\.1:${decode.port}`));
  if (connector !== 'p2p') return;
  // Every decode endpoint unreachable: each pushed prefill is redone for the next one, then 502
  // decode_failed (not the rescue, not a prefill failure).
  const port2 = await freePort();
  const dead2 = await freePort();
  const rule2 = { ...rule, serviceArguments: { ...rule.serviceArguments, port: port2 },
    endpoints: [rule.endpoints[0], rule.endpoints[1],
      { endpointIP: '127.0.0.1', targetPort: dead2, weight: 1, ep_role: 2, nixl_port: dead2 }] };
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule2)).status, 200);
  const p0 = (await simMetrics(prefill)).kvgate_sim_requests_total;
  const res2 = await post(port2, '/v1/completions', { model: 'sim-model', prompt: 'nowhere to decode', max_tokens: 2 });
  assert.equal(res2.status, 502, res2.text);
  assert.equal(JSON.parse(res2.text).error.code, 'decode_failed', res2.text);
  assert.equal((await simMetrics(prefill)).kvgate_sim_requests_total - p0, 2, 'one prefill per decode endpoint tried');
});

// A client that leaves aborts the open leg (the gateway's watcher starts within about a second).
async function cancelAfter(port, body, ms) {
  const ac = new AbortController();
  const p = fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: ac.signal,
  }).then(async (res) => { for await (const _ of res.body) { /* read until aborted */ } }).catch(() => {});
  await sleep(ms);
  ac.abort();
  await p;
}

test('P/D cancel: a client leaving mid-prefill or mid-decode aborts the engines\' requests', async (t) => {
  for (const engine of ['vllm', 'sglang', 'trtllm']) {
    const sim = await fleet(t, engine);
    const [prefill, decode] = sim.workers;
    const gw = await gateway(t);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: engine }))).status, 200);
    // Mid-prefill: the prefill engine stalls; the client leaves.
    await api(prefill.url, 'POST', '/sim/fault', { stall_ms: 10000 });
    await cancelAfter(port, { model: 'sim-model', prompt: `cancel prefill ${engine}`, max_tokens: 2 }, 300);
    assert.ok(await waitFor(async () => (await simMetrics(prefill)).kvgate_sim_requests_aborted_total >= 1, 8000),
      `${engine}: the prefill engine saw the abort`);
    if (engine === 'sglang')  // both legs were open (concurrent): the waiting decode is aborted too
      assert.ok(await waitFor(async () => (await simMetrics(decode)).kvgate_sim_requests_aborted_total >= 1, 8000),
        'sglang: the decode engine saw the abort');
    const decodeAborts = (await simMetrics(decode)).kvgate_sim_requests_aborted_total;
    await api(prefill.url, 'POST', '/sim/fault', { reset: true });
    // Mid-decode: a slow stream; the client leaves after the first events.
    await api(decode.url, 'POST', '/sim/fault', { event_delay_ms: 200 });
    await cancelAfter(port, { model: 'sim-model', prompt: `cancel decode ${engine}`, max_tokens: 50, stream: true }, 1800);
    assert.ok(await waitFor(async () => (await simMetrics(decode)).kvgate_sim_requests_aborted_total > decodeAborts, 8000),
      `${engine}: the decode engine saw the abort`);
    await api(decode.url, 'POST', '/sim/fault', { reset: true });
    // The gateway holds nothing afterwards.
    const inflight = async () => parseMetrics(await (await fetch(`${gw.api}/metrics`)).text())
      .filter((s) => s.name === 'kvgate_endpoint_inflight').reduce((x, s) => x + s.value, 0);
    assert.ok(await waitFor(async () => (await inflight()) === 0, 5000), `${engine}: every lease was released`);
  }
});

test('SGLang P/D: a prefill that fails ends the waiting decode leg', async (t) => {
  const sim = await fleet(t, 'sglang');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: 'sglang' }))).status, 200);
  // The prefill engine answers 500: its answer is the client's; the waiting decode is ended.
  // It answers after 3 s, so the decode engine has read its leg before the gateway ends it (a
  // leg ended before its engine read it is not an abort the engine can count).
  await api(prefill.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 500, stall_ms: 3000 });
  const t0 = Date.now();
  let res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'room without prefill', max_tokens: 2 });
  assert.equal(res.status, 500, res.text);
  assert.equal(JSON.parse(res.text).code, 500, 'the prefill engine\'s own body');
  assert.ok(Date.now() - t0 < 20000, 'not the decode worker\'s 30 s room wait');
  assert.ok(await waitFor(async () => (await simMetrics(decode)).kvgate_sim_requests_aborted_total >= 1, 8000),
    'the decode engine\'s waiting request was aborted');
  // The prefill engine cuts its answer: 502 prefill_failed naming it.
  await api(prefill.url, 'POST', '/sim/fault', { stall_ms: 0, close_mid_stream_after: 0 });
  res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'cut prefill', max_tokens: 2 });
  assert.equal(res.status, 502, res.text);
  const e = JSON.parse(res.text).error;
  assert.equal(e.code, 'prefill_failed');
  assert.match(e.message, new RegExp(`prefill leg to 127\\.0\\.0\\.1:${prefill.port} failed`));
  await api(prefill.url, 'POST', '/sim/fault', { reset: true });
});

// Issue 28 §1.7: a decode leg that failed left the concurrent SGLang prefill leg, and its
// endpoint's in-flight slot, alive until the prefill ended on its own. The prefill engine here
// stalls 20 s; the decode engine refuses after 3 s (503): the prefill leg must end within seconds.
test('SGLang P/D: a decode that fails ends the concurrent prefill leg', async (t) => {
  const sim = await fleet(t, 'sglang');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: 'sglang' }))).status, 200);
  await api(prefill.url, 'POST', '/sim/fault', { stall_ms: 20000 });
  // The decode engine refuses after 3 s, so the prefill engine has read its leg by then.
  await api(decode.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 503, stall_ms: 3000 });
  const inflight = async () => (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_endpoint_inflight_requests' &&
    s.labels.endpoint === `127.0.0.1:${prefill.port}`)?.value;
  const t0 = Date.now();
  const res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'decode refuses', max_tokens: 2 });
  assert.equal(res.status, 503, res.text);
  assert.ok(await waitFor(async () => (await inflight()) === 0, 5000), `prefill in flight: ${await inflight()}`);
  assert.ok(Date.now() - t0 < 15000, 'the prefill leg ended long before its engine\'s 20 s stall');
  assert.ok(await waitFor(async () => (await simMetrics(prefill)).kvgate_sim_requests_aborted_total >= 1, 8000),
    'the prefill engine\'s request was aborted');
  await api(prefill.url, 'POST', '/sim/fault', { reset: true });
  await api(decode.url, 'POST', '/sim/fault', { reset: true });
});

// Seed 000's P/D example exactly as written (cache-aware, kvExactMode 1, sha256_cbor, block 16),
// addresses moved to loopback: two prefill workers publishing KV events, one decode worker. Each
// tier decides once where its signal is the strongest, and a pin to an endpoint that went away
// is evicted while the ladder goes on.
// The hash algorithm each engine's events declare (the seed's vLLM one for vllm).
const SEED_HASH = { vllm: 'sha256_cbor', sglang: 'sha256_sglang', trtllm: 'blockhash_trtllm' };
for (const [engine, hosts] of [['vllm', '127.0.0.31-33'], ['sglang', '127.0.0.34-36'], ['trtllm', '127.0.0.37-39']])
test(`seed P/D example as written, ${engine}: Tier 0, Tier 1, Tier 1.5 and Tier 2 each decide`, async (t) => {
  const kvPort = await freePort();
  const sim = await startSim(['--engine', engine, '--hosts', hosts, '--port', '0', '--kv-events-port', String(kvPort),
    '--kv-events-hash-seed', '0', '--role', 'prefill,prefill,decode', '--timing', 'fixed',
    '--prefill-base-ms', '1', '--itl-ms', '1']);
  t.after(() => sim.stop());
  const [p1, p2, d] = sim.workers;
  const gw = await gateway(t, ['--access-log'], { env: { LLB_KV_NONE_HASH_SEED: '0' } });
  const port = await freePort();
  const seed = {
    serviceArguments: {
      externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, host: '127.0.0.1',
      pd_disagg_mode: true, pd_cache_aware_mode: true, kvExactMode: 1, kvZmqPort: kvPort,
      kvHashAlgo: SEED_HASH[engine], kvBlockSize: 16, kvEngineType: engine,
    },
    endpoints: [
      { endpointIP: p1.host, targetPort: p1.port, weight: 1, ep_role: 1, nixl_port: 5600 },
      { endpointIP: p2.host, targetPort: p2.port, weight: 1, ep_role: 1, nixl_port: 5600 },
      { endpointIP: d.host, targetPort: d.port, weight: 1, ep_role: 2, nixl_port: 5600 },
    ],
  };
  const r = await api(gw.api, 'POST', LB_BASE, seed);
  assert.equal(r.status, 200, r.text);

  const ids = (base) => Array.from({ length: 64 }, (_, i) => base + i);
  // A prefill leg sent straight to a prefill worker, in its dialect: its cache (and KV events)
  // learn the prompt.
  let room = 1;
  const leg = (w) => engine === 'vllm' ? { kv_transfer_params: { do_remote_decode: true } }
    : engine === 'sglang' ? { bootstrap_host: w.host, bootstrap_port: 8998, bootstrap_room: room++ }
      : { disaggregated_params: { request_type: 'context_only', disagg_request_id: room++ } };
  const warm = async (w, base) => {
    const res = await fetch(`${w.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: Array.isArray(base) ? base : ids(base),
        max_tokens: 1, stream: false, ...leg(w) }),
    });
    const text = await res.text();
    assert.equal(res.status, 200, text);
  };
  // (TensorRT-LLM's events are drained from the serving port.)
  const source = (w) => `${w.host}:${engine === 'trtllm' ? w.port : kvPort}`;
  const metricOf = async (name, w) => (await scrapeMetrics(gw.api)).find((s) => s.name === name &&
    s.labels.source === source(w))?.value ?? 0;
  const blocks = (w) => metricOf('kvgate_kv_blocks', w);  // (a drain counts empty answers too)
  let k = 1;
  for (const w of [p1, p2])  // PUB/SUB joins asynchronously; a drain answers empty at first
    assert.ok(await waitFor(async () => { await warm(w, 1000000 * k++); return (await blocks(w)) > 0; }, 15000, 100),
      `no KV blocks from ${w.host}`);
  // Every join prompt indexed (a later warm is told apart by the count growing by its 4 blocks).
  for (const w of [p1, p2]) {
    let last = -1;
    assert.ok(await waitFor(async () => {
      const n = await blocks(w);
      const settled = n === last;
      last = n;
      return settled;
    }, 5000, 300));
  }

  const tiers = async () => {
    const m = await scrapeMetrics(gw.api);
    return Object.fromEntries(['tier0', 'tier1', 'tier15', 'tier2', 'rescue'].map((x) => [x, tierCount(m, x)]));
  };
  let seen = 0;
  const send = async (base, { user, conv } = {}) => {
    const body = { model: 'sim-model', prompt: ids(base), max_tokens: 2 };
    if (user) body.user_id = user;
    const before = await tiers();
    const res = await post(port, '/v1/completions', body, conv ? { 'x-conversation-id': conv } : {});
    assert.equal(res.status, 200, res.text);
    const after = await tiers();
    const moved = Object.keys(after).filter((x) => after[x] !== before[x]);
    const line = await waitFor(() => accessLines(gw).slice(seen).find((l) => l.includes('status=200')));
    seen = accessLines(gw).length;
    return { tier: moved.join(','), prefill: line.match(/prefill=([^ ]+)/)?.[1], line };
  };
  const label = (w) => `${w.host}:${w.port}`;

  // Tier 1.5: p2 alone holds R (warmed straight), nobody routed R before.
  const before = await blocks(p2);
  await warm(p2, 50000);
  assert.ok(await waitFor(async () => (await blocks(p2)) >= before + 4, 5000), 'R reached the index');
  let got = await send(50000);
  assert.equal(got.tier, 'tier15', got.line);
  assert.equal(got.prefill, label(p2));
  assert.match(got.line, /tier=kv_exact/);
  // Tier 1: the gateway routed R once: its own trie says p2.
  got = await send(50000);
  assert.equal(got.tier, 'tier1', got.line);
  assert.equal(got.prefill, label(p2));
  // An excluded Tier 1.5 winner falls to the next-best overlap (never to a decode endpoint nor
  // straight to Tier 2): p2 holds all of Q, p1 its first half; the controller disables p2.
  const q1 = await blocks(p1), q2 = await blocks(p2);
  await warm(p1, [...ids(55000).slice(0, 32), ...ids(99000).slice(0, 32)]);  // Q's first 2 blocks
  await warm(p2, 55000);  // all 4
  assert.ok(await waitFor(async () => (await blocks(p1)) >= q1 + 4 && (await blocks(p2)) >= q2 + 4, 5000));
  await api(gw.api, 'PUT', '/kvgate/v1/controller', { interval_sec: 60,
    endpoints: [{ endpointIP: p2.host, targetPort: p2.port, state: 'DISABLED' }] });
  got = await send(55000);
  assert.equal(got.tier, 'tier15', got.line);
  assert.equal(got.prefill, label(p1));
  assert.match(got.line, /key=kv_overlap/);
  await api(gw.api, 'DELETE', '/kvgate/v1/controller');
  // Tier 2, then Tier 0: a new conversation's first prompt is nobody's; its next sticks.
  got = await send(60000, { user: 'alice' });
  assert.equal(got.tier, 'tier2', got.line);
  const pinned = got.prefill;
  got = await send(70000, { user: 'alice' });
  assert.equal(got.tier, 'tier0', got.line);
  assert.equal(got.prefill, pinned);
  assert.match(got.line, /tier=session/);
  // X-Conversation-Id overrides user_id: "bob" has no pin.
  got = await send(80000, { user: 'alice', conv: 'bob' });
  assert.notEqual(got.tier, 'tier0', got.line);
  // The pinned prefill engine fails: three 503s (relayed: no decode leg) open its breaker (P/D
  // rules: 3); then the pin is evicted, the ladder picks the other one and the conversation
  // sticks there from then on.
  const [gone, other] = pinned === label(p1) ? [p1, p2] : [p2, p1];
  await api(gone.url, 'POST', '/sim/fault', { fail_requests: 3, fail_status: 503 });
  for (let i = 0; i < 3; ++i) {
    const res = await post(port, '/v1/completions', { model: 'sim-model', prompt: ids(85000 + 100 * i),
      max_tokens: 2, user_id: 'alice' });
    assert.equal(res.status, 503, res.text);
  }
  seen = accessLines(gw).length;
  got = await send(90000, { user: 'alice' });
  assert.equal(got.prefill, label(other), got.line);
  got = await send(91000, { user: 'alice' });
  assert.equal(got.tier, 'tier0', got.line);
  assert.equal(got.prefill, label(other));
});

// Issue 29 §1 typed config: the admission gate's LLB_FC_* defaults are read once at start (an
// out-of-range one warned about and ignored), and a P/D rule's GET shows the settings its gate
// runs with, field by field: the rule's own, else the environment's, else the default; the same
// go to kvgate_rule_routing_info.
test('P/D admission: the effective block shows the settings of the gate (rule, else environment, else default)', async (t) => {
  const gw = await gateway(t, [], { env: { LLB_FC_MODE: 'observe', LLB_FC_EP_MAX_INFLIGHT: '3',
    LLB_FC_MAX_QUEUE_DEPTH: '99999' } });
  const port = await freePort();
  const engine = { host: '127.0.0.1', port: 9 };
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, engine, { host: '127.0.0.1', port: 10 },
    { name: 'adm-eff', fc_prefill_max_inflight: 2 }));
  assert.equal(r.status, 200, r.text);
  const eff = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0].effective;
  assert.equal(eff.fc_mode, 'observe', 'no fc_mode on the rule: the environment decides');
  assert.equal(eff.fc_prefill_max_inflight, 2, 'the field of the rule beats the environment');
  assert.equal(eff.fc_decode_max_inflight, 3, 'LLB_FC_EP_MAX_INFLIGHT caps decode endpoints too');
  assert.equal(eff.fc_max_outstanding, 0);
  assert.equal(eff.fc_max_queue_depth, 0, 'an out-of-range value leaves the default');
  assert.equal(eff.fc_max_queue_wait_ms, 0);
  assert.ok(await waitFor(() => /ignoring LLB_FC_MAX_QUEUE_DEPTH='99999' \(not 0\.\.65536\)/
    .test(gw.proc.stderrText), 5000), gw.proc.stderrText);
  const info = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_rule_routing_info' &&
    s.labels.rule === 'adm-eff');
  assert.ok(info.some((s) => s.labels.knob === 'fc_mode' && s.labels.value === 'observe'), JSON.stringify(info));
  assert.ok(info.some((s) => s.labels.knob === 'fc_prefill_max_inflight' && s.labels.value === '2'));
  // The rule's own mode beats the environment's.
  const mine = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0];
  mine.serviceArguments.fc_mode = 'off';
  assert.equal((await api(gw.api, 'POST', LB_BASE, mine)).status, 200);
  assert.equal((await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0].effective.fc_mode, 'off');
});

// The admission gate (seed 000; upstream-gateway.md §2.5) on a P/D rule whose one prefill engine
// is slow: a capped endpoint parks the next request (hold, don't drop) and hands it the slot
// when it frees, sheds the one after (full queue), times a parked one out, closes the global
// valve, and observe mode only counts.
test('P/D admission: park then resume, 429 when the queue is full, queue timeout, valve, observe', async (t) => {
  const sim = await fleet(t, 'vllm');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const metric = async (name, svc, decision) => (await scrapeMetrics(gw.api)).find((s) => s.name === name &&
    s.labels.service === svc && (decision === undefined || s.labels.decision === decision))?.value ?? 0;
  const make = async (extra) => {
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { name: `adm-${port}`, ...extra }));
    assert.equal(r.status, 200, r.text);
    return port;
  };
  const req = (port, i) => post(port, '/v1/completions', { model: 'sim-model', prompt: `admission ${port} ${i}`, max_tokens: 1 });
  // Ordering by the gate's own gauges, not by sleeps: A is admitted (in flight), B parked.
  const inflight = (port, n) => waitFor(async () => (await metric('loxilb_ai_admission_inflight', `adm-${port}`)) === n, 10000);
  const queued = (port, n) => waitFor(async () => (await metric('loxilb_ai_admission_queued', `adm-${port}`)) === n, 10000);
  await api(prefill.url, 'POST', '/sim/fault', { stall_ms: 2000 });

  // Cap 1, queue 1: A runs, B parks and then runs, C is shed.
  let port = await make({ fc_mode: 'enforce', fc_prefill_max_inflight: 1, fc_max_queue_depth: 1,
    fc_max_queue_wait_ms: 60000 });
  const a = req(port, 'a');
  assert.ok(await inflight(port, 1));
  const b = req(port, 'b');
  assert.ok(await queued(port, 1));
  const c = await req(port, 'c');
  assert.equal(c.status, 429, c.text);
  const ce = JSON.parse(c.text).error;
  assert.equal(ce.code, 'admission_capacity');
  assert.equal(ce.retry_after, 1);
  assert.ok(Number.isInteger(ce.jitter_hint_ms));
  assert.equal(c.headers.get('retry-after'), '1');
  assert.equal(c.headers.get('x-loxilb-admission-limit'), '1');
  assert.equal(c.headers.get('x-loxilb-admission-queued'), '1');
  assert.equal(c.headers.get('x-loxilb-admission-inflight'), '1');
  const [ra, rb] = await Promise.all([a, b]);
  assert.equal(ra.status, 200, ra.text);
  assert.equal(rb.status, 200, rb.text);  // held, not dropped
  const svc = `adm-${port}`;
  assert.equal(await metric('loxilb_ai_admission_decisions_total', svc, 'admit'), 1);
  assert.equal(await metric('loxilb_ai_admission_decisions_total', svc, 'park'), 1);
  assert.equal(await metric('loxilb_ai_admission_decisions_total', svc, 'shed'), 1);
  assert.ok(await queued(port, 0));
  assert.ok(await inflight(port, 0));

  // A parked request that waits the whole window: 504 with how long it waited.
  port = await make({ fc_mode: 'enforce', fc_prefill_max_inflight: 1, fc_max_queue_depth: 4,
    fc_max_queue_wait_ms: 400 });
  const a2 = req(port, 'a');
  assert.ok(await inflight(port, 1));
  const t0 = Date.now();
  const b2 = await req(port, 'b');
  assert.equal(b2.status, 504, b2.text);
  const be = JSON.parse(b2.text).error;
  assert.equal(be.code, 'admission_queue_timeout');
  assert.ok(be.queued_ms >= 400, String(be.queued_ms));
  assert.ok(Date.now() - t0 >= 400);
  assert.equal((await a2).status, 200);

  // The global valve: one request in flight at most.
  port = await make({ fc_mode: 'enforce', fc_max_outstanding: 1 });
  const a3 = req(port, 'a');
  assert.ok(await inflight(port, 1));
  const b3 = await req(port, 'b');
  assert.equal(b3.status, 503, b3.text);
  assert.equal(JSON.parse(b3.text).error.code, 'admission_no_capacity');
  assert.equal(b3.headers.get('retry-after'), '1');
  assert.equal((await a3).status, 200);

  // Observe: the same cap admits everything and counts what enforce would have done.
  port = await make({ fc_mode: 'observe', fc_prefill_max_inflight: 1, fc_max_queue_depth: 1 });
  const a4 = req(port, 'a');
  assert.ok(await inflight(port, 1));
  const b4 = await req(port, 'b');
  assert.equal(b4.status, 200, b4.text);
  assert.equal((await a4).status, 200);
  assert.equal(await metric('loxilb_ai_admission_decisions_total', `adm-${port}`, 'would_park'), 1);

  // A parked request whose service is deleted: 503 admission_drained.
  port = await make({ fc_mode: 'enforce', fc_prefill_max_inflight: 1, fc_max_queue_depth: 4,
    fc_max_queue_wait_ms: 60000 });
  const a5 = req(port, 'a');
  assert.ok(await inflight(port, 1));
  const b5 = req(port, 'b');
  assert.ok(await queued(port, 1));
  assert.equal((await api(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`)).status, 200);
  const rb5 = await b5;
  assert.equal(rb5.status, 503, rb5.text);
  assert.equal(JSON.parse(rb5.text).error.code, 'admission_drained');
  await a5;
  await api(prefill.url, 'POST', '/sim/fault', { reset: true });
});

// A parked request is not tied to its FIFO while another prefill endpoint sits idle with nobody
// parked there (review finding: it waited for its own endpoint's slow request). Two prefill
// engines, cap 1 each: A and B take both, C parks on the first (the slow one); when the fast
// one frees, C takes it and ends before the slow request does. Ordered by completion, not time.
test('P/D admission: a parked request takes a sibling prefill endpoint that frees first', async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,prefill,decode', 3);
  const [p1, p2, d] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  const svc = `sib-${port}`;
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, p1, d, { name: svc, fc_mode: 'enforce',
    fc_prefill_max_inflight: 1, fc_max_queue_depth: 4, fc_max_queue_wait_ms: 60000 },
  [{ endpointIP: p2.host, targetPort: p2.port, weight: 1, ep_role: 1, nixl_port: 5602 }]));
  assert.equal(r.status, 200, r.text);
  const metric = async (name) => (await scrapeMetrics(gw.api)).find((s) => s.name === name &&
    s.labels.service === svc)?.value ?? 0;
  await api(p1.url, 'POST', '/sim/fault', { stall_ms: 6000 });
  await api(p2.url, 'POST', '/sim/fault', { stall_ms: 500 });
  const done = [];
  const req = (tag) => post(port, '/v1/completions', { model: 'sim-model', prompt: `sibling ${tag}`,
    max_tokens: 1 }).then((res) => { done.push(tag); return res; });
  const a = req('a');
  assert.ok(await waitFor(async () => (await metric('loxilb_ai_admission_inflight')) === 1, 10000));
  const b = req('b');
  assert.ok(await waitFor(async () => (await metric('loxilb_ai_admission_inflight')) === 2, 10000));
  const c = req('c');
  const [ra, rb, rc] = await Promise.all([a, b, c]);
  for (const x of [ra, rb, rc]) assert.equal(x.status, 200, x.text);
  // One of A and B held the slow engine; C finished before it.
  assert.equal(done.length, 3);
  assert.notEqual(done[2], 'c', done.join(','));
  await api(p1.url, 'POST', '/sim/fault', { reset: true });
  await api(p2.url, 'POST', '/sim/fault', { reset: true });
});

// The external controller (PUT /kvgate/v1/controller): DISABLED leaves the ladder, DRAINING
// keeps its conversations and takes no new ones, DELETE detaches; bad bodies are 400s that
// change nothing.
test('P/D controller fold-in: DISABLED, DRAINING, detach, and bad bodies', async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,prefill,decode', 3);
  const [p1, p2, d] = sim.workers;
  const gw = await gateway(t, ['--access-log']);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, p1, d, {},
    [{ endpointIP: p2.host, targetPort: p2.port, weight: 1, ep_role: 1 }]));
  assert.equal(r.status, 200, r.text);
  const CTL = '/kvgate/v1/controller';
  const ep = (w, state, weight) => ({ endpointIP: w.host, targetPort: w.port, state, ...(weight ? { weight } : {}) });
  const prefillOf = async (body, headers) => {
    const n = accessLines(gw).length;
    const res = await post(port, '/v1/completions', { model: 'sim-model', max_tokens: 1, ...body }, headers);
    assert.equal(res.status, 200, res.text);
    const line = await waitFor(() => accessLines(gw).slice(n).find((l) => l.includes('status=200')));
    return line.match(/prefill=([^ ]+)/)[1];
  };
  const label = (w) => `${w.host}:${w.port}`;

  // Bad bodies: 400 naming the field; nothing changes.
  for (const [body, field] of [
    [{ endpoints: [] }, 'interval_sec'],
    [{ interval_sec: 0, endpoints: [] }, 'interval_sec'],
    [{ interval_sec: 5, endpoints: [ep(p1, 'OFF')] }, 'state'],
    [{ interval_sec: 5, endpoints: [ep(p1, 'ACTIVE', -1)] }, 'weight'],
    [{ interval_sec: 5, endpoints: [{ ...ep(p1, 'ACTIVE'), extra: 1 }] }, 'extra'],
    [{ interval_sec: 5, endpoints: [{ endpointIP: 'not-an-ip', targetPort: 1 }] }, 'endpointIP'],
    [{ interval_sec: 5, endpoints: 'x' }, 'endpoints'],
  ]) {
    const res = await api(gw.api, 'PUT', CTL, body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.match(res.text, new RegExp(field));
  }
  assert.equal((await api(gw.api, 'PUT', CTL, '{"interval_sec":')).status, 400);
  assert.deepEqual((await api(gw.api, 'GET', CTL)).json, { endpoints: [] });

  // p1 DISABLED: every request goes to p2. An endpoint no rule has is reported, not stored.
  let res = await api(gw.api, 'PUT', CTL, { interval_sec: 60,
    endpoints: [ep(p1, 'DISABLED'), { endpointIP: '127.0.0.1', targetPort: 1, state: 'ACTIVE' }] });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json.unknown, ['127.0.0.1:1']);
  const view = (await api(gw.api, 'GET', CTL)).json.endpoints;
  assert.equal(view.length, 1);
  assert.equal(view[0].effective_state, 'DISABLED');
  assert.equal(view[0].stale, false);
  for (let i = 0; i < 4; ++i) assert.equal(await prefillOf({ prompt: `disabled ${i}` }), label(p2));

  // p1 back, p2 DRAINING: a new conversation starts on p1 and is pinned there.
  await api(gw.api, 'PUT', CTL, { interval_sec: 60, endpoints: [ep(p1, 'ACTIVE'), ep(p2, 'DRAINING')] });
  assert.equal(await prefillOf({ prompt: 'c1', user_id: 'carol' }), label(p1));
  // Now p1 drains: carol's conversation stays on p1; a new one (dave) goes to p2.
  await api(gw.api, 'PUT', CTL, { interval_sec: 60, endpoints: [ep(p1, 'DRAINING'), ep(p2, 'ACTIVE')] });
  assert.equal(await prefillOf({ prompt: 'c2', user_id: 'carol' }), label(p1));
  assert.equal(await prefillOf({ prompt: 'd1', user_id: 'dave' }), label(p2));
  assert.equal(await prefillOf({ prompt: 'anon' }), label(p2));

  // Detached: both endpoints are candidates again.
  assert.equal((await api(gw.api, 'DELETE', CTL)).status, 200);
  assert.deepEqual((await api(gw.api, 'GET', CTL)).json, { endpoints: [] });
  const seen = new Set();
  for (let i = 0; i < 6; ++i) seen.add(await prefillOf({ prompt: `free ${i}` }));
  assert.equal(seen.size, 2);
});

// pdLadder: the prefill stages as data. A ladder without Tier 0 pins nothing (a conversation
// follows the ladder, not its first endpoint) and keeps DRAINING endpoints out before any stage;
// the rule's GET shows the stages and where they came from; a bad ladder is a 400 that changes
// nothing.
test('P/D pdLadder: no Tier 0 pins nothing and honours DRAINING; bad ladders refused', async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,prefill,decode', 3);
  const [p1, p2, d] = sim.workers;
  const gw = await gateway(t, ['--access-log']);
  const port = await freePort();
  const more = [{ endpointIP: p2.host, targetPort: p2.port, weight: 1, ep_role: 1 }];
  // Refused: each names the field and says why; the rule is not created.
  for (const [extra, says] of [
    [{ pdLadder: ['min_load', 'session'] }, 'session \\(Tier 0\\) must come first'],
    [{ pdLadder: ['session'] }, 'must end with min_load'],
    [{ pdLadder: ['kv_exact', 'min_load'] }, 'kv_exact requires kvExactMode 1'],
    [{ pdLadder: ['session', 'min_load'], pd_cache_aware_mode: true }, 'asks for prefix_trie'],
    [{ pdLadder: 'min_load' }, 'must be an array'],
  ]) {
    const res = await api(gw.api, 'POST', LB_BASE, pdRule(port, p1, d, extra, more));
    assert.equal(res.status, 400, JSON.stringify(extra));
    assert.match(res.text, /pdLadder/);
    assert.match(res.text, new RegExp(says));
  }
  assert.equal((await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr?.length ?? 0, 0);

  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, p1, d, { name: `ladder-${port}`,
    pdLadder: ['prefix_trie', 'min_load'] }, more));
  assert.equal(r.status, 200, r.text);
  const rule = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr.find((x) => x.serviceArguments.port === port);
  assert.deepEqual(rule.serviceArguments.pdLadder, ['prefix_trie', 'min_load']);
  assert.deepEqual(rule.effective.stages, ['prefix_trie', 'min_load']);
  assert.equal(rule.effective.stagesFrom, 'pdLadder');
  assert.equal(rule.effective.session_max, undefined);

  const CTL = '/kvgate/v1/controller';
  const ep = (w, state) => ({ endpointIP: w.host, targetPort: w.port, state });
  const prefillOf = async (body) => {
    const n = accessLines(gw).length;
    const res = await post(port, '/v1/completions', { model: 'sim-model', max_tokens: 1, ...body });
    assert.equal(res.status, 200, res.text);
    const line = await waitFor(() => accessLines(gw).slice(n).find((l) => l.includes('status=200')));
    return line.match(/prefill=([^ ]+)/)[1];
  };
  const label = (w) => `${w.host}:${w.port}`;
  // p2 DRAINING: with no Tier 0 to keep it for pinned conversations, nothing new goes there.
  await api(gw.api, 'PUT', CTL, { interval_sec: 60, endpoints: [ep(p1, 'ACTIVE'), ep(p2, 'DRAINING')] });
  for (let i = 0; i < 4; ++i) assert.equal(await prefillOf({ prompt: `c${i} ${'x'.repeat(i)}`, user_id: 'carol' }), label(p1));
  // p1 DRAINING: carol's conversation is not pinned there; it moves to p2 with everything else.
  await api(gw.api, 'PUT', CTL, { interval_sec: 60, endpoints: [ep(p1, 'DRAINING'), ep(p2, 'ACTIVE')] });
  assert.equal(await prefillOf({ prompt: 'c9', user_id: 'carol' }), label(p2));
  assert.equal(await prefillOf({ prompt: 'anon' }), label(p2));
  const samples = await scrapeMetrics(gw.api);
  assert.equal(tierCount(samples, 'tier0'), 0, 'no Tier 0 in this ladder');
  assert.ok(tierCount(samples, 'tier1') + tierCount(samples, 'tier2') >= 6);
  // Back to the flags' ladder (pdLadder dropped): Tier 0 is there again and pins.
  await api(gw.api, 'DELETE', CTL);
  const again = pdRule(port, p1, d, { name: `ladder-${port}` }, more);
  assert.equal((await api(gw.api, 'POST', LB_BASE, again)).status, 200);
  const after = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr.find((x) => x.serviceArguments.port === port);
  assert.deepEqual(after.effective.stages, ['session', 'min_load']);
  assert.equal(after.effective.stagesFrom, 'pd_disagg_mode');
  const first = await prefillOf({ prompt: 'e1', user_id: 'erin' });
  assert.equal(await prefillOf({ prompt: 'e2', user_id: 'erin' }), first);
  assert.ok(tierCount(await scrapeMetrics(gw.api), 'tier0') >= 1);
});

// A ladder without Tier 0: a request parked on an endpoint that begins DRAINING while it waits
// was accepted there before the drain and is served there when its slot frees (the endpoints
// left are at their caps: refusing it would be a 503); the next new request goes elsewhere.
test('P/D pdLadder without Tier 0: a request parked before a drain is served where it waited', async (t) => {
  const sim = await fleet(t, 'vllm', 'prefill,prefill,decode', 3);
  const [p1, p2, d] = sim.workers;
  const gw = await gateway(t, ['--access-log']);
  const port = await freePort();
  const svc = `ladder-park-${port}`;
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, p1, d, { name: svc, pdLadder: ['min_load'],
    fc_mode: 'enforce', fc_prefill_max_inflight: 1, fc_max_queue_depth: 4, fc_max_queue_wait_ms: 60000 },
  [{ endpointIP: p2.host, targetPort: p2.port, weight: 1, ep_role: 1, nixl_port: 5602 }]));
  assert.equal(r.status, 200, r.text);
  const metric = async (name) => (await scrapeMetrics(gw.api)).find((s) => s.name === name &&
    s.labels.service === svc)?.value ?? 0;
  await api(p1.url, 'POST', '/sim/fault', { stall_ms: 1000 });
  await api(p2.url, 'POST', '/sim/fault', { stall_ms: 4000 });
  const req = (tag) => post(port, '/v1/completions', { model: 'sim-model', prompt: `park ${tag}`, max_tokens: 1 });
  const a = req('a');
  assert.ok(await waitFor(async () => (await metric('loxilb_ai_admission_inflight')) === 1, 10000));
  const b = req('b');
  assert.ok(await waitFor(async () => (await metric('loxilb_ai_admission_inflight')) === 2, 10000));
  const c = req('c');
  assert.ok(await waitFor(async () => (await metric('loxilb_ai_admission_queued')) === 1, 10000));
  // Both prefill endpoints at their cap, C parked; p1 (which frees first) begins draining.
  const ep = (w, state) => ({ endpointIP: w.host, targetPort: w.port, state });
  assert.equal((await api(gw.api, 'PUT', '/kvgate/v1/controller', { interval_sec: 60,
    endpoints: [ep(p1, 'DRAINING'), ep(p2, 'ACTIVE')] })).status, 200);
  const [ra, rb, rc] = await Promise.all([a, b, c]);
  for (const x of [ra, rb, rc]) assert.equal(x.status, 200, x.text);
  const ok200 = () => accessLines(gw).filter((l) => l.includes('status=200'));
  assert.ok(await waitFor(() => ok200().length === 3, 10000), ok200().join('\n'));
  const lines = ok200();
  // p1 served two of the three (A or B, then C, parked there before the drain), p2 one.
  const on = (w) => lines.filter((l) => l.includes(`prefill=${w.host}:${w.port}`)).length;
  assert.equal(on(p1), 2, lines.join('\n'));
  assert.equal(on(p2), 1, lines.join('\n'));
  await api(p1.url, 'POST', '/sim/fault', { reset: true });
  await api(p2.url, 'POST', '/sim/fault', { reset: true });
  const next = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'after the drain', max_tokens: 1 });
  assert.equal(next.status, 200, next.text);
  const last = await waitFor(() => accessLines(gw).filter((l) => l.includes('status=200'))[3]);
  assert.match(last, new RegExp(`prefill=${p2.host}:${p2.port}`), 'a new request: not on the DRAINING endpoint');
  await api(gw.api, 'DELETE', '/kvgate/v1/controller');
  await api(p1.url, 'POST', '/sim/fault', { reset: true });
  await api(p2.url, 'POST', '/sim/fault', { reset: true });
});

// Review regressions: a client that cancels does not count against the prefill engine's
// breaker; an SGLang prefill's own refusal reaches the client; two requests with one client id
// do not collide on the engines; P/D state does not leak into the next request of a connection.
test('P/D regressions: cancels spare the breaker, refusals relayed, ids unique, no leak', async (t) => {
  const sim = await fleet(t, 'sglang', 'prefill,decode,both', 3, ['--model', 'sim-model', '--model', 'other']);
  const [prefill, decode, plain] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: 'sglang', model_name: 'sim-model' }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, {
    serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, model_name: 'other',
      timeoutMemberData: 300 },
    endpoints: [{ endpointIP: plain.host, targetPort: plain.port, weight: 1 }],
  });
  assert.equal(r.status, 200, r.text);

  // Three cancels mid-prefill in a row (the P/D breaker opens after 3 failures): still closed.
  await api(prefill.url, 'POST', '/sim/fault', { stall_ms: 3000 });
  for (let i = 0; i < 3; ++i) {
    const before = (await simMetrics(prefill)).kvgate_sim_requests_aborted_total;
    await cancelAfter(port, { model: 'sim-model', prompt: `cancel ${i}`, max_tokens: 2 }, 1500);
    assert.ok(await waitFor(async () => (await simMetrics(prefill)).kvgate_sim_requests_aborted_total > before, 8000));
  }
  await api(prefill.url, 'POST', '/sim/fault', { reset: true });
  const ok = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'after cancels', max_tokens: 2 });
  assert.equal(ok.status, 200, ok.text);
  const breaker = (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_endpoint_breaker_state' &&
    s.labels.endpoint === `${prefill.host}:${prefill.port}`);
  assert.equal(breaker?.value ?? 0, 0, 'the prefill breaker stayed closed');

  // The SGLang prefill engine refuses the request (400): its answer is the client's.
  await api(prefill.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 400 });
  const refused = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'refused', max_tokens: 2 });
  assert.equal(refused.status, 400, refused.text);
  assert.equal(JSON.parse(refused.text).code, 400, 'the engine\'s own error body');

  // Two concurrent requests with the same client id: both served (the legs' ids differ).
  const same = await Promise.all([0, 1].map((i) => post(port, '/v1/completions',
    { model: 'sim-model', prompt: `same id ${i}`, max_tokens: 2 }, { 'x-request-id': 'dup-id' })));
  for (const x of same) {
    assert.equal(x.status, 200, x.text);
    assert.equal(x.headers.get('x-request-id'), 'dup-id');
  }

  // One keep-alive connection: a P/D request whose prefill fails, then a plain request whose
  // engine is too slow: 504 upstream_timeout, nothing of the P/D request's failure.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  const onConn = (body) => new Promise((resolve, reject) => {
    const rq = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text, socket: rq.socket }));
    });
    rq.on('error', reject);
    rq.end(JSON.stringify(body));
  });
  await api(prefill.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 500 });
  const first = await onConn({ model: 'sim-model', prompt: 'pd fails', max_tokens: 2 });
  assert.equal(first.status, 500, first.text);
  await api(plain.url, 'POST', '/sim/fault', { worker: 2, stall_ms: 2000 });
  const second = await onConn({ model: 'other', prompt: 'plain slow', max_tokens: 2 });
  assert.equal(second.socket, first.socket, 'the same connection');
  assert.equal(second.status, 504, second.text);
  assert.equal(JSON.parse(second.text).error.code, 'upstream_timeout');
  assert.doesNotMatch(second.text, /prefill|decode leg/);
  await api(plain.url, 'POST', '/sim/fault', { worker: 2, reset: true });
});

// A vLLM prefill and decode worker behind a fresh gateway with seed 000's P/D rule over them.
async function pdBehindGateway(t) {
  const sim = await fleet(t, 'vllm');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode))).status, 200);
  return { prefill, decode, gw, port };
}

// The Responses API bounds its answer with max_output_tokens, which the dialects' one-token
// prefill does not rewrite: a P/D rule refuses it with a clear 400 and runs no leg.
test('P/D: Responses and pooling requests are refused with a clear error, no leg runs', async (t) => {
  const { prefill, decode, gw, port } = await pdBehindGateway(t);
  const before = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  const res = await post(port, '/v1/responses', { model: 'sim-model', input: 'hi', max_output_tokens: 3 });
  assert.equal(res.status, 400, res.text);
  assert.match(JSON.parse(res.text).error.message, /Responses API is not served on a prefill\/decode service/);
  // Nor is a pooling request (nothing to decode).
  const emb = await post(port, '/v1/embeddings', { model: 'sim-model', input: 'hi' });
  assert.equal(emb.status, 400, emb.text);
  assert.match(JSON.parse(emb.text).error.message, /pooling request .* is not served on a prefill\/decode service/);
  const after = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  assert.deepEqual(after.map((m) => m.kvgate_sim_requests_total), before.map((m) => m.kvgate_sim_requests_total));
  // Chat still works on the same rule.
  const ok = await post(port, '/v1/chat/completions', { model: 'sim-model', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(ok.status, 200, ok.text);
});

// The Anthropic Messages API on P/D rules (issue 31): vLLM's /v1/messages carries
// kv_transfer_params both ways (vLLM PR 37535), so the two legs run as for chat; SGLang's and
// TensorRT-LLM's conversions drop the P/D fields, so those rules refuse it. What generates
// nothing (count_tokens, tokenize, detokenize) goes to one decode endpoint, no prefill leg.
test('P/D and the Messages API: vLLM runs both legs; SGLang and TensorRT-LLM refuse; count_tokens and tokenize take one decode leg', async (t) => {
  const { prefill, decode, gw, port } = await pdBehindGateway(t);
  const before = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  const body = { model: 'sim-model', max_tokens: 4, messages: [{ role: 'user', content: 'prefill then decode' }] };
  const res = await post(port, '/v1/messages', body, { 'anthropic-version': '2023-06-01' });
  assert.equal(res.status, 200, res.text);
  const j = JSON.parse(res.text);
  assert.equal(j.type, 'message');
  assert.equal(j.content[0].text.split(' ').length, 4, 'the decode worker generated the whole answer');
  assert.equal(j.usage.output_tokens, 4);
  const st = await post(port, '/v1/messages', { ...body, stream: true });
  assert.equal(st.status, 200, st.text);
  const deltas = st.text.split('\n\n').filter((e) => e.includes('"content_block_delta"'));
  assert.equal(deltas.length, 4, st.text);
  assert.match(st.text, /event: message_stop/);
  const mid = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  assert.equal(mid[0].kvgate_sim_requests_total - before[0].kvgate_sim_requests_total, 2, 'one prefill leg each');
  assert.equal((mid[1].kvgate_sim_pd_pulled_total ?? 0) - (before[1].kvgate_sim_pd_pulled_total ?? 0), 2,
    'every decode pulled its prefill');
  assert.equal(mid[0].kvgate_sim_pd_refused_total ?? 0, 0);
  assert.equal(mid[1].kvgate_sim_pd_refused_total ?? 0, 0);
  // count_tokens and tokenize: one leg, on the decode endpoint.
  const ct = await post(port, '/v1/messages/count_tokens', { model: 'sim-model', messages: body.messages });
  assert.equal(ct.status, 200, ct.text);
  assert.ok(JSON.parse(ct.text).input_tokens > 0);
  const tk = await post(port, '/tokenize', { model: 'sim-model', prompt: 'hello world' });
  assert.equal(tk.status, 200, tk.text);
  const end = await Promise.all([simMetrics(prefill), simMetrics(decode)]);
  assert.equal(end[0].kvgate_sim_tokenize_requests_total ?? 0, 0);
  // Which endpoint answered (kvgate_requests_total counts the answer a client got: a P/D
  // request's is its decode leg's): the decode endpoint, four times; the prefill one never.
  const sent = (ms, w) => ms.filter((x) => x.name === 'kvgate_requests_total' &&
    x.labels.endpoint === `${w.host}:${w.port}`).reduce((n, x) => n + x.value, 0);
  const gm = await scrapeMetrics(gw.api);
  assert.equal(sent(gm, prefill), 0);
  assert.equal(sent(gm, decode), 4, 'the two Messages decode legs, count_tokens and tokenize');
  assert.equal((end[1].kvgate_sim_tokenize_requests_total ?? 0) - (mid[1].kvgate_sim_tokenize_requests_total ?? 0), 1);

  for (const engine of ['sglang', 'trtllm']) {
    const s2 = await fleet(t, engine);
    const p2 = await freePort();
    assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(p2, s2.workers[0], s2.workers[1], { kvEngineType: engine }))).status, 200);
    const b2 = await Promise.all(s2.workers.map(simMetrics));
    const r = await post(p2, '/v1/messages', body);
    assert.equal(r.status, 400, r.text);
    assert.match(JSON.parse(r.text).error.message, /Messages API is not served on a prefill\/decode service/);
    const a2 = await Promise.all(s2.workers.map(simMetrics));
    assert.deepEqual(a2.map((m) => m.kvgate_sim_requests_total), b2.map((m) => m.kvgate_sim_requests_total), 'no leg ran');
  }
});

// A P/D prefill leg Tier 1.5 keyed counts its uncached blocks as prefill queued on its endpoint
// (kvgate_endpoint_pending_prefill_blocks) until the leg's answer head, and that answer samples
// the endpoint's prefill rate: the laws that read the queued prefill see P/D traffic. Here a
// 128-token prompt nobody holds (8 blocks of 16) on a prefill engine taking 3 s a prefill;
// the decode endpoint is never counted. vLLM (sequential legs) and SGLang (the background drain),
// streamed too: an SGLang prefill leg carries the client's `stream` and sends its head before it
// computes anything, so its count must last until the whole answer.
for (const [engine, stream] of [['vllm', false], ['vllm', true], ['sglang', false], ['sglang', true]])
test(`P/D ${engine}${stream ? ' streamed' : ''}: a prefill leg counts as queued prefill until its answer, and samples the rate`, async (t) => {
  const kvPort = await freePort();
  const sim = await fleet(t, engine, 'prefill,decode', 2,
    ['--prefill-base-ms', '3000', '--kv-events-port', String(kvPort)]);
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t, []);
  const port = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode,
    { kvEngineType: engine, kvExactMode: 1, kvZmqPort: kvPort, kvBlockSize: 16 }));
  assert.equal(r.status, 200, r.text);
  // (the default law of P/D rules: predict, misses to Tier 2's min-load; docs/benchmarks.md
  // "P/D: the prefill law")
  const eff = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0].effective;
  assert.equal(eff.kvLbMode, 'predict');
  assert.equal(eff.kvLbModeFrom, 'default');
  assert.deepEqual(eff.stages, ['session', 'kv_exact', 'min_load']);
  const label = (w) => `${w.host}:${w.port}`;
  const gauge = async (name, w) => (await scrapeMetrics(gw.api)).find((s) => s.name === name &&
    s.labels.endpoint === label(w))?.value ?? 0;
  const pending = (w) => gauge('kvgate_endpoint_pending_prefill_blocks', w);
  assert.equal(await gauge('kvgate_endpoint_prefill_rate_tokens_per_second', prefill), 0);
  const prompt = Array.from({ length: 128 }, (_, i) => 7000 + i);
  const answer = post(port, '/v1/completions', { model: 'sim-model', prompt, max_tokens: 2, stream });
  assert.ok(await waitFor(async () => (await pending(prefill)) === 8, 1400, 20),
    `queued prefill while the leg runs: ${await pending(prefill)}`);
  assert.equal(await pending(decode), 0);
  await sleep(700);  // (mid-prefill: still counted, the engine's head notwithstanding)
  assert.equal(await pending(prefill), 8);
  const res = await answer;
  assert.equal(res.status, 200, res.text);
  assert.equal(await pending(prefill), 0);
  assert.equal(await pending(decode), 0);
  // (128 tokens in about 3 s: well under 1,000 tokens/s, above 0)
  const rate = await gauge('kvgate_endpoint_prefill_rate_tokens_per_second', prefill);
  assert.ok(rate > 0 && rate < 1000, `prefill rate ${rate}`);
  assert.equal(await gauge('kvgate_endpoint_prefill_rate_tokens_per_second', decode), 0);
});
