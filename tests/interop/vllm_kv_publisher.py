#!/usr/bin/python3
"""An independent vLLM KV-event publisher, written from shared/reference/engines.md (sections 1.3,
1.5, 2.2-2.4), not from kvgate's C++: Debian's python3-zmq, python3-msgpack and python3-cbor2.

It plays one vLLM worker with --prefix-caching-hash-algo sha256_cbor and a random PYTHONHASHSEED:
NONE_HASH = sha256(cbor(seed string)); block i hashes cbor([parent digest, [tokens], None]) with
sha256, the parent being the previous block's full digest; the published hash is the digest's last
8 bytes read big-endian (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1). Every batch is the three ZMQ
frames [topic, seq (8 bytes big-endian), msgpack [ts, [events], dp_rank]] with events as maps
tagged "type" (vLLM after PR #42892).

  vllm_kv_publisher.py --host 127.0.0.1 --port P --first-token T --blocks N [--block-size 16]
                       [--interval-ms 100] [--seconds 60]

Binds a PUB socket, prints {"ready": true, "port": P, "hashes": [...]} on stdout, then publishes
one BlockStored of the N blocks of tokens T, T+1, ... every interval (each batch a new seq; a
mirror treats the repeats as duplicate stores), until the time is up or it is killed.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import cbor2
import msgpack
import zmq


def block_hashes(seed, tokens, block_size):
    parent = hashlib.sha256(cbor2.dumps(seed, canonical=True)).digest()  # NONE_HASH
    out = []
    for i in range(len(tokens) // block_size):
        block = tuple(tokens[i * block_size:(i + 1) * block_size])
        digest = hashlib.sha256(cbor2.dumps((parent, block, None), canonical=True)).digest()
        out.append(int.from_bytes(digest, "big") & (2**64 - 1))
        parent = digest
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--first-token", type=int, default=0)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--topic", default="")
    a = ap.parse_args()

    seed = os.urandom(16).hex()  # a random PYTHONHASHSEED, as an unseeded deployment
    tokens = list(range(a.first_token, a.first_token + a.blocks * a.block_size))
    hashes = block_hashes(seed, tokens, a.block_size)
    stored = {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": None,
        "token_ids": tokens,
        "block_size": a.block_size,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
    }
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://%s:%d" % (a.host, a.port))
    print(json.dumps({"ready": True, "port": a.port, "hashes": [str(h) for h in hashes]}), flush=True)
    seq = 0
    end = time.time() + a.seconds
    while time.time() < end:
        payload = msgpack.packb([time.time(), [stored], 0], use_bin_type=True)
        pub.send_multipart([a.topic.encode(), seq.to_bytes(8, "big"), payload])
        seq += 1
        time.sleep(a.interval_ms / 1000.0)
    pub.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
