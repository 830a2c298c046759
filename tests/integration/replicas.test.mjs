// Two gateway replicas sharing governance state (issue 14 §3): keys and limits in a real
// PostgreSQL server (--state-db), quota counters in a real Redis server (--redis), both started by
// this test on loopback and stopped when it ends. A key and a tenant limit made through one
// replica work through the other; a tenant's token debt and a key's request rate hold across
// both; Redis going away answers token_quota_warming for 3 s and then lets requests pass
// (counted), and the counters come back with Redis; PostgreSQL going away keeps the last state.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { LB_BASE, api, freePort, rule, scrapeMetrics, sleep, startGateway, startKvgate, tempDir, waitFor } from './lib.mjs';

const KEYS = '/netlox/v1/config/ai/apikey';
const TENANT = '/netlox/v1/config/ai/tenant/ratelimit';

// Runs a PostgreSQL server of the Debian package in a fresh directory (as the postgres user when
// the tests run as root: the server refuses root). Returns its URI and a stop function.
async function startPostgres(t) {
  const base = '/usr/lib/postgresql';
  const ver = existsSync(base) ? readdirSync(base).sort().at(-1) : null;
  assert.ok(ver, 'PostgreSQL server binaries (Debian package postgresql) are installed by setup');
  const bin = path.join(base, ver, 'bin');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvgate-pg-'));
  chmodSync(dir, 0o777);
  const asPg = process.getuid() === 0 ? ['runuser', '-u', 'postgres', '--'] : [];
  const run = (cmd, args) => {
    const argv = [...asPg, path.join(bin, cmd), ...args];
    return execFileSync(argv[0], argv.slice(1), { stdio: 'pipe', cwd: dir });
  };
  run('initdb', ['-D', `${dir}/data`, '-A', 'trust', '-U', 'kvgate', '--no-sync']);
  const port = await freePort();
  const start = () => run('pg_ctl', ['start', '-w', '-D', `${dir}/data`, '-l', `${dir}/log`, '-o',
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`]);
  const stop = () => { try { run('pg_ctl', ['stop', '-m', 'immediate', '-D', `${dir}/data`]); } catch { /* gone */ } };
  start();
  t.after(() => { stop(); rmSync(dir, { recursive: true, force: true }); });
  return { uri: `postgresql://kvgate@127.0.0.1:${port}/postgres`, stop };
}

// A Redis server without persistence on a free loopback port; `stop` and `start` again.
async function startRedis(t, extra = []) {
  const port = await freePort();
  let proc = null;
  const ping = () => new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => s.write('PING\r\n'));
    // (+PONG, or -NOAUTH from a server that requires a password: up either way)
    s.on('data', (d) => { s.destroy(); resolve(/^(\+PONG|-NOAUTH)/.test(d.toString())); });
    s.on('error', () => resolve(false));
  });
  const start = async () => {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', ...extra], { stdio: 'ignore' });
    assert.ok(await waitFor(ping, 10000), 'redis-server answers');
  };
  const stop = async () => {
    if (!proc) return;
    const p = proc;
    proc = null;
    await new Promise((r) => { p.once('exit', r); p.kill('SIGKILL'); });
  };
  await start();
  t.after(stop);
  return { addr: `127.0.0.1:${port}`, start, stop };
}

// An engine answering every chat request with usage.total_tokens = 500.
async function engine(t) {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const out = JSON.stringify({ id: 'x', object: 'chat.completion', model: 'm1',
        choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 10, completion_tokens: 490, total_tokens: 500 } });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { host: '127.0.0.1', port: srv.address().port };
}

async function chat(port, key) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ model: 'm1', max_tokens: 10, messages: [{ role: 'user', content: 'hello' }] }) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, retry: res.headers.get('retry-after') };
}

const metric = (ms, name, labels = {}) => ms.find((s) => s.name === name &&
  Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

test('two replicas: PostgreSQL keys and limits, Redis counters, failure modes', async (t) => {
  const pg = await startPostgres(t);
  const redis = await startRedis(t);
  const up = await engine(t);
  const replicas = [];
  for (let i = 0; i < 2; i++) {
    const tmp = tempDir();
    t.after(() => tmp.remove());
    const gw = await startGateway({ stateDir: tmp.dir, extra: ['--state-db', pg.uri, '--redis', redis.addr] });
    t.after(() => gw.stop());
    const port = await freePort();
    const r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up], extraArgs: { api_key_auth: 'required' } }));
    assert.equal(r.status, 200, r.text);
    replicas.push({ gw, port });
  }
  const [a, b] = replicas;

  // Made through A, seen by B within a few polls.
  let r = await api(a.gw.api, 'POST', KEYS, { tenant_id: 'acme' });
  assert.equal(r.status, 201, r.text);
  const { key_id: id, raw_key: acme } = r.json;
  r = await api(a.gw.api, 'POST', TENANT, { tenant_id: 'acme', tokens_per_min: 60 });
  assert.equal(r.status, 204);
  assert.ok(await waitFor(async () => (await api(b.gw.api, 'GET', `${TENANT}/acme`)).status === 200, 10000),
    'B sees the tenant limit made through A');
  assert.equal((await api(b.gw.api, 'GET', `${KEYS}/${id}`)).status, 200);

  // The tenant's 60 tokens per minute hold across both: A's answer costs 500 (debt -440 in
  // Redis), so B refuses the next one, with the wait of the shared bucket (>= 300 s).
  assert.equal((await chat(a.port, acme)).status, 200);
  r = await chat(b.port, acme);
  assert.equal(r.status, 429);
  assert.equal(r.json.error.code, 'token_quota_exceeded');
  assert.ok(Number(r.retry) >= 300, `Retry-After ${r.retry}`);
  assert.equal((await chat(a.port, acme)).status, 429);
  let ms = await scrapeMetrics(b.gw.api);
  assert.equal(metric(ms, 'loxilb_ai_rate_limit_hits_total', { tenant: 'acme', reason: 'tenant_tpm' }), 1);
  assert.equal(metric(ms, 'kvgate_quota_redis_up'), 1);

  // A key's request rate across both: 0.01 rps (one request per 100 s).
  r = await api(b.gw.api, 'POST', KEYS, { tenant_id: 'beta', rate_limit_rps: 0.01 });
  const slow = r.json.raw_key;
  assert.ok(await waitFor(async () => (await chat(a.port, slow)).status === 200, 10000), 'A sees B\'s key');
  r = await chat(b.port, slow);
  assert.equal(r.status, 429);
  assert.equal(r.json.error.code, 'rate_limit_exceeded');

  // Deleting through B: a PATCH through A right after cannot bring the key back (404), and A
  // refuses the key after its next poll.
  assert.equal((await api(b.gw.api, 'DELETE', `${KEYS}/${id}`)).status, 204);
  r = await api(a.gw.api, 'PATCH', `${KEYS}/${id}`, { name: 'back from the dead' });
  assert.equal(r.status, 404, r.text);
  assert.equal((await api(b.gw.api, 'GET', `${KEYS}/${id}`)).status, 404);
  assert.ok(await waitFor(async () => (await chat(a.port, acme)).status === 401, 10000));

  // Redis goes away: the first requests get 429 token_quota_warming (Retry-After 1); once it has
  // been unreachable for 3 s, requests pass uncounted (cold open).
  r = await api(a.gw.api, 'POST', KEYS, { tenant_id: 'gamma', tokens_per_min: 100000 });
  const gamma = r.json.raw_key;
  assert.ok(await waitFor(async () => (await chat(b.port, gamma)).status === 200, 10000));
  await redis.stop();
  r = await chat(b.port, gamma);
  assert.equal(r.status, 429);
  assert.equal(r.json.error.code, 'token_quota_warming');
  assert.equal(r.retry, '1');
  await sleep(3300);
  r = await chat(b.port, gamma);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  ms = await scrapeMetrics(b.gw.api);
  assert.ok(metric(ms, 'loxilb_ai_token_quota_cold_open_total') >= 1);
  assert.equal(metric(ms, 'kvgate_quota_redis_up'), 0);
  // Redis back: the counters reconnect by themselves.
  await redis.start();
  assert.ok(await waitFor(async () => {
    await chat(b.port, gamma);
    return metric(await scrapeMetrics(b.gw.api), 'kvgate_quota_redis_up') === 1;
  }, 10000), 'reconnected to Redis');

  // PostgreSQL goes away: both keep serving what they had (fail static); the API answers 503.
  pg.stop();
  assert.equal((await chat(a.port, gamma)).status, 200);
  r = await api(a.gw.api, 'POST', KEYS, { tenant_id: 'delta' });
  assert.equal(r.status, 503, r.text);
});

// A Redis that requires credentials: an ACL user with only what the quota scripts need, and the
// default user's requirepass. The gateway authenticates from --redis-auth-file (mode 0600, no
// symbolic link; refused otherwise); a wrong password at start stops serve with Redis's answer;
// a password rotated under a running gateway is counted and quotas warm, then open, as for an
// outage. No password ever reaches the log.
test('Redis with AUTH: --redis-auth-file (minimal ACL user or password), refusals, rotation', async (t) => {
  const redis = await startRedis(t, ['--requirepass', 'default-secret-1',
    '--user', 'kvgate', 'on', '>acl-secret-2', '~kvgate:*', '+script|load', '+evalsha', '+hmget',
    '+hset', '+expire', '+time']);
  const up = await engine(t);
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const file = (name, text, mode = 0o600) => {
    const f = path.join(tmp.dir, name);
    writeFileSync(f, text, { mode });
    chmodSync(f, mode);
    return f;
  };
  const serve = (authFile, dir) => startKvgate(['serve', '--api-listen', '127.0.0.1:0', '--redis', redis.addr,
    '--redis-auth-file', authFile, '--state-dir', path.join(tmp.dir, dir)]);
  // Refused at start: a file others can read, a symbolic link, a malformed line, no --redis.
  const loose = file('loose', 'user=kvgate\npassword=acl-secret-2\n', 0o644);
  await assert.rejects(serve(loose, 'x1'), /chmod 600/);
  const acl = file('acl', '# a minimal ACL user\nuser=kvgate\npassword= acl-secret-2\n');
  // A symbolic link to a loose file is judged by that file (Kubernetes mounts secrets as links).
  const link = path.join(tmp.dir, 'link');
  symlinkSync(loose, link);
  await assert.rejects(serve(link, 'x2'), /chmod 600/);
  await assert.rejects(serve(file('bad', 'kvgate acl-secret-2\n'), 'x3'), /password=SECRET/);
  await assert.rejects(serve(file('empty', 'user=\npassword=x\n'), 'x6'), /non-empty/);
  await assert.rejects(startKvgate(['serve', '--api-listen', '127.0.0.1:0', '--redis-auth-file', acl,
    '--state-dir', path.join(tmp.dir, 'x4')]), /needs --redis/);
  // A wrong password at start: serve exits naming Redis's answer, without the password.
  const wrong = file('wrong', 'user=kvgate\npassword=not-the-password\n');
  await assert.rejects(serve(wrong, 'x5'), (e) => /refused: WRONGPASS/.test(e.message) &&
    !e.message.includes('not-the-password'));

  const metered = async (authFile, dir) => {
    const gw = await startGateway({ stateDir: path.join(tmp.dir, dir),
      extra: ['--redis', redis.addr, '--redis-auth-file', authFile] });
    t.after(() => gw.stop());
    const port = await freePort();
    let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up], extraArgs: { api_key_auth: 'required' } }));
    assert.equal(r.status, 200, r.text);
    r = await api(gw.api, 'POST', KEYS, { tenant_id: 'acme', tokens_per_min: 100000 });
    return { gw, port, key: r.json.raw_key };
  };
  // The minimal ACL user and the default user's password both count quotas in Redis (a tenant
  // bucket key appears there; an ACL user without a command the scripts run would fail them).
  const gws = [];
  const linked = path.join(tmp.dir, 'linked');
  symlinkSync(acl, linked);  // (through a link to a protected file: accepted)
  for (const [name, authFile] of [['acl', linked], ['pass', file('pass', 'password=default-secret-1\n')]]) {
    const g = await metered(authFile, `state-${name}`);
    gws.push(g);
    assert.equal((await chat(g.port, g.key)).status, 200);
    const ms = await scrapeMetrics(g.gw.api);
    assert.equal(metric(ms, 'kvgate_quota_redis_up'), 1, name);
    assert.equal(metric(ms, 'kvgate_quota_redis_errors_total'), 0, `${name}: the scripts ran`);
    assert.equal(metric(ms, 'loxilb_ai_token_quota_cold_open_total'), 0, name);
  }
  // Rotation: the default user's password changes and connections are dropped; the 'pass'
  // gateway's reconnect is refused: counted, down, then quotas open.
  const [, g] = gws;
  const rot = await new Promise((resolve, reject) => {
    const [host, port] = redis.addr.split(':');
    const s = net.connect(Number(port), host);
    const cmd = (...a) => `*${a.length}\r\n` + a.map((x) => `$${Buffer.byteLength(x)}\r\n${x}\r\n`).join('');
    s.on('connect', () => s.write(cmd('AUTH', 'default-secret-1') + cmd('CONFIG', 'SET', 'requirepass', 'rotated-secret-3') +
      cmd('CLIENT', 'KILL', 'TYPE', 'normal')));
    let buf = '';
    s.on('data', (d) => { buf += d; if (buf.split('\r\n').length > 3) { s.destroy(); resolve(buf); } });
    s.on('error', reject);
  });
  assert.match(rot, /^\+OK\r\n\+OK\r\n:\d+/);
  assert.ok(await waitFor(async () => {
    const st = (await chat(g.port, g.key)).status;
    assert.ok(st === 200 || st === 429, `status ${st}`);
    const ms = await scrapeMetrics(g.gw.api);
    return metric(ms, 'kvgate_quota_redis_auth_failures_total') >= 1 && metric(ms, 'kvgate_quota_redis_up') === 0 &&
      metric(ms, 'loxilb_ai_token_quota_cold_open_total') >= 1;
  }, 15000, 200), 'the refused AUTH is counted and quotas open after the warming window');
  for (const x of gws)
    for (const secret of ['acl-secret-2', 'default-secret-1'])
      assert.ok(!x.gw.proc.stderrText.includes(secret), 'no password in the log');
});
