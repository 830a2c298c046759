// JWT auth end to end (issue 14): a profile whose JWKS file holds keys made by the openssl
// command line (RSA) and Node's crypto (EC P-256), tokens signed by `openssl dgst` (RS256) and
// Node (ES256), never by kvgate; a rule with api_key_auth jwt in front of an upstream that
// records what it receives; each bad variant refused with the §2.4 code; apikey-or-jwt where a
// key decides alone; key rotation picked up from the file; a referenced profile cannot be
// deleted (409); profiles survive a restart.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test } from 'node:test';
import { LB_BASE, api, freePort, rule, scrapeMetrics, startGateway, tempDir, waitFor } from './lib.mjs';

const PROFILES = '/netlox/v1/config/ai/jwtauthprofile';
const b64u = (b) => Buffer.from(b).toString('base64url');

function rsaKey(dir, name) {
  const file = path.join(dir, `${name}.pem`);
  execFileSync('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', file]);
  return { file, jwk: { ...crypto.createPublicKey(fs.readFileSync(file)).export({ format: 'jwk' }), kid: name, alg: 'RS256' } };
}
function rs256(keyFile, header, claims) {
  const input = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(claims))}`;
  const sig = execFileSync('openssl', ['dgst', '-sha256', '-sign', keyFile], { input });
  return `${input}.${b64u(sig)}`;
}
function es256(key, header, claims) {
  const input = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(claims))}`;
  return `${input}.${b64u(crypto.sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' }))}`;
}

async function recordingUpstream(t) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push(req.headers);
      const out = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [] });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { seen, worker: { host: '127.0.0.1', port: srv.address().port } };
}

async function call(port, headers) {
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'm1', messages: [{ role: 'user', content: 'hi' }] }) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, code: json?.error?.code, text };
}

test('api_key_auth jwt: tokens from independent signers, every refusal, rotation, persistence', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const r1 = rsaKey(tmp.dir, 'r1');
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const ecJwk = { ...ec.publicKey.export({ format: 'jwk' }), kid: 'e1', alg: 'ES256' };
  const jwks = path.join(tmp.dir, 'jwks.json');
  fs.writeFileSync(jwks, JSON.stringify({ keys: [r1.jwk, ecJwk] }));
  const state = path.join(tmp.dir, 'state');
  let gw = await startGateway({ stateDir: state, extra: ['--access-log'] });
  t.after(() => gw.stop('SIGKILL'));
  const up = await recordingUpstream(t);

  // Profiles: validated, the JWKS must load.
  let r = await api(gw.api, 'POST', PROFILES, { name: 'corp', issuer: 'i', jwks_file: path.join(tmp.dir, 'missing.json') });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /jwks_file/);
  r = await api(gw.api, 'POST', PROFILES, { name: 'corp', jwks_file: jwks, issuer: 'i', algorithms: ['HS256'] });
  assert.equal(r.status, 400);
  r = await api(gw.api, 'POST', PROFILES, { name: 'corp', jwks_file: jwks });  // a signature alone: refused
  assert.equal(r.status, 400);
  assert.match(r.text, /issuer or an audience/);
  r = await api(gw.api, 'POST', PROFILES, { name: 'corp', jwks_file: jwks, issuer: 'https://idp.example',
    audience: ['kvgate'], tenant_claim: 'org' });
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'GET', `${PROFILES}/corp`);
  assert.equal(r.json.keys, 2);
  assert.equal(r.json.error, '');

  const port = await freePort();
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { api_key_auth: 'jwt', jwt_auth_profile: 'corp' } }));
  assert.equal(r.status, 200, r.text);
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: 'https://idp.example', aud: 'kvgate', sub: 'alice', org: 'acme', exp: now + 3600 };
  const good = rs256(r1.file, { alg: 'RS256', kid: 'r1', typ: 'JWT' }, claims);
  r = await call(port, { authorization: `Bearer ${good}` });
  assert.equal(r.status, 200, r.text);
  assert.equal(up.seen.at(-1).authorization, undefined, 'the token never reaches the engine');
  // The access log names the token's tenant (claim org) and user (sub), never the token.
  assert.ok(await waitFor(() => gw.proc.stderrText.split('\n').some((l) => l.includes(' access ') &&
    l.includes('tenant=acme') && l.includes('user=alice')), 5000), gw.proc.stderrText.slice(-2000));
  assert.ok(!gw.proc.stderrText.includes(good.split('.')[2]), 'the token is never logged');
  r = await call(port, { authorization: `Bearer ${es256(ec.privateKey, { alg: 'ES256', kid: 'e1' }, claims)}` });
  assert.equal(r.status, 200, r.text);

  const refusals = [
    [{}, 'missing_token'],
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, exp: now - 3600 })}` }, 'token_expired'],
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, aud: 'other' })}` }, 'invalid_token'],
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, iss: 'https://evil' })}` }, 'invalid_token'],
    [{ authorization: `Bearer ${b64u('{"alg":"none"}')}.${b64u(JSON.stringify(claims))}.` }, 'invalid_token'],
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, pad: 'x'.repeat(4000) })}` }, 'invalid_token'],
    // Issue 28 §1.8: without its tenant claim (org here) a token escaped every tenant limit.
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, org: undefined })}` }, 'invalid_token'],
    [{ authorization: `Bearer ${rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { ...claims, sub: undefined })}` }, 'invalid_token'],
  ];
  // HS256 with the RSA public key's PEM as the HMAC secret (algorithm confusion).
  const pub = crypto.createPublicKey(fs.readFileSync(r1.file)).export({ type: 'spki', format: 'pem' });
  const hsIn = `${b64u('{"alg":"HS256","kid":"r1"}')}.${b64u(JSON.stringify(claims))}`;
  refusals.push([{ authorization: `Bearer ${hsIn}.${b64u(crypto.createHmac('sha256', pub).update(hsIn).digest())}` }, 'invalid_token']);
  const before = up.seen.length;
  for (const [headers, code] of refusals) {
    r = await call(port, headers);
    assert.equal(r.status, 401, `${code}: ${r.text}`);
    assert.equal(r.code, code, r.text);
  }
  assert.equal(up.seen.length, before, 'refused requests never reach the engine');

  // apikey-or-jwt: a present key decides alone (a bad key is a 401 even with a good token).
  const port2 = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port: port2, workers: [up.worker],
    extraArgs: { api_key_auth: 'apikey-or-jwt', jwt_auth_profile: 'corp' } }))).status, 200);
  assert.equal((await call(port2, { authorization: `Bearer ${good}` })).status, 200);
  const { raw_key: key } = (await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'acme' })).json;
  assert.equal((await call(port2, { 'x-api-key': key })).status, 200);
  // A deciding key beside a JWT: neither credential reaches the engine.
  assert.equal((await call(port2, { 'x-api-key': key, authorization: `Bearer ${good}` })).status, 200);
  assert.equal(up.seen.at(-1).authorization, undefined);
  assert.equal(up.seen.at(-1)['x-api-key'], undefined);
  // X-Model cannot steer a request to a rule without the check: body and header must agree.
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', 'x-model': 'other' },
    body: JSON.stringify({ model: 'm1', messages: [] }) });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.code, 'model_mismatch');
  r = await call(port2, { 'x-api-key': 'kvg-0000000000000000-' + 'A'.repeat(43), authorization: `Bearer ${good}` });
  assert.equal(r.status, 401);
  assert.equal(r.code, 'invalid_api_key');

  // Rotation: a new key in the file is picked up by the refresh thread (polled, one-sided bound).
  const r2 = rsaKey(tmp.dir, 'r2');
  const rotated = rs256(r2.file, { alg: 'RS256', kid: 'r2' }, claims);
  assert.equal((await call(port, { authorization: `Bearer ${rotated}` })).status, 401);
  fs.writeFileSync(jwks, JSON.stringify({ keys: [r2.jwk] }));
  assert.ok(await waitFor(async () => (await call(port, { authorization: `Bearer ${rotated}` })).status === 200, 30000, 250),
    'the rotated key is accepted within 30 s');
  assert.equal((await call(port, { authorization: `Bearer ${good}` })).status, 401, 'the removed key is not');
  // An emptied (well-formed) set revokes every key: no 24-hour grace for a deliberate removal.
  fs.writeFileSync(jwks, JSON.stringify({ keys: [] }));
  assert.ok(await waitFor(async () => (await call(port, { authorization: `Bearer ${rotated}` })).status === 401, 30000, 250),
    'an emptied JWKS revokes within 30 s');
  fs.writeFileSync(jwks, JSON.stringify({ keys: [r2.jwk] }));
  assert.ok(await waitFor(async () => (await call(port, { authorization: `Bearer ${rotated}` })).status === 200, 30000, 250));

  // A profile a rule names cannot be deleted; profiles survive kill -9.
  r = await api(gw.api, 'DELETE', `${PROFILES}/corp`);
  assert.equal(r.status, 409, r.text);
  await gw.stop('SIGKILL');
  gw = await startGateway({ stateDir: state });
  assert.equal((await call(port, { authorization: `Bearer ${rotated}` })).status, 200);
  const m = (await scrapeMetrics(gw.api)).filter((s) => s.name === 'kvgate_jwt_checks_total');
  assert.ok(m.find((s) => s.labels.outcome === 'ok')?.value >= 1, JSON.stringify(m));
  // Unreferenced: deleted.
  for (const p of [port, port2])
    assert.equal((await api(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/127.0.0.1/port/${p}/protocol/tcp`)).status, 200);
  assert.equal((await api(gw.api, 'DELETE', `${PROFILES}/corp`)).status, 200);
  assert.equal((await api(gw.api, 'GET', `${PROFILES}/corp`)).status, 404);
});

test('model pools behind JWT: /v1/models needs a valid token', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const r1 = rsaKey(tmp.dir, 'r1');
  const jwks = path.join(tmp.dir, 'jwks.json');
  fs.writeFileSync(jwks, JSON.stringify({ keys: [r1.jwk] }));
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 'state') });
  t.after(() => gw.stop());
  const up = await recordingUpstream(t);
  assert.equal((await api(gw.api, 'POST', PROFILES, { name: 'corp', jwks_file: jwks, audience: 'kvgate' })).status, 200);
  const port = await freePort();
  for (const model of ['m1', 'm2'])
    assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, model, workers: [up.worker],
      extraArgs: { api_key_auth: 'jwt', jwt_auth_profile: 'corp' } }))).status, 200);
  let r = await fetch(`http://127.0.0.1:${port}/v1/models`);
  assert.equal(r.status, 401);
  const tok = rs256(r1.file, { alg: 'RS256', kid: 'r1' }, { aud: 'kvgate', sub: 'u', tenant: 't', exp: Math.floor(Date.now() / 1000) + 600 });
  r = await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { authorization: `Bearer ${tok}` } });
  assert.equal(r.status, 200);
  assert.deepEqual((await r.json()).data.map((m) => m.id).sort(), ['m1', 'm2']);
});

// A keyset fetched from a URL (issue 14 §1): an HTTPS server with a certificate from a CA made by
// the openssl command line, verified with jwks_ca_file; an unverifiable server, plain http to a
// non-loopback host and an oversized document are refused when the profile is stored.
test('JWKS from an https URL: verified, bounded, tokens accepted', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const ossl = (...a) => execFileSync('openssl', a, { stdio: 'pipe' });
  const caKey = path.join(tmp.dir, 'ca.key'), caPem = path.join(tmp.dir, 'ca.pem');
  ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=jwks-ca', '-keyout', caKey, '-out', caPem);
  const sKey = path.join(tmp.dir, 's.key'), csr = path.join(tmp.dir, 's.csr'), sCrt = path.join(tmp.dir, 's.crt');
  fs.writeFileSync(path.join(tmp.dir, 'ext'), 'subjectAltName=IP:127.0.0.1\n');
  ossl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', sKey, '-out', csr);
  ossl('x509', '-req', '-in', csr, '-CA', caPem, '-CAkey', caKey, '-set_serial', '7', '-days', '2',
    '-extfile', path.join(tmp.dir, 'ext'), '-out', sCrt);
  const other = path.join(tmp.dir, 'other.pem');
  ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=other', '-keyout', path.join(tmp.dir, 'o.key'), '-out', other);

  const r1 = rsaKey(tmp.dir, 'u1');
  let doc = JSON.stringify({ keys: [r1.jwk] });
  const https = await import('node:https');
  const srv = https.createServer({ key: fs.readFileSync(sKey), cert: fs.readFileSync(sCrt) }, (req, res) => {
    const body = req.url === '/big' ? JSON.stringify({ keys: [], pad: 'x'.repeat(2 << 20) }) : doc;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  const url = `https://127.0.0.1:${srv.address().port}`;

  const gw = await startGateway({ stateDir: path.join(tmp.dir, 'state') });
  t.after(() => gw.stop());
  for (const [body, field] of [
    [{ name: 'u', issuer: 'i', jwks_url: `${url}/jwks`, jwks_ca_file: other }, 'jwks_url'],  // unverifiable
    [{ name: 'u', issuer: 'i', jwks_url: `${url}/big`, jwks_ca_file: caPem }, 'jwks_url'],   // over 1 MiB
    [{ name: 'u', issuer: 'i', jwks_url: 'http://example.com/jwks' }, 'jwks_url'],           // clear text
    [{ name: 'u', issuer: 'i', jwks_url: 'http://127.0.0.1.example.com/jwks' }, 'jwks_url'], // a name, not 127.x
    [{ name: 'u', issuer: 'i', jwks_url: 'http://localhost.example.com/jwks' }, 'jwks_url'],
    [{ name: 'u', issuer: 'i', jwks_url: `${url}/jwks`, jwks_file: '/x' }, 'jwks_file'],     // both
    [{ name: 'u', issuer: 'i', jwks_file: '/x', jwks_ca_file: caPem }, 'jwks_ca_file']]) {
    const r = await api(gw.api, 'POST', PROFILES, body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.text, new RegExp(field), r.text);
  }
  // A server that accepts and never answers: the store gives up after its 5 s bound, the API
  // stays responsive, nothing is stored.
  const net = await import('node:net');
  const held = [];
  const mute = net.createServer((s) => held.push(s));
  await new Promise((r) => mute.listen(0, '127.0.0.1', r));
  t.after(() => { for (const s of held) s.destroy(); return new Promise((r) => mute.close(r)); });
  const t0 = Date.now();
  let r = await api(gw.api, 'POST', PROFILES, { name: 'u', issuer: 'i', jwks_url: `http://127.0.0.1:${mute.address().port}/jwks` });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /jwks_url/);
  assert.ok(Date.now() - t0 < 20000, 'bounded');
  r = await api(gw.api, 'POST', PROFILES, { name: 'u', issuer: 'i', jwks_url: `${url}/jwks`, jwks_ca_file: caPem });
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'GET', `${PROFILES}/u`);
  assert.equal(r.json.keys, 1);
  const up = await recordingUpstream(t);
  const port = await freePort();
  assert.equal((await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up.worker],
    extraArgs: { api_key_auth: 'jwt', jwt_auth_profile: 'u' } }))).status, 200);
  const now = Math.floor(Date.now() / 1000);
  const tok = rs256(r1.file, { alg: 'RS256', kid: 'u1', typ: 'JWT' }, { iss: 'i', sub: 'bob', tenant: 't', exp: now + 600 });
  assert.equal((await call(port, { authorization: `Bearer ${tok}` })).status, 200);
  const r2 = rsaKey(tmp.dir, 'u2');
  const tok2 = rs256(r2.file, { alg: 'RS256', kid: 'u2', typ: 'JWT' }, { iss: 'i', sub: 'bob', tenant: 't', exp: now + 600 });
  assert.equal((await call(port, { authorization: `Bearer ${tok2}` })).code, 'invalid_token');
});
