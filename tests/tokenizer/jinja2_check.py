#!/usr/bin/python3
"""Second template oracle: renders kvgate's chat test cases with real Jinja2, configured the way
transformers 4.x does it (utils/chat_template_utils.py `_compile_jinja_template` and
`render_jinja_template`), and compares with the @huggingface/jinja output of
tests/tokenizer/reference.mjs.

  node tests/tokenizer/reference.mjs dump-chat MODELS_DIR /tmp/cases.json
  /usr/bin/python3 tests/tokenizer/jinja2_check.py /tmp/cases.json

Each case carries the exact template scope (messages after vLLM's request mapping, tools,
documents, add_generation_prompt, special tokens, chat_template_kwargs) and whether
continue_final_message post-processing applies. Exit 0 when every case matches, 1 otherwise,
2 on usage errors, 3 when jinja2 is missing (python3-jinja2).
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # pragma: no cover
    print("jinja2_check: python3-jinja2 is not installed", file=sys.stderr)
    sys.exit(3)


class AssistantTracker(Extension):
    """`{% generation %}...{% endgeneration %}` as a pass-through (transformers tracks indices)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_passthrough"), [], [], body).set_lineno(lineno)

    def _passthrough(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def continue_final(rendered, chat):
    final_message = chat[-1]["content"]
    if isinstance(final_message, (list, tuple)):
        for block in reversed(final_message):
            if "text" in block:
                final_message = block["text"]
                break
        else:
            raise ValueError("continue_final_message: no text in the final message")
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message: final message not in the rendered chat")
    loc = rendered.rindex(final_message.strip())
    if rendered[loc: loc + len(final_message.lstrip())] == final_message:
        return rendered[: loc + len(final_message.lstrip())]
    return rendered[: loc + len(final_message.strip())]


def render(case):
    ctx = dict(case["context"])
    messages = ctx.pop("messages")
    tools = ctx.pop("tools")
    documents = ctx.pop("documents")
    agp = ctx.pop("add_generation_prompt")
    out = compile_template(case["template"]).render(
        messages=messages, tools=tools, documents=documents, add_generation_prompt=agp, **ctx)
    if case["continue_final_message"]:
        out = continue_final(out, messages)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    bad = 0
    for case in cases:
        label = f"{case['model']} / {case['name']}"
        try:
            got, err = render(case), None
        except Exception as e:  # template errors are part of the comparison
            got, err = None, f"{type(e).__name__}: {e}"
        if "expected_error" in case:
            ok = err is not None
            detail = f"Jinja2 rendered {json.dumps(got)[:200]} but @huggingface/jinja failed: {case['expected_error']}"
        elif err is not None:
            ok = False
            detail = f"Jinja2 failed ({err}) but @huggingface/jinja rendered {json.dumps(case['expected'])[:200]}"
        else:
            ok = got == case["expected"]
            if not ok:
                exp = case["expected"]
                i = next((k for k in range(min(len(exp), len(got))) if exp[k] != got[k]), min(len(exp), len(got)))
                detail = (f"first difference at char {i}: jinja2 {json.dumps(got[max(0, i - 30): i + 30])} vs "
                          f"@huggingface/jinja {json.dumps(exp[max(0, i - 30): i + 30])}")
        if not ok:
            bad += 1
            print(f"MISMATCH {label}: {detail}")
    print(f"jinja2_check: {len(cases) - bad}/{len(cases)} cases identical (Jinja2 {jinja2.__version__})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
