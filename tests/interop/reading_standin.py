#!/usr/bin/python3
"""An engine stand-in that reads a request the way the Python engines do (vLLM, SGLang and
TensorRT-LLM serve through uvicorn + Starlette + pydantic), written from those libraries' documented
behaviour, not from kvgate's C++. Standard library only (Debian's /usr/bin/python3).

  reading_standin.py [--host 127.0.0.1] [--port 0]

Prints one JSON line {"event":"ready","port":P} once it listens. Every request is answered 200 with
the JSON {"path": P, "target": T, "model": M, "host": H} where
  T is the request target as received,
  P is what Starlette routes on: uvicorn's scope["path"], urllib.parse.unquote of the target's path
    (every escape decoded, dot segments and repeated slashes kept),
  M is the body's "model" as Python's json.loads reads it (duplicate keys: the last one wins; lone
    surrogate escapes accepted), or null when the body is not a JSON object,
  H is the Host header.
GET /seen lists every request received so far (the same objects); DELETE /seen clears the list.
"""
import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

SEEN = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, obj, status=200):
        body = json.dumps(obj, ensure_ascii=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/seen":
            with LOCK:
                if self.command == "DELETE":
                    SEEN.clear()
                    return self._answer([])
                return self._answer(list(SEEN))
        model = None
        try:
            body = json.loads(raw) if raw else None
            if isinstance(body, dict):
                model = body.get("model")
        except ValueError:
            pass
        # surrogates cannot be encoded as UTF-8: report them escaped (ensure_ascii above)
        entry = {"path": unquote(self.path.split("?", 1)[0]), "target": self.path,
                 "model": model, "host": self.headers.get("Host")}
        with LOCK:
            SEEN.append(entry)
        self._answer(entry)

    do_GET = do_POST = do_DELETE = do_PUT = _handle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    print(json.dumps({"event": "ready", "port": srv.server_address[1]}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
