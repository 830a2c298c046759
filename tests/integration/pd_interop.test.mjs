// vLLM P/D disaggregation (NixlConnector) through the gateway, against independent stand-ins
// (tests/interop/pd_vllm_standin.py: a prefill and a decode worker written from
// shared/reference/engines.md §4 and §8, not from kvgate's C++). A pd_disagg_mode rule modelled on
// the seed's "P/D-disaggregated rule" example puts the prefill worker (ep_role 1) and the decode
// worker (ep_role 2) behind a loopback VIP; each request through it must make exactly the two legs
// of §4: prefill with the item-2 changes, then decode with the client's original body plus the
// prefill answer's kv_transfer_params (opaque extras included), the same X-Request-Id on both, and
// the client must get decode's answer. The expected legs are computed here from the spec's rules.
// Loopback only, free ports, everything stopped at the end.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LB_BASE, api, freePort, gateway, sleep, waitFor } from './lib.mjs';

// serviceArguments beyond the base ones (externalIP, port, protocol, sel, mode) — extend here.
const PD_SERVICE_ARGS = { pd_disagg_mode: true, name: 'pd-interop' };
const PREFILL_NIXL_PORT = 5600;
const DECODE_NIXL_PORT = 5601;
const MODEL = 'standin-model';

const STANDIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../interop/pd_vllm_standin.py');

// §4 item 2: the kv_transfer_params the proxy puts on the prefill leg, exactly.
const PREFILL_KV_PARAMS = {
  do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null,
  remote_block_ids: null, remote_host: null, remote_port: null,
};

// §4 item 2: the prefill leg a proxy makes of the client body.
function expectedPrefillBody(original) {
  const b = structuredClone(original);
  b.stream = false;
  b.max_tokens = 1;
  if ('max_completion_tokens' in b) b.max_completion_tokens = 1;
  delete b.stream_options;
  delete b.min_tokens;
  delete b.min_completion_tokens;
  b.kv_transfer_params = { ...PREFILL_KV_PARAMS };
  return b;
}

// §4 item 4: the decode leg: the original body, plus the prefill answer's params when it had any.
function expectedDecodeBody(original, prefillLeg) {
  const b = structuredClone(original);
  if (prefillLeg.kv_transfer_params !== null && prefillLeg.kv_transfer_params !== undefined)
    b.kv_transfer_params = prefillLeg.kv_transfer_params;
  return b;
}

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const ID_RE = new RegExp(`^${esc(`___prefill_addr_127.0.0.1:${PREFILL_NIXL_PORT}___decode_addr_127.0.0.1:${DECODE_NIXL_PORT}_`)}(.+)$`, 's');

// Starts the stand-in; resolves with {prefillPort, decodePort, legs(since), stderr()}; killed when
// the test ends.
async function startStandin(t) {
  const py = spawn('/usr/bin/python3', [STANDIN, '--host', '127.0.0.1', '--prefill-port', '0', '--decode-port', '0'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  const kill = () => { if (py.exitCode === null && py.signalCode === null) py.kill('SIGKILL'); };
  process.once('exit', kill);
  t.after(kill);
  let err = '';
  py.stderr.on('data', (d) => { err = (err + d).slice(-20000); });
  const ready = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`stand-in not ready in 10 s; stderr:\n${err}`)), 10000);
    py.on('exit', (c, s) => { clearTimeout(timer); reject(new Error(`stand-in exited ${c ?? s}; stderr:\n${err}`)); });
    py.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      try { resolve(JSON.parse(out.slice(0, nl))); } catch (e) { reject(e); }
    });
  });
  assert.equal(ready.event, 'ready');
  const legs = async (since = 0) => {
    const res = await fetch(`http://127.0.0.1:${ready.prefill_port}/legs?since=${since}`);
    assert.equal(res.status, 200);
    return res.json();
  };
  return { prefillPort: ready.prefill_port, decodePort: ready.decode_port, legs, stderr: () => err };
}

const listening = (port) => new Promise((resolve) => {
  const s = net.connect(port, '127.0.0.1');
  s.once('connect', () => { s.destroy(); resolve(true); });
  s.once('error', () => resolve(false));
});

// SSE text -> the data fields of its events, in order (comment lines ignored).
function sseData(text) {
  assert.ok(text.endsWith('\n\n'), `SSE body does not end with a blank line: ${JSON.stringify(text.slice(-80))}`);
  const out = [];
  for (const ev of text.split('\n\n')) {
    const data = ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length) out.push(data.join('\n'));
  }
  return out;
}

const COMPLETIONS = '/v1/completions';
const CHAT = '/v1/chat/completions';
const CASES = [
  {
    name: 'completions, non-stream',
    path: COMPLETIONS,
    body: { model: MODEL, prompt: 'The capital of France is', max_tokens: 8, temperature: 0 },
  },
  {
    name: 'completions, stream with include_usage, min_tokens 2, max_tokens 5',
    path: COMPLETIONS,
    body: { model: MODEL, prompt: 'Count from one to five:', stream: true, stream_options: { include_usage: true },
      min_tokens: 2, max_tokens: 5 },
  },
  {
    name: 'chat, non-stream, max_completion_tokens 7, client X-Request-Id',
    path: CHAT,
    clientId: 'client-req-7f3a9c',
    body: { model: MODEL, max_completion_tokens: 7,
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello in French.' }] },
  },
  {
    name: 'chat, stream',
    path: CHAT,
    body: { model: MODEL, stream: true, max_tokens: 6, temperature: 0.2,
      messages: [{ role: 'user', content: 'Write a haiku about caches.' }] },
  },
  {
    // §4 item 3: prefill ended by EOS, kv_transfer_params null: decode gets the body without any.
    name: 'EOS-NOW: prefill answers kv_transfer_params null',
    path: COMPLETIONS,
    body: { model: MODEL, prompt: 'EOS-NOW stop at once', max_tokens: 4 },
  },
  {
    // The "absent" half of §4 item 3: no kv_transfer_params key in prefill's answer at all.
    name: 'EOS-ABSENT: prefill answers without kv_transfer_params (chat, stream)',
    path: CHAT,
    body: { model: MODEL, stream: true, messages: [{ role: 'user', content: 'EOS-ABSENT then decode' }] },
  },
  {
    name: 'FAIL-PREFILL: prefill answers 503, no decode leg, the client gets a 5xx',
    path: CHAT,
    fail: true,
    body: { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'FAIL-PREFILL please' }] },
  },
];

test('vLLM P/D (NixlConnector) dialect against independent prefill/decode stand-ins', async (t) => {
  const si = await startStandin(t);
  const gw = await gateway(t);
  const vip = await freePort();
  const r = await api(gw.api, 'POST', LB_BASE, {
    serviceArguments: { externalIP: '127.0.0.1', port: vip, protocol: 'tcp', sel: 0, mode: 4, ...PD_SERVICE_ARGS },
    endpoints: [
      { endpointIP: '127.0.0.1', targetPort: si.prefillPort, weight: 1, ep_role: 1, nixl_port: PREFILL_NIXL_PORT },
      { endpointIP: '127.0.0.1', targetPort: si.decodePort, weight: 1, ep_role: 2, nixl_port: DECODE_NIXL_PORT },
    ],
  });
  assert.equal(r.status, 200, r.text);
  assert.ok(await waitFor(() => listening(vip), 5000), `VIP 127.0.0.1:${vip} does not listen`);

  let mark = 0;  // the stand-in's record: everything up to this seq belongs to earlier cases
  const generated = [];
  for (const c of CASES) {
    await t.test(c.name, async () => {
      const headers = { 'content-type': 'application/json' };
      if (c.clientId) headers['X-Request-Id'] = c.clientId;
      const res = await fetch(`http://127.0.0.1:${vip}${c.path}`, {
        method: 'POST', headers, body: JSON.stringify(c.body), signal: AbortSignal.timeout(20000),
      });
      const text = await res.text();
      if (c.fail) await sleep(300);  // a decode leg sent after the client's answer would still show
      const legs = await si.legs(mark);
      mark = Math.max(mark, ...[...legs.prefill, ...legs.decode, ...legs.violations].map((x) => x.seq));
      const where = `client got ${res.status} ${text.slice(0, 300)}\nlegs: ${JSON.stringify(legs).slice(0, 3000)}`;

      assert.deepEqual(legs.violations, [], `the stand-in saw §4 violations\n${where}`);
      assert.equal(legs.prefill.length, 1, `prefill legs\n${where}`);
      assert.equal(legs.decode.length, c.fail ? 0 : 1, `decode legs\n${where}`);
      const [p] = legs.prefill;
      assert.equal(p.path, c.path);

      // §4 item 1 and the proxy's id: ___prefill_addr_<P nixl>___decode_addr_<D nixl>_<suffix>.
      const id = p.x_request_id;
      const m = typeof id === 'string' && id.match(ID_RE);
      assert.ok(m, `prefill X-Request-Id ${JSON.stringify(id)} does not match ${ID_RE}`);
      // The suffix is the gateway's own (a client's id may repeat or hold ':' digits an engine
      // would misparse); the client's answer carries the client's id.
      assert.match(m[1], /^[0-9a-f]{32}$/, 'the suffix is 32 lowercase hex characters');
      generated.push(m[1]);
      if (c.clientId) assert.equal(res.headers.get('x-request-id'), c.clientId, 'the client keeps its id');

      // §4 item 2, computed from the original body.
      assert.deepEqual(p.body, expectedPrefillBody(c.body), 'prefill leg body');

      if (c.fail) {
        assert.equal(p.status, 503);
        assert.ok(res.status >= 500 && res.status < 600, `client status ${res.status}, want 5xx\n${where}`);
        let e;
        assert.doesNotThrow(() => { e = JSON.parse(text); }, `error body is not JSON: ${text}`);
        assert.ok(e && typeof e.error === 'object' && e.error !== null, `error body has no error object: ${text}`);
        return;
      }

      // What the prefill stand-in answered (sanity of the stand-in itself).
      const eos = /EOS-(NOW|ABSENT)/.test(JSON.stringify(c.body));
      assert.equal(p.status, 200);
      if (eos) assert.equal(p.kv_transfer_params, null);
      else {
        assert.equal(p.kv_transfer_params.remote_request_id, id);
        assert.equal(p.kv_transfer_params.transfer_mode, 'read');
        assert.ok(Number.isInteger(p.kv_transfer_params.remote_num_tokens));
        assert.deepEqual(p.kv_transfer_params.nested.a, [1, { b: null }]);
      }

      // §4 items 1 and 4: same id, the original body plus prefill's params (opaque, deep-equal).
      const [d] = legs.decode;
      assert.equal(d.path, c.path);
      assert.equal(d.x_request_id, id, 'decode leg X-Request-Id equals prefill\'s');
      assert.deepEqual(d.body, expectedDecodeBody(c.body, p), 'decode leg body');
      for (const k of ['stream', 'min_tokens', 'stream_options', 'max_tokens', 'max_completion_tokens'])
        assert.deepEqual(d.body[k], c.body[k], `decode leg ${k} is the client's`);
      if (eos) assert.ok(!('kv_transfer_params' in d.body), 'no kv_transfer_params on decode after an EOS prefill');

      // The client got decode's answer.
      assert.equal(res.status, 200, where);
      const chat = c.path === CHAT;
      if (c.body.stream) {
        assert.match(res.headers.get('content-type') || '', /^text\/event-stream/);
        const data = sseData(text);
        assert.equal(data.at(-1), '[DONE]', 'the stream ends with data: [DONE]');
        assert.equal(data.filter((x) => x === '[DONE]').length, 1);
        const chunks = data.slice(0, -1).map((x) => JSON.parse(x));
        assert.ok(chunks.length >= 2, text);
        for (const ch of chunks) assert.equal(ch.object, chat ? 'chat.completion.chunk' : 'text_completion');
        assert.equal(new Set(chunks.map((ch) => ch.id)).size, 1, 'one id across the chunks');
        const includeUsage = c.body.stream_options?.include_usage === true;
        const content = includeUsage ? chunks.slice(0, -1) : chunks;
        if (includeUsage) {
          const last = chunks.at(-1);
          assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
          assert.ok(Number.isInteger(last.usage?.completion_tokens), JSON.stringify(last));
          for (const ch of content) assert.equal(ch.usage, null, 'every other chunk has usage null');
        } else {
          for (const ch of chunks) assert.ok(ch.choices.length > 0, 'no usage chunk without include_usage');
        }
        if (chat) assert.equal(content[0].choices[0].delta.role, 'assistant');
        const out = content.map((ch) => (chat ? ch.choices[0].delta.content ?? '' : ch.choices[0].text)).join('');
        assert.match(out, /^decoded/, `streamed text ${JSON.stringify(out)} is not decode's`);
        assert.ok(content.at(-1).choices[0].finish_reason, 'finish_reason on the last content chunk');
      } else {
        assert.match(res.headers.get('content-type') || '', /json/);
        const j = JSON.parse(text);
        assert.equal(j.object, chat ? 'chat.completion' : 'text_completion');
        const out = chat ? j.choices[0].message.content : j.choices[0].text;
        assert.match(out, /^decoded/, `text ${JSON.stringify(out)} is not decode's`);
      }
    });
  }

  await t.test('generated ids are distinct; no violations over the whole run', async () => {
    assert.equal(new Set(generated).size, generated.length, `generated suffixes repeat: ${generated}`);
    const all = await si.legs(0);
    assert.deepEqual(all.violations, [], si.stderr());
  });
});
