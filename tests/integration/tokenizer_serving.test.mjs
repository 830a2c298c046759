// The real tokenizer in the running processes: `kvgate sim --models-dir` counts prompt tokens with
// the model's tokenizer and chat template (so gateway and workers agree, as in a real fleet), and
// `kvgate serve --models-dir` answers POST /kvgate/v1/tokenize. Expected ids come from the
// reference (HF Rust tokenizers + vLLM's chat mapping, tests/tokenizer/reference.mjs).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { BIN, startSim, startGateway, tempDir } from './lib.mjs';
import { buildModelsDir } from '../../scripts/models_dir.mjs';
import { loadRef } from '../tokenizer/reference.mjs';

const QWEN = 'Qwen/Qwen3-8B';
const LLAMA = 'meta-llama/Meta-Llama-3-8B-Instruct';
let modelsDir; let tmp;

before(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvgate-tokserve-'));
  modelsDir = path.join(tmp, 'models');
  await buildModelsDir(modelsDir);
});
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const chatBody = (model) => ({
  model,
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name three primes, then explain in 2 sentences why 1 is not prime. 👋' },
  ],
  max_tokens: 3,
});

describe('kvgate sim --models-dir', () => {
  let sim;
  before(async () => { sim = await startSim(['--models-dir', modelsDir, '--model', QWEN, '--model', LLAMA, '--model', 'plain-model']); });
  after(async () => { await sim?.stop(); });

  test('the ready line says which tokenizer each model uses', () => {
    assert.deepEqual(sim.ready.tokenizers, { [QWEN]: 'hf', [LLAMA]: 'hf', 'plain-model': 'stand-in' });
  });

  for (const model of [QWEN, LLAMA]) {
    test(`completions: prompt_tokens is the reference count with special tokens (${model})`, async () => {
      const ref = await loadRef(modelsDir, model);
      const prompt = 'The quick brown fox jumps over the lazy dog. 日本語のテキストも少し。 2024-11-29';
      const res = await fetch(`${sim.workers[0].url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt, max_tokens: 2 }),
      });
      assert.equal(res.status, 200);
      const j = await res.json();
      assert.equal(j.usage.prompt_tokens, (await ref.encode(prompt, true)).length);
      // vLLM's add_special_tokens: false drops the BOS of Llama-3 (Qwen has none).
      const res2 = await fetch(`${sim.workers[0].url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt, max_tokens: 2, add_special_tokens: false }),
      });
      assert.equal((await res2.json()).usage.prompt_tokens, (await ref.encode(prompt, false)).length);
      const bad = await fetch(`${sim.workers[0].url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt, add_special_tokens: 'no' }),
      });
      assert.equal(bad.status, 400);
    });

    test(`chat: prompt_tokens is the reference count of the rendered template (${model})`, async () => {
      const ref = await loadRef(modelsDir, model);
      const body = chatBody(model);
      const res = await fetch(`${sim.workers[0].url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      assert.equal(res.status, 200);
      const j = await res.json();
      assert.equal(j.usage.prompt_tokens, (await ref.chat(body)).ids.length);
    });
  }

  test('a template error is a 400 naming the problem, and the worker keeps serving', async () => {
    // Gemma-style role checks are not in Qwen's template; an unsupported content part is a 400.
    const res = await fetch(`${sim.workers[0].url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: QWEN, messages: [{ role: 'user', content: [{ type: 'video', video: 'x' }] }] }),
    });
    assert.equal(res.status, 400);
    assert.match(JSON.stringify(await res.json()), /Unsupported chat content part type/);
    const ok = await fetch(`${sim.workers[0].url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chatBody(QWEN)),
    });
    assert.equal(ok.status, 200);
  });
});

test('hostile bodies: 200k-deep JSON is a 400 on the sim and on /kvgate/v1/tokenize, and both keep serving', async () => {
  const deep = (n) => `{"model":"${QWEN}","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":${'['.repeat(n)}${']'.repeat(n)}}}`;
  const sim = await startSim(['--models-dir', modelsDir, '--model', QWEN]);
  const state = tempDir();
  const gw = await startGateway({ stateDir: state.dir, extra: ['--models-dir', modelsDir] });
  try {
    for (const url of [`${sim.workers[0].url}/v1/chat/completions`, `${gw.api}/kvgate/v1/tokenize`]) {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: deep(200000) });
      assert.equal(res.status, 400, url);
      assert.match(await res.text(), /nested too deeply/);
      // 100 levels is within the limit and works.
      const ok = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: deep(100) });
      assert.equal(ok.status, 200, url);
    }
  } finally {
    await sim.stop();
    await gw.stop();
    state.remove();
  }
});

test('kvgate sim refuses to start when a model folder has a broken tokenizer.json', () => {
  const bad = path.join(tmp, 'bad-models');
  fs.mkdirSync(path.join(bad, 'org', 'broken'), { recursive: true });
  fs.writeFileSync(path.join(bad, 'org', 'broken', 'tokenizer.json'), '{"model": {"type": "BPE", "vocab": {');
  const r = spawnSync(BIN, ['sim', '--port', '0', '--models-dir', bad, '--model', 'org/broken'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /org\/broken\/tokenizer\.json/);
});

describe('kvgate serve --models-dir: POST /kvgate/v1/tokenize', () => {
  let gw; let state;
  before(async () => {
    state = tempDir();
    gw = await startGateway({ stateDir: state.dir, extra: ['--models-dir', modelsDir] });
  });
  after(async () => { await gw?.stop(); state?.remove(); });

  const post = (body) => fetch(`${gw.api}/kvgate/v1/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

  test('a prompt: the reference ids, with and without special tokens', async () => {
    const ref = await loadRef(modelsDir, LLAMA);
    const prompt = 'Hello world, héllo wörld!\n\n  indented';
    for (const special of [true, false]) {
      const res = await post({ model: LLAMA, prompt, add_special_tokens: special });
      assert.equal(res.status, 200);
      const j = await res.json();
      assert.deepEqual(j.tokens, await ref.encode(prompt, special));
      assert.equal(j.count, j.tokens.length);
    }
  });

  test('a chat request: the rendered prompt and its ids, as vLLM would compute them', async () => {
    const ref = await loadRef(modelsDir, QWEN);
    const body = chatBody(QWEN);
    const res = await post(body);
    assert.equal(res.status, 200);
    const j = await res.json();
    const want = await ref.chat(body);
    assert.equal(j.prompt, want.text);
    assert.deepEqual(j.tokens, want.ids);
  });

  test('errors: malformed body 400, unknown model 404, bad model name 400, wrong method 405', async () => {
    assert.equal((await post('{not json')).status, 400);
    assert.equal((await post({ prompt: 'x' })).status, 400);
    assert.equal((await post({ model: LLAMA })).status, 400);
    const missing = await post({ model: 'nobody/none', prompt: 'x' });
    assert.equal(missing.status, 404);
    assert.match((await missing.json()).result, /no tokenizer files for model nobody\/none/);
    assert.equal((await post({ model: '../etc', prompt: 'x' })).status, 400);
    assert.equal((await fetch(`${gw.api}/kvgate/v1/tokenize`)).status, 405);
    // Oversized: a 5 MiB prompt is over the management API's 4 MiB body limit.
    const big = await post({ model: LLAMA, prompt: 'x'.repeat(5 << 20) });
    assert.equal(big.status, 413);
  });

  test('/metrics reports tokenizer states and tokenize outcomes', async () => {
    const text = await (await fetch(`${gw.api}/metrics`)).text();
    assert.match(text, new RegExp(`kvgate_tokenizers\\{model="${LLAMA.replace('/', '\\/')}",state="loaded"\\} 1`));
    assert.match(text, /kvgate_tokenizers\{model="nobody\/none",state="missing"\} 1/);
    const ok = Number(text.match(/kvgate_tokenize_requests_total\{outcome="ok"\} (\d+)/)[1]);
    assert.ok(ok >= 3, `ok outcomes ${ok}`);
  });
});

test('kvgate serve without --models-dir answers 503 on /kvgate/v1/tokenize', async () => {
  const state = tempDir();
  const gw = await startGateway({ stateDir: state.dir });
  try {
    const res = await fetch(`${gw.api}/kvgate/v1/tokenize`, { method: 'POST', body: JSON.stringify({ model: 'x', prompt: 'y' }) });
    assert.equal(res.status, 503);
    assert.match((await res.json()).result, /--models-dir/);
  } finally {
    await gw.stop();
    state.remove();
  }
});
