// The Debian package and the service (issue 32 §4): `make deb`'s package (built here with cpack
// from this build tree) has its control data, conffile and files; it installs into a clean root
// (dpkg --root, maintainer scripts told so by DPKG_ROOT); systemd-analyze verifies its unit and
// rates its hardening; the installed binary, started as the unit starts it (--config
// /etc/kvgate/kvgate.conf), serves the README's example. And `serve --config FILE` with SIGHUP:
// the file's flags, the command line winning, a reload applying the log level and the API token
// file, a broken file changing nothing.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { BIN, LB_BASE, api, freePort, rule, startKvgate, startSim, stop, tempDir, waitFor } from './lib.mjs';

const BUILD = path.dirname(BIN);
let deb; let tmp;

before(() => {
  tmp = tempDir();
  const out = spawnSync('cpack', ['-G', 'DEB', '-B', tmp.dir], { cwd: BUILD, encoding: 'utf8', timeout: 600_000 });
  assert.equal(out.status, 0, `${out.stdout}\n${out.stderr}`);
  deb = fs.readdirSync(tmp.dir).filter((f) => f.endsWith('.deb')).map((f) => path.join(tmp.dir, f))[0];
  assert.ok(deb, `no .deb in ${tmp.dir}: ${out.stdout}`);
});
after(() => tmp?.remove());

const run = (cmd, args, opts = {}) => execFileSync(cmd, args, { encoding: 'utf8', ...opts });

describe('the Debian package', () => {
  let root;
  before(() => {
    root = path.join(tmp.dir, 'root');
    for (const d of ['var/lib/dpkg/info', 'var/lib/dpkg/updates']) fs.mkdirSync(path.join(root, d), { recursive: true });
    fs.writeFileSync(path.join(root, 'var/lib/dpkg/status'), '');
  });

  test('control data, conffile and files', () => {
    const info = run('dpkg-deb', ['-f', deb, 'Package', 'Architecture', 'Depends', 'Section']);
    assert.match(info, /^Package: kvgate$/m);
    assert.match(info, /^Architecture: amd64$/m);
    assert.match(info, /^Depends: .*\badduser\b/m);
    assert.match(info, /libssl3/, 'shared-library dependencies computed');
    const ctl = path.join(tmp.dir, 'ctl');
    run('dpkg-deb', ['-e', deb, ctl]);
    assert.equal(fs.readFileSync(path.join(ctl, 'conffiles'), 'utf8').trim(), '/etc/kvgate/kvgate.conf');
    for (const s of ['postinst', 'prerm', 'postrm']) {
      const st = fs.statSync(path.join(ctl, s));
      assert.equal(st.mode & 0o777, 0o755, `${s} executable`);
      run('sh', ['-n', path.join(ctl, s)]);  // (parses)
    }
    const files = run('dpkg-deb', ['-c', deb]).split('\n').map((l) => l.split(/\s+/).at(-1)).filter((f) => f && !f.endsWith('/'));
    assert.deepEqual(files.sort(), ['./etc/kvgate/kvgate.conf', './usr/bin/kvgate',
      './usr/lib/systemd/system/kvgate.service', './usr/share/kvgate/grafana/kvgate.json',
      './usr/share/kvgate/prometheus/alerts.yml', './usr/share/man/man1/kvgate.1']);
  });

  test('installs into a clean root; systemd-analyze verifies the unit and rates its hardening', () => {
    run('dpkg', ['--root', root, '--force-not-root', '--force-script-chrootless', '--force-depends',
      '--log=/dev/null', '-i', deb]);
    assert.match(run('dpkg', ['--root', root, '-s', 'kvgate']), /^Status: install ok installed$/m);
    for (const f of ['usr/bin/kvgate', 'etc/kvgate/kvgate.conf', 'usr/lib/systemd/system/kvgate.service', 'usr/share/man/man1/kvgate.1'])
      assert.ok(fs.existsSync(path.join(root, f)), f);
    // The man page is the binary's own help (every serve flag, --config included).
    const man = fs.readFileSync(path.join(root, 'usr/share/man/man1/kvgate.1'), 'utf8');
    assert.match(man, /^\.TH KVGATE 1/m);
    for (const flag of ['--config FILE', '--api-token-file', '--models-dir', '--drain-timeout-ms']) assert.ok(man.includes(flag), flag);
    // The unit needs systemd's own units and the commands it names: taken from this machine.
    fs.cpSync('/usr/lib/systemd/system', path.join(root, 'usr/lib/systemd/system'), { recursive: true, force: false, errorOnExist: false });
    fs.mkdirSync(path.join(root, 'bin'), { recursive: true });
    fs.copyFileSync('/bin/kill', path.join(root, 'bin/kill'));
    const verify = spawnSync('systemd-analyze', ['verify', `--root=${root}`, '--man=no', 'kvgate.service'], { encoding: 'utf8' });
    assert.equal(verify.status, 0, verify.stderr);
    assert.equal(verify.stderr.trim(), '', 'no warnings');
    const sec = spawnSync('systemd-analyze', ['security', '--offline=true', `--root=${root}`, 'kvgate.service'], { encoding: 'utf8' });
    const level = Number(/Overall exposure level for kvgate\.service: ([\d.]+)/.exec(sec.stdout)?.[1]);
    assert.ok(level <= 4.0, `exposure ${level} (${sec.stdout.split('\n').slice(-3).join(' ')})`);
    const unit = fs.readFileSync(path.join(root, 'usr/lib/systemd/system/kvgate.service'), 'utf8');
    for (const d of ['User=kvgate', 'ProtectSystem=strict', 'StateDirectory=kvgate', 'NoNewPrivileges=yes',
      'CapabilityBoundingSet=CAP_NET_BIND_SERVICE', 'ExecStart=/usr/bin/kvgate serve --config /etc/kvgate/kvgate.conf'])
      assert.ok(unit.includes(d), d);
  });

  test('the installed binary, started as the unit starts it, serves the README example', async (t) => {
    const bin = path.join(root, 'usr/bin/kvgate');
    const sim = await startSim(['--hosts', '127.0.0.10-13', '--port', '0']);
    t.after(() => sim.stop());
    // The packaged config as it is, with the state and the API moved for the test (the command
    // line wins over the file).
    const state = path.join(tmp.dir, 'state');
    const { proc, ready } = await startKvgate(['serve', '--config', path.join(root, 'etc/kvgate/kvgate.conf'),
      '--state-dir', state, '--api-listen', '127.0.0.1:0'], { bin });
    t.after(() => stop(proc));
    const port = await freePort();
    const r = await api(ready.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, model_name: 'sim-model', sse_mode: true },
      endpoints: sim.workers.map((w) => ({ endpointIP: w.host, targetPort: w.port, weight: 1 })),
    });
    assert.equal(r.status, 200, r.text);
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], stream: true }) });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /data: \[DONE\]/);
    assert.ok(fs.existsSync(state), 'the rule set persists in the state directory');
  });
});

test('serve --config FILE: the file\'s flags, the command line wins, SIGHUP reloads', async (t) => {
  const dir = tempDir();
  t.after(() => dir.remove());
  const conf = path.join(dir.dir, 'kvgate.conf');
  const tokens = path.join(dir.dir, 'tokens');
  fs.writeFileSync(tokens, 'a-long-enough-api-token-0123456789\n', { mode: 0o600 });
  fs.writeFileSync(conf, `# test\nstate-dir ${dir.dir}/state\napi-listen = 127.0.0.1:1\nlog-level warn\n`);
  // A bad file: refused at start, naming the line.
  const badConf = path.join(dir.dir, 'bad.conf');
  fs.writeFileSync(badConf, 'workers 2\nWorkers 3\n');
  const bad = spawnSync(BIN, ['serve', '--config', badConf], { encoding: 'utf8', timeout: 10000 });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /bad\.conf:2/);
  const unknown = path.join(dir.dir, 'unknown.conf');
  fs.writeFileSync(unknown, 'no-such-flag 1\n');
  const u = spawnSync(BIN, ['serve', '--config', unknown], { encoding: 'utf8', timeout: 10000 });
  assert.equal(u.status, 2);
  assert.match(u.stderr, /unknown flag '--no-such-flag'/);

  // (api-listen from the file is overridden on the command line)
  const { proc, ready } = await startKvgate(['serve', '--config', conf, '--api-listen', '127.0.0.1:0']);
  t.after(() => stop(proc));
  assert.equal((await fetch(`${ready.api}/netlox/v1/config/loadbalancer/all`)).status, 200, 'no tokens yet');
  // Reload with a token file: the API requires it from then on; the log level changes too.
  fs.writeFileSync(conf, `state-dir ${dir.dir}/state\napi-token-file ${tokens}\nlog-level info\n`);
  proc.kill('SIGHUP');
  assert.ok(await waitFor(() => /SIGHUP: reloaded \(log level info, API tokens from/.test(proc.stderrText), 5000), proc.stderrText);
  assert.equal((await fetch(`${ready.api}/netlox/v1/config/loadbalancer/all`)).status, 401);
  const ok = await fetch(`${ready.api}/netlox/v1/config/loadbalancer/all`, { headers: { authorization: 'Bearer a-long-enough-api-token-0123456789' } });
  assert.equal(ok.status, 200);
  // A file that no longer parses: nothing changes, the gateway goes on.
  fs.writeFileSync(conf, 'workers two\n');
  proc.kill('SIGHUP');
  assert.ok(await waitFor(() => /SIGHUP: the flags do not parse/.test(proc.stderrText), 5000), proc.stderrText);
  assert.equal((await fetch(`${ready.api}/netlox/v1/config/loadbalancer/all`)).status, 401);
  assert.equal(proc.exitCode, null);
});
