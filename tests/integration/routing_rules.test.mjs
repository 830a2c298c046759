// Rule matching on one VIP:port (host, path prefix, model pools), protocol corner cases
// (pipelining, HTTP/1.0), the stream wall-clock cap, the simulator's own input checks and ctl.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  BIN, LB_BASE, api, freePort, gateway, rawRequest, rule, scrapeMetrics, simMetrics, startGateway, startSim, tempDir, requestCounts, delta, waitFor } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';

describe('rule matching and protocol corners', () => {
  let sim; let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    sim = await startSim(['--workers', '3', '--port', '0', '--timing', 'fixed', '--itl-ms', '0', '--prefill-us-per-token', '0']);
    gw = await startGateway({ stateDir: tmp.dir });
  });
  after(async () => { await gw.stop(); await sim.stop(); tmp.remove(); });

  const counts = () => requestCounts(sim.workers);
  const body = '{"model":"sim-model","prompt":"a","max_tokens":1}';
  const post = (port, headers = {}, p = '/v1/completions') => rawRequest(port,
    `POST ${p} HTTP/1.1\r\nHost: ${headers.host || '127.0.0.1'}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);

  test('host (without port) and path prefix select among rules on one VIP:port', async () => {
    const port = await freePort();
    const mk = (extraArgs, w) => rule({ port, workers: [w], extraArgs });
    assert.equal((await api(gw.api, 'POST', BASE, mk({ host: 'a.example' }, sim.workers[0]))).status, 200);
    assert.equal((await api(gw.api, 'POST', BASE, mk({ host: 'b.example' }, sim.workers[1]))).status, 200);
    assert.equal((await api(gw.api, 'POST', BASE, mk({ path_prefix: '/v1/chat', path_match_mode: 'prefix' }, sim.workers[2]))).status, 200);
    const c0 = await counts();
    assert.match(await post(port, { host: 'a.example:8080' }), /^HTTP\/1.1 200/);
    assert.match(await post(port, { host: 'B.EXAMPLE' }), /^HTTP\/1.1 200/);
    assert.deepEqual(delta(c0, await counts()), [1, 1, 0]);
    // Unknown host and a path outside the prefix rule: no rule -> 404.
    assert.match(await post(port, { host: 'c.example' }), /^HTTP\/1.1 404/);
    const c1 = await counts();
    const cbody = '{"model":"sim-model","messages":[{"role":"user","content":"x"}],"max_tokens":1}';
    const chat = await rawRequest(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: c.example\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${cbody.length}\r\n\r\n${cbody}`);
    assert.match(chat, /^HTTP\/1.1 200/);
    assert.deepEqual(delta(c1, await counts()), [0, 0, 1]);
    assert.equal((await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr.length, 3);
    assert.equal((await api(gw.api, 'DELETE', `${BASE}/hosturl/a.example/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`)).status, 200);
    assert.match(await post(port, { host: 'a.example' }), /^HTTP\/1.1 404/);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    // The listener is gone with its last rule.
    await assert.rejects(fetch(`http://127.0.0.1:${port}/v1/models`));
  });

  test('pipelined requests get their responses in order; HTTP/1.0 gets a de-chunked body', async () => {
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: sim.workers }))).status, 200);
    const one = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: req-ID\r\n\r\n${body}`;
    const out = await rawRequest(port, one.replace('ID', '1') + one.replace('ID', '2') + one.replace('ID', '3'));
    const ids = [...out.matchAll(/X-Request-Id: (req-\d)/gi)].map((m) => m[1]);
    assert.deepEqual(ids, ['req-1', 'req-2', 'req-3']);
    assert.equal(out.match(/HTTP\/1.1 200/g).length, 3);
    // HTTP/1.0 client, streaming response (chunked upstream): body arrives de-chunked, then close.
    const sbody = '{"model":"sim-model","prompt":"a","max_tokens":3,"stream":true}';
    const r10 = await rawRequest(port, `POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${sbody.length}\r\n\r\n${sbody}`);
    assert.match(r10, /^HTTP\/1.1 200/);
    assert.doesNotMatch(r10, /Transfer-Encoding/i);
    assert.match(r10, /\r\n\r\ndata: \{/);
    assert.match(r10, /data: \[DONE\]\n\n$/);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
  });

  test('max_stream_duration_sec cuts a stream at its wall-clock cap', async () => {
    const slow = await startSim(['--workers', '1', '--port', '0', '--event-delay-ms', '200']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: slow.workers, extraArgs: { sse_mode: true, max_stream_duration_sec: 1 } }))).status, 200);
    const t0 = Date.now();
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'x', max_tokens: 50, stream: true }),
    });
    let text = '';
    await assert.rejects(async () => {
      const reader = res.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
    });  // the chunked stream is cut, so the client sees a terminated body
    const took = Date.now() - t0;
    assert.ok(took >= 900 && took < 3000, `cut after ${took} ms`);
    assert.ok(text.includes('data: '));
    assert.ok(!text.includes('[DONE]'));
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await slow.stop();
  });

  test('the simulator rejects malformed and hostile requests clearly', async () => {
    const w = sim.workers[0];
    const call = (b, p = '/v1/completions') => fetch(`${w.url}${p}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b });
    for (const b of ['{', '[]', '{"model":"sim-model"}', '{"model":"sim-model","prompt":[[1],[2]]}',
      '{"model":"sim-model","prompt":"a","max_tokens":-1}', '{"model":"sim-model","prompt":"a","max_tokens":"x"}']) {
      const r = await call(b);
      assert.equal(r.status, 400, b);
      const j = await r.json();
      assert.equal(j.code, 400);
      assert.ok(j.message.length > 0);
    }
    const r404 = await call('{"model":"nope","prompt":"a"}');
    assert.equal(r404.status, 404);
    assert.equal((await call('{"model":"sim-model","messages":"x"}', '/v1/chat/completions')).status, 400);
    assert.equal((await call('{"bogus_fault":1}', '/sim/fault')).status, 400);
    assert.match(await rawRequest(w.port, 'POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n'), /^HTTP\/1.1 400/);
    assert.match(await rawRequest(w.port, 'POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\n'), /^HTTP\/1.1 413/);
  });

  test('kvgate ctl creates, lists and deletes rules and passes API errors through', async () => {
    const port = await freePort();
    const file = path.join(tmp.dir, 'rule.json');
    writeFileSync(file, JSON.stringify(rule({ port, workers: sim.workers, extraArgs: { name: 'ctl-rule' } })));
    const ctl = (...args) => spawnSync(BIN, ['ctl', '--api', gw.api, ...args], { encoding: 'utf8' });
    let r = ctl('apply', '-f', file);
    assert.equal(r.status, 0, r.stderr);
    r = ctl('get');
    assert.equal(r.status, 0);
    assert.match(r.stdout, new RegExp(`127\\.0\\.0\\.1\\s+${port}\\s+0\\s+\\*\\s+ctl-rule`));
    r = ctl('--json', 'get');
    assert.equal(JSON.parse(r.stdout).lbAttr.find((x) => x.serviceArguments.name === 'ctl-rule').serviceArguments.port, port);
    r = ctl('apply', '-f', file);  // identical: 409 passed through
    assert.equal(r.status, 1);
    assert.match(r.stderr, /error 409/);
    writeFileSync(file, '{"serviceArguments":{"port":1}}');
    r = ctl('apply', '-f', file);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /error 400.*externalIP/);
    r = ctl('delete', '--name', 'ctl-rule');
    assert.equal(r.status, 0, r.stderr);
    r = ctl('delete', '--name', 'ctl-rule');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /error 404/);
    const port2 = await freePort();
    r = ctl('create', '--vip', '127.0.0.1', '--port', String(port2), '--sel', '2', '--name', 'flags',
      '--endpoint', `${sim.workers[0].host}:${sim.workers[0].port}:3`, '--endpoint', `${sim.workers[1].host}:${sim.workers[1].port}`);
    assert.equal(r.status, 0, r.stderr);
    const made = JSON.parse(ctl('--json', 'get').stdout).lbAttr.find((x) => x.serviceArguments.name === 'flags');
    assert.equal(made.serviceArguments.sel, 2);
    assert.deepEqual(made.endpoints.map((e) => e.weight), [3, 1]);
    assert.equal((await fetch(`http://127.0.0.1:${port2}/v1/models`)).status, 200);
    r = ctl('create', '--vip', '127.0.0.1', '--port', 'x');
    assert.equal(r.status, 2);
    r = ctl('create', '--vip', '127.0.0.1', '--port', String(port2), '--sel', '6', '--endpoint', '127.0.0.1:9');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /error 400.*sel/);
    assert.equal(ctl('delete', '--name', 'flags').status, 0);
    assert.equal(ctl('bogus').status, 2);
    assert.match(execFileSync(BIN, ['ctl', '--help']).toString(), /usage: kvgate ctl/);
  });
});

// Issue 29 §1 typed config: the environment's routing defaults are read once at start and every
// rule's GET shows what it routes with ("effective"), as does kvgate_rule_routing_info; an
// ignored environment value is warned about at start; GET's output POSTs back unchanged.
test('a rule shows its effective routing knobs: rule field, else environment, else default', async (t) => {
  const gw = await gateway(t, [], { env: { LOXILB_KV_LB_MODE: 'soft', LOXILB_KV_MEAN_LOAD_FACTOR: '999',
    LOXILB_KV_SPECULATIVE_TTL_MS: '500' } });
  const port = await freePort();
  const body = rule({ port, workers: [{ host: '127.0.0.1', port: 9 }], extraArgs: { kvExactMode: 3, kvZmqPort: 5999 } });
  assert.equal((await api(gw.api, 'POST', LB_BASE, body)).status, 200);
  const get = await api(gw.api, 'GET', `${LB_BASE}/all`);
  const eff = get.json.lbAttr[0].effective;
  assert.deepEqual(eff.stages, ['kv_exact', 'rr']);
  assert.equal(eff.kvLbMode, 'soft');
  assert.equal(eff.kvLbModeFrom, 'environment');
  assert.equal(eff.mean_load_factor_pct, 175, 'an out-of-range value keeps the default');
  assert.equal(eff.speculative_ttl_ms, 500);
  assert.equal(eff.spill_relief, true);
  assert.equal(eff.min_match_tokens, 16);
  assert.ok(await waitFor(() => /ignoring LOXILB_KV_MEAN_LOAD_FACTOR='999' \(not 100\.\.300\); using 175/
    .test(gw.proc.stderrText), 5000), gw.proc.stderrText);
  const info = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_rule_routing_info');
  assert.ok(info.some((s) => s.labels.knob === 'kvLbMode' && s.labels.value === 'soft' && s.value === 1));
  assert.ok(info.some((s) => s.labels.knob === 'stages' && s.labels.value === 'kv_exact,rr,'));
  // The rule's own field beats the environment; GET's output (with its effective block) POSTs back.
  const mine = get.json.lbAttr[0];
  mine.serviceArguments.kvLbMode = 'ttft';
  assert.equal((await api(gw.api, 'POST', LB_BASE, mine)).status, 200);
  const again = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0];
  assert.equal(again.effective.kvLbMode, 'ttft');
  assert.equal(again.effective.kvLbModeFrom, 'rule');
  assert.equal(again.serviceArguments.kvLbMode, 'ttft');
  // ttft's profile form: its cost scorer with the law's knobs (the environment's defaults here).
  assert.deepEqual(again.effective.kvLbModeProfile, { filters: [], picker: 'max', onMiss: 'selector',
    coldStartSeeding: true, scorers: [{ name: 'ttft_cost', weight: 1, missWeightPct: 800, loadBlocks: 2 }] });
  // A law with a profile form shows it, with the law's knobs filled in (the factor the hard law
  // runs with: the environment's 999 was ignored, 175).
  again.serviceArguments.kvLbMode = 'hard';
  assert.equal((await api(gw.api, 'POST', LB_BASE, again)).status, 200);
  const hard = (await api(gw.api, 'GET', `${LB_BASE}/all`)).json.lbAttr[0].effective;
  assert.equal(hard.kvLbModeProfile.filters[0].name, 'bounded_load');
  assert.equal(hard.kvLbModeProfile.filters[0].factorPct, 175);
  assert.equal(hard.kvLbModeProfile.scorers[0].name, 'prefix');
  assert.equal(hard.kvLbModeProfile.onMiss, 'selector');
});
