#!/usr/bin/python3
"""Compact Markdown tables of a `kvgate bench fleet` result: one row per arm, one column per
offered load, for TTFT p90, the prefix-cache hit rate and output tokens/s (the figures
docs/benchmarks.md compares). Usage: fleet_pivot.py RESULT.json [OUT.md] (stdout without OUT).
Peer policies are marked as re-implementations, as in every table of the report."""
import json
import sys

PEERS = {"sglang", "sglang-cli", "lmetric", "dynamo", "llm-d"}


def pivot(doc, title, key, fmt):
    qps = sorted({s["qps"] for a in doc["arms"] for s in a["steps"]})
    lines = [f"| {title} | " + " | ".join(f"{q:g}/s" for q in qps) + " |",
             "|---|" + "---|" * len(qps)]
    for arm in doc["arms"]:
        name = arm["arm"] + (" (re-impl.)" if arm["arm"] in PEERS else "")
        by = {}
        for s in arm["steps"]:
            if s["qps"] in by:
                print(f"fleet_pivot: {arm['arm']} ran {s['qps']:g}/s twice: showing the last",
                      file=sys.stderr)
            by[s["qps"]] = s
        cells = [fmt(by[q][key]) if q in by and by[q].get("ok", 1) else "" for q in qps]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: fleet_pivot.py RESULT.json [OUT.md]")
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    out = "\n".join([
        pivot(doc, "TTFT p90 ms", "ttft_p90_ms", lambda v: f"{v:.1f}"),
        pivot(doc, "hit rate", "hit_rate", lambda v: f"{100 * v:.1f}%"),
        pivot(doc, "output tok/s", "output_tok_s", lambda v: f"{v:.0f}"),
    ])
    if len(sys.argv) == 3:
        with open(sys.argv[2], "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
