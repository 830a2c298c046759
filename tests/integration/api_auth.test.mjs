// Management API authentication (issue 14 §4): --api-token-file (permission-checked, bearer
// tokens), /healthz open, 401 with WWW-Authenticate otherwise, `kvgate ctl --token-file`, and a
// non-loopback --api-listen refused without a token file unless --api-insecure.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { BIN, LB_BASE, startGateway, startKvgate, tempDir } from './lib.mjs';

test('--api-token-file: bearer tokens on every route but /healthz', async (t) => {
  const tmp = tempDir();
  t.after(() => tmp.remove());
  const file = path.join(tmp.dir, 'tokens');
  const token = 'tok-' + 'a1b2c3d4'.repeat(4);
  fs.writeFileSync(file, `# operators\n${token}\n\nsecond-token-0123456789\n`);
  // A file others can read is refused, so is a short token.
  fs.chmodSync(file, 0o644);
  await assert.rejects(startKvgate(['serve', '--api-listen', '127.0.0.1:0', '--state-dir', path.join(tmp.dir, 's0'),
    '--api-token-file', file]), /chmod 600/);
  const short = path.join(tmp.dir, 'short');
  fs.writeFileSync(short, 'tooshort\n', { mode: 0o600 });
  await assert.rejects(startKvgate(['serve', '--api-listen', '127.0.0.1:0', '--state-dir', path.join(tmp.dir, 's1'),
    '--api-token-file', short]), /16 characters/);
  fs.chmodSync(file, 0o600);

  const gw = await startGateway({ stateDir: path.join(tmp.dir, 's2'), extra: ['--api-token-file', file] });
  t.after(() => gw.stop());
  let r = await fetch(`${gw.api}${LB_BASE}/all`);
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate'), /^Bearer/);
  assert.equal((await fetch(`${gw.api}/metrics`)).status, 401);
  assert.equal((await fetch(`${gw.api}${LB_BASE}/all`, { headers: { authorization: 'Bearer wrong-token-0123456789' } })).status, 401);
  assert.equal((await fetch(`${gw.api}/healthz`)).status, 200);
  for (const tok of [token, 'second-token-0123456789']) {
    r = await fetch(`${gw.api}${LB_BASE}/all`, { headers: { authorization: `Bearer ${tok}` } });
    assert.equal(r.status, 200, await r.text());
  }
  // A rule created through the CLI with the token file; refused without it.
  const ctl = (args, env = {}) => {
    try {
      return { code: 0, out: execFileSync(BIN, ['ctl', '--api', gw.api, ...args], { encoding: 'utf8', env: { ...process.env, ...env } }) };
    } catch (e) {
      return { code: e.status, out: `${e.stdout}${e.stderr}` };
    }
  };
  assert.notEqual(ctl(['get']).code, 0);
  assert.equal(ctl(['--token-file', file, 'get']).code, 0);
  assert.equal(ctl(['get'], { KVGATE_API_TOKEN: token }).code, 0);
});

test('a non-loopback API without a token file needs --api-insecure', async () => {
  const tmp = tempDir();
  try {
    // (refused before anything binds)
    await assert.rejects(startKvgate(['serve', '--api-listen', '0.0.0.0:0', '--state-dir', tmp.dir]), /--api-insecure/);
  } finally {
    tmp.remove();
  }
});
