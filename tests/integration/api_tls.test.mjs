// The management API over HTTPS (issue 14 §4): a CA and server certificates made by the openssl
// command line; Node's TLS client verifying them; plain HTTP, an unknown CA, TLS 1.1 and a
// non-HTTP ALPN refused; kvgate ctl with --cacert; a renewed certificate picked up by new
// connections without a restart, a broken one refused while the old one keeps serving.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { test } from 'node:test';
import tls from 'node:tls';
import { BIN, makeCa, makeServerCert, rawRequest, sleep, startGateway, tempDir, waitFor } from './lib.mjs';

// GET over HTTPS with `ca`: {status, body, serial, alpn}.
function get(url, ca, { alpn } = {}) {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { ca, ALPNProtocols: alpn, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body,
        serial: res.socket.getPeerCertificate().serialNumber, alpn: res.socket.alpnProtocol }));
    });
    req.on('error', reject);
  });
}

test('management API over HTTPS: verification, refusals, ctl, certificate reload', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const ca = makeCa(tmp.dir, 'ca');
  const other = makeCa(tmp.dir, 'other');
  const first = makeServerCert(tmp.dir, ca, 1001, 'srv1');
  // The files the gateway serves, replaced in place later.
  const certFile = path.join(tmp.dir, 'server.crt'), keyFile = path.join(tmp.dir, 'server.key');
  writeFileSync(certFile, readFileSync(first.crt));
  writeFileSync(keyFile, readFileSync(first.key));
  const gw = await startGateway({ stateDir: path.join(tmp.dir, 'state'),
    extra: ['--api-tls-cert', certFile, '--api-tls-key', keyFile] });
  t.after(() => gw.stop());
  assert.match(gw.api, /^https:\/\/127\.0\.0\.1:\d+$/);
  const caPem = readFileSync(ca.cert);

  let r = await get(`${gw.api}/healthz`, caPem, { alpn: ['h2', 'http/1.1'] });
  assert.equal(r.status, 200);
  assert.equal(r.serial, '03E9');  // 1001
  assert.equal(r.alpn, 'http/1.1', 'ALPN picks HTTP/1.1 over h2');
  r = await get(`${gw.api}/netlox/v1/config/loadbalancer/all`, caPem);
  assert.equal(r.status, 200);

  // Refused: a client trusting another CA, TLS 1.1, plain HTTP on the TLS port.
  await assert.rejects(get(`${gw.api}/healthz`, readFileSync(other.cert)), /self[- ]signed|unable to verify|certificate/i);
  const port = Number(new URL(gw.api).port);
  await assert.rejects(new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca: caPem, maxVersion: 'TLSv1.1', minVersion: 'TLSv1' },
      () => { s.destroy(); resolve(); });
    s.on('error', reject);
  }));
  const plain = await rawRequest(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', { waitMs: 1000 });
  assert.doesNotMatch(plain, /^HTTP\/1\.1 200/, 'plain HTTP gets no answer');

  // kvgate ctl verifies the certificate with --cacert, and refuses without it.
  const ctl = (extra) => execFileSync(BIN, ['ctl', '--api', gw.api, ...extra, 'get'], { stdio: 'pipe' }).toString();
  assert.doesNotThrow(() => ctl(['--cacert', ca.cert]));
  assert.throws(() => ctl([]), (e) => /TLS handshake|certificate verify/i.test(e.stderr.toString() + e.stdout.toString()));

  // Renewal: new files (written to the side, then renamed in) serve new connections.
  const second = makeServerCert(tmp.dir, ca, 2002, 'srv2');
  await sleep(1100);  // (modification times of the new files differ from the first ones)
  writeFileSync(`${keyFile}.new`, readFileSync(second.key));
  writeFileSync(`${certFile}.new`, readFileSync(second.crt));
  renameSync(`${keyFile}.new`, keyFile);
  renameSync(`${certFile}.new`, certFile);
  assert.ok(await waitFor(async () => (await get(`${gw.api}/healthz`, caPem)).serial === '07D2', 10000),
    'the renewed certificate serves new connections');

  // A broken pair (a key that does not match) is refused; the previous certificate keeps serving.
  await sleep(1100);
  writeFileSync(keyFile, readFileSync(first.key));
  assert.ok(await waitFor(async () => {  // (a new connection looks at the files)
    await get(`${gw.api}/healthz`, caPem);
    return gw.proc.stderrText.includes('TLS certificate reload refused');
  }, 10000));
  r = await get(`${gw.api}/healthz`, caPem);
  assert.equal(r.status, 200);
  assert.equal(r.serial, '07D2');
});
