"""One CSV row from an h2load report: arm,round,rps,mean_ms,max_ms,cpu_us_per_req,failed[,extra...].

Usage: h2load_row.py H2LOAD_OUTPUT ARM ROUND PROXY_TICKS CLK_TCK [EXTRA_COLUMN...]
(bench/h2_bench.sh, bench/h2_backend_bench.sh)."""
import re
import sys

txt = open(sys.argv[1]).read()
arm, rnd, ticks, hz = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
extra = sys.argv[6:]
m = re.search(r'finished in [\d.]+\w+, ([\d.]+) req/s', txt)
if not m:
    sys.exit(f"h2load output for {arm} round {rnd} unreadable:\n{txt}")
ok = int(re.search(r'(\d+) succeeded', txt).group(1))
failed = int(re.search(r'(\d+) failed', txt).group(1))


def ms(v):
    x = float(re.match(r'[\d.]+', v).group(0))
    return x / 1000 if v.endswith('us') else x * 1000 if v.endswith('s') and not v.endswith('ms') else x


line = re.search(r'time for request:\s+(\S+)\s+(\S+)\s+(\S+)', txt)
print(",".join([arm, rnd, f"{float(m.group(1)):.0f}", f"{ms(line.group(3)):.3f}", f"{ms(line.group(2)):.3f}",
                f"{ticks * 1e6 / hz / max(ok, 1):.2f}", str(failed)] + extra))
