#!/usr/bin/python3
"""Issue 29's goal table from `kvgate bench fleet --out` results, seeds pooled.

usage: bench/fleet_goals.py [--default ARM] [--resamples N] RESULT.json...

Results of one workload and ladder, one file per seed (or per run), are grouped by workload,
workload parameters and P/D shape; at each rung only the arms run in every file the default was
run in are compared. For each rung and arm the measured requests' TTFTs
(`ttft_ms`) of every file are pooled and their p90 taken; the default law's p90 is divided by
each other arm's, and a 95 % bootstrap interval of that ratio is drawn by resampling every file's
requests with replacement (stratified by file, seeded: the same inputs print the same table).
A file without `ttft_ms` (results before 2026-12-07) contributes the mean of its p90s only; the
ratio then has no interval.

Printed per rung: the default's pooled p90, the best other arm and the ratio to it (with its
interval), the best peer's, round-robin's, and the default's hit rate over the oracle's (means
over files). The goals (docs/benchmarks.md): the default <= 1.05x the best arm at every rung,
never above round-robin; near saturation >= 1.2x better than the best peer on two shapes; hit
rate >= 95 % of the oracle's.
"""
import json
import random
import sys
from collections import defaultdict

PEERS = {"lmetric", "llm-d-sticky", "smg", "dynamo-v1", "dynamo", "llm-d", "sglang", "sglang-cli"}


def percentile(v, p):
    """NumPy's linear method, as src/bench/fleet/stats.cc."""
    if not v:
        return 0.0
    v = sorted(v)
    r = p / 100 * (len(v) - 1)
    lo = int(r)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (r - lo) * (v[hi] - v[lo])


def main(argv):
    default = "kv-predict-q"
    resamples = 1000
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "--default":
            default = argv[i + 1]
            i += 2
        elif argv[i] == "--resamples":
            resamples = int(argv[i + 1])
            i += 2
        else:
            files.append(argv[i])
            i += 1
    groups = defaultdict(list)
    for f in files:
        d = json.load(open(f))
        key = (d["workload"], json.dumps(d.get("workload_params", {}), sort_keys=True),
               d.get("fleet", {}).get("pd_prefill_workers", 0))
        groups[key].append((f, d))
    rng = random.Random(1)
    for (workload, params, pd), runs in groups.items():
        print(f"## {workload}{' P/D ' + str(pd) + ' prefill' if pd else ''}: "
              f"{len(runs)} file(s), seeds {sorted(d.get('seed') for _, d in runs)}")
        # steps[qps][arm] = list of (samples or None, p90, hit_rate), one per file
        steps = defaultdict(lambda: defaultdict(list))
        for _, d in runs:
            for a in d["arms"]:
                for s in a["steps"]:
                    steps[s["qps"]][a["arm"]].append(
                        (s.get("ttft_ms"), s["ttft_p90_ms"], s.get("hit_rate", 0.0)))
        for qps in sorted(steps):
            if default not in steps[qps]:
                continue
            # Only arms run in every file the default was (side by side, the same seeds).
            n = len(steps[qps][default])
            arms = {a: xs for a, xs in steps[qps].items() if len(xs) == n}
            sampled = all(x[0] is not None for xs in arms.values() for x in xs)

            def p90(arm):
                xs = arms[arm]
                if sampled:
                    return percentile([t for x in xs for t in x[0]], 90)
                return sum(x[1] for x in xs) / len(xs)

            point = {a: p90(a) for a in arms}
            others = [a for a in arms if a != default]
            if not others:
                continue
            best = min(others, key=point.get)
            line = f"  {qps:g}/s default {point[default]:.1f} ms; best other {best} " \
                   f"{point[best]:.1f} ({point[default] / point[best]:.2f}x"
            if sampled and resamples > 0:
                ratios = []
                for _ in range(resamples):
                    def boot(arm):
                        pool = []
                        for x in arms[arm]:
                            pool += [x[0][rng.randrange(len(x[0]))] for _ in x[0]]
                        return percentile(pool, 90)
                    b = boot(best)
                    ratios.append(boot(default) / b if b > 0 else float("inf"))
                line += f", 95 % {percentile(ratios, 2.5):.2f}-{percentile(ratios, 97.5):.2f}"
            line += ")"
            peers = [a for a in others if a in PEERS]
            if peers:
                bp = min(peers, key=point.get)
                line += f"; best peer {bp} {point[bp]:.1f} ({point[default] / point[bp]:.2f}x)"
            if "rr" in point:
                line += f"; rr {point['rr']:.1f} ({point[default] / point['rr']:.2f}x)"
            if "oracle" in arms:
                h = sum(x[2] for x in arms[default]) / len(arms[default])
                o = sum(x[2] for x in arms["oracle"]) / len(arms["oracle"])
                line += f"; hit {h:.3f} / oracle {o:.3f} = {h / o:.2f}" if o > 0 else ""
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
