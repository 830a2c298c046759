// P/D disaggregation end to end: seed 000's P/D rule (addresses moved to loopback) in front of a
// simulated prefill and decode worker speaking each engine's dialect (vLLM NIXL, SGLang
// bootstrap rooms, TensorRT-LLM context/generation). The simulator refuses a leg that is not
// its role's (kvgate_sim_pd_refused_total) and counts pulled transfers, so a wrong
// orchestration fails here. Also: the tier per request (access log, metric), a failing prefill
// or decode leg, the any-healthy rescue, and client cancellation of either leg.
import assert from 'node:assert/strict';
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
      // Both legs carried the P/D id naming the transfer addresses; the client sees it too.
      assert.equal(res.headers.get('x-request-id'),
        `___prefill_addr_127.0.0.1:5600___decode_addr_127.0.0.1:5601_client-${engine}`);
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
      assert.match(l, new RegExp(`prefill=127\\.0\\.0\\.1:${prefill.port}`));
      assert.match(l, new RegExp(`endpoint=127\\.0\\.0\\.1:${decode.port}`));
    }
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
  assert.equal(tierCount(m, 'tier2'), 1, 'the dead prefill endpoint was picked once (its connect failed)');
  // Without a role-less endpoint there is no rescue: 502 naming the prefill leg.
  const port2 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port2, dead, decode))).status, 200);
  const res2 = await post(port2, '/v1/completions', { model: 'sim-model', prompt: 'x', max_tokens: 1 });
  assert.equal(res2.status, 502, res2.text);
  assert.match(JSON.parse(res2.text).error.message, /^prefill leg: connect to/);
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

test('P/D cancel: a client leaving mid-prefill or mid-decode aborts that engine\'s request', async (t) => {
  for (const engine of ['vllm', 'sglang']) {
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
    await api(prefill.url, 'POST', '/sim/fault', { reset: true });
    // Mid-decode: a slow stream; the client leaves after the first events.
    await api(decode.url, 'POST', '/sim/fault', { event_delay_ms: 200 });
    await cancelAfter(port, { model: 'sim-model', prompt: `cancel decode ${engine}`, max_tokens: 50, stream: true }, 1800);
    assert.ok(await waitFor(async () => (await simMetrics(decode)).kvgate_sim_requests_aborted_total >= 1, 8000),
      `${engine}: the decode engine saw the abort`);
    await api(decode.url, 'POST', '/sim/fault', { reset: true });
    // The gateway holds nothing afterwards.
    const m = parseMetrics(await (await fetch(`${gw.api}/metrics`)).text());
    const inflight = m.filter((s) => s.name === 'kvgate_endpoint_inflight').reduce((x, s) => x + s.value, 0);
    assert.equal(inflight, 0, `${engine}: every lease was released`);
  }
});

test('SGLang P/D: a prefill that fails ends the waiting decode leg with 502 prefill_failed', async (t) => {
  const sim = await fleet(t, 'sglang');
  const [prefill, decode] = sim.workers;
  const gw = await gateway(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, pdRule(port, prefill, decode, { kvEngineType: 'sglang' }))).status, 200);
  await api(prefill.url, 'POST', '/sim/fault', { fail_requests: 1, fail_status: 500 });
  const t0 = Date.now();
  const res = await post(port, '/v1/completions', { model: 'sim-model', prompt: 'room without prefill', max_tokens: 2 });
  assert.equal(res.status, 502, res.text);
  assert.equal(JSON.parse(res.text).error.code, 'prefill_failed');
  assert.ok(Date.now() - t0 < 20000, 'not the decode worker\'s 30 s room wait');
  assert.ok(await waitFor(async () => (await simMetrics(decode)).kvgate_sim_requests_aborted_total >= 1, 8000),
    'the decode engine\'s waiting request was aborted');
});
