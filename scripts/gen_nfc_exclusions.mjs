// Derives, from the reference tokenizer itself, the code points its NFC normalizer does not know
// (HF tokenizers normalizes with an older Unicode version than ICU): for every code point whose
// probes ("c", "c\u0334", "\u0334c", "ac", "c\u0301", "ec") are changed by Unicode NFC or NFD,
// compare the reference's NFC with Node's (ICU) NFC; every code point where they differ is
// listed. The C++ normalizer leaves these characters untouched (an ICU FilteredNormalizer2),
// which is what the reference does. Writes src/tokenizer/nfc_exclusions.inc.
// Usage: node scripts/gen_nfc_exclusions.mjs [OUT]   (from the repository root; default OUT is
// src/tokenizer/nfc_exclusions.inc)
import fs from 'node:fs';
import tk from 'tokenizers';

const ref = tk.nfcNormalizer();
const probes = (c) => [c, c + '\u0334', '\u0334' + c, 'a' + c, c + '\u0301', 'e' + c];
const excluded = [];
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xd800 && cp < 0xe000) continue;
  const c = String.fromCodePoint(cp);
  for (const p of probes(c)) {
    if (p.normalize('NFC') === p && p.normalize('NFD') === p) continue;
    if (ref.normalizeString(p) !== p.normalize('NFC')) {
      excluded.push(cp);
      break;
    }
  }
}
const runs = [];
for (const cp of excluded) {
  const last = runs[runs.length - 1];
  if (last && last[1] === cp - 1) last[1] = cp;
  else runs.push([cp, cp]);
}
const hex = (n) => '0x' + n.toString(16).toUpperCase().padStart(4, '0');
const out = [
  '// Generated file: do not edit. Code points HF tokenizers\' NFC normalizer leaves alone.',
  '// Generator: node scripts/gen_nfc_exclusions.mjs; reference: npm tokenizers@0.23.2;',
  `// compared with Node ${process.version} ICU ${process.versions.icu} (Unicode ${process.versions.unicode}).`,
  `// ${excluded.length} code points in ${runs.length} runs: {first, last (inclusive)}.`,
  ...runs.map(([a, b]) => `{${hex(a)}, ${hex(b)}},`),
  '',
].join('\n');
const target = process.argv[2] || 'src/tokenizer/nfc_exclusions.inc';
fs.writeFileSync(target, out);
console.log(`nfc exclusions: ${excluded.length} code points, ${runs.length} runs -> ${target}`);
