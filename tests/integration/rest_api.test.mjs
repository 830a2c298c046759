// Management REST API: schema, responses, errors, rule-set invariants and persistence.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, freePort, rawRequest, startGateway, tempDir } from './lib.mjs';

const BASE = '/netlox/v1/config/loadbalancer';

describe('management REST API', () => {
  let gw; let tmp;
  before(async () => {
    tmp = tempDir();
    gw = await startGateway({ stateDir: tmp.dir });
  });
  after(async () => { await gw.stop(); tmp.remove(); });

  const list = async () => (await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr;

  // Found by the rule_json fuzz target: GET leaves out fields given at zero, so posting back what
  // GET returned read "security": 0 -> absent as a change (409), and the fields whose default is
  // not zero (adminStateUp false, hsts_max_age 0) came back as their defaults.
  test('what GET returns posts back as the same rule; a real change of security is still 409', async () => {
    const port = await freePort();
    const rule = {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, security: 0,
        adminStateUp: false, hsts_max_age: 0 },
      endpoints: [{ endpointIP: '127.0.0.2', targetPort: 8100, weight: 1 }],
    };
    assert.equal((await api(gw.api, 'POST', BASE, rule)).status, 200);
    const got = (await list()).find((r) => r.serviceArguments.port === port);
    assert.equal(got.serviceArguments.adminStateUp, false);
    assert.equal(got.serviceArguments.hsts_max_age, 0);
    const back = { serviceArguments: got.serviceArguments,
      endpoints: got.endpoints.map(({ endpointIP, targetPort, weight }) => ({ endpointIP, targetPort, weight })) };
    const r = await api(gw.api, 'POST', BASE, back);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const again = (await list()).find((x) => x.serviceArguments.port === port);
    assert.equal(again.serviceArguments.adminStateUp, false, 'still disabled');
    assert.equal(again.serviceArguments.hsts_max_age, 0);
    const tls = { ...back, serviceArguments: { ...back.serviceArguments, security: 1 } };
    const c = await api(gw.api, 'POST', BASE, tls);
    assert.equal(c.status, 409);
    assert.match(JSON.stringify(c.json), /cant modify security/);
    assert.equal((await api(gw.api, 'DELETE', `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`)).status, 200);
  });

  test('seed examples (loopback) are accepted and listed like the upstream gateway', async () => {
    const p1 = await freePort(); const p2 = await freePort();
    const pd = {
      serviceArguments: {
        externalIP: '127.0.0.1', port: p1, protocol: 'tcp', sel: 0, mode: 4, host: '127.0.0.1',
        pd_disagg_mode: true, pd_cache_aware_mode: true, kvExactMode: 1, kvZmqPort: 5557,
        kvHashAlgo: 'sha256_cbor', kvBlockSize: 16,
      },
      endpoints: [
        { endpointIP: '127.0.0.2', targetPort: 8100, weight: 1, ep_role: 1, nixl_port: 5600 },
        { endpointIP: '127.0.0.3', targetPort: 8200, weight: 1, ep_role: 2, nixl_port: 5600 },
      ],
    };
    const chwbl = {
      serviceArguments: { externalIP: '127.0.0.1', port: p2, protocol: 'tcp', sel: 8, mode: 4, host: '127.0.0.1' },
      endpoints: [
        { endpointIP: '127.0.0.2', targetPort: 8000, weight: 1 },
        { endpointIP: '127.0.0.3', targetPort: 8000, weight: 1 },
      ],
    };
    for (const body of [pd, chwbl]) {
      const r = await api(gw.api, 'POST', BASE, body);
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { result: 'Success' });
    }
    const rules = await list();
    assert.equal(rules.length, 2);
    const got = rules.find((x) => x.serviceArguments.port === p1);
    assert.equal(got.serviceArguments.kvExactMode, 1);
    assert.equal(got.serviceArguments.backend_protocol, 'http1');
    assert.match(got.serviceArguments.id, /^[0-9a-f-]{36}$/);
    assert.equal(got.serviceArguments.sel, undefined, 'sel 0 is omitted (omitempty)');
    assert.equal(got.endpoints[0].state, 'active');
    assert.equal(got.secondaryIPs, null);
    // The P/D rule is routed (no engine listens on the seed's ports: 502 naming the prefill leg).
    const pdTraffic = await fetch(`http://127.0.0.1:${p1}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":"m","prompt":"hi"}',
    });
    assert.equal(pdTraffic.status, 502);
    const e = await pdTraffic.json();
    assert.equal(e.error.code, 'upstream_connect_failed');
    assert.match(e.error.message, /^prefill leg: connect to 127\.0\.0\.2:8100 failed/);
    // CHWBL is active: the request is routed (no worker listens on the seed's ports: 502).
    const chTraffic = await fetch(`http://127.0.0.1:${p2}/v1/models`);
    assert.equal(chTraffic.status, 502);
    assert.equal((await chTraffic.json()).error.code, 'upstream_connect_failed');
    // Identical re-post: 409; delete both.
    const again = await api(gw.api, 'POST', BASE, chwbl);
    assert.equal(again.status, 409);
    assert.equal(again.json.code, 409);
    assert.ok(again.json.message.length > 0 && again.json.result.includes('exists'));
    assert.equal((await api(gw.api, 'DELETE', `${BASE}/all`)).status, 200);
    assert.deepEqual(await list(), []);
  });

  test('malformed and out-of-range input gets 400 naming the field and changes nothing', async () => {
    const port = await freePort();
    const good = {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, name: 'keep' },
      endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9, weight: 1 }],
    };
    assert.equal((await api(gw.api, 'POST', BASE, good)).status, 200);
    const before = JSON.stringify(await list());
    const cases = [
      ['{not json', 'malformed JSON'],
      ['[]', 'body'],
      [{ endpoints: [] }, 'serviceArguments'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, port: 70000 } }, 'serviceArguments.port'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, port: 'x' } }, 'serviceArguments.port'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, sel: 6 } }, 'serviceArguments.sel'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, sel: 99 } }, 'serviceArguments.sel'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, externalIP: 'host.example' } }, 'serviceArguments.externalIP'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, kvExactMode: 7 } }, 'serviceArguments.kvExactMode'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, sse_mode: 'true' } }, 'serviceArguments.sse_mode'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, pd_cache_threshold: -1 } }, 'serviceArguments.pd_cache_threshold'],
      [{ ...good, serviceArguments: { ...good.serviceArguments, nonsense: 1 } }, 'serviceArguments.nonsense'],
      [{ ...good, endpoints: [{ endpointIP: '127.0.0.1', targetPort: 0, weight: 1 }] }, 'endpoints[0].targetPort'],
      [{ ...good, endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9 }] }, 'endpoints[0].weight'],
      [{ ...good, endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9, weight: 300 }] }, 'endpoints[0].weight'],
      [{ ...good, endpoints: 'x' }, 'endpoints'],
    ];
    for (const [body, field] of cases) {
      const r = await api(gw.api, 'POST', BASE, body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)} -> ${r.status} ${r.text}`);
      assert.equal(r.json.code, 400);
      assert.equal(r.json.message, 'Malformed arguments for API call');
      assert.ok(r.json.result.includes(field), `${field} not named in: ${r.json.result}`);
    }
    const mode = await api(gw.api, 'POST', BASE, { ...good, serviceArguments: { ...good.serviceArguments, mode: 6 } });
    assert.equal(mode.status, 400);
    assert.match(mode.json.result, /serviceArguments\.mode/);
    // Oversized body.
    const big = await api(gw.api, 'POST', BASE, JSON.stringify({ ...good, pad: 'x'.repeat(5 * 1024 * 1024) }));
    assert.equal(big.status, 413);
    assert.equal(JSON.stringify(await list()), before, 'rule set unchanged');
    // Hostile raw request to the API: smuggling attempt is refused.
    const raw = await rawRequest(Number(new URL(gw.api).port),
      'POST /netlox/v1/config/loadbalancer HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
    assert.match(raw, /^HTTP\/1.1 400/);
    assert.equal(JSON.stringify(await list()), before, 'rule set unchanged');
    assert.equal((await api(gw.api, 'DELETE', `${BASE}/name/keep`)).status, 200);
  });

  test('model pools on one VIP:port, update, empty endpoint list deletes, delete by key', async () => {
    const port = await freePort();
    const mk = (model, eps) => ({
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, model_name: model },
      endpoints: eps.map((p) => ({ endpointIP: '127.0.0.1', targetPort: p, weight: 1 })),
    });
    for (const m of ['a', 'b', '']) assert.equal((await api(gw.api, 'POST', BASE, mk(m, [9001]))).status, 200);
    assert.equal((await list()).length, 3);
    // Update endpoints of pool a.
    assert.equal((await api(gw.api, 'POST', BASE, mk('a', [9001, 9002]))).status, 200);
    const a = (await list()).find((r) => r.serviceArguments.model_name === 'a');
    assert.equal(a.endpoints.length, 2);
    // Empty endpoints delete pool b.
    assert.equal((await api(gw.api, 'POST', BASE, mk('b', []))).status, 200);
    assert.equal((await list()).length, 2);
    // Delete one pool by key + model_name, then the rest by key.
    const key = `${BASE}/externalipaddress/127.0.0.1/port/${port}/protocol/tcp`;
    assert.equal((await api(gw.api, 'DELETE', `${key}?model_name=a`)).status, 200);
    assert.equal((await list()).length, 1);
    const missing = await api(gw.api, 'DELETE', `${key}?model_name=zzz`);
    assert.equal(missing.status, 404);
    assert.equal(missing.json.message, 'Resource not found');
    assert.equal((await api(gw.api, 'DELETE', key)).status, 200);
    assert.equal((await list()).length, 0);
    assert.equal((await api(gw.api, 'DELETE', `${BASE}/name/none`)).status, 404);
    assert.equal((await api(gw.api, 'GET', '/netlox/v1/nothing')).status, 404);
  });

  test('a VIP that cannot be bound fails the change and leaves the rule set unchanged', async () => {
    const r = await api(gw.api, 'POST', BASE, {
      serviceArguments: { externalIP: '192.0.2.77', port: 8080, protocol: 'tcp', mode: 4 },
      endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9, weight: 1 }],
    });
    assert.equal(r.status, 503);
    assert.match(r.json.result, /cannot listen/);
    assert.deepEqual(await list(), []);
  });
});

describe('persistence', () => {
  test('rules survive a restart and kill -9 right after the acknowledgement', async () => {
    const tmp = tempDir();
    try {
      let gw = await startGateway({ stateDir: tmp.dir });
      const ports = [];
      for (let i = 0; i < 5; i++) {
        const port = await freePort();
        ports.push(port);
        const r = await api(gw.api, 'POST', BASE, {
          serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, name: `r${i}` },
          endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9000 + i, weight: 1 }],
        });
        assert.equal(r.status, 200);
        if (i === 4) await gw.stop('SIGKILL');  // kill -9 immediately after the last ack
      }
      gw = await startGateway({ stateDir: tmp.dir });
      let rules = (await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr;
      assert.deepEqual(rules.map((r) => r.serviceArguments.name).sort(), ['r0', 'r1', 'r2', 'r3', 'r4']);
      // The restored listeners serve again (no endpoint listens: connect fails -> 502).
      const res = await fetch(`http://127.0.0.1:${ports[0]}/v1/models`);
      assert.equal(res.status, 502);
      assert.equal((await api(gw.api, 'DELETE', `${BASE}/name/r2`)).status, 200);
      await gw.stop();
      gw = await startGateway({ stateDir: tmp.dir });
      rules = (await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr;
      assert.equal(rules.length, 4);
      await gw.stop();
    } finally {
      tmp.remove();
    }
  });

  test('kill -9 in the middle of a burst of changes loses no acknowledged rule', async () => {
    const tmp = tempDir();
    let totalAcked = 0;
    try {
      for (const killAfterMs of [5, 25, 60]) {
        let gw = await startGateway({ stateDir: tmp.dir });
        const acked = [];
        const ports = await Promise.all(Array.from({ length: 40 }, () => freePort()));
        const posts = ports.map((port, i) => api(gw.api, 'POST', BASE, {
          serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', mode: 4, name: `k${killAfterMs}-${i}` },
          endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9, weight: 1 }],
        }).then((r) => { if (r.status === 200) acked.push(`k${killAfterMs}-${i}`); }).catch(() => {}));
        await new Promise((r) => setTimeout(r, killAfterMs));
        await gw.stop('SIGKILL');
        await Promise.all(posts);
        gw = await startGateway({ stateDir: tmp.dir });
        const names = new Set((await api(gw.api, 'GET', `${BASE}/all`)).json.lbAttr.map((r) => r.serviceArguments.name));
        for (const n of acked) assert.ok(names.has(n), `acknowledged rule ${n} lost (kill after ${killAfterMs} ms)`);
        totalAcked += acked.length;
        console.log(`kill after ${killAfterMs} ms: ${acked.length} acknowledged, ${names.size} restored`);
        assert.equal((await api(gw.api, 'DELETE', `${BASE}/all`)).status, 200);
        await gw.stop();
      }
      assert.ok(totalAcked > 0, 'the burst acknowledged some rules before the kill');
    } finally {
      tmp.remove();
    }
  });
});
