// Demo workload: groups of chat requests sharing a long system prompt (behind one preamble common
// to every group), streamed through kvgate with the official openai client. Prints per-worker
// request counts, the fleet's prefix-cache hit rate (from the workers' vLLM metrics) and TTFT.
// Usage: node scripts/demo_workload.mjs BASE_URL SIM_READY_JSON LABEL
import OpenAI from 'openai';

const [baseURL, simJson, label] = process.argv.slice(2);
const workers = JSON.parse(simJson).workers;
const client = new OpenAI({ baseURL, apiKey: 'demo', maxRetries: 0 });

const GROUPS = 8; const PER_GROUP = 8; const CONCURRENCY = 8;
const words = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi'.split(' ');
const PREAMBLE = 'Company policy: answer precisely, cite sources, never guess. ';  // 61 bytes, shared by all
const system = (g) => PREAMBLE + `Group ${g} knowledge base: ` +
  Array.from({ length: 1500 }, (_, i) => words[(g * 7 + i * 3 + (i >> 4)) % words.length]).join(' ');
const jobs = [];
for (let q = 0; q < PER_GROUP; q++) for (let g = 0; g < GROUPS; g++) jobs.push({ g, q });
// Arrival order: a fixed pseudo-random shuffle (mulberry32, seed 7), the same for every arm, so
// that no arm gets affinity by accident from a regular order.
let seed = 7;
const rand = () => { seed = (seed + 0x6D2B79F5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed); t ^= t + Math.imul(t ^ (t >>> 7), 61 | t); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
for (let i = jobs.length - 1; i > 0; i--) { const j = Math.floor(rand() * (i + 1)); [jobs[i], jobs[j]] = [jobs[j], jobs[i]]; }

async function metrics() {
  return Promise.all(workers.map(async (w) => {
    const t = await (await fetch(`${w.url}/metrics`)).text();
    const get = (name) => t.split('\n').filter((l) => l.startsWith(name)).reduce((a, l) => a + Number(l.split(' ').pop()), 0);
    return { requests: get('kvgate_sim_requests_total'), queries: get('vllm:prefix_cache_queries_total'), hits: get('vllm:prefix_cache_hits_total') };
  }));
}

// Every arm starts from cold caches.
await Promise.all(workers.map((w) => fetch(`${w.url}/reset_prefix_cache`, { method: 'POST' })));
const before = await metrics();
const ttft = [];
async function one({ g, q }) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model: process.env.DEMO_MODEL || 'demo-model', stream: true, max_tokens: 8,
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
const pct = (p) => { const s = [...ttft].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))].toFixed(0); };
let q = 0; let h = 0;
const counts = after.map((m, i) => {
  q += m.queries - before[i].queries; h += m.hits - before[i].hits;
  return m.requests - before[i].requests;
});
console.log(`| ${label.padEnd(38)} | ${counts.map((c) => String(c).padStart(3)).join(' ')} | ${(100 * h / q).toFixed(1).padStart(5)}% | ${pct(50).padStart(5)} | ${pct(90).padStart(5)} | ${pct(99).padStart(5)} |`);
