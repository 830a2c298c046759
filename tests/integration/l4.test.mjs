// The L4 data path (issue 33), modes 0 (DNAT), 1 (one-arm), 2 (full NAT) and 3 (DSR) in eBPF at
// tc ingress, tested on real traffic
// between network namespaces: client --veth-- gateway (kvgate serve --l4-ifaces) --veth--
// backends. Addresses are of 198.18.0.0/15 on veth pairs this file creates and removes.
//
//   client ns   c0 198.18.0.2/24 and 198.18.0.3/24, route to the VIP net 198.19.0.0/24 via 198.18.0.1
//   gateway ns  c1 198.18.0.1/24, b1 198.18.1.1/24, forwarding on (kvgate runs here)
//   backend ns  b0 198.18.1.2/24 and 198.18.1.3/24 (two backends), default route via .1.1;
//               the DSR VIP 198.19.0.200/32 on lo, and its answers (from that address) sent
//               straight to the client over d0 198.18.2.2/24 -- d1 198.18.2.1/24 (client ns)
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import readline from 'node:readline';
import { after, before, describe, test } from 'node:test';

import { BIN, api, freePort, gateway, LB_BASE, tempDir, waitFor } from './lib.mjs';

const tag = String(process.pid % 100000);
const NS = { c: `kvl4c${tag}`, g: `kvl4g${tag}`, b: `kvl4b${tag}` };
const VIP = '198.19.0.100';
const DSR_VIP = '198.19.0.200';
const BACKENDS = ['198.18.1.2', '198.18.1.3'];
const EXTRA = '198.18.1.4';  // a third backend, added to one rule and removed again
const PEER = 'tests/integration/l4_peer.py';
// A bpf filesystem for the gateway's pinned maps, mounted outside /sys (`ip netns exec` remounts
// /sys for each process: a bpffs there would not outlive the gateway that mounted it).
const PIN_DIR = `/tmp/kvgate-bpffs-${tag}`;

const sh = (...args) => execFileSync(args[0], args.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const inNs = (ns, ...args) => sh('ip', 'netns', 'exec', ns, ...args);

function l4Rule({ port, protocol = 'tcp', sel = 0, mode = 0, endpoints = BACKENDS, targetPort, extra = {}, weights }) {
  return {
    serviceArguments: { externalIP: VIP, port, protocol, sel, mode, ...extra },
    endpoints: endpoints.map((ip, i) => ({ endpointIP: ip, targetPort, weight: weights ? weights[i] : 1 })),
  };
}

// The management API of the gateway in its namespace (curl there).
function gwApi(base, method, p, body) {
  const args = ['-s', '-o', '-', '-w', '\n%{http_code}', '-X', method, `${base}${p}`];
  if (body !== undefined) args.push('-H', 'content-type: application/json', '-d', JSON.stringify(body));
  const out = inNs(NS.g, 'curl', ...args);
  const i = out.lastIndexOf('\n');
  return { status: Number(out.slice(i + 1)), text: out.slice(0, i) };
}

function spawnIn(ns, args) {
  const p = spawn('ip', ['netns', 'exec', ns, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  p.stderrText = '';
  p.stderr.on('data', (d) => { p.stderrText += d; });
  p.lines = readline.createInterface({ input: p.stdout });
  p.next = () => new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no line from ${args.join(' ')}: ${p.stderrText}`)), 10000);
    p.lines.once('line', (l) => { clearTimeout(t); resolve(l); });
  });
  return p;
}

async function startGw(stateDir, extra = []) {
  const p = spawnIn(NS.g, [BIN, 'serve', '--l4-ifaces', 'c1,b1', '--api-listen', '127.0.0.1:0',
    '--state-dir', stateDir, '--workers', '1', '--probe-interval-ms', '300', '--l4-pin-dir', PIN_DIR,
    // (the breaker's test: opened by 2 refused connects, half-open 5 s later; passive detection
    // out of its way, and out of the probe test's)
    '--cb-failures', '2', '--cb-open-ms', '5000', '--passive-failures', '100', ...extra]);
  for (;;) {
    const line = await p.next();
    try {
      const j = JSON.parse(line);
      if (j.event === 'ready') return { proc: p, api: j.api };
    } catch { /* a log line */ }
  }
}

async function stopProc(p) {
  if (!p || p.exitCode !== null || p.signalCode !== null) return;  // (gone: no 'exit' to come)
  const done = new Promise((r) => p.once('exit', r));
  p.kill('SIGTERM');
  const t = setTimeout(() => p.kill('SIGKILL'), 5000);
  await done;
  clearTimeout(t);
}

const curlTcp = (port, host = VIP, sport = 0, line = 'x', from = '198.18.0.2') => {
  // one TCP connection (from `sport` when given), one line, the backend's answer back: its id
  // (and, for the line "who", the address it saw: "ID IP:PORT")
  const out = inNs(NS.c, '/usr/bin/python3', '-c',
    'import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);'
    + `s.bind(("${from}",${sport}));s.settimeout(3);s.connect(("${host}",${port}));`
    + `s.sendall(b"${line}\\n");print(s.makefile().readline().strip())`);
  return out.trim();
};

describe('L4 modes 0-3 in eBPF', { skip: process.getuid?.() !== 0 && 'needs root (namespaces, BPF)' }, () => {
  const procs = [];
  let gw;
  let tmp;
  before(async () => {
    sh('mkdir', '-p', PIN_DIR);
    sh('mount', '-t', 'bpf', 'bpf', PIN_DIR);
    for (const ns of Object.values(NS)) sh('ip', 'netns', 'add', ns);
    sh('ip', 'link', 'add', `c0k${tag}`, 'netns', NS.c, 'type', 'veth', 'peer', 'name', 'c1', 'netns', NS.g);
    sh('ip', 'link', 'add', `b0k${tag}`, 'netns', NS.b, 'type', 'veth', 'peer', 'name', 'b1', 'netns', NS.g);
    sh('ip', 'link', 'add', `d0k${tag}`, 'netns', NS.b, 'type', 'veth', 'peer', 'name', `d1k${tag}`, 'netns', NS.c);
    inNs(NS.b, 'ip', 'link', 'set', `d0k${tag}`, 'name', 'd0');
    inNs(NS.c, 'ip', 'link', 'set', `d1k${tag}`, 'name', 'd1');
    inNs(NS.c, 'ip', 'link', 'set', `c0k${tag}`, 'name', 'c0');
    inNs(NS.b, 'ip', 'link', 'set', `b0k${tag}`, 'name', 'b0');
    for (const [ns, dev, addrs] of [[NS.c, 'c0', ['198.18.0.2/24', '198.18.0.3/24']], [NS.g, 'c1', ['198.18.0.1/24']],
      [NS.g, 'b1', ['198.18.1.1/24']], [NS.b, 'b0', [...BACKENDS, EXTRA].map((a) => `${a}/24`)],
      [NS.b, 'd0', ['198.18.2.2/24']], [NS.c, 'd1', ['198.18.2.1/24']], [NS.b, 'lo', [`${DSR_VIP}/32`]]]) {
      for (const a of addrs) inNs(ns, 'ip', 'addr', 'add', a, 'dev', dev);
      inNs(ns, 'ip', 'link', 'set', dev, 'up');
      inNs(ns, 'ip', 'link', 'set', 'lo', 'up');
    }
    // Checksums computed by the senders, checked by the receivers: the rewrite's arithmetic is
    // really tested (with offload on, veth passes packets whose checksums nobody verifies).
    inNs(NS.c, 'ethtool', '-K', 'c0', 'tx', 'off', 'rx', 'off');
    inNs(NS.b, 'ethtool', '-K', 'b0', 'tx', 'off', 'rx', 'off');
    inNs(NS.g, 'ethtool', '-K', 'c1', 'tx', 'off', 'rx', 'off');
    inNs(NS.g, 'ethtool', '-K', 'b1', 'tx', 'off', 'rx', 'off');
    inNs(NS.b, 'ethtool', '-K', 'd0', 'tx', 'off', 'rx', 'off');
    inNs(NS.c, 'ethtool', '-K', 'd1', 'tx', 'off', 'rx', 'off');
    // DSR: the backends answer from the DSR VIP straight to the client, not through the gateway
    inNs(NS.b, 'ip', 'rule', 'add', 'from', DSR_VIP, 'lookup', '100', 'pref', '100');
    inNs(NS.b, 'ip', 'route', 'add', '198.18.0.0/24', 'via', '198.18.2.1', 'dev', 'd0', 'table', '100');
    for (const k of ['net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0', 'net.ipv4.conf.d1.rp_filter=0'])
      inNs(NS.c, 'sysctl', '-qw', k);
    inNs(NS.c, 'ip', 'route', 'add', '198.19.0.0/24', 'via', '198.18.0.1');
    inNs(NS.c, 'ip', 'route', 'add', '198.18.1.0/24', 'via', '198.18.0.1');  // (direct, for one test)
    inNs(NS.b, 'ip', 'route', 'add', 'default', 'via', '198.18.1.1');
    for (const k of ['net.ipv4.ip_forward=1', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.c1.rp_filter=0',
      'net.ipv4.conf.b1.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0'])
      inNs(NS.g, 'sysctl', '-qw', k);
    for (const [i, ip] of BACKENDS.entries()) {
      const p = spawnIn(NS.b, ['/usr/bin/python3', PEER, 'serve', ip, '8000', '5300', `be${i}`]);
      procs.push(p);
      assert.equal(await p.next(), 'ready');
    }
    const be2 = spawnIn(NS.b, ['/usr/bin/python3', PEER, 'serve', EXTRA, '8000', '5300', 'be2']);
    procs.push(be2);
    assert.equal(await be2.next(), 'ready');
    const dsr = spawnIn(NS.b, ['/usr/bin/python3', PEER, 'serve', DSR_VIP, '8000', '5301', 'dsr']);
    procs.push(dsr);
    assert.equal(await dsr.next(), 'ready');
    tmp = tempDir();
    gw = await startGw(tmp.dir);
  });
  after(async () => {
    await stopProc(gw?.proc);
    // (and the maps a gateway kept on exit, should a test have failed before the restart that
    // detaches them, go with their file system)
    try { sh('umount', PIN_DIR); } catch { /* not mounted */ }
    try { sh('rmdir', PIN_DIR); } catch { /* not made */ }
    for (const p of procs) await stopProc(p);
    for (const ns of Object.values(NS)) { try { sh('ip', 'netns', 'del', ns); } catch { /* not made */ } }
    tmp?.remove();
  });

  test('TCP connections are spread over the endpoints round-robin and answered from the VIP', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8080, targetPort: 8000 }));
    assert.equal(r.status, 200, r.text);
    const seen = { be0: 0, be1: 0 };
    for (let i = 0; i < 10; ++i) seen[curlTcp(8080)] += 1;
    assert.deepEqual(seen, { be0: 5, be1: 5 });  // 10 new flows, alternating
  });

  test('a flow stays on its endpoint when the endpoint set changes', async () => {
    const s = spawnIn(NS.c, ['/usr/bin/python3', PEER, 'session', VIP, '8080']);
    procs.push(s);
    assert.equal(await s.next(), 'connected');
    s.stdin.write('ask\n');
    const first = await s.next();
    assert.match(first, /^be[01]$/);
    // Only the other backend left in the rule: the open flow keeps its endpoint.
    const other = first === 'be0' ? BACKENDS[1] : BACKENDS[0];
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8080, targetPort: 8000, endpoints: [other] }));
    assert.equal(r.status, 200, r.text);
    for (let i = 0; i < 3; ++i) {
      s.stdin.write('ask\n');
      assert.equal(await s.next(), first);
    }
    s.stdin.write('quit\n');
    // New flows go to the endpoint left.
    const expect = first === 'be0' ? 'be1' : 'be0';
    for (let i = 0; i < 3; ++i) assert.equal(curlTcp(8080), expect);
  });

  test('weighted round-robin follows the weights', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8081, targetPort: 8000, sel: 2, weights: [2, 1] }));
    assert.equal(r.status, 200, r.text);
    const seen = { be0: 0, be1: 0 };
    for (let i = 0; i < 9; ++i) seen[curlTcp(8081)] += 1;
    assert.deepEqual(seen, { be0: 6, be1: 3 });  // three cycles of 2 + 1
  });

  test('sel 3 (persist): a client address keeps its endpoint over new flows, through a reordering of the endpoints', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8084, targetPort: 8000, sel: 3 }));
    assert.equal(r.status, 200, r.text);
    // The first flow of each address is round-robin (be0, then be1); every later one, from any
    // port, goes where that address's first went. (Round-robin would alternate within each run
    // of one address, the flow hash would spread its ports.)
    const a = curlTcp(8084, VIP, 0, 'x', '198.18.0.2');
    const b = curlTcp(8084, VIP, 0, 'x', '198.18.0.3');
    assert.deepEqual([a, b].sort(), ['be0', 'be1']);
    for (let i = 0; i < 4; ++i) assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.2'), a);
    for (let i = 0; i < 4; ++i) assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.3'), b);
    // The endpoints listed the other way round: each address keeps its endpoint (remembered by
    // address, not by place in the list).
    let u = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8084, targetPort: 8000, sel: 3, endpoints: [...BACKENDS].reverse() }));
    assert.equal(u.status, 200, u.text);
    for (let i = 0; i < 3; ++i) {
      assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.2'), a);
      assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.3'), b);
    }
    // An address whose endpoint left the rule gets another, and keeps that one.
    const aIp = BACKENDS[Number(a.slice(2))];
    u = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8084, targetPort: 8000, sel: 3, endpoints: BACKENDS.filter((ip) => ip !== aIp) }));
    assert.equal(u.status, 200, u.text);
    for (let i = 0; i < 3; ++i) assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.2'), b);
    u = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8084, targetPort: 8000, sel: 3 }));
    assert.equal(u.status, 200, u.text);
    for (let i = 0; i < 3; ++i) assert.equal(curlTcp(8084, VIP, 0, 'x', '198.18.0.2'), b);
  });

  test('sel 4 (lc): new flows go to the endpoint with the fewest live flows; per-endpoint flows, packets and bytes', async () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8085, targetPort: 8000, sel: 4 }));
    assert.equal(r.status, 200, r.text);
    const open = async () => {
      const s = spawnIn(NS.c, ['/usr/bin/python3', PEER, 'session', VIP, '8085']);
      s.stdin.on('error', () => {});  // (a 'quit' written twice, to a session gone)
      procs.push(s);
      assert.equal(await s.next(), 'connected');
      s.stdin.write('ask\n');
      s.id = await s.next();
      return s;
    };
    const metric = (name, ip) => {
      const m = gwApi(gw.api, 'GET', '/metrics').text;
      const l = m.split('\n').find((x) => x.startsWith(`${name}{`) && x.includes(':8085/tcp') && x.includes(`endpoint="${ip}:8000"`));
      return l === undefined ? NaN : Number(l.split(' ').pop());
    };
    // Four connections kept open: two on each endpoint (equal counts take turns).
    const held = [];
    for (let i = 0; i < 4; ++i) held.push(await open());
    assert.deepEqual(held.map((s) => s.id).sort(), ['be0', 'be0', 'be1', 'be1']);
    assert.ok(await waitFor(() => metric('kvgate_l4_endpoint_flows', BACKENDS[0]) === 2
      && metric('kvgate_l4_endpoint_flows', BACKENDS[1]) === 2, 10000, 200), 'live flows per endpoint not 2 and 2');
    // Both of be1's connections closed: once the count says so, the next two new flows both go
    // to be1 (round-robin would give be0 one of them).
    for (const s of held.filter((x) => x.id === 'be1')) s.stdin.write('quit\n');
    assert.ok(await waitFor(() => metric('kvgate_l4_endpoint_flows', BACKENDS[1]) === 0, 10000, 200),
      `be1's closed flows still counted: ${metric('kvgate_l4_endpoint_flows', BACKENDS[1])}`);
    const next = [await open(), await open()];
    assert.deepEqual(next.map((s) => s.id), ['be1', 'be1']);
    // Per endpoint: both forwarded packets, and together what the rule counted (before the
    // reordering below: a flow picked before it counts under the rule only).
    const m = gwApi(gw.api, 'GET', '/metrics').text;
    const rulePackets = Number(m.split('\n').find((l) => l.startsWith('kvgate_l4_packets_total') && l.includes(':8085/tcp')).split(' ').pop());
    const ep = BACKENDS.map((ip) => metric('kvgate_l4_endpoint_packets_total', ip));
    assert.ok(ep[0] > 0 && ep[1] > 0, `per-endpoint packets ${ep}`);
    // (read one after the other: a delayed ACK between the two reads may count on one side)
    assert.ok(Math.abs(ep[0] + ep[1] - rulePackets) <= 2, `${ep} against the rule's ${rulePackets}`);
    const bytes = BACKENDS.map((ip) => metric('kvgate_l4_endpoint_bytes_total', ip));
    assert.ok(bytes[0] >= ep[0] * 40 && bytes[1] >= ep[1] * 40, `per-endpoint bytes ${bytes}`);  // (IPv4 + TCP headers)
    // The endpoints listed the other way round: the live flows are counted by address, not by
    // the place a flow's endpoint had when it was picked (after at least one count, 1 s).
    const u = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8085, targetPort: 8000, sel: 4, endpoints: [...BACKENDS].reverse() }));
    assert.equal(u.status, 200, u.text);
    await new Promise((res) => setTimeout(res, 2500));
    assert.deepEqual(BACKENDS.map((ip) => metric('kvgate_l4_endpoint_flows', ip)), [2, 2]);
    // Three new flows at once, be0 holding one fewer than be1: the program counts each pick at
    // once, so they split 2 and 1 (were picks counted only by the sweep every second, all three
    // would go to be0).
    const spare = held.find((x) => x.id === 'be0');
    spare.stdin.write('quit\n');
    assert.ok(await waitFor(() => metric('kvgate_l4_endpoint_flows', BACKENDS[0]) === 1, 10000, 200));
    const burst = await Promise.all([open(), open(), open()]);
    const ids = burst.map((x) => x.id).sort();
    assert.ok(ids.filter((x) => x === 'be0').length === 2 && ids.filter((x) => x === 'be1').length === 1,
      `a burst of three onto be0 1 / be1 2 live flows went ${ids}`);
    next.push(...burst);
    for (const s of [...held, ...next]) s.stdin.write('quit\n');
  });

  test('cb_enable: refused connects open an endpoint\'s breaker (no new flows), the first answered one after its open window closes it', async () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: VIP, port: 8086, protocol: 'tcp', sel: 0, mode: 0, cb_enable: true },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8000, weight: 1 },
        { endpointIP: BACKENDS[1], targetPort: 8009, weight: 1 }],  // (nothing listens there yet)
    });
    assert.equal(r.status, 200, r.text);
    const metric = (name, ep, extra = '') => {
      const l = gwApi(gw.api, 'GET', '/metrics').text.split('\n')
        .find((x) => x.startsWith(`${name}{`) && x.includes(':8086/tcp') && x.includes(`endpoint="${ep}"`) && x.includes(extra));
      return l === undefined ? NaN : Number(l.split(' ').pop());
    };
    const attempt = () => { try { return curlTcp(8086); } catch { return 'refused'; } };
    const seen = [];
    assert.ok(await waitFor(() => { seen.push(attempt(), attempt()); return metric('kvgate_l4_endpoint_up', `${BACKENDS[1]}:8009`) === 0; }, 15000, 100),
      `the refusing endpoint still gets new flows: ${seen}`);
    assert.ok(seen.includes('refused') && seen.includes('be0'), String(seen));
    assert.ok(metric('kvgate_l4_endpoint_connects_total', `${BACKENDS[1]}:8009`, 'result="refused"') >= 2);
    // Open: every new flow goes to be0 (round-robin would send every other one to be1:8009).
    assert.deepEqual([0, 1, 2, 3, 4, 5].map(attempt), Array(6).fill('be0'));
    // A server there now: once the open window (5 s) has passed the endpoint gets new flows again,
    // and the first answered connect closes the breaker.
    const p = spawnIn(NS.b, ['/usr/bin/python3', PEER, 'serve', BACKENDS[1], '8009', '5309', 'be1b']);
    procs.push(p);
    assert.equal(await p.next(), 'ready');
    assert.ok(await waitFor(() => attempt() === 'be1b', 20000, 200), 'the endpoint back got no new flow');
    assert.ok(await waitFor(() => metric('kvgate_l4_endpoint_up', `${BACKENDS[1]}:8009`) === 1, 5000, 200));
    const ids = [0, 1, 2, 3].map(attempt);
    assert.ok(ids.includes('be0') && ids.includes('be1b') && !ids.includes('refused'), String(ids));
    assert.ok(metric('kvgate_l4_endpoint_connects_total', `${BACKENDS[1]}:8009`, 'result="answered"') >= 1);
    assert.ok(metric('kvgate_l4_endpoint_connects_total', `${BACKENDS[0]}:8000`, 'result="answered"') >= 6);
    // Closed, not left half-open: one refused connect (the server gone again) does not open it
    // (2 in a row do), where a half-open breaker would open again at the first.
    await stopProc(p);
    const refusedBefore = metric('kvgate_l4_endpoint_connects_total', `${BACKENDS[1]}:8009`, 'result="refused"');
    for (let i = 0; i < 3 && attempt() !== 'refused'; ++i);
    assert.equal(metric('kvgate_l4_endpoint_connects_total', `${BACKENDS[1]}:8009`, 'result="refused"'), refusedBefore + 1);
    await new Promise((res) => setTimeout(res, 2500));  // (two health ticks at least)
    assert.equal(metric('kvgate_l4_endpoint_up', `${BACKENDS[1]}:8009`), 1, 'one refused connect opened the breaker');
  });

  test('sel 1 (hash): a flow picked again lands where it was; an endpoint added takes flows only for itself, one removed gives back only its own', async () => {
    const rule = (endpoints) => gwApi(gw.api, 'POST', LB_BASE, l4Rule({
      port: 57, protocol: 'udp', targetPort: 5300, sel: 1, endpoints, extra: { inactiveTimeOut: 1 } }));
    // One datagram from each of 24 source ports (one process): the endpoint that answered each.
    const ports = Array.from({ length: 24 }, (_, i) => 41001 + i);
    const ask = () => JSON.parse(inNs(NS.c, '/usr/bin/python3', '-c', [
      'import json,socket',
      'out={}',
      `for p in ${JSON.stringify(ports)}:`,
      '  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("198.18.0.2",p));s.settimeout(3)',
      `  s.sendto(b"hi",("${VIP}",57));out[p]=s.recv(100).decode();s.close()`,
      'print(json.dumps(out))',
    ].join('\n')));
    const idle = () => new Promise((res) => setTimeout(res, 2500));  // (the flows idle out: 1 s)
    assert.equal(rule(BACKENDS).status, 200);
    const first = ask();
    const ids = Object.values(first);
    assert.ok(ids.includes('be0') && ids.includes('be1'), JSON.stringify(first));
    assert.deepEqual(ask(), first);  // (the same again, tracked or picked again)
    // (listed first, the others swapped: scored by address and port, not by place in the list)
    assert.equal(rule([EXTRA, BACKENDS[1], BACKENDS[0]]).status, 200);
    await idle();
    const grown = ask();
    // Each flow stays where it was or goes to the new endpoint (hash % n would move about a
    // third of them between be0 and be1).
    for (const p of ports) assert.ok(grown[p] === first[p] || grown[p] === 'be2', `port ${p}: ${first[p]} -> ${grown[p]}`);
    assert.ok(Object.values(grown).includes('be2'), `the new endpoint took no flow: ${JSON.stringify(grown)}`);
    assert.equal(rule(BACKENDS).status, 200);
    await idle();
    assert.deepEqual(ask(), first);  // (its flows back where they were, the others never moved)
  });

  test('direct traffic to an endpoint is left alone after its flows through the VIP', () => {
    // A connection through the VIP leaves a reverse entry (endpoint -> client port); a direct
    // connection from the client to the same endpoint from the same port, once the first is
    // closed, must not have its answers rewritten to the VIP (it would never connect).
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8082, targetPort: 8000, endpoints: [BACKENDS[0]] }));
    assert.equal(r.status, 200, r.text);
    // (source ports above the ephemeral range, 32768-60999: no earlier connection of this suite
    // used them, so no backend holds one of them in TIME_WAIT)
    for (const sport of [61101, 61102, 61103]) {
      assert.equal(curlTcp(8082, VIP, sport), 'be0');
      assert.equal(curlTcp(8000, BACKENDS[0], sport), 'be0');
    }
  });

  test('UDP datagrams are forwarded and answered from the VIP and port', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 53, protocol: 'udp', targetPort: 5300, sel: 1 }));
    assert.equal(r.status, 200, r.text);
    const a = JSON.parse(inNs(NS.c, '/usr/bin/python3', PEER, 'udp', VIP, '53'));
    assert.match(a.id, /^be[01]$/);
    assert.deepEqual(a.from, [VIP, 53]);  // the reverse NAT: the client sees the VIP
  });

  test('mode 2 (full NAT): the endpoint sees the VIP, the client the VIP; the client port kept when free', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8090, targetPort: 8000, mode: 2 }));
    assert.equal(r.status, 200, r.text);
    const seen = { be0: 0, be1: 0 };
    for (let i = 0; i < 4; ++i) {
      const [id, from] = curlTcp(8090, VIP, 0, 'who').split(' ');
      seen[id] += 1;
      assert.equal(from.split(':')[0], VIP);  // SNAT to the VIP (the client saw the VIP answer)
    }
    assert.deepEqual(seen, { be0: 2, be1: 2 });
    const [, from] = curlTcp(8090, VIP, 61201, 'who').split(' ');
    assert.equal(from, `${VIP}:61201`);  // (no other flow holds it: the client's own port)
  });

  test('mode 2: two clients on the same source port to one endpoint get different ports', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8092, targetPort: 8000, mode: 2, endpoints: [BACKENDS[0]] }));
    assert.equal(r.status, 200, r.text);
    // both connections open at once, from 198.18.0.2:61301 and 198.18.0.3:61301
    const out = inNs(NS.c, '/usr/bin/python3', '-c', [
      'import socket',
      'ss=[]',
      'for a in ("198.18.0.2","198.18.0.3"):',
      ' s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind((a,61301))',
      ` s.settimeout(3);s.connect(("${VIP}",8092));ss.append(s)`,
      'for s in ss: s.sendall(b"who\\n")',
      'for s in ss: print(s.makefile().readline().strip())',
    ].join('\n'));
    const [a, b] = out.trim().split('\n').map((l) => l.split(' ')[1]);
    assert.ok(a && b, out);
    assert.equal(a.split(':')[0], VIP);
    assert.equal(b.split(':')[0], VIP);
    assert.notEqual(a, b);  // one VIP:port each: the endpoint tells them apart
    assert.ok([a, b].includes(`${VIP}:61301`), out);  // the first kept its own
  });

  test('mode 1 (one-arm): the endpoint sees the gateway\'s own address, on a port below the ephemeral range', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8091, targetPort: 8000, mode: 1 }));
    assert.equal(r.status, 200, r.text);
    const seen = { be0: 0, be1: 0 };
    for (let i = 0; i < 4; ++i) {
      const [id, from] = curlTcp(8091, VIP, 0, 'who').split(' ');
      seen[id] += 1;
      const [ip, port] = from.split(':');
      assert.equal(ip, '198.18.1.1');  // the gateway's address on the endpoints' network
      // (ip_local_port_range 32768-60999 by default: the larger part outside it is 1024-32767)
      const [lo] = inNs(NS.g, 'cat', '/proc/sys/net/ipv4/ip_local_port_range').trim().split(/\s+/).map(Number);
      assert.ok(Number(port) >= 1024 && Number(port) < lo, from);
    }
    assert.deepEqual(seen, { be0: 2, be1: 2 });
  });

  test('mode 2 relays a large answer byte for byte with segmentation offload on (GSO packets over the MTU)', async () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8094, targetPort: 8000, mode: 2 }));
    assert.equal(r.status, 200, r.text);
    // the backends send TSO super-packets (up to 64 KiB) over the veth: the gateway sees them whole
    inNs(NS.b, 'ethtool', '-K', 'b0', 'tx', 'on', 'tso', 'on');
    try {
      assert.match(inNs(NS.b, 'ethtool', '-k', 'b0'), /tcp-segmentation-offload: on/);
      const n = 4 * 1024 * 1024;
      const out = inNs(NS.c, '/usr/bin/python3', '-c', [
        'import socket,hashlib',
        `s=socket.create_connection(("${VIP}",8094),timeout=10)`,
        `s.sendall(b"big ${n}\\n")`,
        'b=bytearray()',
        `while len(b)<${n}+1:`,
        ' d=s.recv(1<<20)',
        ' if not d: break',
        ' b+=d',
        'print(len(b), hashlib.sha256(bytes(b)).hexdigest())',
      ].join('\n')).trim().split(' ');
      assert.equal(Number(out[0]), n + 1);  // n bytes and the newline
      const want = createHash('sha256').update(Buffer.concat([Buffer.alloc(n, 'x'), Buffer.from('\n')])).digest('hex');
      assert.equal(out[1], want);
    } finally {
      inNs(NS.b, 'ethtool', '-K', 'b0', 'tx', 'off');
    }
  });

  test('mode 5 (host one-arm): the port on every address of the gateway, one-arm to the endpoints', () => {
    let r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: '0.0.0.0', port: 8096, protocol: 'tcp', sel: 0, mode: 5 },
      endpoints: BACKENDS.map((ip) => ({ endpointIP: ip, targetPort: 8000, weight: 1 })),
    });
    assert.equal(r.status, 200, r.text);
    for (const addr of ['198.18.0.1', '198.18.1.1']) {  // (both the gateway's)
      const [id, from] = curlTcp(8096, addr, 0, 'who').split(' ');
      assert.match(id, /^be[01]$/);
      assert.equal(from.split(':')[0], '198.18.1.1');
    }
    r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: VIP, port: 8097, protocol: 'tcp', sel: 0, mode: 5 },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8000, weight: 1 }],
    });
    assert.equal(r.status, 400);
    assert.match(r.text, /must be 0\.0\.0\.0/);
    r = gwApi(gw.api, 'POST', LB_BASE, {  // (in the ephemeral range: the node's own answers)
      serviceArguments: { externalIP: '0.0.0.0', port: 40000, protocol: 'tcp', sel: 0, mode: 5 },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8000, weight: 1 }],
    });
    assert.equal(r.status, 400);
    assert.match(r.text, /ip_local_port_range/);
  });

  test('refused: an endpoint that is the gateway itself, a port range that leaves one-arm no ports', () => {
    let r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8098, targetPort: 8000, mode: 2, endpoints: ['198.18.1.1'] }));
    assert.equal(r.status, 400);
    assert.match(r.text, /an address of this node/);
    inNs(NS.g, 'sysctl', '-qw', 'net.ipv4.ip_local_port_range=1024 65000');
    try {
      r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8098, targetPort: 8000, mode: 1 }));
      assert.equal(r.status, 400);
      assert.match(r.text, /ip_local_port_range leaves 535 ports/);
    } finally {
      inNs(NS.g, 'sysctl', '-qw', 'net.ipv4.ip_local_port_range=32768 60999');
    }
  });

  test('a packet the gateway cannot route on is dropped and counted (no_route)', async () => {
    // (the gateway has no route to 198.19.9.9: no default route in its namespace)
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8099, targetPort: 8000, mode: 2, endpoints: ['198.19.9.9'] }));
    assert.equal(r.status, 200, r.text);
    const key = `${VIP}:8099/tcp`;
    const noRoute = () => {
      const line = gwApi(gw.api, 'GET', '/metrics').text.split('\n')
        .find((l) => l.startsWith('kvgate_l4_dropped_total{') && l.includes(key) && l.includes('reason="no_route"'));
      return line ? Number(line.split(' ').pop()) : NaN;
    };
    assert.equal(noRoute(), 0);
    assert.throws(() => curlTcp(8099), /timed out|refused|unreachable/i);
    assert.ok(await waitFor(() => noRoute() >= 1, 5000, 100), `no_route stayed at ${noRoute()}`);
  });

  test('modes 1 and 2 forward UDP: the endpoint sees the SNAT address, the client the VIP and port', () => {
    for (const [mode, port, source] of [[2, 54, VIP], [1, 55, '198.18.1.1']]) {
      const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port, protocol: 'udp', targetPort: 5300, mode }));
      assert.equal(r.status, 200, r.text);
      const a = JSON.parse(inNs(NS.c, '/usr/bin/python3', PEER, 'udp', VIP, String(port), 'who'));
      const [id, from] = a.id.split(' ');
      assert.match(id, /^be[01]$/);
      assert.equal(from.split(':')[0], source);
      assert.deepEqual(a.from, [VIP, port]);
    }
  });

  test('an AI rule (mode 4, in front of a simulated engine) and a classic rule (mode 1) on one node at once', async () => {
    const sim = spawnIn(NS.b, [BIN, 'sim', '--engine', 'vllm', '--host', BACKENDS[0], '--port', '8100']);
    procs.push(sim);
    for (;;) {
      const line = await sim.next();
      if (line.includes('"ready"')) break;
    }
    const ai = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: '198.18.0.1', port: 8400, protocol: 'tcp', sel: 0, mode: 4,
        model_name: 'sim-model' },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8100, weight: 1 }],
    });
    assert.equal(ai.status, 200, ai.text);
    // (mode 1: its flows and mode 4's connections both leave from the gateway's 198.18.1.1)
    const classic = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8093, targetPort: 8000, mode: 1 }));
    assert.equal(classic.status, 200, classic.text);
    for (let i = 0; i < 2; ++i) {
      const out = inNs(NS.c, 'curl', '-s', '-m', '10', 'http://198.18.0.1:8400/v1/chat/completions',
        '-H', 'content-type: application/json',
        '-d', JSON.stringify({ model: 'sim-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }));
      const j = JSON.parse(out);
      assert.equal(j.object, 'chat.completion', out);
      assert.equal(j.model, 'sim-model');
      const [id, from] = curlTcp(8093, VIP, 0, 'who').split(' ');
      assert.match(id, /^be[01]$/);
      assert.equal(from.split(':')[0], '198.18.1.1');
    }
    await stopProc(sim);
  });

  test('mode 3 (DSR): the endpoint sees the client, and its answers bypass the gateway', () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: DSR_VIP, port: 8000, protocol: 'tcp', sel: 1, mode: 3 },
      endpoints: BACKENDS.map((ip) => ({ endpointIP: ip, targetPort: 8000, weight: 1 })),
    });
    assert.equal(r.status, 200, r.text);
    const stat = (ns, dev, what) => Number(inNs(ns, 'cat', `/sys/class/net/${dev}/statistics/${what}`));
    const gwTx0 = stat(NS.g, 'c1', 'tx_packets');
    const direct0 = stat(NS.c, 'd1', 'rx_packets');
    for (let i = 0; i < 4; ++i) {
      const [id, from] = curlTcp(8000, DSR_VIP, 0, 'who').split(' ');
      assert.equal(id, 'dsr');
      assert.equal(from.split(':')[0], '198.18.0.2');  // no NAT: the client's own address
    }
    // 4 connections' SYN-ACKs, answers and FINs came over the direct link; the gateway sent the
    // client nothing (an ARP at most)
    assert.ok(stat(NS.c, 'd1', 'rx_packets') - direct0 >= 12);
    assert.ok(stat(NS.g, 'c1', 'tx_packets') - gwTx0 <= 2);
  });

  test('mode 3 refusals: a selector other than hash (upstream\'s words), an endpoint that is not a neighbour', () => {
    let r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: DSR_VIP, port: 8001, protocol: 'tcp', sel: 0, mode: 3 },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8001, weight: 1 }],
    });
    assert.equal(r.status, 400);
    assert.match(r.text, /Only Hash Selection criteria allowed for DSR mode/);
    r = gwApi(gw.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: DSR_VIP, port: 8001, protocol: 'tcp', sel: 1, mode: 3 },
      endpoints: [{ endpointIP: '198.19.5.5', targetPort: 8001, weight: 1 }],
    });
    assert.equal(r.status, 400);
    assert.match(r.text, /not on a network of this node/);
  });

  test('an endpoint its probe finds down gets no new flows, and gets them again once back', async () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8083, targetPort: 8000,
      extra: { probetype: 'tcp', probeRetries: 1, probeTimeout: 1 } }));
    assert.equal(r.status, 200, r.text);
    await stopProc(procs[1]);  // be1's server goes away
    // (until the probe sees it, a flow sent there is refused: tried again)
    const attempt = () => { try { return curlTcp(8083); } catch { return 'refused'; } };
    const onlyBe0 = await waitFor(() => [0, 1, 2, 3].map(attempt).every((id) => id === 'be0'), 15000, 300);
    assert.ok(onlyBe0, 'new flows kept going to the endpoint that is down');
    procs[1] = spawnIn(NS.b, ['/usr/bin/python3', PEER, 'serve', BACKENDS[1], '8000', '5300', 'be1']);
    assert.equal(await procs[1].next(), 'ready');
    const both = await waitFor(() => {
      const ids = new Set([0, 1, 2, 3, 4, 5].map(attempt));
      return ids.has('be0') && ids.has('be1');
    }, 15000, 300);
    assert.ok(both, 'the endpoint back up got no new flows');
  });

  test('per-rule packet, byte and drop counters', async () => {
    const m = gwApi(gw.api, 'GET', '/metrics').text;
    const line = m.split('\n').find((l) => l.startsWith('kvgate_l4_packets_total') && l.includes(':8080/tcp'));
    assert.ok(line, m.split('\n').filter((l) => l.startsWith('kvgate_l4')).join('\n'));
    assert.ok(Number(line.split(' ').pop()) >= 40, line);  // 13+ flows, 3+ packets each way
    // A TCP packet of no tracked connection is dropped and said why.
    const dropped = (rule, reason) => Number(gwApi(gw.api, 'GET', '/metrics').text.split('\n')
      .find((l) => l.startsWith(`kvgate_l4_dropped_total{rule="${rule}",reason="${reason}"}`))?.split(' ').pop());
    const rule8080 = line.match(/rule="([^"]+)"/)[1];
    const before = dropped(rule8080, 'untracked');
    assert.ok(Number.isFinite(before), 'no kvgate_l4_dropped_total{reason="untracked"} line');
    inNs(NS.c, '/usr/bin/python3', '-c', [
      'import socket,struct',
      's=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_TCP)',
      // an ACK (no SYN) from 198.18.0.2:61401 to the VIP:8080, checksum left to the receiver's check
      "h=struct.pack('!HHIIBBHHH',61401,8080,1,1,5<<4,0x10,1024,0,0)",
      `s.sendto(h,("${VIP}",0))`,
    ].join('\n'));
    assert.ok(await waitFor(() => dropped(rule8080, 'untracked') === before + 1, 5000, 100),
      'the untracked ACK was not counted');
    const refused = gwApi(gw.api, 'POST', LB_BASE, {
      // (another key than the mode 0 rule's: the same key would be a mode change, 409)
      serviceArguments: { externalIP: VIP, port: 8080, protocol: 'tcp', sel: 0, mode: 4, model_name: 'm' },
      endpoints: [{ endpointIP: BACKENDS[0], targetPort: 8000, weight: 1 }],
    });
    assert.equal(refused.status, 400);  // a mode 4 rule on a mode 0 rule's VIP:port
    assert.match(refused.text, /L4 \(mode 0-3, 5\) rule/);
  });

  test('rules and their tracked flows survive a restart of the gateway (pinned maps)', async () => {
    const r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 8100, targetPort: 8000, mode: 2 }));
    assert.equal(r.status, 200, r.text);
    // connections open across the restart: a full NAT one and a DNAT one (port 8080, mode 0)
    const sessions = [];
    for (const port of ['8100', '8080']) {
      const s = spawnIn(NS.c, ['/usr/bin/python3', PEER, 'session', VIP, port]);
      procs.push(s);
      assert.equal(await s.next(), 'connected');
      s.stdin.write('ask\n');
      sessions.push({ s, first: await s.next() });
    }
    await stopProc(gw.proc);
    // the gateway is down: its program still forwards with the maps it kept
    for (const { s, first } of sessions) {
      s.stdin.write('ask\n');
      assert.equal(await s.next(), first);
    }
    // (the restarted gateway detaches and removes its maps when it stops: the suite's end)
    gw = await startGw(tmp.dir, ['--l4-on-exit', 'detach']);
    for (const { s, first } of sessions) {  // the same endpoint, the same SNAT port: tracked
      s.stdin.write('ask\n');
      assert.equal(await s.next(), first);
      s.stdin.write('quit\n');
    }
    assert.match(curlTcp(8080), /^be[01]$/);
    assert.match(curlTcp(8100), /^be[01]$/);
  });

  test('a second gateway with the L4 path in the same namespace is refused (the pinned maps are one owner\'s)', () => {
    const other = tempDir();
    try {
      const r = spawnSync('ip', ['netns', 'exec', NS.g, BIN, 'serve', '--l4-ifaces', 'c1', '--api-listen',
        '127.0.0.1:0', '--state-dir', other.dir, '--workers', '1', '--l4-pin-dir', PIN_DIR,
        '--l4-on-exit', 'detach'],  // (its failed start must not detach or unpin the first's)
      { encoding: 'utf8', timeout: 20000 });
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, /another kvgate serve runs the L4 path of this network namespace/);
    } finally {
      other.remove();
    }
    assert.match(curlTcp(8080), /^be[01]$/);  // the first one's program and rules untouched
    assert.match(curlTcp(8100), /^be[01]$/);
  });

  test('a deleted rule forwards nothing', () => {
    const d = gwApi(gw.api, 'DELETE', `${LB_BASE}/externalipaddress/${VIP}/port/8080/protocol/tcp`);
    assert.equal(d.status, 200, d.text);
    assert.throws(() => curlTcp(8080), /timed out|refused|unreachable|No route/i);
  });

  test('L7 fields and unsupported selectors on a mode 0 rule are refused', () => {
    let r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 9090, targetPort: 8000, extra: { sse_mode: true } }));
    assert.equal(r.status, 400);
    assert.match(r.text, /sse_mode.*mode 4/);
    r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 9090, targetPort: 8000, sel: 8 }));
    assert.equal(r.status, 400);
    assert.match(r.text, /not available for mode 0/);
    r = gwApi(gw.api, 'POST', LB_BASE, l4Rule({ port: 9090, targetPort: 8000, sel: 3, extra: { session_header_name: 'x-session' } }));
    assert.equal(r.status, 400);
    assert.match(r.text, /session_header_name/);
  });
});

describe('mode 0 without the L4 path', () => {
  test('is refused with the flag that enables it', async (t) => {
    const gwp = await gateway(t, ['--workers', '1']);
    const port = await freePort();
    const r = await api(gwp.api, 'POST', LB_BASE, {
      serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 0 },
      endpoints: [{ endpointIP: '127.0.0.1', targetPort: 9, weight: 1 }],
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.text, /--l4-ifaces/);
  });
});
