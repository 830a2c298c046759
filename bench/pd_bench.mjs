// P/D request latency through kvgate against a direct two-leg client (issue 12 §5), on the same
// simulated vLLM prefill/decode pair in one run. The simulator is given no compute time (fixed
// timing, zero prefill and token costs, zero transfer time), so what is measured is the request
// path: the direct client does the vLLM NIXL legs itself (engines.md §4: prefill with
// max_tokens 1 and kv_transfer_params, then decode with the returned params) over keep-alive
// connections; the gateway does the same legs behind one client request. Rounds alternate
// direct / gateway so the machine's noise falls on both.
//
//   node bench/pd_bench.mjs [--kvgate build/kvgate] [--requests 2000] [--rounds 3] [--concurrency 1]
//
// Prints a Markdown table: p50 / p99 latency of each and the gateway's added p50 / p99.
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { api, freePort, startGateway, startSim, stop, tempDir } from '../tests/integration/lib.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
if (args.kvgate) process.env.KVGATE_BIN = args.kvgate;
const REQUESTS = Number(args.requests ?? 2000);
const ROUNDS = Number(args.rounds ?? 3);
const CONC = Number(args.concurrency ?? 1);

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function post(port, path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const rq = http.request({ host: '127.0.0.1', port, path, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...headers } },
    (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
    });
    rq.on('error', reject);
    rq.end(data);
  });
}

const body = (i) => ({ model: 'sim-model', prompt: `pd bench request ${i} with a prompt of a few words`, max_tokens: 2 });

async function direct(prefill, decode, i) {
  const id = `bench-${i}-${Math.random().toString(16).slice(2)}`;
  const b = body(i);
  const p = await post(prefill.port, '/v1/completions', { ...b, stream: false, max_tokens: 1,
    kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null,
      remote_block_ids: null, remote_host: null, remote_port: null } }, { 'x-request-id': id });
  if (p.status !== 200) throw new Error(`direct prefill ${p.status} ${p.text}`);
  const params = JSON.parse(p.text).kv_transfer_params;
  const d = await post(decode.port, '/v1/completions', { ...b, kv_transfer_params: params }, { 'x-request-id': id });
  if (d.status !== 200) throw new Error(`direct decode ${d.status} ${d.text}`);
}

async function viaGateway(port, i) {
  const r = await post(port, '/v1/completions', body(i));
  if (r.status !== 200) throw new Error(`gateway ${r.status} ${r.text}`);
}

async function run(fn, n) {
  const ms = [];
  let next = 0;
  await Promise.all(Array.from({ length: CONC }, async () => {
    while (next < n) {
      const i = next++;
      const t0 = performance.now();
      await fn(i);
      ms.push(performance.now() - t0);
    }
  }));
  ms.sort((a, b) => a - b);
  return { p50: ms[Math.floor(ms.length / 2)], p99: ms[Math.floor(ms.length * 0.99)] };
}

const sim = await startSim(['--workers', '2', '--port', '0', '--role', 'prefill,decode', '--timing', 'fixed',
  '--prefill-base-ms', '0', '--prefill-us-per-token', '0', '--itl-ms', '0', '--pd-transfer-us-per-block', '0',
  '--max-concurrency', '1024']);
const tmp = tempDir();
const gw = await startGateway({ stateDir: tmp.dir, extra: ['--workers', '1'] });
try {
  const [prefill, decode] = sim.workers;
  const port = await freePort();
  const r = await api(gw.api, 'POST', '/netlox/v1/config/loadbalancer', {
    serviceArguments: { externalIP: '127.0.0.1', port, protocol: 'tcp', sel: 0, mode: 4, pd_disagg_mode: true },
    endpoints: [
      { endpointIP: prefill.host, targetPort: prefill.port, weight: 1, ep_role: 1 },
      { endpointIP: decode.host, targetPort: decode.port, weight: 1, ep_role: 2 },
    ],
  });
  if (r.status !== 200) throw new Error(r.text);
  await run((i) => direct(prefill, decode, i), 200);  // warm both paths
  await run((i) => viaGateway(port, i), 200);
  const d = [], g = [];
  for (let k = 0; k < ROUNDS; ++k) {
    d.push(await run((i) => direct(prefill, decode, i), REQUESTS));
    g.push(await run((i) => viaGateway(port, i), REQUESTS));
  }
  const med = (xs, key) => xs.map((x) => x[key]).sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const f = (x) => x.toFixed(3);
  console.log(`P/D (vLLM dialect), ${REQUESTS} requests x ${ROUNDS} rounds, concurrency ${CONC}; medians of the rounds`);
  console.log('');
  console.log('| path | p50 ms | p99 ms |');
  console.log('|---|---|---|');
  console.log(`| direct two-leg client | ${f(med(d, 'p50'))} | ${f(med(d, 'p99'))} |`);
  console.log(`| through kvgate | ${f(med(g, 'p50'))} | ${f(med(g, 'p99'))} |`);
  console.log(`| added by kvgate | ${f(med(g, 'p50') - med(d, 'p50'))} | ${f(med(g, 'p99') - med(d, 'p99'))} |`);
} finally {
  agent.destroy();
  await gw.stop();
  await sim.stop();
  tmp.remove();
  void stop;
}
