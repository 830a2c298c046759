#!/usr/bin/python3
"""Independent stand-ins for a vLLM prefill/decode (P/D) pair with the NixlConnector, written from
shared/reference/engines.md section 4 (and section 8 for the OpenAI response and SSE shapes), not
from kvgate's C++. Standard library only (Debian's /usr/bin/python3).

  pd_vllm_standin.py --host 127.0.0.1 --prefill-port N --decode-port N   (0 = pick a free port)
                     [--sse-delay-ms 5] [--max-seconds 0] [--verbose]

Two HTTP/1.1 servers in one process: a *prefill* worker and a *decode* worker. Once both listen it
prints one JSON line {"event":"ready","prefill_port":P,"decode_port":D} on stdout.

Both serve POST /v1/completions and POST /v1/chat/completions, GET /health (200), GET /v1/models and
GET /legs. /legs answers {"prefill":[...],"decode":[...],"violations":[...]}: the shared record (the
last 1000 of each) of every inference request either server received, with its global `seq`, the
path, the X-Request-Id header, the parsed JSON body, and for prefill legs the kv_transfer_params the
stand-in answered with. `GET /legs?since=S` lists only entries with seq > S; `DELETE /legs` clears.

Prefill (section 4, items 1-3). Every leg is checked: "stream" false, "max_tokens" 1,
"max_completion_tokens" 1 when present, no "stream_options", "min_tokens" or
"min_completion_tokens", "kv_transfer_params" exactly
{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,
 "remote_block_ids":null,"remote_host":null,"remote_port":null}, an X-Request-Id header. Each
mismatch becomes a violation. The answer is a non-streamed completion / chat.completion finished by
"length" with a top-level kv_transfer_params (do_remote_prefill true, block ids, engine id, the
X-Request-Id as remote_request_id, host, port, tp_size, and opaque extras a proxy must pass on
untouched). Markers in the prompt (completions "prompt", or the last chat message's content):
  EOS-NOW      finish_reason "stop" and "kv_transfer_params": null (prefill did not end by length)
  EOS-ABSENT   as EOS-NOW, but without any kv_transfer_params key
  FAIL-PREFILL HTTP 503 {"error":{"message":...,"type":"ServiceUnavailableError","code":503}}

Decode (section 4, item 4). The leg must carry the X-Request-Id of an earlier, answered prefill leg
(the same id on both legs, item 1) not yet decoded, its kv_transfer_params must equal exactly what
that prefill leg was answered with (no kv_transfer_params key at all when prefill answered null or
none), and the prefill leg's body must be this body with the item 2 changes applied (so stream,
max_tokens, min_tokens, stream_options stay the client's on decode). Each mismatch becomes a
violation. It then answers as vLLM does: "stream": true gives text/event-stream "data: {chunk}\\n\\n"
events ending "data: [DONE]\\n\\n" (chunked transfer encoding, one HTTP chunk per event; the
include_usage chunk of section 8 when stream_options.include_usage), otherwise one JSON completion
whose text starts with "decoded".
"""
import argparse
import collections
import json
import os
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEEP = 1000
PREFILL_KV_PARAMS = {  # section 4 item 2, exactly
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
INFERENCE_PATHS = ("/v1/completions", "/v1/chat/completions")
MISSING = object()


def strict_equal(a, b):
    """JSON equality that keeps types apart (True is not 1, 5600.0 is not 5600)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return a == b


def expected_prefill_body(body):
    """The prefill leg a section-4 proxy makes of the client body `body` (item 2)."""
    out = dict(body)
    out.pop("kv_transfer_params", None)
    out["stream"] = False
    out["max_tokens"] = 1
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    for k in ("stream_options", "min_tokens", "min_completion_tokens"):
        out.pop(k, None)
    out["kv_transfer_params"] = dict(PREFILL_KV_PARAMS)
    return out


def prompt_text(path, body):
    """The text the markers are looked for in: completions prompt, or the last chat message."""
    if path == "/v1/completions":
        p = body.get("prompt")
        if isinstance(p, str):
            return p
        if isinstance(p, list):
            return " ".join(x for x in p if isinstance(x, str))
        return ""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
        return ""
    c = msgs[-1].get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return " ".join(x.get("text", "") for x in c if isinstance(x, dict) and isinstance(x.get("text"), str))
    return ""


def prompt_tokens(path, body):
    if path == "/v1/completions":
        p = body.get("prompt")
        if isinstance(p, list) and p and all(isinstance(x, int) for x in p):
            return len(p)
    return max(1, len(prompt_text(path, body).split()) + (8 if path == "/v1/chat/completions" else 0))


class Record:
    """The shared record of both servers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seq = 0
        self.engine_n = 0
        self.prefill = collections.deque(maxlen=KEEP)
        self.decode = collections.deque(maxlen=KEEP)
        self.violations = collections.deque(maxlen=KEEP)

    def next_seq(self):  # with self.lock held
        self.seq += 1
        return self.seq

    def violate(self, server, path, xrid, message):  # with self.lock held
        self.violations.append({"seq": self.next_seq(), "server": server, "path": path,
                                "x_request_id": xrid, "message": message})
        sys.stderr.write("pd_vllm_standin: violation (%s %s %r): %s\n" % (server, path, xrid, message))

    def snapshot(self, since=0):
        with self.lock:
            pick = lambda q: [x for x in q if x["seq"] > since]  # noqa: E731
            return {"prefill": pick(self.prefill), "decode": pick(self.decode),
                    "violations": pick(self.violations)}

    def clear(self):
        with self.lock:
            self.prefill.clear()
            self.decode.clear()
            self.violations.clear()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vllm-pd-standin/1"

    # ---- plumbing

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("pd_vllm_standin %s: %s\n" % (self.server.role, fmt % args))

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return data
                data += self.rfile.read(size)
                self.rfile.readline(65537)  # the CRLF after the chunk
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_json(self, status, obj):
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events):
        """`events`: JSON objects, then [DONE]. One HTTP chunk per event, flushed, 0-chunk at the end
        (HTTP/1.0 peers get the same bytes unchunked and Connection: close)."""
        chunked = self.request_version != "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        payloads = ["data: " + json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n\n" for e in events]
        payloads.append("data: [DONE]\n\n")
        try:
            for i, p in enumerate(payloads):
                b = p.encode("utf-8")
                self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b) if chunked else b)
                self.wfile.flush()
                if i + 1 < len(payloads) and self.server.sse_delay > 0:
                    time.sleep(self.server.sse_delay)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def error_json(self, status, message, typ):
        self.send_json(status, {"error": {"message": message, "type": typ, "param": None, "code": status}})

    # ---- routes

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif url.path == "/legs":
            q = urllib.parse.parse_qs(url.query)
            try:
                since = int(q.get("since", ["0"])[0])
            except ValueError:
                return self.error_json(400, "since must be an integer", "BadRequestError")
            self.send_json(200, self.server.record.snapshot(since))
        elif url.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "standin-model", "object": "model",
                                                            "created": 0, "owned_by": "vllm"}]})
        else:
            self.error_json(404, "no route GET %s" % url.path, "NotFoundError")

    def do_DELETE(self):
        if urllib.parse.urlsplit(self.path).path == "/legs":
            self.server.record.clear()
            self.send_json(200, {"cleared": True})
        else:
            self.error_json(404, "no route DELETE %s" % self.path, "NotFoundError")

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        raw = self.read_body()
        if path not in INFERENCE_PATHS:
            return self.error_json(404, "no route POST %s" % path, "NotFoundError")
        xrid = self.headers.get("X-Request-Id")
        rec = self.server.record
        try:
            body = json.loads(raw.decode("utf-8"))
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as e:
            with rec.lock:
                rec.violate(self.server.role, path, xrid, "body is not a JSON object: %s" % e)
            return self.error_json(400, "body is not a JSON object", "BadRequestError")
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.server.role == "prefill":
            self.prefill(path, xrid, body, headers)
        else:
            self.decode(path, xrid, body, headers)

    # ---- prefill worker

    def prefill(self, path, xrid, body, headers):
        rec = self.server.record
        text = prompt_text(path, body)
        with rec.lock:
            leg = {"seq": rec.next_seq(), "path": path, "x_request_id": xrid, "headers": headers,
                   "body": body, "status": None, "kv_transfer_params": None,
                   "kv_transfer_params_present": False, "answered": False, "decoded": False}
            rec.prefill.append(leg)
            bad = lambda m: rec.violate("prefill", path, xrid, m)  # noqa: E731
            if not xrid:
                bad("prefill leg without an X-Request-Id header")
            if body.get("stream", MISSING) is not False:
                bad("prefill leg must have \"stream\": false (got %s)" % json.dumps(body.get("stream", "<absent>")))
            if not strict_equal(body.get("max_tokens", MISSING), 1):
                bad("prefill leg must have \"max_tokens\": 1 (got %s)" % json.dumps(body.get("max_tokens", "<absent>")))
            if "max_completion_tokens" in body and not strict_equal(body["max_completion_tokens"], 1):
                bad("prefill leg must have \"max_completion_tokens\": 1 when present (got %s)"
                    % json.dumps(body["max_completion_tokens"]))
            for k in ("stream_options", "min_tokens", "min_completion_tokens"):
                if k in body:
                    bad("prefill leg must not carry %r (got %s)" % (k, json.dumps(body[k])))
            if "kv_transfer_params" not in body:
                bad("prefill leg without kv_transfer_params")
            elif not strict_equal(body["kv_transfer_params"], PREFILL_KV_PARAMS):
                bad("prefill leg kv_transfer_params %s != %s"
                    % (json.dumps(body["kv_transfer_params"]), json.dumps(PREFILL_KV_PARAMS)))
            rec.engine_n += 1
            engine_n = rec.engine_n

        if "FAIL-PREFILL" in text:
            with rec.lock:
                leg["status"] = 503
                leg["answered"] = True
            return self.error_json(503, "prefill worker unavailable (stand-in FAIL-PREFILL)", "ServiceUnavailableError")

        ntok = prompt_tokens(path, body)
        eos = "EOS-NOW" in text or "EOS-ABSENT" in text
        params = None
        if not eos:
            params = {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_block_ids": [1, 2, 3],
                "remote_engine_id": "standin-engine-%d" % engine_n,
                "remote_request_id": xrid or "",
                "remote_host": "127.0.0.1",
                "remote_port": 5600,
                "tp_size": 1,
                # opaque extras: a proxy passes them on byte-for-value, whatever they are
                "remote_num_tokens": ntok,
                "transfer_mode": "read",
                "remote_blocks_expiry_time": 480.25,
                "nested": {"a": [1, {"b": None}], "s": "quote\" and \\u00e9", "u": "caf\u00e9 \U0001F600",
                           "big": 18446744073709551557, "neg": -3, "f": False, "e": {}, "l": []},
            }
        rid = xrid or "standin-%d" % engine_n
        resp = self.completion_json(path, body, rid, "prefill", ["P"], "stop" if eos else "length", ntok)
        if "EOS-ABSENT" not in text:
            resp["kv_transfer_params"] = params
        with rec.lock:
            leg["status"] = 200
            leg["kv_transfer_params"] = params
            leg["kv_transfer_params_present"] = "kv_transfer_params" in resp
            leg["answered"] = True  # before the bytes go out: a decode leg may follow at once
        self.send_json(200, resp)

    # ---- decode worker

    def decode(self, path, xrid, body, headers):
        rec = self.server.record
        with rec.lock:
            leg = {"seq": rec.next_seq(), "path": path, "x_request_id": xrid, "headers": headers,
                   "body": body, "prefill_seq": None}
            rec.decode.append(leg)
            bad = lambda m: rec.violate("decode", path, xrid, m)  # noqa: E731
            if not xrid:
                bad("decode leg without an X-Request-Id header")
            same = [p for p in rec.prefill if xrid and p["x_request_id"] == xrid]
            open_ = [p for p in same if not p["decoded"]]
            if not same:
                bad("decode leg with no prefill leg of the same X-Request-Id")
            elif not open_:
                bad("a second decode leg for the X-Request-Id of prefill leg %d" % same[-1]["seq"])
            else:
                p = open_[-1]
                p["decoded"] = True
                leg["prefill_seq"] = p["seq"]
                if not p["answered"]:
                    bad("decode leg before prefill leg %d was answered" % p["seq"])
                elif p["status"] != 200:
                    bad("decode leg after prefill leg %d failed with %s" % (p["seq"], p["status"]))
                elif p["kv_transfer_params"] is None:
                    if "kv_transfer_params" in body:
                        bad("prefill answered no kv_transfer_params, decode leg must have none (got %s)"
                            % json.dumps(body["kv_transfer_params"]))
                elif "kv_transfer_params" not in body:
                    bad("decode leg without the kv_transfer_params prefill answered")
                elif not strict_equal(body["kv_transfer_params"], p["kv_transfer_params"]):
                    bad("decode leg kv_transfer_params %s != prefill's answer %s"
                        % (json.dumps(body["kv_transfer_params"]), json.dumps(p["kv_transfer_params"])))
                if p["path"] != path:
                    bad("decode leg path %s != prefill leg path %s" % (path, p["path"]))
                exp = expected_prefill_body(body)
                if not strict_equal(p["body"], exp):
                    keys = sorted(k for k in set(exp) | set(p["body"])
                                  if not strict_equal(exp.get(k, MISSING), p["body"].get(k, MISSING)))
                    bad("prefill leg %d body is not this decode body with the section-4 item-2 changes"
                        " (differs in %s)" % (p["seq"], ", ".join(keys)))

        rid = xrid or "standin-decode-%d" % leg["seq"]
        ntok = prompt_tokens(path, body)
        limit = body.get("max_completion_tokens", body.get("max_tokens", 16))
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            limit = 16
        words = ["decoded", " by", " the", " decode", " stand-in"]
        out = words[:limit]
        finish = "length" if limit < len(words) else "stop"
        if body.get("stream") is True:
            return self.send_sse(self.stream_events(path, body, rid, out, finish, ntok))
        resp = self.completion_json(path, body, rid, "decode", out, finish, ntok)
        resp["kv_transfer_params"] = None  # vLLM's response model always has the field
        self.send_json(200, resp)

    # ---- response shapes (section 8, OpenAI)

    @staticmethod
    def usage(ntok, ncomp):
        return {"prompt_tokens": ntok, "total_tokens": ntok + ncomp, "completion_tokens": ncomp,
                "prompt_tokens_details": None}

    def completion_json(self, path, body, rid, who, words, finish, ntok):
        model = body.get("model", "standin-model")
        text = "".join(words)
        if path == "/v1/completions":
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                      "prompt_logprobs": None}
            return {"id": "cmpl-%s" % rid, "object": "text_completion", "created": int(time.time()),
                    "model": model, "choices": [choice], "usage": self.usage(ntok, len(words)),
                    "system_fingerprint": None, "service_tier": None}
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                          "tool_calls": [], "reasoning_content": None},
                  "logprobs": None, "finish_reason": finish, "stop_reason": None}
        return {"id": "chatcmpl-%s" % rid, "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [choice], "usage": self.usage(ntok, len(words)),
                "prompt_logprobs": None, "service_tier": None, "system_fingerprint": None}

    def stream_events(self, path, body, rid, words, finish, ntok):
        model = body.get("model", "standin-model")
        created = int(time.time())
        so = body.get("stream_options")
        include_usage = isinstance(so, dict) and so.get("include_usage") is True
        chat = path == "/v1/chat/completions"
        base = {"id": ("chatcmpl-%s" if chat else "cmpl-%s") % rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created, "model": model}
        events = []

        def chunk(choice):
            e = dict(base)
            e["choices"] = [choice]
            if include_usage:
                e["usage"] = None
            events.append(e)

        if chat:
            chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})
        for i, w in enumerate(words):
            last = i + 1 == len(words)
            if chat:
                chunk({"index": 0, "delta": {"content": w}, "logprobs": None,
                       "finish_reason": finish if last else None})
            else:
                chunk({"index": 0, "text": w, "logprobs": None, "finish_reason": finish if last else None,
                       "stop_reason": None})
        if include_usage:
            e = dict(base)
            e["choices"] = []
            e["usage"] = self.usage(ntok, len(words))
            events.append(e)
        return events


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--prefill-port", type=int, default=0)
    ap.add_argument("--decode-port", type=int, default=0)
    ap.add_argument("--sse-delay-ms", type=float, default=5, help="pause between SSE events")
    ap.add_argument("--max-seconds", type=float, default=0, help="exit after this long (0 = never)")
    ap.add_argument("--verbose", action="store_true", help="log every request on stderr")
    a = ap.parse_args()

    record = Record()
    servers = []
    for role, port in (("prefill", a.prefill_port), ("decode", a.decode_port)):
        s = Server((a.host, port), Handler)
        s.role = role
        s.record = record
        s.verbose = a.verbose
        s.sse_delay = a.sse_delay_ms / 1000.0
        servers.append(s)
    for s in servers:
        threading.Thread(target=s.serve_forever, name=s.role, daemon=True).start()
    print(json.dumps({"event": "ready", "prefill_port": servers[0].server_address[1],
                      "decode_port": servers[1].server_address[1]}, separators=(",", ":")), flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    ppid = os.getppid()
    end = time.monotonic() + a.max_seconds if a.max_seconds > 0 else None
    # Ends with its parent too (a test runner killed hard must not leave the ports taken).
    while not done.wait(0.5):
        if ppid != 1 and os.getppid() != ppid:
            break
        if end is not None and time.monotonic() >= end:
            break
    for s in servers:
        s.shutdown()
        s.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
