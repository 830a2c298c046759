// Client certificates on TLS listeners (issue 14 §4, `mtls_frontend`): certificates, a CRL and the
// expected outcomes all made by the openssl command line (an independent tool); Node's TLS client
// presenting them. Required mode: a verified certificate is served, none / an unknown CA / a
// revoked leaf / a name outside client_cn_pattern are refused and counted by reason; the pattern
// is matched against DNS subjectAltNames and, only without them, the CN (case-insensitive).
// Optional mode serves clients without a certificate. An inline CA (client_ca_cert_data), a CRL
// renewed while serving, tls_versions, and every malformed or conflicting field refused with 400
// while nothing changes.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { test } from 'node:test';
import { LB_BASE, api, freePort, makeCa, makeLeafCert, makeServerCert, rule, scrapeMetrics, startGateway,
  tempDir, waitFor } from './lib.mjs';

// A client certificate signed by `ca`: subject CN `cn`, and DNS subjectAltNames `dns` (none when
// empty).
function makeClientCert(dir, ca, serial, stem, { cn, dns = [] }) {
  const ext = 'extendedKeyUsage=clientAuth' +
    (dns.length ? `\nsubjectAltName=${dns.map((d) => `DNS:${d}`).join(',')}` : '');
  const { key, crt } = makeLeafCert(dir, ca, serial, stem, { cn, ext });
  return { key: readFileSync(key), cert: readFileSync(crt), crt };
}

// A CRL of `ca` revoking the certificates `revoked` (openssl ca with a throwaway database).
function makeCrl(dir, ca, revoked, out) {
  const db = path.join(dir, 'crl-index.txt'), cnf = path.join(dir, 'crl.cnf');
  writeFileSync(db, '');
  writeFileSync(cnf, `[ca]\ndefault_ca=c\n[c]\ndatabase=${db}\ncertificate=${ca.cert}\n` +
    `private_key=${ca.key}\ndefault_md=sha256\ndefault_crl_days=2\n`);
  for (const c of revoked)
    execFileSync('openssl', ['ca', '-config', cnf, '-revoke', c.crt], { stdio: 'pipe' });
  execFileSync('openssl', ['ca', '-config', cnf, '-gencrl', '-out', out], { stdio: 'pipe' });
}

async function engine(t) {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const out = JSON.stringify({ object: 'chat.completion', choices: [{ index: 0,
        message: { role: 'assistant', content: 'hello, client' }, finish_reason: 'stop' }] });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
      res.end(out);
    });
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => { srv.closeAllConnections(); return new Promise((r) => srv.close(r)); });
  return { host: '127.0.0.1', port: srv.address().port };
}

// One request over a new TLS connection; resolves {status, text} or rejects with the TLS error.
function post(port, serverCa, client = {}, tlsOpts = {}) {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions',
      ca: serverCa, agent: false, key: client.key, cert: client.cert, ...tlsOpts,
      headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end('{"model":"m","messages":[{"role":"user","content":"hi"}]}');
  });
}

const served = async (p) => {
  const r = await p;
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /hello, client/);
};
const refused = (p) => assert.rejects(p, (e) => e instanceof Error && e.code !== undefined);

test('mtls_frontend: client certificates verified, refused and counted', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const serverCa = makeCa(tmp.dir, 'server-ca');
  const clientCa = makeCa(tmp.dir, 'client-ca');
  const strangerCa = makeCa(tmp.dir, 'stranger-ca');
  const dp = makeServerCert(tmp.dir, serverCa, 7001, 'dp');
  const up = await engine(t);
  const serverCaPem = readFileSync(serverCa.cert);

  const good = makeClientCert(tmp.dir, clientCa, 11, 'good', { cn: 'ignored', dns: ['a.clients.test'] });
  const cnOnly = makeClientCert(tmp.dir, clientCa, 12, 'cnonly', { cn: 'b.CLIENTS.test' });
  const sanWrong = makeClientCert(tmp.dir, clientCa, 13, 'sanwrong', { cn: 'c.clients.test', dns: ['evil.example'] });
  const revokedCert = makeClientCert(tmp.dir, clientCa, 14, 'revoked', { cn: 'r', dns: ['r.clients.test'] });
  const laterRevoked = makeClientCert(tmp.dir, clientCa, 15, 'later', { cn: 'l', dns: ['l.clients.test'] });
  const stranger = makeClientCert(tmp.dir, strangerCa, 16, 'stranger', { cn: 's', dns: ['s.clients.test'] });
  const crl = path.join(tmp.dir, 'client.crl');
  makeCrl(tmp.dir, clientCa, [revokedCert], crl);

  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'),
    extra: ['--tls-cert', dp.crt, '--tls-key', dp.key] });
  t.after(() => gw.stop());
  const required = await freePort(), optional = await freePort(), inline = await freePort();
  const mtlsRequired = { client_cert_mode: 'required', client_ca_path: clientCa.cert,
    require_client_cn: true, client_cn_pattern: '*.clients.test', client_crl_path: crl };
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port: required, workers: [up],
    extraArgs: { security: 1, mtls_frontend: mtlsRequired } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: optional, workers: [up],
    extraArgs: { security: 1, mtls_frontend: { client_cert_mode: 'optional', client_ca_path: clientCa.cert } } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: inline, workers: [up], extraArgs: { security: 1,
    tls_versions: ['TLSv1.3'],
    mtls_frontend: { client_cert_mode: 'required', client_ca_cert_data: readFileSync(clientCa.cert, 'utf8') } } }));
  assert.equal(r.status, 200, r.text);
  const all = await api(gw.api, 'GET', `${LB_BASE}/all`);
  assert.match(all.text, /"client_cn_pattern":"\*\.clients\.test"/);  // stored and returned as given

  // Required mode.
  await served(post(required, serverCaPem, good));
  await served(post(required, serverCaPem, cnOnly));        // no DNS names: the CN, any case
  await refused(post(required, serverCaPem));                // no certificate
  await refused(post(required, serverCaPem, stranger));      // another CA
  await refused(post(required, serverCaPem, sanWrong));      // DNS names present: the CN is ignored
  await refused(post(required, serverCaPem, revokedCert));   // on the CRL
  await served(post(required, serverCaPem, laterRevoked));
  // Optional mode: no certificate is fine, a bad one is not.
  await served(post(optional, serverCaPem));
  await served(post(optional, serverCaPem, sanWrong));       // (no name pattern on this listener)
  await refused(post(optional, serverCaPem, stranger));
  // Inline CA, TLS 1.3 only.
  await served(post(inline, serverCaPem, good));
  await refused(post(inline, serverCaPem, good, { maxVersion: 'TLSv1.2' }));
  await refused(post(inline, serverCaPem));

  const counts = async () => {
    const ms = await scrapeMetrics(gw.api);
    const v = (res) => ms.find((m) => m.name === 'kvgate_tls_client_certs_total' && m.labels.result === res)?.value;
    return { verified: v('verified'), absent: v('absent'), missing: v('missing'), untrusted: v('untrusted'),
      revoked: v('revoked'), cn_mismatch: v('cn_mismatch') };
  };
  // verified: good, cnOnly, laterRevoked (required), sanWrong (optional), good (inline).
  // A refused handshake is counted when the server's side of it ends, which can be after the
  // client has read the alert: the counts are awaited (bounded), then compared exactly.
  const want = { verified: 5, absent: 1, missing: 2, untrusted: 2, revoked: 1, cn_mismatch: 1 };
  let got = null;
  await waitFor(async () => {
    got = await counts();
    return JSON.stringify(got) === JSON.stringify(want);
  }, 8000, 100);
  assert.deepEqual(got, want);

  // A renewed CRL applies to new connections without a restart.
  makeCrl(tmp.dir, clientCa, [revokedCert, laterRevoked], crl + '.new');
  execFileSync('mv', [crl + '.new', crl]);
  await waitFor(async () => {
    try { await post(required, serverCaPem, laterRevoked); return false; } catch { return true; }
  }, 8000, 200);
  await served(post(required, serverCaPem, good));
});

test('mtls_frontend and TLS fields: malformed or conflicting values get 400 and change nothing', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const serverCa = makeCa(tmp.dir, 'server-ca');
  const clientCa = makeCa(tmp.dir, 'client-ca');
  const dp = makeServerCert(tmp.dir, serverCa, 7002, 'dp');
  const up = await engine(t);
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's'),
    extra: ['--tls-cert', dp.crt, '--tls-key', dp.key] });
  t.after(() => gw.stop());
  const port = await freePort();
  const post1 = (extraArgs) => api(gw.api, 'POST', LB_BASE, rule({ port, workers: [up], extraArgs }));
  const bad = [
    [{ security: 1, mtls_frontend: { client_cert_mode: 'maybe', client_ca_path: clientCa.cert } }, /client_cert_mode/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required' } }, /client_ca_path/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert, require_client_cn: true } }, /client_cn_pattern/],
    [{ security: 0, mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert } }, /security 1 or 2/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: path.join(tmp.dir, 'nope.pem') } }, /client CA bundle/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_cert_data: 'not a pem' } }, /no CA certificate/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert, client_crl_path: clientCa.cert } }, /CRL/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert, client_cn_pattern: 'x'.repeat(300) } }, /longer than/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: `${clientCa.cert}\n` } }, /control character/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'optional', client_ca_path: clientCa.cert, surprise: 1 } }, /unknown field/],
    [{ security: 1, mtls_frontend: 'required' }, /must be an object/],
    [{ security: 1, tls_versions: ['TLSv1.1'] }, /TLS 1.2 and 1.3 only/],
    [{ security: 1, tls_versions: [] }, /tls_versions/],
    [{ security: 1, tls_ciphers: 'NOT-A-CIPHER' }, /tls_ciphers/],
    [{ security: 1, alpn_protocols: ['h2'] }, /http\/1.1/],
    [{ security: 1, tls_ciphers: 'TLS_AES_129_GCM_SHA256' }, /not a TLS 1.3 suite/],
    [{ security: 1, tls_ciphers: 'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256' }, /not a TLS 1.3 suite/],
    [{ security: 1, mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert, client_cn_pattern: '*.x' } }, /require_client_cn/],
  ];
  for (const [args, why] of bad) {
    const r = await post1(args);
    assert.equal(r.status, 400, `${JSON.stringify(args)}: ${r.text}`);
    assert.match(r.text, why, JSON.stringify(args));
  }
  const none = JSON.parse((await api(gw.api, 'GET', `${LB_BASE}/all`)).text);
  assert.equal((none.lbAttr ?? []).length, 0, 'no refused rule was stored');
  // Two rules on one listener must agree on TLS.
  let r = await post1({ security: 1, mtls_frontend: { client_cert_mode: 'optional', client_ca_path: clientCa.cert } });
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, model: 'other', workers: [up], extraArgs: { security: 1 } }));
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /same mtls_frontend/);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port, model: 'plain', workers: [up] }));
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /disagree on security/);
  const all = JSON.parse((await api(gw.api, 'GET', `${LB_BASE}/all`)).text);
  assert.equal((all.lbAttr ?? []).length, 1, 'only the first rule is stored');
  // The stored listener still serves.
  await served(post(port, readFileSync(serverCa.cert)));
});

test('restart: a rule whose CA bundle is gone is kept but not served; one this build refuses is set aside', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const serverCa = makeCa(tmp.dir, 'server-ca');
  const clientCa = makeCa(tmp.dir, 'client-ca');
  const dp = makeServerCert(tmp.dir, serverCa, 7003, 'dp');
  const up = await engine(t);
  const stateDir = path.join(tmp.dir, 's');
  const extra = ['--tls-cert', dp.crt, '--tls-key', dp.key];
  let gw = await startGateway({ stateDir, extra });
  const mtlsPort = await freePort(), plainPort = await freePort(), oldPort = await freePort();
  let r = await api(gw.api, 'POST', LB_BASE, rule({ port: mtlsPort, workers: [up], extraArgs: { security: 1,
    mtls_frontend: { client_cert_mode: 'required', client_ca_path: clientCa.cert } } }));
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: plainPort, workers: [up] }));
  assert.equal(r.status, 200, r.text);
  await gw.stop();
  // The CA bundle goes away, and a rule an older build accepted is added to the saved state.
  execFileSync('rm', [clientCa.cert]);
  const statePath = path.join(stateDir, 'rules.json');
  const saved = JSON.parse(readFileSync(statePath, 'utf8'));
  saved.rules.push({ serviceArguments: { externalIP: '127.0.0.1', port: oldPort, protocol: 'tcp', mode: 4,
    security: 1, tls_versions: ['TLSv1.1'] }, endpoints: [{ endpointIP: up.host, targetPort: up.port, weight: 1 }] });
  writeFileSync(statePath, JSON.stringify(saved));

  gw = await startGateway({ stateDir, extra });
  t.after(() => gw.stop());
  // The refused-by-this-build rule is set aside with its reason; the state file forgets it.
  const side = JSON.parse(readFileSync(path.join(stateDir, 'rules.rejected.json'), 'utf8'));
  assert.equal(side.rejected.length, 1);
  assert.equal(side.rejected[0].rule.serviceArguments.port, oldPort);
  assert.match(side.rejected[0].error, /TLS 1.2 and 1.3 only/);
  assert.ok(!readFileSync(statePath, 'utf8').includes(String(oldPort)));
  // The rule whose CA is gone is kept (GET), not served; the plain one is served.
  const all = JSON.parse((await api(gw.api, 'GET', `${LB_BASE}/all`)).text);
  assert.deepEqual(all.lbAttr.map((x) => x.serviceArguments.port).sort(), [mtlsPort, plainPort].sort());
  const res = await fetch(`http://127.0.0.1:${plainPort}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: '{"model":"m","messages":[]}' });
  assert.equal(res.status, 200);
  await assert.rejects(post(mtlsPort, readFileSync(serverCa.cert)));
  // Other changes are refused, naming it, until it is fixed or deleted.
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: oldPort, workers: [up] }));
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /client CA bundle/);
  r = await api(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/127.0.0.1/port/${mtlsPort}/protocol/tcp`);
  assert.equal(r.status, 200, r.text);
  r = await api(gw.api, 'POST', LB_BASE, rule({ port: oldPort, workers: [up] }));
  assert.equal(r.status, 200, r.text);
});
