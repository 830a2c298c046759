#!/usr/bin/env node
// Derives kvgate's code-point class table from the reference itself: HF's Rust `tokenizers` (npm
// N-API build), whose bundled Oniguruma decides what `\p{L}`, `\s`, ... match in every pre-tokenizer
// regex. Writes src/tokenizer/unicode_classes.inc (run entries {first, last, flags}).
//
//   node scripts/gen_unicode_table.mjs [OUT_FILE]
//
// Method: for each class regex R, a throwaway tokenizer whose pre-tokenizer is
// Split(Regex "\x01" + R, behavior Removed) runs over batches of entries "\x01<cp>". Matched entries
// disappear; what remains (with code-point offsets) are exactly the entries whose code point is NOT
// in R. Every code point 0..0x10FFFF except the surrogates D800-DFFF is classified.
// Re-run whenever the backend's `tokenizers` version changes (it pins the Unicode version).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(ROOT, 'package.json'));
const { Tokenizer } = require('tokenizers');
const TOKENIZERS_VERSION = JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules/tokenizers/package.json'), 'utf8')).version;

// Bit flags; keep in sync with the C++ side (src/tokenizer/).
export const CLASSES = [
  ['L', 0x001, '\\p{L}'],
  ['N', 0x002, '\\p{N}'],
  ['M', 0x004, '\\p{M}'],
  ['P', 0x008, '\\p{P}'],
  ['S', 0x010, '\\p{S}'],
  ['WS', 0x020, '\\s'],
  ['Lu', 0x040, '\\p{Lu}'],
  ['Ll', 0x080, '\\p{Ll}'],
  ['Lt', 0x100, '\\p{Lt}'],
  ['Lm', 0x200, '\\p{Lm}'],
  ['Lo', 0x400, '\\p{Lo}'],
];

function splitter(regex) {
  const json = {
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: regex }, behavior: 'Removed', invert: false },
    post_processor: null, decoder: null,
    model: { type: 'WordLevel', vocab: { x: 0 }, unk_token: 'x' },
  };
  return Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}

const MARK = 0x01; // U+0001 is in none of the classes (checked below).
const BATCH = 1 << 15;

function allCodePoints() {
  const cps = [];
  for (let cp = 0; cp <= 0x10ffff; cp++) if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
  return cps;
}

// Returns a Uint8Array over 0..0x10FFFF: 1 where the code point is matched by `regex`.
function classify(regex, cps) {
  const pt = splitter('\\x01' + regex);
  const member = new Uint8Array(0x110000);
  for (let b = 0; b < cps.length; b += BATCH) {
    const batch = cps.slice(b, b + BATCH);
    const parts = new Array(batch.length);
    for (let i = 0; i < batch.length; i++) parts[i] = String.fromCodePoint(MARK, batch[i]);
    const input = parts.join('');
    for (const cp of batch) member[cp] = 1;
    for (const [piece, [s, e]] of pt.preTokenizeString(input)) {
      // Offsets count code points; each entry is 2 code points wide.
      if (s % 2 !== 0 || e % 2 !== 0) throw new Error(`unaligned piece [${s},${e}) for ${regex}`);
      const expect = parts.slice(s / 2, e / 2).join('');
      if (piece !== expect) throw new Error(`piece text mismatch at [${s},${e}) for ${regex}`);
      for (let i = s / 2; i < e / 2; i++) member[batch[i]] = 0;
    }
  }
  return member;
}

export function buildTable() {
  const cps = allCodePoints();
  const flags = new Uint16Array(0x110000);
  for (const [name, bit, regex] of CLASSES) {
    const t0 = Date.now();
    const m = classify(regex, cps);
    let n = 0;
    for (let cp = 0; cp < 0x110000; cp++) if (m[cp]) { flags[cp] |= bit; n++; }
    process.stderr.write(`${name.padEnd(3)} ${regex.padEnd(8)} ${String(n).padStart(7)} code points (${Date.now() - t0} ms)\n`);
  }
  if (flags[MARK]) throw new Error('the marker U+0001 is in a class; pick another marker');
  for (let cp = 0; cp < 0x110000; cp++) {
    // \p{L} must be exactly the union of its subcategories.
    if (((flags[cp] & 0x001) !== 0) !== ((flags[cp] & 0x7c0) !== 0)) throw new Error(`L vs Lu|Ll|Lt|Lm|Lo disagree at U+${cp.toString(16)}`);
  }
  const runs = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    const f = flags[cp];
    if (!f) continue;
    const last = runs[runs.length - 1];
    if (last && last[1] === cp - 1 && last[2] === f) last[1] = cp;
    else runs.push([cp, cp, f]);
  }
  return { flags, runs };
}

function check(flags) {
  const has = (cp, bit) => (flags[cp] & bit) !== 0;
  const L = 0x001; const WS = 0x020; const N = 0x002;
  const checks = [
    ['U+1C89 is L (Unicode 16)', has(0x1c89, L)],
    ['U+10D50 is L (Unicode 16)', has(0x10d50, L)],
    ['U+11DB0 is not L (Unicode 17)', !has(0x11db0, L)],
    ['U+180E is not WS', !has(0x180e, WS)],
    ['U+0085 is WS', has(0x0085, WS)],
    ['U+3000 is WS', has(0x3000, WS)],
    ['U+00A0 is WS', has(0x00a0, WS)],
    ['U+200B is not WS', !has(0x200b, WS)],
    ['U+FEFF is not WS', !has(0xfeff, WS)],
    ['"A" is L|Lu', flags[0x41] === (L | 0x40)],
    ['"7" is N', flags[0x37] === N],
  ];
  const bad = checks.filter(([, ok]) => !ok);
  for (const [what, ok] of checks) process.stderr.write(`check ${ok ? 'ok  ' : 'FAIL'} ${what}\n`);
  if (bad.length) throw new Error(`unicode table checks failed: ${bad.map(([w]) => w).join('; ')}`);
}

const hex = (n, w) => '0x' + n.toString(16).toUpperCase().padStart(w, '0');

export function render(runs) {
  const date = new Date().toISOString().slice(0, 10);
  const legend = CLASSES.map(([n, b, r]) => `${n}=${hex(b, 3)} (${r})`).join(', ');
  const lines = [
    '// Generated file: do not edit. Code-point classes as HF tokenizers\' Oniguruma sees them.',
    '// Generator: node scripts/gen_unicode_table.mjs (Split(Regex) pre-tokenizer over all code points)',
    `// Reference: npm tokenizers@${TOKENIZERS_VERSION} (HF Rust tokenizers, N-API). Generated ${date}.`,
    `// Flags: ${legend}.`,
    '// WS is what `\\s` matches in the reference (U+180E and U+200B are not WS; U+0085 is).',
    '// Surrogates D800-DFFF are not classified. Code points not listed have no flags.',
    `// ${runs.length} runs: {first, last (inclusive), flags}, ascending.`,
  ];
  for (const [a, b, f] of runs) lines.push(`{${hex(a, 4)}, ${hex(b, 4)}, ${hex(f, 3)}},`);
  return lines.join('\n') + '\n';
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = path.resolve(process.argv[2] || path.join(ROOT, 'src/tokenizer/unicode_classes.inc'));
  const t0 = Date.now();
  const { flags, runs } = buildTable();
  check(flags);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, render(runs));
  console.log(`wrote ${path.relative(process.cwd(), out)}: ${runs.length} runs (${Date.now() - t0} ms)`);
}
