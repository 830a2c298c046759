// Golden reference for kvgate's tokenizer and chat-template tests (and the tokenizer benchmark).
// Self-contained: no kvgate code. Needs the pinned npm packages (package.json) and a models dir built
// by scripts/models_dir.mjs.
//
//   loadRef(modelsDir, model) -> { encode(text, addSpecialTokens), encodeBatch(texts, addSpecial),
//                                  chat(request) -> {text, ids}, chatContext(request), ... }
//   corpus() / fuzz(seed, n) / chatCases(model)   deterministic inputs
//
// Token ids come from HF's Rust `tokenizers` (npm N-API build, the same code as Python tokenizers)
// plus transformers 4.x's BOS/EOS rule (see bosEosRule). Chat prompts follow vLLM's OpenAI chat
// request -> template input mapping (docs/chat-templates.md, "How an OpenAI chat request becomes
// template input (vLLM rules)"), rendered with @huggingface/jinja patched to Python/Jinja2 string
// semantics (pyStrip below) and cross-checked against real Jinja2 by tests/tokenizer/jinja2_check.py.
//
// CLI: node tests/tokenizer/reference.mjs selfcheck MODELS_DIR
//      node tests/tokenizer/reference.mjs dump-chat MODELS_DIR OUT.json   (input for jinja2_check.py)
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Environment, Interpreter, Template } from '@huggingface/jinja';

const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');

// ---------------------------------------------------------------------------------------------
// Jinja: make @huggingface/jinja 0.5.11 behave like Python Jinja2 where the shipped templates can
// tell the difference. Upstream ignores the `chars` argument of str.strip/lstrip/rstrip (Qwen3 uses
// `.lstrip('\n')`, `.strip('\n')`), and `trim`/`strip` use JavaScript's whitespace set instead of
// Python's str.isspace() (U+0085 and U+001C..U+001F are Python whitespace; U+FEFF is not). String
// `length` counts code points in Python, UTF-16 units in JS.
// ---------------------------------------------------------------------------------------------
const PY_WS = new Set([0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680,
  0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
  0x2028, 0x2029, 0x202f, 0x205f, 0x3000]);

// Python str.strip/lstrip/rstrip. chars: undefined/null = whitespace, else the set of its code points.
export function pyStrip(s, chars, left = true, right = true) {
  const cps = [...s];
  const set = chars == null ? null : new Set([...chars]);
  const strip = (c) => (set ? set.has(c) : PY_WS.has(c.codePointAt(0)));
  let a = 0; let b = cps.length;
  if (left) while (a < b && strip(cps[a])) a++;
  if (right) while (b > a && strip(cps[b - 1])) b--;
  return cps.slice(a, b).join('');
}

let jinjaPatched = false;
function patchJinja() {
  if (jinjaPatched) return;
  jinjaPatched = true;
  const env = new Environment();
  env.set('__probe', 'x');
  const StringValue = env.lookupVariable('__probe').constructor;
  const desc = Object.getOwnPropertyDescriptor(StringValue.prototype, 'builtins');
  const sample = desc.get.call(new StringValue('x'));
  const FunctionValue = sample.get('upper').constructor;
  const IntegerValue = sample.get('length').constructor;
  const charsArg = (args) => {
    const a = args && args[0];
    if (a === undefined || a === null || a.type === 'NullValue' || a.type === 'UndefinedValue') return null;
    if (a.type !== 'StringValue') throw new Error('strip arg must be None or str');
    return a.value;
  };
  Object.defineProperty(StringValue.prototype, 'builtins', {
    configurable: true,
    get() {
      const m = desc.get.call(this);
      if (!m.__py) {
        m.__py = true;
        const s = this.value;
        m.set('strip', new FunctionValue((args) => new StringValue(pyStrip(s, charsArg(args), true, true))));
        m.set('lstrip', new FunctionValue((args) => new StringValue(pyStrip(s, charsArg(args), true, false))));
        m.set('rstrip', new FunctionValue((args) => new StringValue(pyStrip(s, charsArg(args), false, true))));
        m.set('length', new IntegerValue([...s].length));
      }
      return m;
    },
  });
  const applyFilter = Interpreter.prototype.applyFilter;
  Interpreter.prototype.applyFilter = function patched(operand, filterNode, environment) {
    if (operand instanceof StringValue && filterNode.type === 'Identifier') {
      if (filterNode.value === 'trim') return new StringValue(pyStrip(operand.value));
      if (filterNode.value === 'length') return new IntegerValue([...operand.value].length);
    }
    return applyFilter.call(this, operand, filterNode, environment);
  };
}

// ---------------------------------------------------------------------------------------------
// vLLM's chat-template content format detection (vllm/renderers/hf.py `_detect_content_format`,
// formerly vllm/entrypoints/chat_utils.py): "openai" when the template loops over the `content` of
// a message variable (`{% for x in message['content'] %}`, also through a filter, a test or a
// slice), where message variables are loop targets over `messages` or over names assigned from it
// (`{% set loop_messages = messages[1:] %}`); otherwise "string". Any analysis error -> "string".
// ---------------------------------------------------------------------------------------------
function* walk(node) {
  if (!node || typeof node !== 'object') return;
  if (Array.isArray(node)) { for (const n of node) yield* walk(n); return; }
  if (node instanceof Map) { for (const [k, v] of node) { yield* walk(k); yield* walk(v); } return; }
  if (typeof node.type === 'string') yield node;
  for (const k of Object.keys(node)) if (k !== 'type') yield* walk(node[k]);
}
const isVar = (n, name) => n && n.type === 'Identifier' && n.value === name;
function isAttr(n, name, key) {
  if (!n || n.type !== 'MemberExpression' || !isVar(n.object, name)) return false;
  const p = n.property;
  return n.computed ? (p.type === 'StringLiteral' && p.value === key) : (p.type === 'Identifier' && p.value === key);
}
function isVarOrElems(n, name, key = null) {
  if (!n) return false;
  if (n.type === 'FilterExpression') return isVarOrElems(n.operand, name, key);
  if (n.type === 'TestExpression') return isVarOrElems(n.operand, name, key);
  if (n.type === 'SelectExpression') return isVarOrElems(n.lhs, name, key); // `for x in y if c`
  if (n.type === 'MemberExpression' && n.property && n.property.type === 'SliceExpression') return isVarOrElems(n.object, name, key);
  return key ? isAttr(n, name, key) : isVar(n, name);
}
export function detectContentFormat(chatTemplate) {
  let ast;
  try { ast = new Template(chatTemplate).parsed; } catch { return 'string'; }
  try {
    const nodes = [...walk(ast)];
    const sets = nodes.filter((n) => n.type === 'Set' && n.value); // `{% set x = expr %}` (not block sets)
    const fors = nodes.filter((n) => n.type === 'For');
    const msgNames = ['messages'];
    for (let i = 0; i < msgNames.length; i++) {
      for (const s of sets) {
        if (isVarOrElems(s.value, msgNames[i])) {
          if (s.assignee.type !== 'Identifier') throw new Error('non-name assignment target'); // vLLM asserts
          if (s.assignee.value !== msgNames[i]) msgNames.push(s.assignee.value);
        }
      }
    }
    const messageVars = [];
    for (const f of fors) {
      if (msgNames.some((v) => isVarOrElems(f.iterable, v))) {
        if (f.loopvar.type !== 'Identifier') throw new Error('tuple loop target');
        messageVars.push(f.loopvar.value);
      }
    }
    for (const f of fors) {
      if (messageVars.some((v) => isVarOrElems(f.iterable, v, 'content'))) {
        if (f.loopvar.type !== 'Identifier') throw new Error('tuple loop target');
        return 'openai';
      }
    }
    return 'string';
  } catch {
    return 'string';
  }
}

// ---------------------------------------------------------------------------------------------
// OpenAI chat request -> conversation (vllm/entrypoints/chat_utils.py `_parse_chat_message_content`,
// `_parse_chat_message_content_parts`, `_parse_chat_message_content_part`, `_postprocess_messages`).
// ---------------------------------------------------------------------------------------------
export class ChatError extends Error {}

const TEXT_PART_FIELD = { text: 'text', input_text: 'text', output_text: 'text', refusal: 'refusal', thinking: 'thinking' };
const MEDIA_PART_TYPES = new Set(['image_url', 'input_image', 'image_embeds', 'audio_embeds', 'prompt_embeds',
  'image_pil', 'audio_url', 'input_audio', 'video_url']);

function parsePart(part, wrap) {
  if (typeof part === 'string') return wrap ? { type: 'text', text: part } : part;
  if (part === null || typeof part !== 'object' || Array.isArray(part)) throw new ChatError('Invalid content part');
  const type = part.type;
  if (type === undefined || type === null || part.uuid != null) {
    for (const k of ['image_url', 'image_pil', 'image_embeds', 'audio_embeds', 'prompt_embeds', 'audio_url', 'input_audio', 'video_url']) {
      if (k in part) throw new ChatError(`multimodal content part '${k}' is not supported by a text-only model`);
    }
    if ('tool_reference' in part) return wrap ? { type: 'tool_reference', name: part.tool_reference } : part.tool_reference;
    throw new ChatError("Missing 'type' field in multimodal part.");
  }
  if (typeof type !== 'string') throw new ChatError("Invalid 'type' field in multimodal part.");
  if (type in TEXT_PART_FIELD) {
    const v = part[TEXT_PART_FIELD[type]];
    if (v === undefined || v === null) {
      if (type === 'text' || type === 'refusal') return null; // skipped with a warning
      throw new ChatError(`content part of type '${type}' has no text`);
    }
    if (typeof v !== 'string') throw new ChatError(`content part of type '${type}' must be a string`);
    return wrap ? { type: 'text', text: v } : v;
  }
  if (type === 'tool_reference') return wrap ? { type: 'tool_reference', name: part.name ?? null } : (part.name ?? null);
  if (MEDIA_PART_TYPES.has(type)) throw new ChatError(`multimodal content part '${type}' is not supported by a text-only model`);
  throw new ChatError(`Unsupported chat content part type: '${type}'`);
}

export function toConversation(messages, contentFormat) {
  if (!Array.isArray(messages)) throw new ChatError('messages must be an array');
  const wrap = contentFormat === 'openai';
  const conv = [];
  for (const message of messages) {
    if (!message || typeof message !== 'object' || typeof message.role !== 'string') throw new ChatError('each message needs a string role');
    const role = message.role;
    let content = message.content;
    const reasoning = message.reasoning;
    if (content === undefined || content === null) content = [];
    else if (typeof content === 'string') content = [{ type: 'text', text: content }];
    else if (!Array.isArray(content)) throw new ChatError('content must be a string, an array of parts or null');
    // `if parse_res: content.append(parse_res)`: falsy results are dropped, i.e. null and, in string
    // format, "" (in openai format a part is a non-empty dict even when its text is "").
    const parts = content.map((p) => parsePart(p, wrap)).filter((p) => p !== null && p !== '');
    const msg = { role, content: wrap ? parts : parts.join('\n') };
    if (role === 'assistant') {
      if (message.tool_calls !== undefined && message.tool_calls !== null) {
        if (!Array.isArray(message.tool_calls)) throw new ChatError('tool_calls must be an array');
        // Deep copy: arguments are parsed in place below.
        msg.tool_calls = message.tool_calls.map((tc) => JSON.parse(JSON.stringify(tc)));
      }
      if (reasoning !== undefined && reasoning !== null) {
        msg.reasoning = reasoning;
        msg.reasoning_content = reasoning;
      }
    } else if (role === 'tool') {
      if ('tool_call_id' in message) msg.tool_call_id = message.tool_call_id;
      if (Array.isArray(msg.content)) {
        const nonText = msg.content.some((it) => it && typeof it === 'object' && it.type !== 'text');
        if (!nonText) msg.content = msg.content.filter((it) => it && it.type === 'text').map((it) => it.text ?? '').join('\n');
      }
    }
    if (typeof message.name === 'string') msg.name = message.name;
    if (typeof message.task === 'string') msg.task = message.task;
    if (role === 'developer') msg.tools = message.tools ?? null;
    conv.push(msg);
  }
  // _postprocess_messages: tool-call arguments JSON string -> object ({} when not valid JSON).
  for (const m of conv) {
    if (m.role !== 'assistant' || !('tool_calls' in m) || !Array.isArray(m.tool_calls)) continue;
    if (m.tool_calls.length === 0) { delete m.tool_calls; continue; }
    for (const tc of m.tool_calls) {
      if (!tc || typeof tc !== 'object' || !tc.function || typeof tc.function !== 'object') throw new ChatError('tool call without function');
      const a = tc.function.arguments;
      if (typeof a === 'string') {
        try { tc.function.arguments = JSON.parse(a); } catch { tc.function.arguments = {}; }
      } else if (a === null || typeof a !== 'object') {
        tc.function.arguments = {};
      }
    }
  }
  return conv;
}

// `tools` as vLLM hands them to the template: [tool.model_dump() for tool in request.tools], i.e.
// pydantic ChatCompletionToolsParam {type="function", function: FunctionDefinition{name,
// description=None, parameters=None}} with extra fields kept (extra="allow") after the declared ones.
export function normalizeTools(tools) {
  if (tools === undefined || tools === null) return null;
  if (!Array.isArray(tools)) throw new ChatError('tools must be an array');
  return tools.map((t) => {
    if (!t || typeof t !== 'object' || !t.function || typeof t.function.name !== 'string') throw new ChatError('invalid tool');
    const { type = 'function', function: fn, ...extra } = t;
    if (type !== 'function') throw new ChatError(`unsupported tool type ${type}`);
    const { name, description = null, parameters = null, ...fnExtra } = fn;
    return { type, function: { name, description, parameters, ...fnExtra }, ...extra };
  });
}

// ---------------------------------------------------------------------------------------------
// transformers 4.x tokenizer behaviour taken from tokenizer_config.json.
// ---------------------------------------------------------------------------------------------
// BOS/EOS rule. In transformers 4.x, LlamaTokenizerFast.__init__ calls update_post_processor(),
// which REPLACES tokenizer.json's post-processor by
//   TemplateProcessing(single = (bos:0 if add_bos_token) $A:0 (eos:0 if add_eos_token), ...)
// with add_bos_token default True and add_eos_token default False:
// https://github.com/huggingface/transformers/blob/v4.57.1/src/transformers/models/llama/tokenization_llama_fast.py
// (LlamaTokenizerFast.__init__ / update_post_processor). GemmaTokenizerFast, CodeLlamaTokenizerFast
// and CohereTokenizerFast carry the same method ("Copied from ...LlamaTokenizerFast.update_post_processor"):
// .../models/gemma/tokenization_gemma_fast.py, .../code_llama/tokenization_code_llama_fast.py,
// .../cohere/tokenization_cohere_fast.py. AutoTokenizer maps tokenizer_class "XTokenizer" to
// "XTokenizerFast" when tokenizer.json exists. Every other class (PreTrainedTokenizerFast,
// Qwen2TokenizerFast, ...) keeps tokenizer.json's post-processor; the generic add_bos_token support
// for PreTrainedTokenizerFast (transformers PR #31316) was never merged in 4.x.
// Effect here: DeepSeek-V3 (LlamaTokenizerFast, add_bos_token=true, tokenizer.json without BOS) gets
// BOS id 0 with add_special_tokens=true; Llama-2/Mistral/Gemma keep BOS; Qwen3/Llama-3/gpt-oss use
// tokenizer.json's post-processor as is.
export const REBUILT_POST_PROCESSOR_CLASSES = new Set([
  'LlamaTokenizer', 'LlamaTokenizerFast', 'GemmaTokenizer', 'GemmaTokenizerFast',
  'CodeLlamaTokenizer', 'CodeLlamaTokenizerFast', 'CohereTokenizer', 'CohereTokenizerFast',
]);

// __init__ defaults of the special tokens, used when tokenizer_config.json does not name them.
const CLASS_DEFAULTS = {
  LlamaTokenizerFast: { unk_token: '<unk>', bos_token: '<s>', eos_token: '</s>' },
  CodeLlamaTokenizerFast: { unk_token: '<unk>', bos_token: '<s>', eos_token: '</s>' },
  GemmaTokenizerFast: { unk_token: '<unk>', bos_token: '<bos>', eos_token: '<eos>', pad_token: '<pad>' },
  CohereTokenizerFast: { unk_token: '<UNK>', bos_token: '<BOS_TOKEN>', eos_token: '<|END_OF_TURN_TOKEN|>', pad_token: '<PAD>' },
  Qwen2TokenizerFast: { unk_token: '<|endoftext|>', eos_token: '<|endoftext|>', pad_token: '<|endoftext|>' },
};
const SPECIAL_ATTRS = ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token'];
const tokStr = (v) => (v && typeof v === 'object' ? v.content : v);

export function fastClass(config) {
  const c = config.tokenizer_class || 'PreTrainedTokenizerFast';
  return c.endsWith('Fast') ? c : `${c}Fast`;
}

// transformers' `special_tokens_map` (what apply_chat_template puts into the template scope):
// every named special token that is set, as a string; additional_special_tokens when non-empty;
// extra_special_tokens (named, e.g. Gemma-3's image_token) are added as further names.
export function specialTokensMap(config) {
  const defaults = CLASS_DEFAULTS[fastClass(config)] || {};
  const out = {};
  for (const a of SPECIAL_ATTRS) {
    const v = a in config ? tokStr(config[a]) : defaults[a];
    if (v !== undefined && v !== null) out[a] = v;
  }
  const add = (config.additional_special_tokens || []).map(tokStr);
  if (add.length) out.additional_special_tokens = add;
  const extra = config.extra_special_tokens;
  if (extra && !Array.isArray(extra) && typeof extra === 'object') {
    for (const [k, v] of Object.entries(extra)) if (tokStr(v) != null) out[k] = tokStr(v);
  }
  return out;
}

// Python's `continue_final_message` post-processing (transformers chat_template_utils.render_jinja_template).
function continueFinal(rendered, conversation) {
  let final = conversation[conversation.length - 1].content;
  if (Array.isArray(final)) {
    const block = [...final].reverse().find((b) => b && typeof b === 'object' && 'text' in b);
    if (!block) throw new ChatError('continue_final_message is set but we could not find any text to continue in the final message!');
    final = block.text;
  }
  if (typeof final !== 'string') throw new ChatError('continue_final_message: final message has no text');
  const stripped = pyStrip(final);
  if (!rendered.includes(stripped)) {
    throw new ChatError('continue_final_message is set but the final message does not appear in the chat after applying the chat template!');
  }
  const loc = rendered.lastIndexOf(stripped);
  const lstripped = pyStrip(final, null, true, false);
  if (rendered.slice(loc, loc + lstripped.length) === final) return rendered.slice(0, loc + lstripped.length);
  return rendered.slice(0, loc + stripped.length);
}

// ---------------------------------------------------------------------------------------------
export async function loadRef(modelsDir, model) {
  patchJinja();
  const dir = path.join(modelsDir, ...model.split('/'));
  const tokenizer = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const cls = fastClass(config);
  const specials = specialTokensMap(config);
  const template = typeof config.chat_template === 'string' ? config.chat_template : null;
  let rule = null;
  if (REBUILT_POST_PROCESSOR_CLASSES.has(cls)) {
    const addBos = config.add_bos_token ?? true;
    const addEos = config.add_eos_token ?? false;
    const id = (name) => {
      const t = specials[name];
      if (t == null) throw new Error(`${model}: ${name.replace('_token', '')} token required by add_${name} but not set`);
      const i = tokenizer.tokenToId(t);
      if (i === null || i === undefined) throw new Error(`${model}: ${t} not in vocabulary`);
      return i;
    };
    rule = { cls, bos: addBos ? id('bos_token') : null, eos: addEos ? id('eos_token') : null };
  }
  const finish = (enc, addSpecial) => {
    const ids = enc.getIds();
    if (!rule || !addSpecial) return ids;
    return [...(rule.bos !== null ? [rule.bos] : []), ...ids, ...(rule.eos !== null ? [rule.eos] : [])];
  };
  // With the rule, encode without the file's post-processor and add BOS/EOS ourselves.
  const opts = (addSpecial) => ({ addSpecialTokens: rule ? false : addSpecial });

  async function encode(text, addSpecialTokens = true) {
    return finish(await tokenizer.encode(text, null, opts(addSpecialTokens)), addSpecialTokens);
  }
  async function encodeBatch(texts, addSpecialTokens = true) {
    const out = [];
    const CHUNK = 256;
    for (let i = 0; i < texts.length; i += CHUNK) {
      const encs = await tokenizer.encodeBatch(texts.slice(i, i + CHUNK), opts(addSpecialTokens));
      for (const e of encs) out.push(finish(e, addSpecialTokens));
    }
    return out;
  }

  let compiled = null;
  let contentFormat = null;
  // The exact template input vLLM + transformers would build for `request` (throws ChatError).
  function chatContext(request) {
    if (!template) throw new ChatError(`model ${model} has no chat template`);
    if (!request || typeof request !== 'object') throw new ChatError('request must be an object');
    const agp = request.add_generation_prompt ?? true;
    const cfm = request.continue_final_message ?? false;
    if (agp && cfm) throw new ChatError('Cannot set both `continue_final_message` and `add_generation_prompt` to True.');
    const ctk = request.chat_template_kwargs ?? {};
    if (typeof ctk !== 'object' || Array.isArray(ctk)) throw new ChatError('chat_template_kwargs must be an object');
    for (const bad of ['chat_template', 'tokenize']) {
      if (bad in ctk) throw new ChatError(`Found unexpected chat template kwargs from request: {'${bad}'}`);
    }
    contentFormat ??= detectContentFormat(template);
    const messages = toConversation(request.messages, contentFormat);
    // serving: dict(add_generation_prompt, continue_final_message, tools, documents) updated by
    // chat_template_kwargs; apply_chat_template takes the named ones, the rest joins the scope on
    // top of special_tokens_map.
    const kw = {
      add_generation_prompt: agp, continue_final_message: cfm,
      tools: normalizeTools(request.tools), documents: request.documents ?? null, ...ctk,
    };
    const { add_generation_prompt, continue_final_message, tools, documents, ...rest } = kw;
    if (add_generation_prompt && continue_final_message) {
      throw new ChatError('continue_final_message and add_generation_prompt are not compatible.');
    }
    if (continue_final_message && messages.length === 0) throw new ChatError('continue_final_message needs a final message');
    const context = { ...specials, ...rest, messages, tools: tools ?? null, documents: documents ?? null, add_generation_prompt: !!add_generation_prompt };
    return { template, contentFormat, context, continueFinalMessage: !!continue_final_message, addSpecialTokens: !!(request.add_special_tokens ?? false) };
  }
  function renderContext({ context, continueFinalMessage }) {
    compiled ??= new Template(template);
    let text;
    try {
      text = compiled.render(context);
    } catch (e) {
      throw new ChatError(`template error: ${e.message}`);
    }
    return continueFinalMessage ? continueFinal(text, context.messages) : text;
  }
  async function chat(request) {
    const ctx = chatContext(request);
    const text = renderContext(ctx);
    return { text, ids: await encode(text, ctx.addSpecialTokens) };
  }

  // transformers' tokenizer.decode(ids, skip_special_tokens): HF tokenizers' decode, then
  // clean_up_tokenization (PreTrainedTokenizerBase) when `cleanUp` (default: the config's
  // clean_up_tokenization_spaces, as transformers before 5.7 applies it).
  async function decode(ids, skipSpecialTokens = false, cleanUp = config.clean_up_tokenization_spaces === true) {
    const text = await tokenizer.decode(ids, skipSpecialTokens);
    if (!cleanUp) return text;
    return text.replaceAll(' .', '.').replaceAll(' ?', '?').replaceAll(' !', '!').replaceAll(' ,', ',')
      .replaceAll(" ' ", "'").replaceAll(" n't", "n't").replaceAll(" 'm", "'m").replaceAll(" 's", "'s")
      .replaceAll(" 've", "'ve").replaceAll(" 're", "'re");
  }
  // transformers' convert_ids_to_tokens (vLLM's token_strs).
  const tokenStrs = (ids) => ids.map((i) => tokenizer.idToToken(i) ?? null);

  return {
    model, dir, tokenizer, config, tokenizerClass: cls, specials, template, bosEosRule: rule,
    hasChatTemplate: !!template, encode, encodeBatch, chat, chatContext, renderContext, decode, tokenStrs,
    get contentFormat() { return template ? (contentFormat ??= detectContentFormat(template)) : null; },
  };
}

// ---------------------------------------------------------------------------------------------
// Deterministic inputs.
// ---------------------------------------------------------------------------------------------
export function rng(seed) {
  let a = (seed >>> 0) || 0x9e3779b9;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (n) => Math.floor(next() * n);
  next.pick = (arr) => arr[Math.floor(next() * arr.length)];
  next.range = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  return next;
}

const cp = (...xs) => String.fromCodePoint(...xs);

const PROSE = [
  'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!',
  "It's a truth universally acknowledged that a gateway in possession of a good cache must be in want of a router.",
  'On Tuesday, 14 March 2023, at 09:41:07 UTC, the cluster served 1,234,567 requests (99.95% under 250 ms).',
  'Prices rose 3.5% year-over-year; meanwhile, the Fed held rates at 5.25-5.50 percent... or did it?',
  '"Quoted speech," she said, "uses curly quotes sometimes" — and em-dashes – en-dashes – and ellipses…',
  'Emails like jane.doe+test@example.com and URLs like https://example.org/a/b?c=d&e=f#g appear in prompts.',
  "WE'LL SEE. THEY'RE HERE. I'M SURE YOU'VE HEARD IT'S FINE; DON'T PANIC, HE'D SAY.",
  'Mixed-case identifiers: getHTTPResponseCode, XMLHttpRequest, snake_case_name, SCREAMING_CASE, kebab-case.',
];

const CODE_CPP = `#include <vector>
#include <string_view>

namespace kv {
// Returns the length of the common prefix of a and b.
template <typename T>
size_t common_prefix(const std::vector<T>& a, const std::vector<T>& b) noexcept {
    size_t n = std::min(a.size(), b.size()), i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;  // O(n)
}
}  // namespace kv

int main(int argc, char** argv) {
\tstd::string_view s{"tab\\tand\\nnewline"};
\treturn argc > 1 ? 0x1F : -1;
}
`;

const CODE_PY = `import json, re
from dataclasses import dataclass

@dataclass
class Request:
    model: str
    messages: list[dict]

    def prompt(self) -> str:
        """Join messages; it's fine."""
        return "\\n".join(f"{m['role']}: {m['content']}" for m in self.messages)

if __name__ == "__main__":
    r = Request("qwen", [{"role": "user", "content": "hi"}])
    print(json.dumps(r.__dict__, indent=2))   # trailing spaces   
    x = [i**2 for i in range(10) if i % 3 == 0]
`;

const CODE_JSON = JSON.stringify({
  model: 'Qwen/Qwen3-8B', stream: true, temperature: 0.7, max_tokens: 512,
  messages: [{ role: 'system', content: 'You are helpful.' }, { role: 'user', content: 'Hi there! 👋 ¿Qué tal?' }],
  tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  nested: { a: [1, 2.5, -3e-7, null, true], 'key with spaces': '\\u00e9' },
}, null, 2);

const CJK = '我们在北京大学学习人工智能。東京の天気は晴れです。오늘 날씨가 좋네요. 中文、日本語、한국어の混在テキスト：「引用」『二重』（括弧）';
const ARABIC = 'مرحبا بالعالم! هذا نصٌّ عربيٌّ مع تشكيلٍ كاملٍ، وأرقام ١٢٣٤٥٦٧٨٩٠ و 2024. العربية تُكتب من اليمين إلى اليسار.';
const OTHER_SCRIPTS = 'Привет, мир! Ελληνικά κείμενα. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก ქართული Հայերեն ትግርኛ ᏣᎳᎩ ᠮᠣᠩᠭᠣᠯ';
const EMOJI = 'Family 👨‍👩‍👧‍👦, couple 👩‍❤️‍💋‍👨, skin tones 👍🏻👍🏼👍🏽👍🏾👍🏿, flags 🇺🇸🇯🇵🇩🇪 🏳️‍🌈 🏴‍☠️, keycaps 1️⃣#️⃣*️⃣, ' +
  'hearts ❤️🧡💛, ZWJ jobs 🧑‍💻👩🏽‍🚀🧑🏿‍🤝‍🧑🏻, subdivision 🏴󠁧󠁢󠁳󠁣󠁴󠁿, emoji 15/16 🫨🩷🪼 🫩🫆🪾';
const COMBINING = 'e\u0301 (NFD é) vs \u00e9 (NFC); A\u030a vs \u00c5; \u1e9b\u0323; n\u0303o; ' +
  'Z\u0351\u0308\u0352a\u0337\u035dl\u0316g\u0322o\u0340 text; Hangul jamo \u1100\u1161\u11a8 vs \uac01; ' +
  'Devanagari क्षि, Thai ก่ำ, Arabic بِسْمِ, dangling \u0301 mark, \u0300\u0301\u0302 only marks';
const WHITESPACE = 'a\u00a0b\u3000c\u0085d\u180ee\u200bf\ufeffg\r\nh\ti\t\tj\n\n\nk \n \n\t l\u2028m\u2029n\u000bo\u000cp' +
  '\u1680q\u2000\u2001\u2002\u2003\u2009\u200a\u202f\u205fr   \r\n\r\n  s\n\n\n\n\n\n t     ';
const UNICODE_NEW = [
  // Unicode 15.0
  0x1f6dc, 0x1fa75, 0x1fae8, 0x1e030, 0x1e04f, 0x11f00, 0x11f04, 0x11f50, 0x31350, 0x10efd, 0x1d2c0, 0x0cf3, 0x0ecE,
  // Unicode 15.1
  0x2ebf0, 0x2ee5d, 0x2ffc, 0x31ef,
  // Unicode 16.0
  0x1c89, 0x1c8a, 0x10d50, 0x10d65, 0x10d69, 0x16100, 0x16130, 0x1cc00, 0x1ccf0, 0x1fae9, 0x1fa89, 0x0897, 0x1b4e, 0xa7cb, 0x105c0, 0x11380,
  0x16d40, 0x16d70, 0x1e5d0, 0x1e5f1, 0x10ec2, 0x11bc0, 0x1f8b0, 0x1fbcb,
  // Unicode 17.0 (not yet in the reference's tables)
  0x11db0, 0x11db9, 0x1e6c0, 0x16ea0, 0x1fae3, 0x1f6d8,
].map((c) => cp(c)).join('');
const CONTRACTIONS = "it's IT'S he'S we'll WE'LL we'Ll don't DON'T don'T you're YOU'RE I've I'VE I'm I'M he'd HE'D " +
  "'s 'S ''s 's's x'sy 'tis rock'n'roll O'Neil's it’s (curly) 's\n't \t'll 123's é's 日本's";
const SPECIALS = [
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<s>', '</s>', '<unk>', '<|begin_of_text|>', '<|end_of_text|>',
  '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>',
  '<｜User｜>', '<｜Assistant｜>', '<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<think>', '</think>',
  '<tool_call>', '</tool_call>', '<|startoftext|>', '<|return|>', '<|channel|>', '<|message|>', '<|start|>', '<|end|>',
  '<|reserved_special_token_5|>', '<start_of_image>', '[INST]', '<<SYS>>', '<|im_start', 'im_start|>', '< s>', '<s >',
];
const SPECIAL_TEXT = 'Before <|im_start|>user\nHi<|im_end|> mid <s>x</s> <|begin_of_text|>hello<|eot_id|> ' +
  '<｜begin▁of▁sentence｜>deep<｜end▁of▁sentence｜> <start_of_turn>model\n<end_of_turn> <think>hmm</think> ' +
  'Hi <s> there <s><s>  <s> nested <|im_start|><|im_start|> partial <|im_start and <|im_end |> and  <bos>  ';

function mixedPrompt(seed, targetBytes) {
  const r = rng(seed);
  const pieces = [...PROSE, CODE_CPP, CODE_PY, CODE_JSON, CJK, ARABIC, OTHER_SCRIPTS, EMOJI, COMBINING, WHITESPACE,
    UNICODE_NEW, CONTRACTIONS, SPECIAL_TEXT];
  let s = '';
  while (Buffer.byteLength(s) < targetBytes) s += r.pick(pieces) + r.pick([' ', '\n', '\n\n', '\t', '', '. ', '\r\n']);
  return s;
}

// Named strings covering the cases the C++ tokenizer must get exactly right.
export function corpus() {
  const c = {
    empty: '',
    space: ' ',
    newline: '\n',
    hello: 'Hello world',
    hello_bang: 'Hello world!',
    hi_s_there: 'Hi <s> there',
    leading_spaces: '   leading and trailing   ',
    ...Object.fromEntries(PROSE.map((p, i) => [`prose_${i}`, p])),
    prose_all: PROSE.join(' '),
    code_cpp: CODE_CPP,
    code_python: CODE_PY,
    code_json: CODE_JSON,
    cjk: CJK,
    arabic: ARABIC,
    other_scripts: OTHER_SCRIPTS,
    emoji: EMOJI,
    combining: COMBINING,
    whitespace: WHITESPACE,
    whitespace_only: ' \t\n\r\n\u00a0\u3000\u0085\u180e\u200b\ufeff  \n\n',
    nbsp_words: 'a\u00a0b\u00a0\u00a0c \u00a0d\u00a0 e',
    crlf_lines: 'line one\r\nline two\r\n\r\nline four\r\n',
    tabs: '\tindent\n\t\tdouble\n\t \t mixed\t\n',
    newline_runs: 'a\n\nb\n\n\nc\n\n\n\n\nd \n\n e\n \n',
    unicode_15_16_17: UNICODE_NEW,
    unicode_in_words: `abc${cp(0x1c89)}def ${cp(0x10d50)}${cp(0x10d51)} x${cp(0x11db0)}y ${cp(0x1e030)}z 9${cp(0x16d70)}9`,
    contractions: CONTRACTIONS,
    special_text: SPECIAL_TEXT,
    specials_joined: SPECIALS.join(''),
    specials_spaced: SPECIALS.join(' '),
    digits: '0 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 1e10 ٣٤٥ ४५६ ½ ² Ⅻ ①',
    controls: '\u0000a\u0001b\u0007c\u001bd\u007fe\u0080f\u009fg',
    private_use: `\ue000\uf8ff${cp(0xf0000)}${cp(0x10fffd)} noncharacters \ufffe\uffff${cp(0x1fffe)}`,
    replacement_char: 'bad \ufffd byte \ufffd\ufffd',
    nfc_vs_nfd: 'Cafe\u0301 Café ñ n\u0303 Å A\u030a ﬁ ﬃ ㍿ Ω Ω',
    long_letter_10k: 'a'.repeat(10000),
    long_letter_100k: 'a'.repeat(100000),
    long_word_mixed_20k: 'ab'.repeat(10000),
    long_spaces_10k: ' '.repeat(10000),
    long_spaces_50k: 'x' + ' '.repeat(50000) + 'y',
    long_digits_30k: '7'.repeat(30000),
    long_newlines_10k: '\n'.repeat(10000),
    long_cjk_10k: '的'.repeat(10000),
    long_emoji_5k: '😀'.repeat(5000),
    long_nbsp_5k: '\u00a0'.repeat(5000),
    long_tabs_spaces: ' \t'.repeat(5000),
    mixed_100k_a: mixedPrompt(1, 100 * 1024),
    mixed_100k_b: mixedPrompt(2, 100 * 1024),
    mixed_4k: mixedPrompt(3, 4096),
  };
  return c;
}

// Alphabets for fuzz().
const WS_POOL = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', '\u00a0', '\u3000', '\u0085', '\u180e', '\u200b', '\ufeff',
  '\u2028', '\u2029', '\u000b', '\u000c', '\u1680', '\u2003', '\u202f', '\u205f', ' \n', '\n ', '\t\n'];
const WORDS = ['the', 'The', 'THE', 'hello', 'world', 'token', 'Tokenizer', 'gateway', 'cache', 'x', 'I', 'a', 'naïve', 'café',
  'straße', 'İstanbul', 'ǅ', 'ǈungla', 'ﬁne', 'ΑΒΓ', 'αβγ', 'Москва', 'http', 'www', 'getHTTPResponse', 'snake_case', 'e.g.'];
const PUNCT = [...'.,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\'"'].concat(['...', '--', '->', '=>', '::', '//', '/*', '*/', '«', '»', '“', '”', '‘', '’', '—', '–', '…', '¿', '¡', '§', '¶', '€', '£', '¥', '©', '®', '™', '°', '±', '×', '÷']);
const RANGES = [[0x4e00, 0x9fff], [0x3040, 0x30ff], [0xac00, 0xd7a3], [0x0600, 0x06ff], [0x0590, 0x05ff], [0x0900, 0x097f],
  [0x0e00, 0x0e7f], [0x0400, 0x04ff], [0x0370, 0x03ff], [0x00c0, 0x024f], [0x1e00, 0x1eff], [0x10a0, 0x10ff], [0x1200, 0x137f],
  [0x2000, 0x206f], [0x2100, 0x214f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x3000, 0x303f], [0xff00, 0xffef],
  [0x1d400, 0x1d7ff], [0x20000, 0x2a6df], [0x1f300, 0x1f5ff], [0x1f900, 0x1f9ff]];
const MARKS = [[0x0300, 0x036f], [0x0483, 0x0489], [0x0591, 0x05bd], [0x0610, 0x061a], [0x064b, 0x065f], [0x093a, 0x094f],
  [0x0e31, 0x0e3a], [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x20d0, 0x20f0], [0xfe00, 0xfe0f], [0xfe20, 0xfe2f]];
const EMOJI_BASE = ['😀', '👍', '👩', '👨', '🧑', '👧', '👦', '❤', '🏳', '🏴', '🐈', '🚀', '💻', '✋', '🤝', '☠', '⚧', '🌈'];
const EMOJI_SEQ = ['👨‍👩‍👧‍👦', '👩‍❤️‍💋‍👨', '🏳️‍🌈', '🧑🏽‍💻', '👍🏿', '🇯🇵', '🇺🇳', '1️⃣', '🏴󠁧󠁢󠁥󠁮󠁧󠁿', '🐈‍⬛', '🫱🏻‍🫲🏿', '❤️‍🔥'];
const NEW_CPS = [...UNICODE_NEW];
const DIGIT_CHARS = [...'0123456789', '٠', '١', '٩', '۵', '०', '७', '๓', '٫', '½', '²', '³', 'Ⅷ', '①', '𝟗'];

function fuzzPiece(r) {
  switch (r.int(16)) {
    case 0: case 1: return r.pick(WORDS);
    case 2: return r.pick(WS_POOL);
    case 3: return r.pick(PUNCT);
    case 4: { let s = ''; const n = r.range(1, 12); for (let i = 0; i < n; i++) s += r.int(5) ? String(r.int(10)) : r.pick(DIGIT_CHARS); return s; }
    case 5: { const [a, b] = r.pick(RANGES); let s = ''; const n = r.range(1, 6); for (let i = 0; i < n; i++) s += cp(r.range(a, b)); return s; }
    case 6: { const [a, b] = r.pick(MARKS); return (r.int(2) ? r.pick(WORDS) : '') + cp(r.range(a, b)) + (r.int(3) ? '' : cp(r.range(a, b))); }
    case 7: {
      let s = r.pick(EMOJI_BASE);
      if (r.int(2)) s += cp(r.range(0x1f3fb, 0x1f3ff));
      if (r.int(3) === 0) s += '\ufe0f';
      if (r.int(3) === 0) s += '\u200d' + r.pick(EMOJI_BASE);
      return r.int(3) ? s : r.pick(EMOJI_SEQ);
    }
    case 8: return r.pick(NEW_CPS) + (r.int(2) ? r.pick(WORDS) : '');
    case 9: return r.pick(SPECIALS);
    case 10: return r.pick(["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'Ll", "'d", "'D", "’s", "'"]);
    case 11: { let c; do c = r.int(0x110000); while (c >= 0xd800 && c <= 0xdfff); return cp(c); }
    case 12: { let c; do c = r.int(0x10000); while (c >= 0xd800 && c <= 0xdfff); return cp(c); }
    case 13: return cp(r.int(0x20)) + (r.int(2) ? '\u007f' : '');
    case 14: return r.pick(['a', ' ', '1', '\n', 'é', '的']).repeat(r.range(2, 60));
    default: return r.pick(PROSE).slice(0, r.range(1, 40));
  }
}

// n random strings (0..300 code points) mixing everything above. Deterministic for a given seed.
export function fuzz(seed, n) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = r.int(301);
    const cps = [];
    while (cps.length < len) cps.push(...fuzzPiece(r));
    out.push(cps.slice(0, len).join(''));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Chat requests (OpenAI chat completion bodies) per model family.
// ---------------------------------------------------------------------------------------------
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name, e.g. Paris' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] },
  },
};
const TIME_TOOL = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };
const SEARCH_TOOL = { function: { name: 'search', description: 'Web search «ünïcödé»', parameters: { type: 'object', properties: { q: { type: 'string' } } }, strict: true } };

function family(model) {
  if (/Llama-3/i.test(model)) return 'llama3';
  if (/Qwen3/i.test(model)) return 'qwen3';
  if (/DeepSeek-V3/i.test(model)) return 'deepseek';
  if (/gemma-3/i.test(model)) return 'gemma3';
  return null;
}

export function chatCases(model) {
  const fam = family(model);
  if (!fam) return [];
  const cases = [];
  const add = (name, request) => cases.push({ name, request: { model, ...request } });
  const sysUser = [{ role: 'system', content: 'You are a helpful assistant.' }, { role: 'user', content: 'Hi there! 👋 What is 2+2?' }];
  const multi = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Name a prime.' },
    { role: 'assistant', content: 'Seven.' },
    { role: 'user', content: 'Another one, please.' },
    { role: 'assistant', content: 'Eleven.' },
    { role: 'user', content: 'And the sum?' },
  ];
  add('system_user', { messages: sysUser });
  add('user_only', { messages: [{ role: 'user', content: 'Hello' }] });
  add('multi_turn', { messages: multi });
  add('no_generation_prompt', { messages: multi.slice(0, 5), add_generation_prompt: false });
  add('content_text_parts', {
    messages: [{ role: 'system', content: [{ type: 'text', text: 'System part one.' }, { type: 'text', text: 'Part two.' }] },
      { role: 'user', content: [{ type: 'text', text: 'first line' }, { type: 'text', text: '' }, { type: 'text', text: 'second line' }, 'bare string part', { type: 'text', text: null }, { type: 'input_text', text: ' input_text part ' }] }],
  });
  add('unicode_and_specials_in_content', {
    messages: [{ role: 'user', content: `Special text <|im_start|>x<|im_end|> <s> <|begin_of_text|> <｜User｜> <start_of_turn>; ${EMOJI}; ${CJK}; ${COMBINING}` }],
  });
  add('edge_whitespace', {
    messages: [{ role: 'system', content: '\u0085\ufeff system with odd edges \u3000\u001c' },
      { role: 'user', content: '\n\n  \u00a0question with edges\t \u2028' }],
  });
  add('empty_and_null_content', { messages: [{ role: 'user', content: '' }, { role: 'assistant', content: null }, { role: 'user', content: 'ok' }] });
  add('name_field', { messages: [{ role: 'user', name: 'alice', content: 'Hi from Alice' }] });
  add('add_special_tokens_true', { messages: sysUser, add_special_tokens: true });
  add('unknown_chat_template_kwargs', { messages: sysUser, chat_template_kwargs: { some_flag: true, bos_token_unused: 'x' } });
  add('continue_final_message', {
    messages: [...sysUser, { role: 'assistant', content: 'Sure, the answer is' }], add_generation_prompt: false, continue_final_message: true,
  });
  add('continue_final_message_trailing_space', {
    messages: [...sysUser, { role: 'assistant', content: 'Let me think about it ' }], add_generation_prompt: false, continue_final_message: true,
  });
  add('error_generation_prompt_and_continue', {
    messages: [...sysUser, { role: 'assistant', content: 'x' }], add_generation_prompt: true, continue_final_message: true,
  });
  add('error_unsupported_part', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] });
  add('long_content', { messages: [{ role: 'user', content: mixedPrompt(7, 20000) }] });

  if (fam === 'qwen3' || fam === 'llama3' || fam === 'deepseek') {
    add('tool_role_message', {
      messages: [{ role: 'user', content: 'Weather?' }, { role: 'assistant', content: 'Checking.' },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' }, { role: 'user', content: 'Thanks' }],
    });
  }
  if (fam === 'qwen3' || fam === 'llama3') {
    add('tools_passed', { messages: sysUser, tools: [WEATHER_TOOL, TIME_TOOL, SEARCH_TOOL] });
  }
  if (fam === 'qwen3' || fam === 'deepseek') {
    const toolTurn = [
      { role: 'system', content: 'You can call tools.' },
      { role: 'user', content: "What's the weather in Paris and the time?" },
      {
        role: 'assistant', content: null,
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "c"}' } },
          { id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: '{"temp": 18, "sky": "cloudy"}' },
      { role: 'tool', tool_call_id: 'call_b', content: [{ type: 'text', text: '14:05' }, { type: 'text', text: 'CET' }] },
    ];
    add('tool_calls_and_results', { messages: toolTurn, tools: [WEATHER_TOOL, TIME_TOOL] });
    add('tool_calls_then_answer', {
      messages: [...toolTurn, { role: 'assistant', content: 'It is 18°C and cloudy; 14:05 CET.' }, { role: 'user', content: 'Thanks!' }],
      tools: [WEATHER_TOOL, TIME_TOOL],
    });
  }
  if (fam === 'qwen3') {
    add('enable_thinking_false', { messages: sysUser, chat_template_kwargs: { enable_thinking: false } });
    add('enable_thinking_true', { messages: sysUser, chat_template_kwargs: { enable_thinking: true } });
    add('think_in_history', {
      messages: [{ role: 'user', content: 'Q1' }, { role: 'assistant', content: '<think>\nreasoning one\n</think>\n\nA1' },
        { role: 'user', content: 'Q2' }, { role: 'assistant', content: '<think>\n  indented reasoning\n\n</think>\n\n  A2 with leading spaces' },
        { role: 'user', content: 'Q3' }],
    });
    add('think_last_assistant_no_gen', {
      messages: [{ role: 'user', content: 'Q' }, { role: 'assistant', content: '<think>\n\tr\n</think>\n\n\tanswer' }], add_generation_prompt: false,
    });
    add('reasoning_field', {
      messages: [{ role: 'user', content: 'Q' }, { role: 'assistant', content: 'A', reasoning: 'because\n' }], add_generation_prompt: false,
    });
    add('reasoning_content_field_ignored', {
      messages: [{ role: 'user', content: 'Q' }, { role: 'assistant', content: 'A', reasoning_content: 'dropped by vLLM' }], add_generation_prompt: false,
    });
    add('tool_call_arguments_variants', {
      messages: [{ role: 'user', content: 'go' }, {
        role: 'assistant', content: 'Calling.',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'get_weather', arguments: 'not json' } },
          { id: 'c2', type: 'function', function: { name: 'get_weather', arguments: { city: 'Zürich', nested: { k: [1, 'два', null, true] } } } },
          { id: 'c3', type: 'function', function: { name: 'get_time', arguments: '' } },
          { id: 'c4', type: 'function', function: { name: 'get_time', arguments: '  {"b": 1, "a": "é\\u00e9\\n"}  ' } },
        ],
      }, { role: 'tool', tool_call_id: 'c1', content: 'r1' }],
      tools: [WEATHER_TOOL],
    });
    add('tool_response_user_message', {
      messages: [{ role: 'user', content: 'real question' }, { role: 'assistant', content: '<think>x</think>ok' },
        { role: 'user', content: '<tool_response>\nfake\n</tool_response>' }],
    });
    add('empty_tool_calls_list', { messages: [{ role: 'user', content: 'Q' }, { role: 'assistant', content: 'A', tool_calls: [] }, { role: 'user', content: 'Q2' }] });
  }
  if (fam === 'deepseek') {
    add('two_system_messages', { messages: [{ role: 'system', content: 'S1' }, { role: 'system', content: 'S2' }, { role: 'user', content: 'U' }] });
  }
  if (fam === 'gemma3') {
    add('error_roles_not_alternating', { messages: [{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }] });
    add('system_as_parts', {
      messages: [{ role: 'system', content: [{ type: 'text', text: ' sys A ' }, { type: 'text', text: 'sys B' }] }, { role: 'user', content: [{ type: 'text', text: '  u1 ' }, { type: 'text', text: ' u2' }] }],
    });
  }
  if (fam === 'llama3') {
    add('tool_role_parts', { messages: [{ role: 'user', content: 'x' }, { role: 'tool', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
  }
  return cases;
}

// ---------------------------------------------------------------------------------------------
async function selfcheck(modelsDir) {
  const checks = [
    ['meta-llama/Meta-Llama-3-8B-Instruct', 'Hello world', true, [128000, 9906, 1917]],
    ['Qwen/Qwen3-8B', 'a <|im_start|> b', true, [64, 220, 151644, 293]],
    ['meta-llama/Llama-2-7b-hf', 'Hello world!', true, [1, 15043, 3186, 29991]],
    ['meta-llama/Llama-2-7b-hf', 'Hi <s> there', true, null],
    ['meta-llama/Llama-2-7b-hf', 'Hi <s> there', false, null],
    ['google/gemma-3-4b-it', 'Hello world', true, [2, 9259, 1902]],
    ['deepseek-ai/DeepSeek-V3', 'Hello world', true, [0, 19923, 2058]],
    ['deepseek-ai/DeepSeek-V3', 'Hello world', false, [19923, 2058]],
    ['mistralai/Mistral-7B-v0.1', 'Hello', true, [1, 22557]],
  ];
  let bad = 0;
  for (const [model, text, special, expect] of checks) {
    const ref = await loadRef(modelsDir, model);
    const ids = await ref.encode(text, special);
    const ok = expect === null || JSON.stringify(ids) === JSON.stringify(expect);
    if (!ok) bad++;
    console.log(`${ok ? (expect ? 'ok  ' : 'info') : 'FAIL'} ${model} ${JSON.stringify(text)} special=${special} -> ${JSON.stringify(ids)}${ok ? '' : ` expected ${JSON.stringify(expect)}`}`);
  }
  const q = await loadRef(modelsDir, 'Qwen/Qwen3-8B');
  const r = await q.chat({ messages: [{ role: 'system', content: 'You are helpful.' }, { role: 'user', content: 'Hi there! 👋' }] });
  const want = [151644, 8948, 198, 2610, 525, 10950, 13, 151645, 198, 151644, 872, 198, 13048, 1052, 0, 61804, 233, 151645, 198, 151644, 77091, 198];
  const ok = JSON.stringify(r.ids) === JSON.stringify(want);
  if (!ok) bad++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} Qwen3 chat ${JSON.stringify(r.text)} -> ${JSON.stringify(r.ids)}`);
  for (const m of ['meta-llama/Meta-Llama-3-8B-Instruct', 'Qwen/Qwen3-8B', 'deepseek-ai/DeepSeek-V3', 'google/gemma-3-4b-it']) {
    const ref = await loadRef(modelsDir, m);
    console.log(`info ${m}: class ${ref.tokenizerClass}, content format ${ref.contentFormat}, BOS/EOS rule ${JSON.stringify(ref.bosEosRule)}`);
  }
  return bad;
}

// Chat cases with their template input and the @huggingface/jinja rendering, for jinja2_check.py.
export async function dumpChatCases(modelsDir, models) {
  const out = [];
  for (const model of models) {
    const ref = await loadRef(modelsDir, model);
    if (!ref.hasChatTemplate) continue;
    for (const { name, request } of chatCases(model)) {
      let ctx;
      try { ctx = ref.chatContext(request); } catch { continue; } // rejected before rendering: nothing to compare
      const item = { model, name, template: ctx.template, context: ctx.context, continue_final_message: ctx.continueFinalMessage };
      try { item.expected = ref.renderContext(ctx); } catch (e) { item.expected_error = String(e.message); }
      out.push(item);
    }
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [cmd, modelsDir, outFile] = process.argv.slice(2);
  if (cmd === 'selfcheck' && modelsDir) {
    process.exit((await selfcheck(modelsDir)) ? 1 : 0);
  } else if (cmd === 'dump-chat' && modelsDir && outFile) {
    const { MODEL_NAMES } = await import('../../scripts/models_dir.mjs');
    const cases = await dumpChatCases(modelsDir, MODEL_NAMES);
    fs.writeFileSync(outFile, JSON.stringify(cases));
    console.log(`wrote ${cases.length} chat cases to ${outFile}`);
  } else {
    console.error('usage: node tests/tokenizer/reference.mjs selfcheck MODELS_DIR | dump-chat MODELS_DIR OUT.json');
    process.exit(2);
  }
}
