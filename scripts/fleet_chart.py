#!/usr/bin/python3
"""Draws one fleet-benchmark result (kvgate bench fleet --out FILE) as a PNG: TTFT p90 and
output throughput against offered QPS, one line per arm. Usage: fleet_chart.py RESULT.json OUT.png
Needs Debian's python3-matplotlib (/usr/bin/python3)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    fig, (ttft, tput) = plt.subplots(1, 2, figsize=(12, 4.6))
    # Baselines dotted, kvgate's arms solid, the oracles black and grey, the re-implemented peers
    # dashed.
    peers = {"sglang", "sglang-cli", "lmetric", "dynamo", "llm-d"}
    baselines = {"random", "rr", "lc", "chwbl"}
    colors = plt.get_cmap("tab20").colors
    for i, arm in enumerate(doc["arms"]):
        name = arm["arm"]
        style = dict(marker="o", markersize=4, color=colors[i % len(colors)], label=name)
        if name in peers:
            style.update(linestyle="--", label=name + " (re-impl.)")
        elif name in baselines:
            style.update(linestyle=":")
        elif name == "oracle":
            style.update(color="black", linewidth=2)
        elif name.startswith("oracle-"):
            style.update(color="dimgray", linewidth=2)
        qps = [s["qps"] for s in arm["steps"]]
        ttft.plot(qps, [max(s["ttft_p90_ms"], 1e-3) for s in arm["steps"]], **style)
        tput.plot(qps, [s["output_tok_s"] for s in arm["steps"]], **style)
    ttft.set_xlabel("offered load (requests/s)")
    ttft.set_ylabel("TTFT p90 (ms, log)")
    ttft.set_yscale("log")
    tput.set_xlabel("offered load (requests/s)")
    tput.set_ylabel("output tokens/s")
    for ax in (ttft, tput):
        ax.grid(True, alpha=0.3)
    tput.legend(fontsize=7, ncol=2)
    fleet = doc.get("fleet", {})
    fig.suptitle(
        "%s: %s workers, %s blocks x %s tokens each, speedup %s (kvgate bench fleet)"
        % (doc["workload"], fleet.get("workers"), fleet.get("num_blocks_per_worker"),
           fleet.get("block_size"), fleet.get("speedup")),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
