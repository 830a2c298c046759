#!/usr/bin/python3
"""Summarises bench/proxy_bench.sh results: per-round ratios to nginx and their medians."""
import csv
import statistics
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
by = defaultdict(dict)
for r in rows:
    by[r['arm']][int(r['round'])] = r
rounds = sorted(by['nginx'])

print('### Throughput (64 connections, ~200-byte JSON POST, ~300-byte JSON response)\n')
print('| round | direct rps | kvgate rps | nginx rps | haproxy rps | kvgate/nginx | haproxy/nginx |')
print('|---|---|---|---|---|---|---|')
ratios, hratios = [], []
for n in rounds:
    g = lambda a: float(by[a][n]['rps'])
    ratio = g('kvgate') / g('nginx'); hr = g('haproxy') / g('nginx')
    ratios.append(ratio); hratios.append(hr)
    print(f"| {n} | {g('direct'):.0f} | {g('kvgate'):.0f} | {g('nginx'):.0f} | {g('haproxy'):.0f} | {ratio:.3f} | {hr:.3f} |")
print(f"\n**median kvgate/nginx requests/s: {statistics.median(ratios):.3f}** "
      f"(haproxy/nginx {statistics.median(hratios):.3f})\n")

print('| arm | p50 us (median of rounds) | p99 us (median) | proxy CPU us/request (median) |')
print('|---|---|---|---|')
for a in ['direct', 'kvgate', 'nginx', 'haproxy']:
    med = lambda k: statistics.median(float(by[a][n][k]) for n in rounds)
    cpu = med('cpu_us_per_req')
    print(f"| {a} | {med('p50_us'):.0f} | {med('p99_us'):.0f} | {cpu:.2f} |" if a != 'direct' else
          f"| {a} | {med('p50_us'):.0f} | {med('p99_us'):.0f} | n/a |")

for suffix, title in (('-c1', 'split layout: proxy on CPU 0, wrk and upstream on CPU 1'),
                      ('-c1same', 'same-core layout: everything on CPU 1')):
    if 'direct' + suffix not in by:
        continue
    print(f'\n### Latency at one connection, {title} (added over direct)\n')
    print('| arm | p50 us | p99 us | added p50 us | added p99 us |')
    print('|---|---|---|---|---|')
    rr = sorted(by['direct' + suffix])
    med = lambda a, k: statistics.median(float(by[a][n][k]) for n in rr)
    d50, d99 = med('direct' + suffix, 'p50_us'), med('direct' + suffix, 'p99_us')
    for a in ['direct', 'kvgate', 'nginx']:
        p50, p99 = med(a + suffix, 'p50_us'), med(a + suffix, 'p99_us')
        print(f"| {a} | {p50:.0f} | {p99:.0f} | {p50 - d50:+.0f} | {p99 - d99:+.0f} |")
