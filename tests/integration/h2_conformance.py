#!/usr/bin/python3
"""RFC 9113 conformance cases for the gateway's HTTP/2 server side (issue 30 §2), in the manner of
h2spec: each case opens its own connection, sends the frames the case names byte by byte (no
HTTP/2 library state machine: most cases are violations no library would send), and checks what
the server did against what RFC 9113 requires. Header blocks are encoded with python3-hpack.

usage: h2_conformance.py PORT [CASE... | malformed | others]
Prints one JSON object: {"cases": [{"id", "section", "expect", "got", "ok"}...]}.

Expectations:
  conn:CODE     a connection error: GOAWAY with that error code (the connection then closes)
  stream:CODE   a stream error: RST_STREAM with that code on the stream (a connection error with
                the same code is accepted too, as RFC 9113 allows an endpoint to escalate)
  malformed     a malformed request (RFC 9113 §8.1.1): RST_STREAM PROTOCOL_ERROR, or an HTTP
                response of 4xx before the stream ends (allowed by §8.1.1); never a 2xx
  ping-ack      the connection lives: a PING sent after the case is acknowledged
  settings-ack  the server acknowledged the case's SETTINGS
  response      an HTTP response (any :status) on the case's stream
  ignored       the frames are dropped, nothing answers them, and the connection lives (a PING
                sent after them is acknowledged)

Where the gateway departs from the RFC's words (the server side's framing is libnghttp2's):
  stream-id-lower  a HEADERS on a stream id below one already used is ignored, not a connection
                   error: libnghttp2 cannot tell such a stream from one it closed and forgot
                   (a late trailer after its RST_STREAM), so it drops the block; the request is
                   never opened nor forwarded.
  preface-invalid  RFC 9113 §3.4 lets the server omit GOAWAY for an invalid preface: the
                   connection is closed.
"""
import json
import socket
import struct
import sys
import time

import hpack

PORT = int(sys.argv[1])
ONLY = set(sys.argv[2:])
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
CODES = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
         4: "SETTINGS_TIMEOUT", 5: "STREAM_CLOSED", 6: "FRAME_SIZE_ERROR", 7: "REFUSED_STREAM",
         8: "CANCEL", 9: "COMPRESSION_ERROR", 10: "CONNECT_ERROR", 11: "ENHANCE_YOUR_CALM",
         12: "INADEQUATE_SECURITY", 13: "HTTP_1_1_REQUIRED"}


def frame(ftype, flags, stream, payload=b"", length=None):
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + struct.pack(">BBI", ftype, flags, stream) + payload


def settings(*pairs, flags=0, stream=0):
    return frame(SETTINGS, flags, stream, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def block(extra=(), method="POST", path="/v1/chat/completions", order=None):
    fields = order if order is not None else [
        (":method", method), (":scheme", "http"), (":authority", f"127.0.0.1:{PORT}"),
        (":path", path), ("content-type", "application/json"), *extra]
    return hpack.Encoder().encode(fields)


BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 2}).encode()


def request(stream=1, extra=(), order=None, end=False, body=None):
    """HEADERS (END_HEADERS), then the body in one DATA frame with END_STREAM when given."""
    out = frame(HEADERS, END_HEADERS | (END_STREAM if end and body is None else 0), stream,
                block(extra, order=order))
    if body is not None:
        out += frame(DATA, END_STREAM, stream, body)
    return out


class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
        self.buf = b""
        self.closed = False
        self.frames = []  # (type, flags, stream, payload) received

    def send(self, data):
        try:
            self.s.sendall(data)
        except OSError:
            self.closed = True

    def read(self, until, seconds=4.0):
        """Reads frames until until(frame) is true for one of them, the peer closes, or time."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                ftype, flags, sid = self.buf[3], self.buf[4], \
                    int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
                f = (ftype, flags, sid, self.buf[9:9 + n])
                self.buf = self.buf[9 + n:]
                self.frames.append(f)
                if until(f):
                    return f
            if self.closed:
                return None
            self.s.settimeout(max(0.05, end - time.monotonic()))
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                return None
            except OSError:
                self.closed = True
                return None
            if not data:
                self.closed = True
                continue
            self.buf += data
        return None

    def handshake(self):
        """The preface and an empty SETTINGS; waits for the server's SETTINGS and ACKs it."""
        self.send(PREFACE + settings())
        f = self.read(lambda f: f[0] == SETTINGS and not f[1] & ACK)
        if f is None:
            raise RuntimeError("no SETTINGS from the server")
        self.send(settings(flags=ACK))


def outcome(c, stream):
    """What the server did after the case's frames: the first decisive event."""
    decisive = c.read(lambda f: f[0] in (GOAWAY, RST_STREAM) or
                      (f[0] == HEADERS and f[2] == stream))
    if decisive is None:
        return "closed" if c.closed else "nothing"
    ftype, flags, sid, payload = decisive
    if ftype == GOAWAY:
        return "conn:" + CODES.get(int.from_bytes(payload[4:8], "big"), "?")
    if ftype == RST_STREAM:
        return f"stream{sid}:" + CODES.get(int.from_bytes(payload[:4], "big"), "?")
    fields = hpack.Decoder().decode(payload if not flags & PADDED else payload[1:])
    status = dict((k.decode() if isinstance(k, bytes) else k, v) for k, v in fields).get(":status")
    return f"status:{status.decode() if isinstance(status, bytes) else status}"


def judge(expect, got, stream):
    if expect.startswith("conn:"):
        return got == expect
    if expect.startswith("stream:"):
        code = expect.split(":")[1]
        return got in (f"stream{stream}:{code}", f"conn:{code}")
    if expect == "malformed":
        return got in (f"stream{stream}:PROTOCOL_ERROR", "conn:PROTOCOL_ERROR") or (
            got.startswith("status:4"))
    if expect == "response":
        return got.startswith("status:")
    return False


def ping_case(c, frames):
    """Sends `frames`, then a PING: the connection must answer it (the frames were ignored)."""
    c.send(frames + frame(PING, 0, 0, b"kvgate!!"))
    f = c.read(lambda f: f[0] in (PING, GOAWAY) and (f[0] == GOAWAY or f[1] & ACK))
    if f is None:
        return "closed" if c.closed else "nothing"
    if f[0] == GOAWAY:
        return "conn:" + CODES.get(int.from_bytes(f[3][4:8], "big"), "?")
    return "ping-ack" if f[3] == b"kvgate!!" else "ping-ack-wrong-payload"


MAX = (1 << 31) - 1
# (id, RFC 9113 section, expectation, frames after the handshake, or a function of the
# connection returning what happened, and the stream it concerns)
CASES = [
    # §3.4, §4: framing
    ("preface-invalid", "3.4", "closed", None, 0),
    ("unknown-frame-type", "4.1", "ping-ack", frame(0x20, 0, 0, b"\x00" * 8), 0),
    ("unknown-flags-ping", "4.1", "ping-ack", b"", 0),
    ("frame-over-max-size", "4.2", "conn:FRAME_SIZE_ERROR",
     frame(HEADERS, END_HEADERS, 1, block() + b"\x00" * 16400), 1),
    # §5.1: stream states
    ("data-on-idle-stream", "5.1", "conn:PROTOCOL_ERROR", frame(DATA, 0, 1, b"x"), 1),
    ("even-stream-id", "5.1.1", "conn:PROTOCOL_ERROR", request(stream=2), 2),
    ("stream-id-lower", "5.1.1", "ignored", request(stream=5) + request(stream=3), 3),
    ("data-after-end-stream", "5.1", "stream:STREAM_CLOSED",
     request(stream=1, body=BODY) + frame(DATA, 0, 1, b"more"), 1),
    # §6.1-6.4
    ("data-stream-0", "6.1", "conn:PROTOCOL_ERROR", frame(DATA, 0, 0, b"x"), 0),
    ("headers-stream-0", "6.2", "conn:PROTOCOL_ERROR",
     frame(HEADERS, END_HEADERS | END_STREAM, 0, block()), 0),
    ("priority-bad-length", "6.3", "stream:FRAME_SIZE_ERROR",
     frame(PRIORITY, 0, 1, b"\x00\x00\x00\x00"), 1),
    ("rst-stream-0", "6.4", "conn:PROTOCOL_ERROR", frame(RST_STREAM, 0, 0, b"\x00\x00\x00\x08"), 0),
    ("rst-idle-stream", "6.4", "conn:PROTOCOL_ERROR",
     frame(RST_STREAM, 0, 1, b"\x00\x00\x00\x08"), 1),
    ("rst-bad-length", "6.4", "conn:FRAME_SIZE_ERROR",
     request(stream=1) + frame(RST_STREAM, 0, 1, b"\x00\x00\x08"), 1),
    # §6.5 SETTINGS
    ("settings-ack-with-payload", "6.5", "conn:FRAME_SIZE_ERROR",
     frame(SETTINGS, ACK, 0, b"\x00\x01\x00\x00\x10\x00"), 0),
    ("settings-on-stream", "6.5", "conn:PROTOCOL_ERROR", settings((1, 4096), stream=1), 0),
    ("settings-bad-length", "6.5", "conn:FRAME_SIZE_ERROR", frame(SETTINGS, 0, 0, b"\x00" * 5), 0),
    ("settings-enable-push-2", "6.5.2", "conn:PROTOCOL_ERROR", settings((2, 2)), 0),
    ("settings-window-too-large", "6.5.2", "conn:FLOW_CONTROL_ERROR", settings((4, MAX + 1)), 0),
    ("settings-frame-size-too-small", "6.5.2", "conn:PROTOCOL_ERROR", settings((5, 16383)), 0),
    ("settings-unknown-ignored", "6.5.2", "settings-ack", settings((0xFF, 1)), 0),
    # §6.7 PING, §6.8 GOAWAY
    ("ping-on-stream", "6.7", "conn:PROTOCOL_ERROR", frame(PING, 0, 1, b"\x00" * 8), 0),
    ("ping-bad-length", "6.7", "conn:FRAME_SIZE_ERROR", frame(PING, 0, 0, b"\x00" * 7), 0),
    ("goaway-on-stream", "6.8", "conn:PROTOCOL_ERROR",
     frame(GOAWAY, 0, 1, b"\x00" * 8), 0),
    # §6.9 WINDOW_UPDATE
    ("window-update-zero-conn", "6.9", "conn:PROTOCOL_ERROR",
     frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00"), 0),
    ("window-update-zero-stream", "6.9", "stream:PROTOCOL_ERROR",
     request(stream=1) + frame(WINDOW_UPDATE, 0, 1, b"\x00\x00\x00\x00"), 1),
    ("window-update-bad-length", "6.9", "conn:FRAME_SIZE_ERROR",
     frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01"), 0),
    ("window-overflow-conn", "6.9.1", "conn:FLOW_CONTROL_ERROR",
     frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX)), 0),
    ("window-overflow-stream", "6.9.1", "stream:FLOW_CONTROL_ERROR",
     request(stream=1) + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", MAX)), 1),
    # §6.10 CONTINUATION
    ("continuation-without-headers", "6.10", "conn:PROTOCOL_ERROR",
     frame(CONTINUATION, END_HEADERS, 1, block()), 1),
    ("headers-interrupted", "6.10", "conn:PROTOCOL_ERROR",
     frame(HEADERS, 0, 1, block()) + frame(DATA, 0, 1, b"x"), 1),
    # §4.3 HPACK
    # a dynamic table size update to 65,536, over the 4,096 the gateway's SETTINGS allow
    ("hpack-table-size-over-limit", "4.3", "conn:COMPRESSION_ERROR",
     frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x3f\xe1\xff\x03" + block()), 1),
    ("hpack-bad-index", "4.3", "conn:COMPRESSION_ERROR",
     frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\xff\xff\xff\xff\x0f"), 1),
    # §8.1-8.3 malformed requests: never forwarded
    ("uppercase-field-name", "8.2.1", "malformed", request(extra=[("X-Upper", "1")], end=True), 1),
    ("pseudo-after-regular", "8.3", "malformed", request(order=[
        (":method", "GET"), (":scheme", "http"), ("x-a", "1"), (":path", "/v1/models"),
        (":authority", f"127.0.0.1:{PORT}")], end=True), 1),
    ("unknown-pseudo", "8.3", "malformed", request(extra=[(":foo", "1")], end=True), 1),
    ("response-pseudo-in-request", "8.3", "malformed",
     request(extra=[(":status", "200")], end=True), 1),
    ("missing-method", "8.3.1", "malformed", request(order=[
        (":scheme", "http"), (":path", "/v1/models"), (":authority", f"127.0.0.1:{PORT}")],
        end=True), 1),
    ("missing-path", "8.3.1", "malformed", request(order=[
        (":method", "GET"), (":scheme", "http"), (":authority", f"127.0.0.1:{PORT}")],
        end=True), 1),
    ("empty-path", "8.3.1", "malformed", request(order=[
        (":method", "GET"), (":scheme", "http"), (":path", ""),
        (":authority", f"127.0.0.1:{PORT}")], end=True), 1),
    ("duplicate-path", "8.3.1", "malformed", request(order=[
        (":method", "GET"), (":scheme", "http"), (":path", "/v1/models"), (":path", "/x"),
        (":authority", f"127.0.0.1:{PORT}")], end=True), 1),
    ("connection-header", "8.2.2", "malformed",
     request(extra=[("connection", "keep-alive")], end=True), 1),
    ("te-not-trailers", "8.2.2", "malformed", request(extra=[("te", "gzip")], end=True), 1),
    ("content-length-mismatch", "8.1.1", "malformed",
     request(extra=[("content-length", "5")], body=BODY), 1),
    # smuggling toward an HTTP/1.1 engine (RFC 9113 §8.2.1, §8.2.2): never forwarded
    ("transfer-encoding", "8.2.2", "malformed",
     request(extra=[("transfer-encoding", "chunked")], body=BODY), 1),
    ("content-length-and-te", "8.2.2", "malformed",
     request(extra=[("content-length", str(len(BODY))), ("transfer-encoding", "chunked")],
             body=BODY), 1),
    # (with a valid body: forwarded, these would be answered 200, not refused for another reason)
    ("crlf-in-value", "8.2.1", "malformed",
     request(extra=[("x-a", "1\r\nx-injected: 2")], body=BODY), 1),
    ("nul-in-value", "8.2.1", "malformed", request(extra=[("x-a", "1\x002")], body=BODY), 1),
    ("space-in-name", "8.2.1", "malformed", request(extra=[("x a", "1")], body=BODY), 1),
    ("colon-in-name", "8.2.1", "malformed", request(extra=[("x:a", "1")], body=BODY), 1),
    ("trailers-with-pseudo", "8.1", "malformed",
     request(stream=1) + frame(DATA, 0, 1, BODY) +
     frame(HEADERS, END_HEADERS | END_STREAM, 1, hpack.Encoder().encode([(":path", "/x")])), 1),
    # and a request that is fine: answered
    ("valid-request", "8.1", "response", request(stream=1, body=BODY), 1),
]


def run(case):
    cid, section, expect, frames, stream = case
    c = Conn()
    try:
        if cid == "preface-invalid":
            c.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + settings())
            c.read(lambda f: False)  # (whatever comes, until the close)
            got = "closed" if c.closed else "open"
        else:
            c.handshake()
            if cid == "unknown-flags-ping":
                c.send(frame(PING, 0xF6, 0, b"kvgate!!"))  # unknown flags, no ACK bit
                f = c.read(lambda f: f[0] == PING and f[1] & ACK)
                got = "ping-ack" if f and f[3] == b"kvgate!!" else "no-ack"
            elif expect == "ping-ack":
                got = ping_case(c, frames)
            elif expect == "ignored":
                got = ping_case(c, frames)
                if got == "ping-ack":
                    c.read(lambda f: f[0] == HEADERS and f[2] == stream, 1.0)
                    answered = any(f[0] in (HEADERS, RST_STREAM) and f[2] == stream
                                   for f in c.frames)
                    got = "answered" if answered else "ignored"
            elif expect == "settings-ack":
                c.send(frames)
                f = c.read(lambda f: (f[0] == SETTINGS and f[1] & ACK) or f[0] == GOAWAY)
                got = "settings-ack" if f and f[0] == SETTINGS else (
                    "conn:" + CODES.get(int.from_bytes(f[3][4:8], "big"), "?") if f else "nothing")
            else:
                c.send(frames)
                got = outcome(c, stream)
        ok = got == expect if expect in ("ping-ack", "settings-ack", "ignored", "closed") else \
            judge(expect, got, stream)
        return {"id": cid, "section": section, "expect": expect, "got": got, "ok": ok}
    finally:
        c.s.close()


if ONLY == {"malformed"}:  # the malformed requests only (the caller checks none reached an engine)
    ONLY = {c[0] for c in CASES if c[2] == "malformed"}
elif ONLY == {"others"}:
    ONLY = {c[0] for c in CASES if c[2] != "malformed"}
results = [run(c) for c in CASES if not ONLY or c[0] in ONLY]
print(json.dumps({"cases": results}))
