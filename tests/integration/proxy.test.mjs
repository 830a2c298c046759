// Data plane against a simulated vLLM fleet: distribution, model pools, the openai client,
// SSE relay timing, client-disconnect cancel, request ids, limits and failure handling.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import {
  api, freePort, rawRequest, rule, simMetrics, sleep, startGateway, startSim, tempDir, requestCounts } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';

describe('fullproxy data plane', () => {
  let sim; let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    sim = await startSim(['--workers', '3', '--port', '0', '--model', 'sim-model', '--model', 'other',
      '--timing', 'fixed', '--itl-ms', '1', '--prefill-us-per-token', '1']);
    gw = await startGateway({ stateDir: tmp.dir, extra: ['--header-timeout-ms', '1000'] });
  });
  after(async () => { await gw.stop(); await sim.stop(); tmp.remove(); });

  async function service(opts) {
    const port = await freePort();
    const r = await api(gw.api, 'POST', BASE, rule({ port, workers: sim.workers, ...opts }));
    assert.equal(r.status, 200, r.text);
    return { port, url: `http://127.0.0.1:${port}`, remove: () => api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`) };
  }
  const fleetCounts = () => requestCounts(sim.workers);
  async function send(url, n, body = { model: 'sim-model', prompt: 'hello world', max_tokens: 2 }) {
    for (let i = 0; i < n; i++) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      const text = await res.text();
      assert.equal(res.status, 200, text);
    }
  }

  test('round-robin spreads evenly; wrr follows weights; lc balances', async () => {
    const rr = await service({ sel: 0 });
    let before = await fleetCounts();
    await send(rr.url, 30);
    let after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [10, 10, 10]);
    await rr.remove();

    const wrr = await service({ sel: 2, weights: [3, 1, 0] });
    before = await fleetCounts();
    await send(wrr.url, 40);
    after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [30, 10, 0]);
    await wrr.remove();

    const lc = await service({ sel: 4 });
    before = await fleetCounts();
    await send(lc.url, 30);  // sequential: all idle, ties rotate
    after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [10, 10, 10]);
    await lc.remove();
  });

  test('openai client: non-streaming and streaming through the gateway, with curl too', async () => {
    const svc = await service({ sel: 0 });
    const client = new OpenAI({ baseURL: `${svc.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const chat = await client.chat.completions.create({
      model: 'sim-model', messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 5,
    });
    assert.equal(chat.object, 'chat.completion');
    assert.equal(chat.usage.completion_tokens, 5);
    assert.ok(chat.choices[0].message.content.length > 0);
    const stream = await client.chat.completions.create({
      model: 'sim-model', messages: [{ role: 'user', content: 'Stream please' }], max_tokens: 6,
      stream: true, stream_options: { include_usage: true },
    });
    let tokens = 0; let usage = null;
    for await (const chunk of stream) {
      if (chunk.choices.length && chunk.choices[0].delta.content) tokens++;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(tokens, 6);
    assert.equal(usage.completion_tokens, 6);
    const comp = await client.completions.create({ model: 'sim-model', prompt: [1, 2, 3, 4], max_tokens: 3 });
    assert.equal(comp.usage.prompt_tokens, 4);
    // curl, with the gateway-injected request id.
    const out = execFileSync('curl', ['-s', '-i', '-X', 'POST', `${svc.url}/v1/completions`,
      '-H', 'content-type: application/json', '-d', '{"model":"sim-model","prompt":"x","max_tokens":1}']).toString();
    assert.match(out, /^HTTP\/1.1 200/);
    assert.match(out, /\r\nX-Request-Id: [0-9a-f]{32}\r\n/i);
    const kept = execFileSync('curl', ['-s', '-i', '-X', 'POST', `${svc.url}/v1/completions`,
      '-H', 'content-type: application/json', '-H', 'X-Request-Id: my-req-42',
      '-d', '{"model":"sim-model","prompt":"x","max_tokens":1}']).toString();
    assert.match(kept, /\r\nX-Request-Id: my-req-42\r\n/i);
    await svc.remove();
  });

  test('model pools: X-Model header, body model, catch-all, /v1/models, 503 model_unavailable', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const mk = (model, workers) => rule({ port, model, workers });
    assert.equal((await api(gw.api, 'POST', BASE, mk('sim-model', [sim.workers[0]]))).status, 200);
    assert.equal((await api(gw.api, 'POST', BASE, mk('other', [sim.workers[1]]))).status, 200);
    const models = await (await fetch(`${url}/v1/models`)).json();
    assert.deepEqual(models.data.map((m) => m.id).sort(), ['other', 'sim-model']);
    let before = await fleetCounts();
    await send(url, 2, { model: 'sim-model', prompt: 'a', max_tokens: 1 });
    await send(url, 3, { model: 'other', prompt: 'a', max_tokens: 1 });
    let after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [2, 3, 0]);
    // X-Model header overrides the body.
    before = after;
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-model': 'other' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'a', max_tokens: 1 }),
    });
    await res.arrayBuffer();
    after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [0, 1, 0]);
    // Unknown model, no catch-all.
    const unk = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"nope","prompt":"a"}',
    });
    assert.equal(unk.status, 503);
    assert.equal((await unk.json()).error.code, 'model_unavailable');
    const badJson = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":',
    });
    assert.equal(badJson.status, 400);
    // Catch-all pool takes unknown models.
    assert.equal((await api(gw.api, 'POST', BASE, mk('', [sim.workers[2]]))).status, 200);
    before = await fleetCounts();
    await send(url, 1, { model: 'sim-model-x', prompt: 'a', max_tokens: 1 }).catch(() => {});
    after = await fleetCounts();
    assert.deepEqual(after.map((x, i) => x - before[i]), [0, 0, 1]);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
  });

  test('SSE events are relayed as they arrive, not buffered', async () => {
    const slow = await startSim(['--workers', '1', '--port', '0', '--event-delay-ms', '100', '--timing', 'fixed', '--itl-ms', '0']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: slow.workers, extraArgs: { sse_mode: true } }))).status, 200);
    const t0 = Date.now();
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'tell me', max_tokens: 10, stream: true }),
    });
    assert.equal(res.headers.get('content-type').split(';')[0], 'text/event-stream');
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = ''; let firstAt = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
      if (firstAt === null && text.includes('data: ')) firstAt = Date.now() - t0;
    }
    const lastAt = Date.now() - t0;
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]');
    assert.equal(events.length, 11);  // 10 token events + [DONE]
    assert.ok(lastAt >= 900, `stream took ${lastAt} ms`);
    assert.ok(firstAt < lastAt - 700, `first event at ${firstAt} ms, last at ${lastAt} ms`);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await slow.stop();
  });

  test('a client that disconnects mid-stream cancels the upstream request', async () => {
    const slow = await startSim(['--workers', '1', '--port', '0', '--event-delay-ms', '100']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: slow.workers }))).status, 200);
    const ctrl = new AbortController();
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctrl.signal,
      body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'long' }], max_tokens: 100, stream: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    ctrl.abort();
    let aborted = 0;
    for (let i = 0; i < 30 && aborted === 0; i++) {
      await sleep(100);
      aborted = (await simMetrics(slow.workers[0])).kvgate_sim_requests_aborted_total || 0;
    }
    assert.equal(aborted, 1);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await slow.stop();
  });

  test('connect failure retries another endpoint; passive detection; nothing healthy gives 503', async () => {
    const dead = { host: '127.0.0.1', port: await freePort() };
    const svc = await service({ sel: 0, workers: [dead, sim.workers[0]] });
    for (let i = 0; i < 6; i++) {
      const res = await fetch(`${svc.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"sim-model","prompt":"a","max_tokens":1}',
      });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
    }
    // 3 consecutive connect failures marked the dead endpoint down (passive detection, 5 s):
    // round-robin tried it on requests 1, 3 and 5 only.
    let m = await (await fetch(`${gw.api}/metrics`)).text();
    assert.match(m, new RegExp(`^kvgate_endpoint_connect_failures_total\\{endpoint="127.0.0.1:${dead.port}"\\} 3$`, 'm'));
    assert.match(m, new RegExp(`^kvgate_endpoint_up\\{endpoint="127.0.0.1:${dead.port}"\\} 0$`, 'm'));
    await svc.remove();
    // A fresh dead endpoint alone: 502 while it is still trusted...
    const dead2 = { host: '127.0.0.1', port: await freePort() };
    const none = await service({ sel: 0, workers: [dead2] });
    const send = () => fetch(`${none.url}/v1/completions`, { method: 'POST', body: '{}' });
    for (let i = 0; i < 3; i++) {
      const res = await send();
      assert.equal(res.status, 502);
      assert.equal((await res.json()).error.code, 'upstream_connect_failed');
    }
    // ...then 503: nothing healthy is left to rescue the request.
    const res = await send();
    assert.equal(res.status, 503);
    assert.equal((await res.json()).error.code, 'no_healthy_upstream');
    await none.remove();
  });

  test('hostile requests: smuggling, oversized head/body, timeouts get clear errors', async () => {
    const svc = await service({ sel: 0 });
    const send1 = (s) => rawRequest(svc.port, s);
    assert.match(await send1('POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'), /^HTTP\/1.1 400/);
    assert.match(await send1('POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd'), /^HTTP\/1.1 400/);
    assert.match(await send1('GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n folded\r\n\r\n'), /^HTTP\/1.1 400/);
    assert.match(await send1('GET / HTTP/1.1\r\nHost: a\r\nBad Name: b\r\n\r\n'), /^HTTP\/1.1 400/);
    assert.match(await send1(`GET / HTTP/1.1\r\nHost: a\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`), /^HTTP\/1.1 431/);
    assert.match(await send1('POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999999\r\n\r\n'), /^HTTP\/1.1 413/);
    // Header timeout (gateway started with --header-timeout-ms 1000): partial head -> 408.
    assert.match(await rawRequest(svc.port, 'GET / HTTP/1.1\r\nHost: a\r\n', { waitMs: 3000 }), /^HTTP\/1.1 408/);
    // A chunked request body is forwarded with a Content-Length.
    const parts = ['{"model":"sim-mo', 'del","prompt":"x","max_tokens":1}'];
    const chunked = await send1('POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n' +
      parts.map((p) => `${p.length.toString(16)}\r\n${p}\r\n`).join('') + '0\r\n\r\n');
    assert.match(chunked, /^HTTP\/1.1 200/);
    await svc.remove();
  });

  test('upstream faults: 5xx relayed as is, stalls hit the data timeout (504)', async () => {
    const faulty = await startSim(['--workers', '1', '--port', '0']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: faulty.workers, extraArgs: { timeoutMemberData: 500 } }))).status, 200);
    const url = `http://127.0.0.1:${port}/v1/completions`;
    const body = '{"model":"sim-model","prompt":"a","max_tokens":1}';
    await fetch(`${faulty.workers[0].url}/sim/fault`, { method: 'POST', body: '{"fail_requests":1,"fail_status":503}' });
    let res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(res.status, 503);
    await res.arrayBuffer();
    res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    await fetch(`${faulty.workers[0].url}/sim/fault`, { method: 'POST', body: '{"stall_ms":2000}' });
    res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    assert.equal(res.status, 504);
    assert.equal((await res.json()).error.code, 'upstream_timeout');
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await faulty.stop();
  });

  test('no request is lost when the upstream closes pooled connections while idle', async () => {
    // Workers close idle keep-alive connections after 150 ms; requests arrive around that age so
    // the gateway keeps meeting connections closed while idle (and some closing as it sends).
    const sim2 = await startSim(['--workers', '2', '--port', '0', '--keepalive-timeout-ms', '150', '--timing', 'fixed', '--itl-ms', '0']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: sim2.workers }))).status, 200);
    const url = `http://127.0.0.1:${port}/v1/completions`;
    const body = '{"model":"sim-model","prompt":"a","max_tokens":1}';
    let ok = 0;
    const delays = [0, 140, 150, 155, 160, 200, 145, 152, 148, 300];
    for (let round = 0; round < 3; round++) {
      for (const d of delays) {
        await sleep(d);
        const burst = await Promise.all(Array.from({ length: 4 }, () =>
          fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
            .then(async (r) => { await r.arrayBuffer(); return r.status; })));
        ok += burst.filter((s) => s === 200).length;
      }
    }
    assert.equal(ok, 3 * delays.length * 4);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await sim2.stop();
  });

  test('an active stream is not reaped by the data timeout (only by the stream cap)', async () => {
    const slow = await startSim(['--workers', '1', '--port', '0', '--event-delay-ms', '400', '--timing', 'fixed', '--itl-ms', '0']);
    const port = await freePort();
    assert.equal((await api(gw.api, 'POST', BASE, rule({ port, workers: slow.workers, extraArgs: { sse_mode: true, timeoutMemberData: 250 } }))).status, 200);
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'x', max_tokens: 4, stream: true }),
    });
    const text = await res.text();
    assert.ok(text.endsWith('data: [DONE]\n\n'), text);
    assert.equal(text.split('\n\n').filter((e) => e.startsWith('data: {')).length, 4);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    await slow.stop();
  });

  test('rule updates and other rules coming and going under traffic lose no request', async () => {
    const port = await freePort();
    const mk = (ws) => rule({ port, sel: 8, workers: ws, extraArgs: { cb_enable: true } });
    assert.equal((await api(gw.api, 'POST', BASE, mk(sim.workers.slice(0, 2)))).status, 200);
    const url = `http://127.0.0.1:${port}/v1/chat/completions`;
    let stop = false; let ok = 0; const bad = [];
    const loop = async (c) => {
      for (let i = 0; !stop; i++) {
        const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-model', max_tokens: 1, messages: [{ role: 'user', content: `client ${c} turn ${i % 7}` }] }) });
        await r.arrayBuffer();
        if (r.status === 200) ok++; else bad.push(r.status);
      }
    };
    const loops = Array.from({ length: 8 }, (_, c) => loop(c));
    const others = await Promise.all(Array.from({ length: 3 }, () => freePort()));
    for (let i = 0; i < 30; i++) {
      const ws = i % 2 ? sim.workers.slice(0, 2) : sim.workers;  // add and remove an endpoint
      assert.equal((await api(gw.api, 'POST', BASE, mk(ws))).status, 200);
      const o = others[i % 3];
      await api(gw.api, 'POST', BASE, rule({ port: o, workers: [sim.workers[0]] }));
      await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${others[(i + 1) % 3]}/protocol/tcp`);
      await sleep(30);
    }
    stop = true;
    await Promise.all(loops);
    assert.deepEqual(bad, []);
    assert.ok(ok > 200, `only ${ok} requests completed`);
    await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`);
    for (const o of others) await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${o}/protocol/tcp`);
  });
});
