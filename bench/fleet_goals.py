#!/usr/bin/python3
"""Issue 29's goal table from `kvgate bench fleet --out` results, seeds pooled.

usage: bench/fleet_goals.py [--default ARM] [--resamples N] RESULT.json...

Results of one workload and ladder, one file per seed (or per run), are grouped by workload,
workload parameters, fleet (workers, P/D, KV size, speed-up, simulator arguments) and requests per
step; at each rung only the arms run in every file the default was run in, without errors, are
compared. For each rung and arm the measured requests' TTFTs (`ttft_ms`) of every file are pooled
and their p90 taken; the default law's p90 is divided by the best other arm's, and a 95 %
bootstrap interval of that ratio is drawn (2,000 resamples by default) by resampling each file's
requests with replacement, in pairs (one draw of request indices for both arms: every arm replays
the same seeded requests in the same order) when both arms answered the same number in every file.
The resampling is seeded by the group, rung and arm: the same files print the same table, whatever
else is on the command line. The best other arm is chosen by its point figure before the interval
is drawn, which leans the ratio up a little. If a file at a rung has no `ttft_ms` (results before
2026-12-07), every arm there gets the mean of its files' p90s and the ratio no interval.

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
    resamples = 2000
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
        fleet = dict(d.get("fleet", {}))
        key = (d["workload"], json.dumps(d.get("workload_params", {}), sort_keys=True),
               json.dumps(fleet, sort_keys=True), d.get("requests_per_step"))
        groups[key].append((f, d))
    for key, runs in groups.items():
        workload, fleet = key[0], json.loads(key[2])
        pd = fleet.get("pd_prefill_workers", 0)
        seeds = sorted(d.get("seed") for _, d in runs)
        print(f"## {workload}{' P/D ' + str(pd) + ' prefill' if pd else ''}: "
              f"{len(runs)} file(s), seeds {seeds}")
        # steps[qps][arm] = {file: (samples or None, p90, hit_rate, errors)}
        steps = defaultdict(lambda: defaultdict(dict))
        for f, d in runs:
            for a in d["arms"]:
                for s in a["steps"]:
                    steps[s["qps"]][a["arm"]][f] = (s.get("ttft_ms"), s["ttft_p90_ms"],
                                                    s.get("hit_rate", 0.0), s.get("errors", 0))
        for qps in sorted(steps):
            if default not in steps[qps]:
                continue
            # Only arms run in every file the default was (side by side, the same seeds), and
            # without errors (a failed request has no TTFT: its arm's p90 would flatter it).
            files_d = set(steps[qps][default])
            arms = {a: xs for a, xs in steps[qps].items() if set(xs) == files_d}
            failed = sorted(a for a, xs in arms.items() if any(x[3] for x in xs.values()))
            arms = {a: xs for a, xs in arms.items() if a not in failed}
            if default not in arms:
                print(f"  {qps:g}/s the default had errors: not compared")
                continue
            sampled = all(x[0] for xs in arms.values() for x in xs.values())
            rung_seeds = [d.get("seed") for f, d in runs if f in files_d]
            twice = len(set(rung_seeds)) != len(rung_seeds)

            def p90(arm, pick=None):
                xs = arms[arm]
                if not sampled:
                    return sum(x[1] for x in xs.values()) / len(xs)
                if pick is None:
                    return percentile([t for x in xs.values() for t in x[0]], 90)
                return percentile([xs[f][0][i] for f in sorted(xs) for i in pick[f]], 90)

            point = {a: p90(a) for a in arms}
            others = [a for a in arms if a != default and point[a] > 0]
            if not others or point[default] <= 0:
                continue
            best = min(others, key=point.get)
            line = f"  {qps:g}/s default {point[default]:.1f} ms; best other {best} " \
                   f"{point[best]:.1f} ({point[default] / point[best]:.2f}x"
            if sampled and resamples > 0:
                # Every arm replays the same seeded requests in the same order, so requests are
                # resampled in pairs (one index draw for both arms) when the two have the same
                # count in every file; else each arm independently.
                rng = random.Random(f"{key}|{qps}|{best}")
                paired = all(len(arms[default][f][0]) == len(arms[best][f][0]) for f in files_d)
                ratios = []
                for _ in range(resamples):
                    def draw(arm):
                        return {f: [rng.randrange(len(x[0])) for _ in x[0]]
                                for f, x in arms[arm].items()}
                    pick = draw(default)
                    b = p90(best, pick if paired else draw(best))
                    ratios.append(p90(default, pick) / b if b > 0 else float("inf"))
                line += f", 95 % {percentile(ratios, 2.5):.2f}-{percentile(ratios, 97.5):.2f}" \
                        f"{' paired' if paired else ''}"
            line += ")"
            peers = [a for a in others if a in PEERS]
            if peers:
                bp = min(peers, key=point.get)
                line += f"; best peer {bp} {point[bp]:.1f} ({point[default] / point[bp]:.2f}x)"
            if "rr" in point and point["rr"] > 0:
                line += f"; rr {point['rr']:.1f} ({point[default] / point['rr']:.2f}x)"
            if "oracle" in arms:
                h = sum(x[2] for x in arms[default].values()) / len(arms[default])
                o = sum(x[2] for x in arms["oracle"].values()) / len(arms["oracle"])
                line += f"; hit {h:.3f} / oracle {o:.3f} = {h / o:.2f}" if o > 0 else ""
            if failed:
                line += f"; left out (errors): {', '.join(failed)}"
            if twice:
                line += "; a seed run twice here: its runs replay the same requests, pooled as " \
                        "if independent"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
