// Gateway CPU per metered Tier 1.5 chat request (issue 29 §1, "one render, one tokenize"): two
// kvgate binaries side by side in one run, each in front of the same instant engine stand-in, each
// with a Tier 1.5 rule (kvExactMode 3) behind an API key whose tenant has a token quota, so every
// request is counted by the quota gate and keyed by kv_exact. The chat request carries a system
// prompt of about 6 KB (a tool preamble) and a short user turn, rendered by Qwen3-8B's template.
// CPU is the gateway's own (utime + stime of /proc/<pid>/stat) over REQUESTS requests at
// CONCURRENCY, after a warm-up that loads the tokenizer; rounds alternate the binaries.
// Usage: node bench/metered_chat_cpu.mjs --before PATH --after PATH [--requests 2000]
//        [--concurrency 8] [--rounds 3] [--callgrind 1]
//   --callgrind 1: the gateways run under valgrind's callgrind, and the figure is their
//        user-space instructions per request over the measured requests (counters zeroed before,
//        dumped after, with callgrind_control): repeatable whatever else the machine does, unlike
//        CPU time. Use fewer requests (2000 take about a minute). --keep DIR keeps the last
//        round's dumps there (cg-before.out, cg-after.out: callgrind_annotate them).
//   or:  node bench/metered_chat_cpu.mjs --apis PATH [...]: one binary, the same conversation as a
//        chat request (before) and as an Anthropic Messages request (after: /v1/messages, the
//        system prompt as `system`, keyed from the chat form the engine renders), side by side.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';
import { buildModelsDir } from '../scripts/models_dir.mjs';
import { LB_BASE, api, freePort, rule, scrapeMetrics, stop, tempDir, waitFor } from '../tests/integration/lib.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const REQUESTS = Number(args.requests ?? 2000);
const CONCURRENCY = Number(args.concurrency ?? 8);
const ROUNDS = Number(args.rounds ?? 3);
const CALLGRIND = args.callgrind === '1';
const APIS = args.apis;  // one binary: chat (before) against Messages (after)
const BINS = APIS ? { before: APIS, after: APIS } : { before: args.before, after: args.after };
const API_OF = { before: 'chat', after: APIS ? 'messages' : 'chat' };
for (const [k, v] of Object.entries(BINS)) if (!v || !fs.existsSync(v)) throw new Error(`--${k} PATH: a kvgate binary`);
const MODEL = 'Qwen/Qwen3-8B';
const TICK = 100;  // USER_HZ

const tmp = tempDir();
const modelsDir = path.join(tmp.dir, 'models');
await buildModelsDir(modelsDir);
const SYSTEM = 'You are a coding agent with these tools. '.repeat(150);
const QUESTION = 'List the files of the repository and explain the build.';
const BODIES = {
  chat: { path: '/v1/chat/completions', body: Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 16, messages: [
    { role: 'system', content: SYSTEM }, { role: 'user', content: QUESTION }] })) },
  messages: { path: '/v1/messages', body: Buffer.from(JSON.stringify({ model: MODEL, max_tokens: 16, system: SYSTEM,
    messages: [{ role: 'user', content: QUESTION }] })) },
};
const ANSWERS = {
  chat: JSON.stringify({ object: 'chat.completion', choices: [{ index: 0,
    message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1500, completion_tokens: 1, total_tokens: 1501 } }),
  messages: JSON.stringify({ id: 'm', type: 'message', role: 'assistant', content: [{ type: 'text', text: 'ok' }],
    stop_reason: 'end_turn', usage: { input_tokens: 1500, output_tokens: 1 } }),
};
const engine = http.createServer((req, res) => {
  req.resume();
  const answer = req.url.startsWith('/v1/messages') ? ANSWERS.messages : ANSWERS.chat;
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.length });
    res.end(answer);
  });
});
await new Promise((r) => engine.listen(0, '127.0.0.1', r));

const cpuTicks = (pid) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return Number(rest[11]) + Number(rest[12]);  // utime, stime (fields 14 and 15)
};

// A gateway from the given binary, once it printed its ready line.
function serve(bin, dir) {
  return new Promise((resolve, reject) => {
    const argv = ['serve', '--api-listen', '127.0.0.1:0', '--state-dir', dir, '--workers', '1',
      '--models-dir', modelsDir];
    fs.mkdirSync(dir, { recursive: true });
    const proc = CALLGRIND
      ? spawn('valgrind', ['--tool=callgrind', '--compress-strings=no', '--compress-pos=no', `--callgrind-out-file=${path.join(dir, 'cg.out')}`, bin, ...argv],
        { stdio: ['ignore', 'pipe', 'ignore'] })
      : spawn(bin, argv, { stdio: ['ignore', 'pipe', 'ignore'] });
    proc.on('exit', (code) => reject(new Error(`${bin} exited with ${code}`)));
    readline.createInterface({ input: proc.stdout }).on('line', (line) => {
      try {
        const j = JSON.parse(line);
        if (j.event === 'ready') resolve({ proc, api: j.api, dir });
      } catch { /* not the ready line */ }
    });
  });
}

// callgrind_control on a gateway running under callgrind: zero its counters, later dump them and
// read the instructions counted since.
function callgrindControl(flag, pid) {
  return new Promise((resolve, reject) => {
    const p = spawn('callgrind_control', [flag, String(pid)], { stdio: 'ignore' });
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`callgrind_control ${flag}: ${code}`))));
  });
}
function callgrindTotal(file) {
  const m = fs.readFileSync(file, 'utf8').match(/^(?:summary|totals): (\d+)/m);
  if (!m) throw new Error(`no totals in ${file}`);
  return Number(m[1]);
}

async function round(name) {
  const { path: target, body } = BODIES[API_OF[name]];
  const gw = await serve(BINS[name], path.join(tmp.dir, `${name}-${Date.now()}`));
  try {
    const port = await freePort();
    let r = await api(gw.api, 'POST', LB_BASE, rule({ port, workers: [{ host: '127.0.0.1', port: engine.address().port }],
      extraArgs: { kvExactMode: 3, kvZmqPort: await freePort(), api_key_auth: 'required' } }));
    if (r.status !== 200) throw new Error(r.text);
    r = await api(gw.api, 'POST', '/netlox/v1/config/ai/tenant/ratelimit',
      { tenant_id: 'acme', tokens_per_min: 1e9, burst_pct: 100 });
    if (r.status !== 204) throw new Error(r.text);
    r = await api(gw.api, 'POST', '/netlox/v1/config/ai/apikey', { tenant_id: 'acme' });
    const key = r.json.raw_key;
    const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
    const send = () => new Promise((resolve, reject) => {
      const q = http.request({ host: '127.0.0.1', port, method: 'POST', path: target, agent,
        headers: { 'content-type': 'application/json', 'content-length': body.length, authorization: `Bearer ${key}` } },
      (res) => { res.resume(); res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`)))); });
      q.on('error', reject);
      q.end(body);
    });
    // Warm-up: until the quota gate counts with the tokenizer (loaded off the event loop).
    const counted = async () => (await scrapeMetrics(gw.api)).find((s) => s.name === 'kvgate_quota_prompt_counts_total' &&
      s.labels.method === 'tokenizer')?.value ?? 0;
    if (!await waitFor(async () => { await send(); return (await counted()) > 0; }, CALLGRIND ? 300000 : 20000, 100)) throw new Error('tokenizer never loaded');
    for (let i = 0; i < 200; ++i) await send();
    if (CALLGRIND) await callgrindControl('-z', gw.proc.pid);
    const c0 = cpuTicks(gw.proc.pid);
    const t0 = process.hrtime.bigint();
    let next = 0;
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (next++ < REQUESTS) await send(); }));
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpuUs = (cpuTicks(gw.proc.pid) - c0) * (1e6 / TICK);
    let instructions = null;
    if (CALLGRIND) {
      await callgrindControl('-d', gw.proc.pid);
      const dumps = fs.readdirSync(gw.dir).filter((f) => /^cg\.out\.\d+$/.test(f));
      instructions = callgrindTotal(path.join(gw.dir, dumps.sort().at(-1)));
      if (args.keep) fs.copyFileSync(path.join(gw.dir, dumps.sort().at(-1)), path.join(args.keep, `cg-${name}.out`));
    }
    agent.destroy();
    return { us_per_request: cpuUs / REQUESTS, requests_per_s: REQUESTS / secs,
      instructions_per_request: instructions === null ? null : instructions / REQUESTS };
  } finally {
    await stop(gw.proc);
  }
}

const results = { before: [], after: [] };
for (let i = 0; i < ROUNDS; ++i) {
  for (const name of ['before', 'after']) {
    const r = await round(name);
    results[name].push(r);
    console.log(`round ${i + 1} ${name.padEnd(6)} (${API_OF[name]}) ${r.us_per_request.toFixed(1)} us CPU/request  ${r.requests_per_s.toFixed(0)} req/s` +
      (r.instructions_per_request === null ? '' : `  ${(r.instructions_per_request / 1000).toFixed(1)}k instructions/request`));
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mb = median(results.before.map((r) => r.us_per_request));
const ma = median(results.after.map((r) => r.us_per_request));
const instr = (name) => (CALLGRIND ? Math.round(median(results[name].map((r) => r.instructions_per_request))) : undefined);
console.log(JSON.stringify({ requests: REQUESTS, concurrency: CONCURRENCY, rounds: ROUNDS,
  before_us_median: Number(mb.toFixed(1)), after_us_median: Number(ma.toFixed(1)), ratio: Number((ma / mb).toFixed(3)),
  before_instructions_median: instr('before'), after_instructions_median: instr('after'),
  instructions_ratio: CALLGRIND ? Number((instr('after') / instr('before')).toFixed(3)) : undefined }));
engine.closeAllConnections();
engine.close();
tmp.remove();
