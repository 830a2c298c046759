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
import { buildLauncher, expandSyscallSets } from './syscall_filter.mjs';

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
  const inRoot = (f) => path.join(root, f);
  const owner = (f) => fs.statSync(inRoot(f));
  const uidOf = (name, file) => Number(fs.readFileSync(inRoot(file), 'utf8').split('\n')
    .find((l) => l.startsWith(`${name}:`))?.split(':')[2]);
  const dpkg = (...args) => run('dpkg', ['--root', root, '--force-not-root', '--force-script-chrootless',
    '--force-depends', '--log=/dev/null', ...args]);
  before(() => {
    root = path.join(tmp.dir, 'root');
    for (const d of ['var/lib/dpkg/info', 'var/lib/dpkg/updates', 'etc']) fs.mkdirSync(inRoot(d), { recursive: true });
    fs.writeFileSync(inRoot('var/lib/dpkg/status'), '');
  });

  test('control data, conffile and files', () => {
    const info = run('dpkg-deb', ['-f', deb, 'Package', 'Architecture', 'Depends', 'Section', 'Description']);
    assert.match(info, /^Package: kvgate$/m);
    assert.equal(/^Architecture: (.*)$/m.exec(info)[1], run('dpkg', ['--print-architecture']).trim());
    assert.match(info, /^Depends: .*\badduser\b.*\binit-system-helpers\b/m);
    assert.match(info, /libssl3/, 'shared-library dependencies computed');
    assert.match(info, /^ kvgate sits in front of vLLM/m, 'a long description');
    const ctl = path.join(tmp.dir, 'ctl');
    run('dpkg-deb', ['-e', deb, ctl]);
    assert.equal(fs.readFileSync(path.join(ctl, 'conffiles'), 'utf8').trim(), '/etc/kvgate/kvgate.conf');
    for (const s of ['postinst', 'prerm', 'postrm']) {
      assert.equal(fs.statSync(path.join(ctl, s)).mode & 0o777, 0o755, `${s} executable`);
      run('sh', ['-n', path.join(ctl, s)]);  // (parses)
    }
    const files = run('dpkg-deb', ['-c', deb]).split('\n').map((l) => l.split(/\s+/).at(-1)).filter((f) => f && !f.endsWith('/'));
    assert.deepEqual(files.sort(), ['./etc/kvgate/kvgate.conf', './usr/bin/kvgate',
      './usr/lib/systemd/system/kvgate.service', './usr/lib/sysusers.d/kvgate.conf',
      './usr/share/doc/kvgate/copyright', './usr/share/kvgate/grafana/kvgate.json',
      './usr/share/kvgate/prometheus/alerts.yml', './usr/share/man/man1/kvgate.1.gz']);
  });

  test('installs into a clean root: user, state directory, API token, unit enabled; again keeps them', () => {
    dpkg('-i', deb);
    assert.match(run('dpkg', ['--root', root, '-s', 'kvgate']), /^Status: install ok installed$/m);
    const uid = uidOf('kvgate', 'etc/passwd');
    const gid = uidOf('kvgate', 'etc/group');
    assert.ok(uid > 0 && uid < 1000 && gid > 0, `a system user and group (${uid}:${gid})`);
    const state = owner('var/lib/kvgate');
    assert.equal(state.mode & 0o777, 0o750);
    assert.deepEqual([state.uid, state.gid], [uid, gid]);
    const tok = owner('etc/kvgate/api-tokens');
    assert.equal(tok.mode & 0o777, 0o600);
    assert.equal(tok.uid, uid);
    const token = fs.readFileSync(inRoot('etc/kvgate/api-tokens'), 'utf8');
    assert.match(token, /^[0-9a-f]{64}\n$/);
    assert.match(fs.readFileSync(inRoot('etc/kvgate/kvgate.conf'), 'utf8'), /^api-token-file \/etc\/kvgate\/api-tokens$/m);
    const wants = inRoot('etc/systemd/system/multi-user.target.wants/kvgate.service');
    assert.ok(fs.lstatSync(wants).isSymbolicLink(), 'enabled');
    // Installing again (an upgrade to the same version): the token and user are kept.
    dpkg('-i', deb);
    assert.equal(fs.readFileSync(inRoot('etc/kvgate/api-tokens'), 'utf8'), token);
    assert.equal(uidOf('kvgate', 'etc/passwd'), uid);
    // The man page is the binary's own help (every serve flag, --config included).
    const man = run('gzip', ['-dc', inRoot('usr/share/man/man1/kvgate.1.gz')]);
    assert.match(man, /^\.TH KVGATE 1/m);
    for (const flag of ['--config FILE', '--api-token-file', '--models-dir', '--drain-timeout-ms']) assert.ok(man.includes(flag), flag);
  });

  test('systemd-analyze verifies the unit and rates its hardening', () => {
    // The unit needs systemd's own units and the commands it names: taken from this machine.
    fs.cpSync('/usr/lib/systemd/system', inRoot('usr/lib/systemd/system'), { recursive: true, force: false, errorOnExist: false });
    fs.mkdirSync(inRoot('bin'), { recursive: true });
    fs.copyFileSync('/bin/kill', inRoot('bin/kill'));
    const verify = spawnSync('systemd-analyze', ['verify', `--root=${root}`, '--man=no', 'kvgate.service'], { encoding: 'utf8' });
    assert.equal(verify.status, 0, verify.stderr);
    const sec = spawnSync('systemd-analyze', ['security', '--offline=true', `--root=${root}`, 'kvgate.service'], { encoding: 'utf8' });
    const level = Number(/Overall exposure level for kvgate\.service: ([\d.]+)/.exec(sec.stdout)?.[1]);
    assert.ok(level <= 4.0, `exposure ${level} (${sec.stdout.split('\n').slice(-3).join(' ')})`);
    const unit = fs.readFileSync(inRoot('usr/lib/systemd/system/kvgate.service'), 'utf8');
    for (const d of ['User=kvgate', 'ProtectSystem=strict', 'StateDirectory=kvgate', 'NoNewPrivileges=yes',
      'CapabilityBoundingSet=CAP_NET_BIND_SERVICE', 'SystemCallFilter=@system-service', 'SystemCallErrorNumber=EPERM',
      'ExecStart=/usr/bin/kvgate serve --config /etc/kvgate/kvgate.conf'])
      assert.ok(unit.includes(d), d);
  });

  test('the installed binary, with the packaged config and under the unit\'s system-call set, serves the README example', async (t) => {
    // The unit's SystemCallFilter= sets, enforced by a seccomp filter of the test's own (no
    // systemd here): every call outside them fails with EPERM, as SystemCallErrorNumber=EPERM.
    const unit = fs.readFileSync(inRoot('usr/lib/systemd/system/kvgate.service'), 'utf8');
    const sets = [...unit.matchAll(/^SystemCallFilter=(.+)$/gm)].flatMap((m) => m[1].trim().split(/\s+/));
    assert.deepEqual(sets, ['@system-service']);
    const launcher = buildLauncher(tmp.dir, expandSyscallSets(sets));
    // (chroot(2) is outside the set: refused even for root, which this test may be)
    const refused = spawnSync(launcher, ['/usr/sbin/chroot', '/', '/bin/true'], { encoding: 'utf8' });
    assert.notEqual(refused.status, 0, 'the filter refuses a call outside the set (chroot)');
    assert.match(refused.stderr, /Operation not permitted/);
    const bin = launcher;
    const binArgs = [inRoot('usr/bin/kvgate')];
    const sim = await startSim(['--hosts', '127.0.0.10-13', '--port', '0']);
    t.after(() => sim.stop());
    // The packaged config as it is, with the state, the API address and the token file moved
    // for the test (the command line wins; the packaged token file is kvgate's, and this test
    // runs as another user).
    const state = path.join(tmp.dir, 'state');
    const tokens = path.join(tmp.dir, 'tokens');
    fs.writeFileSync(tokens, 'a-test-token-for-the-package-0123456789\n', { mode: 0o600 });
    const { proc, ready } = await startKvgate([...binArgs, 'serve', '--config', inRoot('etc/kvgate/kvgate.conf'),
      '--state-dir', state, '--api-listen', '127.0.0.1:0', '--api-token-file', tokens], { bin });
    t.after(() => stop(proc));
    // The gateway itself runs filtered (the launcher exec'd it: same process): one filter more
    // than this test process has (a container may install one of its own for everybody).
    const status = fs.readFileSync(`/proc/${proc.pid}/status`, 'utf8');
    const filters = (s) => Number(/^Seccomp_filters:\s+(\d+)$/m.exec(s)?.[1] ?? -1);
    assert.match(status, /^Seccomp:\s+2$/m, 'a seccomp filter is installed');
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.equal(filters(status), filters(fs.readFileSync('/proc/self/status', 'utf8')) + 1);
    const port = await freePort();
    const ruleBody = {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, model_name: 'sim-model', sse_mode: true },
      endpoints: sim.workers.map((w) => ({ endpointIP: w.host, targetPort: w.port, weight: 1 })),
    };
    const noToken = await fetch(`${ready.api}${LB_BASE}`, { method: 'POST', body: JSON.stringify(ruleBody) });
    assert.equal(noToken.status, 401, 'the packaged config requires the API token');
    const r = await fetch(`${ready.api}${LB_BASE}`, { method: 'POST', body: JSON.stringify(ruleBody),
      headers: { 'content-type': 'application/json', authorization: 'Bearer a-test-token-for-the-package-0123456789' } });
    assert.equal(r.status, 200, await r.text());
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], stream: true }) });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /data: \[DONE\]/);
    const saved = JSON.parse(fs.readFileSync(path.join(state, 'rules.json'), 'utf8'));
    assert.equal(saved.rules.length, 1);
    assert.equal(saved.rules[0].serviceArguments.port, port, 'the rule set persists in the state directory');
  });

  test('purge removes the state, the token, the config and the unit\'s enablement', () => {
    dpkg('--purge', 'kvgate');
    for (const f of ['var/lib/kvgate', 'etc/kvgate/api-tokens', 'etc/kvgate/kvgate.conf', 'usr/bin/kvgate',
      'etc/systemd/system/multi-user.target.wants/kvgate.service'])
      assert.ok(!fs.existsSync(inRoot(f)), `${f} is gone`);
    assert.ok(uidOf('kvgate', 'etc/passwd') > 0, 'the system user stays (Debian keeps them)');
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
  // A line missing its value does not take the next line's flag as one.
  const bare = path.join(dir.dir, 'bare.conf');
  fs.writeFileSync(bare, 'state-dir\naccess-log\n');
  const b = spawnSync(BIN, ['serve', '--config', bare], { encoding: 'utf8', timeout: 10000 });
  assert.equal(b.status, 2);
  assert.match(b.stderr, /--state-dir needs a value/);
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
