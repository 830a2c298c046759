// Demo workload: groups of requests sharing a long system prompt, streamed through kvgate with the
// official openai client; prints per-worker request counts, prefix-cache hit rate and TTFT.
import OpenAI from 'openai';

const [baseURL, simJson] = process.argv.slice(2);
const workers = JSON.parse(simJson).workers;
const client = new OpenAI({ baseURL, apiKey: 'demo', maxRetries: 0 });

const GROUPS = 8; const PER_GROUP = 8; const CONCURRENCY = 8;
const words = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu'.split(' ');
const system = (g) => Array.from({ length: 300 }, (_, i) => words[(g * 7 + i * 3) % words.length]).join(' ');
const jobs = [];
for (let q = 0; q < PER_GROUP; q++) for (let g = 0; g < GROUPS; g++) jobs.push({ g, q });

async function metrics() {
  return Promise.all(workers.map(async (w) => {
    const t = await (await fetch(`${w.url}/metrics`)).text();
    const get = (name) => t.split('\n').filter((l) => l.startsWith(name)).reduce((a, l) => a + Number(l.split(' ').pop()), 0);
    return { requests: get('kvgate_sim_requests_total'), queries: get('vllm:prefix_cache_queries_total'), hits: get('vllm:prefix_cache_hits_total') };
  }));
}

const before = await metrics();
const ttft = [];
async function one({ g, q }) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model: 'demo-model', stream: true, max_tokens: 8,
    messages: [{ role: 'system', content: system(g) }, { role: 'user', content: `question ${q} for group ${g}` }],
  });
  let first = null;
  for await (const chunk of stream) {
    if (first === null && chunk.choices.length) first = performance.now() - t0;
  }
  ttft.push(first);
}
const queue = [...jobs];
await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
  while (queue.length) await one(queue.shift());
}));
const after = await metrics();

const pct = (p) => { const s = [...ttft].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))].toFixed(1); };
let q = 0; let h = 0;
console.log('\nworker               requests  prefix-hit-rate');
after.forEach((m, i) => {
  const dq = m.queries - before[i].queries; const dh = m.hits - before[i].hits;
  q += dq; h += dh;
  console.log(`${workers[i].url.padEnd(24)} ${String(m.requests - before[i].requests).padStart(5)}  ${dq ? (100 * dh / dq).toFixed(1) : '0.0'}%`);
});
console.log(`\nfleet prefix-cache hit rate: ${(100 * h / q).toFixed(1)}% of ${q} prompt tokens`);
console.log(`TTFT ms over ${ttft.length} streamed requests: p50 ${pct(50)}  p90 ${pct(90)}  p99 ${pct(99)}`);
console.log('(round-robin, sel 0: the cache-affinity selectors arrive with their own issue)');
