// Tokenizer benchmark: kvgate's C++ tokenizer vs the HuggingFace Rust tokenizer as available on
// this machine (npm `tokenizers` 0.23.2, the N-API binding: its encode() runs the Rust pipeline
// on a libuv worker thread and is awaited one call at a time, so it uses one core plus N-API
// overhead). Both sides encode the same 4 KiB chunks of the same corpora, alternating, in one run.
//
// Corpora (all from Debian packages, built into a temp dir):
//   english  /usr/share/common-licenses/{GPL-3,Apache-2.0,GFDL-1.3} (base-files)
//   code     this repository's src/**/*.{cc,h}
//   cjk      Chinese prose lines from manpages-zh (installed by scripts/setup.sh --bench)
// Also: worst cases (100/200/400 KB of one letter / spaces / digits: linear time?), p50/p99 of
// chat template + tokenize for an ~8k-token chat request, and multi-turn chats with and without
// incremental encoding.
//
// Usage: node bench/tokenizer_bench.mjs [--kvgate build/kvgate] [--seconds 3] [--rounds 2]
//        [--out build/bench/tokenizer.json]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { execFileSync } from 'node:child_process';
import tk from 'tokenizers';
import { Template } from '@huggingface/jinja';
import { buildModelsDir } from '../scripts/models_dir.mjs';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const KVGATE = opt('--kvgate', 'build/kvgate');
const SECONDS = Number(opt('--seconds', '3'));
const ROUNDS = Number(opt('--rounds', '2'));
const OUT = opt('--out', 'build/bench/tokenizer.json');
const CHUNK = 4096;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvgate-tokbench-'));
const modelsDir = path.join(tmp, 'models');
await buildModelsDir(modelsDir, { quiet: true });

function readAll(files) { return files.filter((f) => fs.existsSync(f)).map((f) => fs.readFileSync(f, 'utf8')).join('\n'); }
function walk(dir, out = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, out); else if (/\.(cc|h)$/.test(e.name)) out.push(p);
  }
  return out;
}
function cjkCorpus() {
  const dir = '/usr/share/man/zh_CN';
  if (!fs.existsSync(dir)) return '';
  const lines = [];
  for (const sec of fs.readdirSync(dir)) {
    for (const f of fs.readdirSync(path.join(dir, sec))) {
      if (!f.endsWith('.gz')) continue;
      let text;
      try { text = zlib.gunzipSync(fs.readFileSync(path.join(dir, sec, f))).toString('utf8'); } catch { continue; }
      for (let l of text.split('\n')) {
        if (l.startsWith('.') || l.startsWith("'")) continue;
        l = l.replace(/\\f[BIRP]/g, '').replace(/\\\(..|\\-|\\&/g, '');
        const cjk = (l.match(/[\u3000-\u9fff\uff00-\uffef]/g) || []).length;
        if (cjk >= 10 && cjk * 2 >= [...l].length) lines.push(l);
      }
    }
  }
  return lines.join('\n');
}
const corpora = {
  english: readAll(['/usr/share/common-licenses/GPL-3', '/usr/share/common-licenses/Apache-2.0', '/usr/share/common-licenses/GFDL-1.3']),
  code: readAll(walk('src').sort()),
  cjk: cjkCorpus(),
};
function chunks(s) {
  const b = Buffer.from(s, 'utf8'); const out = [];
  let i = 0;
  while (i < b.length) {
    let e = Math.min(b.length, i + CHUNK);
    while (e < b.length && (b[e] & 0xc0) === 0x80) e++;
    out.push(b.subarray(i, e).toString('utf8')); i = e;
  }
  return out;
}

const MODELS = ['meta-llama/Meta-Llama-3-8B-Instruct', 'Qwen/Qwen3-8B', 'deepseek-ai/DeepSeek-V3', 'google/gemma-3-4b-it'];
const refs = {};
for (const m of MODELS) refs[m] = tk.Tokenizer.fromFile(path.join(modelsDir, m, 'tokenizer.json'));

async function refThroughput(m, parts) {
  const t = refs[m];
  for (const p of parts.slice(0, 20)) await t.encode(p, null, { addSpecialTokens: false });
  let bytes = 0, tokens = 0, k = 0;
  const t0 = process.hrtime.bigint();
  let s = 0;
  while (s < SECONDS) {
    const p = parts[k++ % parts.length];
    const e = await t.encode(p, null, { addSpecialTokens: false });
    bytes += Buffer.byteLength(p); tokens += e.getIds().length;
    s = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  return { mb_per_s: bytes / s / 1e6, tokens_per_s: tokens / s };
}
function kvThroughput(m, file) {
  const out = execFileSync(KVGATE, ['bench', 'tokenize', '--models-dir', modelsDir, '--model', m,
    '--file', file, '--chunk', String(CHUNK), '--seconds', String(SECONDS)]).toString();
  return JSON.parse(out);
}

const results = { machine: `${os.cpus().length} cores, ${os.cpus()[0].model}`, date: new Date().toISOString(),
  reference: 'npm tokenizers@0.23.2 (HF Rust tokenizers via N-API, one call at a time)', throughput: [], worst: [], chat: [] };
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

for (const [name, text] of Object.entries(corpora)) {
  if (!text) { console.log(`corpus ${name}: not available (install manpages-zh: scripts/setup.sh --bench)`); continue; }
  const file = path.join(tmp, `${name}.txt`); fs.writeFileSync(file, text);
  const parts = chunks(text);
  for (const m of MODELS) {
    const kv = [], ref = [];
    for (let r = 0; r < ROUNDS; r++) {
      kv.push(kvThroughput(m, file).mb_per_s);
      ref.push((await refThroughput(m, parts)).mb_per_s);
    }
    const row = { corpus: name, bytes: Buffer.byteLength(text), model: m, kvgate_mb_s: median(kv), hf_mb_s: median(ref),
      ratio: median(kv) / median(ref), rounds_kvgate: kv, rounds_hf: ref };
    results.throughput.push(row);
    console.log(`${name.padEnd(8)} ${m.padEnd(38)} kvgate ${row.kvgate_mb_s.toFixed(1).padStart(6)} MB/s  HF ${row.hf_mb_s.toFixed(2).padStart(5)} MB/s  ratio ${row.ratio.toFixed(1)}x`);
  }
}

// Worst cases: 100, 200 and 400 KB of one letter / spaces / digits encoded at once (best of 3
// on both sides); linear time means each doubling roughly doubles the time.
for (const [name, unit] of [['letter', 'a'], ['spaces', ' '], ['digits', '7']]) {
  for (const m of MODELS) {
    const row = { input: name, model: m };
    for (const kb of [100, 200, 400]) {
      const s = unit.repeat(kb * 1000); const file = path.join(tmp, `worst-${name}-${kb}.txt`); fs.writeFileSync(file, s);
      const kv = JSON.parse(execFileSync(KVGATE, ['bench', 'tokenize', '--models-dir', modelsDir, '--model', m, '--file', file, '--once']).toString());
      let best = Infinity;
      for (let rep = 0; rep < 3; rep++) {
        const t0 = process.hrtime.bigint(); await refs[m].encode(s, null, { addSpecialTokens: false });
        best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e6);
      }
      row[`kvgate_ms_${kb}k`] = kv.ms; row[`hf_ms_${kb}k`] = best;
    }
    results.worst.push(row);
    const f = (k) => `${row[`kvgate_ms_${k}k`].toFixed(1)}/${row[`hf_ms_${k}k`].toFixed(1)}`;
    console.log(`worst ${name.padEnd(7)} ${m.padEnd(38)} ms kvgate/HF: 100k ${f(100)}  200k ${f(200)}  400k ${f(400)}`);
  }
}

// Chat: an ~8k-token conversation (system + 3 turns) through the chat template, then encode.
const eng = corpora.english;
const chatReq = { model: 'x', messages: [
  { role: 'system', content: 'You are a careful assistant that answers questions about software licenses.' },
  { role: 'user', content: eng.slice(0, 12000) }, { role: 'assistant', content: eng.slice(12000, 16000) },
  { role: 'user', content: eng.slice(16000, 38500) + '\nSummarise the differences.' }] };
for (const m of ['meta-llama/Meta-Llama-3-8B-Instruct', 'Qwen/Qwen3-8B']) {
  const file = path.join(tmp, 'chat.jsonl'); fs.writeFileSync(file, JSON.stringify(chatReq) + '\n');
  const kv = JSON.parse(execFileSync(KVGATE, ['bench', 'tokenize', '--models-dir', modelsDir, '--model', m, '--chat-file', file, '--seconds', String(SECONDS)]).toString());
  const cfg = JSON.parse(fs.readFileSync(path.join(modelsDir, m, 'tokenizer_config.json'), 'utf8'));
  const tmpl = new Template(cfg.chat_template);
  const lat = []; const t0 = Date.now();
  while (Date.now() - t0 < SECONDS * 1000 || lat.length < 20) {
    const a = process.hrtime.bigint();
    const text = tmpl.render({ messages: chatReq.messages, add_generation_prompt: true, bos_token: cfg.bos_token, eos_token: cfg.eos_token });
    await refs[m].encode(text, null, { addSpecialTokens: false });
    lat.push(Number(process.hrtime.bigint() - a) / 1e3);
  }
  lat.sort((x, y) => x - y);
  const row = { model: m, tokens: kv.tokens, kvgate_p50_us: kv.p50_us, kvgate_p99_us: kv.p99_us,
    hf_p50_us: lat[Math.floor(lat.length / 2)], hf_p99_us: lat[Math.floor(lat.length * 0.99)] };
  results.chat.push(row);
  console.log(`chat ${m.padEnd(38)} ${kv.tokens} tokens: kvgate p50 ${row.kvgate_p50_us.toFixed(0)} us p99 ${row.kvgate_p99_us.toFixed(0)} us | HF+jinja p50 ${row.hf_p50_us.toFixed(0)} us p99 ${row.hf_p99_us.toFixed(0)} us`);
}

// Incremental mode: 40 conversations of 12 turns (each turn adds a ~1.5 KB user message and a
// ~1 KB answer; distinct system prompts, so conversations never share a cache key), every turn's
// request templated and tokenized in order, full re-encode vs IncrementalEncoder.
{
  const lines = [];
  for (let c = 0; c < 40; c++) {
    const msgs = [{ role: 'system', content: `Conversation ${c}. You answer questions about the text the user pastes.` }];
    for (let turn = 0; turn < 12; turn++) {
      const off = ((c * 12 + turn) * 2600) % (eng.length - 3000);
      msgs.push({ role: 'user', content: eng.slice(off, off + 1500) });
      lines.push(JSON.stringify({ model: 'x', messages: msgs.map((m) => ({ ...m })) }));
      msgs.push({ role: 'assistant', content: eng.slice(off + 1500, off + 2500) });
    }
  }
  const file = path.join(tmp, 'multiturn.jsonl'); fs.writeFileSync(file, lines.join('\n') + '\n');
  for (const m of ['meta-llama/Meta-Llama-3-8B-Instruct', 'Qwen/Qwen3-8B']) {
    const run = (extra) => JSON.parse(execFileSync(KVGATE, ['bench', 'tokenize', '--models-dir', modelsDir, '--model', m,
      '--chat-file', file, '--seconds', String(SECONDS), ...extra]).toString());
    const full = run([]); const inc = run(['--incremental']);
    const row = { model: m, turns: 12, conversations: 40, max_tokens: full.tokens,
      full_mean_us: full.mean_us, full_p50_us: full.p50_us, full_p99_us: full.p99_us,
      incremental_mean_us: inc.mean_us, incremental_p50_us: inc.p50_us, incremental_p99_us: inc.p99_us };
    (results.incremental ??= []).push(row);
    console.log(`multi-turn ${m.padEnd(38)} up to ${full.tokens} tokens: full mean ${full.mean_us.toFixed(0)} us p99 ${full.p99_us.toFixed(0)} us | incremental mean ${inc.mean_us.toFixed(0)} us p99 ${inc.p99_us.toFixed(0)} us`);
  }
}

fs.mkdirSync(path.dirname(OUT), { recursive: true });
fs.writeFileSync(OUT, JSON.stringify(results, null, 2));
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`results: ${OUT}`);
