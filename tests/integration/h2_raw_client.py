#!/usr/bin/python3
"""A raw HTTP/2 client (python3-h2, an implementation independent of libnghttp2) for the
gateway's hostile-input tests. Prints one JSON object with what the server did.

usage: h2_raw_client.py CMD PORT [ARG]
  streams N       open N request streams (HEADERS, no END_STREAM) before reading anything
  garbage         the preface, then bytes that are no valid frame
  rapid-reset N   N complete requests each reset at once, then one normal request
  slow            one request whose body never ends (HEADERS only)
  host-mismatch   a GET whose host field differs from its :authority
  trailers        a POST whose trailers carry x-api-key (a key-checked rule must still say 401)
  sse-garbage     a long SSE stream, then a malformed frame once its first event arrived
  body N          one POST with an N-byte body
  continuation N  one HEADERS without END_HEADERS, then N CONTINUATION frames of padding fields
                  (CVE-2024-28182's shape)
  settings-flood N / ping-flood N
                  N empty SETTINGS (or N PINGs) sent without reading the answers
  zero-window N   SETTINGS_INITIAL_WINDOW_SIZE 0, then a streamed request whose DATA can never
                  be sent; holds N seconds reading only frames that need no window
"""
import json
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack

CMD, PORT = sys.argv[1], int(sys.argv[2])
ARG = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else 0
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 3}).encode()


def headers(method="POST", path="/v1/chat/completions", extra=()):
    return [(":method", method), (":scheme", "http"), (":authority", f"127.0.0.1:{PORT}"),
            (":path", path), ("content-type", "application/json"), *extra]


sock = socket.create_connection(("127.0.0.1", PORT))
sock.settimeout(15)
# (outbound checks off: the gateway, not this client, must refuse what is malformed)
cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                validate_outbound_headers=False)
conn = h2.connection.H2Connection(config=cfg)
conn.initiate_connection()
out = {"status": {}, "resets": {}, "goaway": None, "bodies": {}, "ended": []}


def pump(until, deadline_s=15.0):
    """Reads and handles events until until() is true, the peer closes, or the deadline."""
    end = time.monotonic() + deadline_s
    sock.sendall(conn.data_to_send())
    first = True
    while (first or not until()) and (first or time.monotonic() < end):
        first = False
        if deadline_s == 0:  # a poll: only what already arrived
            sock.setblocking(False)
        try:
            data = sock.recv(65536)
        except (socket.timeout, BlockingIOError):
            break
        finally:
            sock.settimeout(15)
        if not data:
            out["closed"] = True
            break
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            out["client_error"] = str(e)
            break
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                out["status"][ev.stream_id] = dict(ev.headers)[":status"]
            elif isinstance(ev, h2.events.DataReceived):
                out["bodies"][ev.stream_id] = out["bodies"].get(ev.stream_id, "") + \
                    ev.data.decode("utf-8", "replace")
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                out["ended"].append(ev.stream_id)
            elif isinstance(ev, h2.events.StreamReset):
                out["resets"][ev.stream_id] = int(ev.error_code)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                out["goaway"] = int(ev.error_code)
        sock.sendall(conn.data_to_send())


def frame(typ, flags, stream, payload):
    """One raw frame (RFC 9113 §4.1)."""
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + \
        struct.pack(">I", stream & 0x7FFFFFFF) + payload


def send_repeated(piece, count, batch):
    """Sends `piece` `count` times, `batch` at a time, without reading; stops when the peer
    does. Records how many were sent."""
    out["sent_frames"] = 0
    try:
        for i in range(0, count, batch):
            sock.sendall(piece * min(batch, count - i))
            out["sent_frames"] += min(batch, count - i)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        out["send_stopped"] = True


def read_raw(deadline_s):
    """Reads raw frames (no client state machine: answers to frames it never sent) until the
    peer closes or the deadline; records the GOAWAY's code and how many frames came."""
    end = time.monotonic() + deadline_s
    buf = bytearray()
    out["frames_in"] = 0
    while time.monotonic() < end:
        try:
            sock.settimeout(max(0.1, end - time.monotonic()))
            data = sock.recv(1 << 20)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            out["closed"] = True
            break
        if not data:
            out["closed"] = True
            break
        buf += data
        at = 0  # (one pass over what came, then one cut: linear in the bytes read)
        while len(buf) - at >= 9:
            n = int.from_bytes(buf[at:at + 3], "big")
            if len(buf) - at < 9 + n:
                break
            if buf[at + 3] == 7 and n >= 8:  # GOAWAY: last stream id, then the error code
                out["goaway"] = int.from_bytes(buf[at + 13:at + 17], "big")
            out["frames_in"] += 1
            at += 9 + n
        del buf[:at]


if CMD == "streams":
    ids = []
    for _ in range(ARG):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers())
        ids.append(sid)
    pump(lambda: len(out["resets"]) + len(out["status"]) >= ARG, 5)
    out["refused"] = sum(1 for v in out["resets"].values() if v == 7)  # REFUSED_STREAM
elif CMD == "garbage":
    sock.sendall(conn.data_to_send())
    sock.sendall(b"\x00\x00\x04\x99\x00\x00\x00\x00\x01abcd" + b"\xff" * 64)
    pump(lambda: out["goaway"] is not None or out.get("closed"), 5)
elif CMD == "rapid-reset":
    for _ in range(ARG):
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers())
        conn.send_data(sid, BODY, end_stream=True)
        conn.reset_stream(sid, error_code=8)  # CANCEL
        sock.sendall(conn.data_to_send())
    last = conn.get_next_available_stream_id()
    conn.send_headers(last, headers())
    conn.send_data(last, BODY, end_stream=True)
    pump(lambda: last in out["ended"] or last in out["resets"], 30)
    out["last"] = {"status": out["status"].get(last), "ended": last in out["ended"],
                   "body": out["bodies"].get(last, "")[:200]}
    out["status"] = len(out["status"])
    out["bodies"] = len(out["bodies"])
elif CMD == "slow":
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers())
    t0 = time.monotonic()
    pump(lambda: sid in out["status"], 15)
    out["seconds"] = time.monotonic() - t0
elif CMD == "host-mismatch":
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers("GET", "/v1/models", [("host", "other.example")]), end_stream=True)
    pump(lambda: sid in out["ended"] or sid in out["resets"], 10)
elif CMD == "trailers":
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers())
    conn.send_data(sid, BODY)
    conn.send_headers(sid, [("x-api-key", "kvg-trailer-smuggled"), ("authorization", "Bearer x")],
                      end_stream=True)
    pump(lambda: sid in out["ended"] or sid in out["resets"], 10)
elif CMD == "sse-garbage":
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers())
    conn.send_data(sid, json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}],
                                    "max_tokens": 400, "stream": True}).encode(), end_stream=True)
    pump(lambda: sid in out["bodies"], 10)
    sock.sendall(b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00")  # WINDOW_UPDATE 0
    t0 = time.monotonic()
    pump(lambda: out.get("closed"), 10)
    out["close_seconds"] = time.monotonic() - t0
    out["bodies"] = {k: len(v) for k, v in out["bodies"].items()}
elif CMD == "body":
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers())
    sent = 0
    chunk = b"x" * 16384
    # Send what the windows allow; a refusal stops the upload.
    while sent < ARG and sid not in out["status"] and sid not in out["resets"]:
        room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size, ARG - sent)
        if room > 0:
            try:
                conn.send_data(sid, chunk[:room] if room <= len(chunk) else b"x" * room)
            except h2.exceptions.StreamClosedError:
                break
            sent += room
            sock.sendall(conn.data_to_send())
            pump(lambda: True, 0)  # (what the server said so far: a refusal stops the upload)
        else:
            pump(lambda: conn.local_flow_control_window(sid) > 0 or sid in out["status"], 5)
            if conn.local_flow_control_window(sid) == 0 and sid not in out["status"]:
                break
    if sid not in out["status"] and sid not in out["resets"]:
        try:
            conn.end_stream(sid)
        except h2.exceptions.ProtocolError:
            pass
    pump(lambda: sid in out["ended"] or sid in out["resets"], 15)
    out["sent"] = sent
elif CMD == "continuation":
    sock.sendall(conn.data_to_send())
    sid = conn.get_next_available_stream_id()
    pad = [hpack.NeverIndexedHeaderTuple(f"x-pad-{i}", "a" * 100) for i in range(8)]
    first = frame(1, 0, sid, conn.encoder.encode(headers()))  # HEADERS, no END_HEADERS
    piece = frame(9, 0, sid, conn.encoder.encode(pad))  # CONTINUATION, no END_HEADERS
    try:
        sock.sendall(first)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        out["send_stopped"] = True
    send_repeated(piece, ARG, 64)
    read_raw(20)
elif CMD in ("settings-flood", "ping-flood"):
    sock.sendall(conn.data_to_send())
    one = frame(4, 0, 0, b"") if CMD == "settings-flood" else frame(6, 0, 0, b"12345678")
    send_repeated(one, ARG, 1000)
    read_raw(20)
elif CMD == "zero-window":
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, headers())
    conn.send_data(sid, json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}],
                                    "max_tokens": 2000, "stream": True}).encode(), end_stream=True)
    t0 = time.monotonic()
    pump(lambda: sid in out["resets"] or out.get("closed"), ARG)
    out["seconds"] = time.monotonic() - t0
    out["bodies"] = {k: len(v) for k, v in out["bodies"].items()}
print(json.dumps(out))
sock.close()
