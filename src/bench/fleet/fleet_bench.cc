// `kvgate bench fleet`: routing policies compared side by side on one simulated (or real) fleet,
// over a ladder of open-loop Poisson loads (issue 11; docs/benchmarks.md "Fleet benchmark").
//
// The run: start `kvgate sim` (N workers on their own loopback addresses, publishing KV events)
// unless --fleet names real engines, start `kvgate serve`, create one service through the REST
// API, then for each arm: update the rule to that arm (no restart), empty every worker's prefix
// cache (POST /reset_prefix_cache), wait until the gateway follows every publisher again (KV
// arms), and for each QPS of the ladder send --requests streaming completions (token-id prompts
// drawn from the workload, Poisson arrivals, keep-alive connections) and measure each: TTFT,
// inter-token latency, end to end. Between steps the workers' /metrics give the token-weighted
// prefix-cache hit rate, the per-worker load spread and the simulator's timer slip; the gateway's
// CPU time per request comes from /proc. Output: one JSON file of every figure (--out), a
// Markdown table (--md) and, with --chart, a PNG per workload drawn by scripts/fleet_chart.py.
//
// Arms (each a rule setting, so an operator can run any of them in production, but the oracle):
//   random                      the rule's `selector: "random"` (no sel number)
//   rr, lc, chwbl               the rule's selector (sel 0, 4, 8), no Tier 1.5
//   kv-off, kv-hard, kv-soft, kv-adaptive, kv-adaptive-soft
//                               kvExactMode 3 with that kvLbMode (the selection law of seed 000),
//                               round-robin behind it for misses
//   kv-taper, kv-ttft, kv-predict
//                               the same with our extensions (taper: a cap that tightens with
//                               load; ttft: least estimated time to first token; predict, the
//                               default of mode 3 rules: new prefill x batch on hits)
//   kv-LAW-lc (kv-hard-lc, ...) any of these with least connections (sel 4) instead of
//                               round-robin behind Tier 1.5
//   kv-LAW-lcl                  ... with lc_light behind it (least connections while the pool
//                               is lightly loaded, round-robin otherwise)
//   sglang, sglang-cli          re-implementation of SGLang's cache_aware (its two default sets),
//                               the rule's `selector` (approximate trees, no KV events)
//   smg                         SMG's current cache_aware (matched holders behind a load gate,
//                               least expected wait from the engines' /metrics; the same trees)
//   lmetric, dynamo, dynamo-v1, llm-d, llm-d-sticky
//                               re-implementations of LMetric, Dynamo's KV cost (before 1.x, and
//                               1.x's with queued prefill) and llm-d's
//                               older (weighted) and current ("sticky until saturated")
//                               defaults: kvExactMode 3 with that kvLbMode (routing/stages/
//                               selection_law.h), fed by the same KV index
//   profile-llm-d, profile-llm-d-sticky, profile-predict, profile-predict-q
//                               kvExactMode 3 with that built-in scoring profile
//                               (kvScoringProfile, routing/scoring/): the same policies composed
//                               of filters, scorers and a picker
//   oracle                      the bound: this harness applies the same law (hard) to the
//                               simulator's true state at decision time (POST /sim/cache_state:
//                               cached and queued blocks, no event lag or loss) and its own
//                               in-flight counts (round-robin when nobody holds the prompt), and
//                               sends the request straight to the chosen worker
//   oracle-<law>                the same with another law (oracle-ttft: the ttft law, queued
//                               prefill counted from this harness's own requests until their
//                               first byte); the law's LOXILB_KV_* tuning as the gateway reads it
//   hold, hold-sjf, hold-free   an experiment (issue 29: what would late binding at the gateway
//                               buy near saturation?): requests wait in this harness's queue and
//                               are bound to a worker only when it has room, decided here and
//                               sent direct (no gateway); the algorithm and its knobs in
//                               hold_queue.h (hold-free: the same binding, never held)
//   direct-rr                   round-robin decided here, sent direct (the gateway's own effect)
//
// P/D (--pd-prefill N): the first N simulated workers are vLLM prefill engines, the rest decode
// engines (NIXL pull); every arm's rule is a P/D rule (pd_disagg_mode, ep_role 1 and 2), a KV
// arm with kvExactMode 1 and its kvLbMode (Tier 1.5 over the prefill endpoints, then Tier 2's
// min-load), rr with no Tier 1.5 (the ladder's min-load picks the prefill). TTFT is the
// client's (prefill leg, transfer, decode's first token); the hit rate is the prefill workers'
// prefix-cache counters (a decode engine's pulled blocks count as hits there). No oracle or
// harness-decided arm, no selector arm and no arm with another sel (lc, chwbl, kv-LAW-lc): a P/D
// rule's ladder has no selector stage (--quick names some: refused too).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/fleet/child.h"
#include "bench/fleet/hold_queue.h"
#include "bench/fleet/stats.h"
#include "bench/fleet/stream_client.h"
#include "bench/fleet/workload.h"
#include "common/net.h"
#include "config/scoring_profile.h"
#include "http/client.h"
#include "routing/routing_env.h"
#include "routing/stages/kv_exact.h"
#include "routing/stages/selection_law.h"

namespace kvgate::bench::fleet {
namespace {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kUsage = R"(usage: kvgate bench fleet [options]
Compares routing policies on one fleet over a QPS ladder (docs/benchmarks.md, Fleet benchmark).

Workload:
  --workload W        gsp (default), llmd, nosharing, multiround, mooncake or agentic
                      (src/bench/fleet/workload.h)
  --trace FILE        replay a Mooncake-format JSONL trace (the mooncake workload)
  --trace-out FILE    write the mooncake workload's trace (generated or read) as JSONL
  --wl KEY=VALUE      override a workload parameter (repeatable), e.g. --wl output_len=32
  --seed S            seed of prompts, draws and arrivals (default 1)
Load:
  --qps LIST          comma-separated ladder (default 1,2,4,8)
  --requests N        requests per step (default 200)
  --arms LIST         comma-separated arms (default rr,lc,kv-hard,kv-soft); arms: random, rr, lc,
                      chwbl, kv-off, kv-hard, kv-soft, kv-adaptive, kv-adaptive-soft, kv-taper,
                      kv-ttft, kv-predict, kv-predict-q (the default law; each also as kv-LAW-lc:
                      least connections behind it, and kv-LAW-lcl: lc_light behind it), oracle
                      (hard law), oracle-ttft, oracle-predict (that law), hold, hold-sjf,
                      hold-free, direct-rr (decided here, sent direct: hold_queue.h), and
                      re-implementations of peers: sglang, sglang-cli, smg, lmetric, dynamo, dynamo-v1, llm-d
                      (the older weighted profile), llm-d-sticky (llm-d's current default);
                      profile-llm-d, profile-llm-d-sticky, profile-predict, profile-predict-q
                      (built-in scoring profiles, kvScoringProfile)
  --side-arms LIST    more arms, run only at --side-qps
  --side-qps LIST     the side arms' load points (default: the ladder's second and last rungs;
                      the whole ladder when it has two or fewer)
  --quick             the default law, round-robin, hard, the current peers and the oracle
                      (rr,kv-hard,kv-predict-q,lmetric,llm-d-sticky,dynamo-v1,smg,oracle) over
                      the ladder, the other laws and the older peers at two points
  --warmup N          unmeasured requests before each rung's measured ones (default requests/2);
                      every rung starts from empty caches
  --timeout-s S       per-request timeout (default 600)
Fleet (simulated unless --fleet):
  --workers N         simulated workers (default 4)
  --kv-fill F         size each worker's KV so the workload's working set is F x the fleet's
                      capacity (default 0.75; shared workloads only)
  --num-blocks N      KV blocks per worker instead of --kv-fill
  --speedup F         the simulator's time compression (default 1)
  --sim-arg ARG       one more argument for `kvgate sim` (repeatable), e.g. --sim-arg=--profile=70b-tp4-h100
  --fleet LIST        real engines host:port,... instead (their KV events on --kv-port)
  --kv-port P         their KV-event port (with --fleet; default 5557)
  --block-size N      tokens per KV block (default 16)
  --pd-prefill N      P/D: the first N simulated workers prefill, the rest decode (every arm's
                      rule a P/D rule; KV arms with kvExactMode 1); 0 (default) no P/D
  --model NAME        model name sent (default sim-model)
Output:
  --out FILE          every figure as JSON (default build/bench/fleet-<workload>.json)
  --md FILE           a Markdown table
  --chart FILE        a PNG chart (TTFT p90 and throughput against QPS), via /usr/bin/python3
  --work DIR          logs of the child processes (default a fresh /tmp directory)
)";

struct Options {
  std::string workload = "gsp";
  std::map<std::string, double> wl;
  uint64_t seed = 1;
  std::vector<double> qps{1, 2, 4, 8};
  size_t requests = 200;
  std::vector<std::string> arms{"rr", "lc", "kv-hard", "kv-soft"};
  std::vector<std::string> side_arms;  // run only at side_qps
  std::vector<double> side_qps;
  int64_t warmup = -1;  // unmeasured requests before each rung's measured ones (-1: requests/2)
  int timeout_s = 600;
  size_t workers = 4;
  double kv_fill = 0.75;
  size_t num_blocks = 0;
  double speedup = 1;
  std::vector<std::string> sim_args;
  std::vector<std::pair<std::string, uint16_t>> fleet;
  uint16_t kv_port = 5557;
  size_t block_size = 16;
  std::string model = "sim-model";
  std::string out, md, chart, work;
  std::string trace, trace_out;  // a Mooncake JSONL trace to replay; where to write the one used
  size_t pd_prefill = 0;         // P/D: the first N workers prefill, the rest decode (0: no P/D)
};

struct Arm {
  std::string name;
  int sel = 0;
  std::string kv_mode;   // empty: no Tier 1.5
  std::string selector;  // the rule's `selector` field (stages without a sel number)
  bool oracle = false;   // decided here from the simulator's true cache state, sent direct
  routing::LawMode oracle_law = routing::LawMode::kHard;  // the oracle's law
  int hold = 0;  // 1: the hold experiment in arrival order, 2: fewest uncached tokens first
};

std::optional<Arm> armOf(const std::string& name) {
  if (name == "rr") return Arm{name, 0, "", "", false};
  if (name == "lc") return Arm{name, 4, "", "", false};
  if (name == "chwbl") return Arm{name, 8, "", "", false};
  if (name == "random" || name == "sglang" || name == "sglang-cli" || name == "smg")
    return Arm{name, 0, "", name, false};
  if (name == "oracle") return Arm{name, 0, "", "", true};
  if (name == "direct-rr") {  // round-robin decided here, sent direct: the gateway's own cost
    Arm a{name, 0, "", "", true};
    a.hold = 3;
    return a;
  }
  if (name == "hold" || name == "hold-sjf" || name == "hold-free") {
    Arm a{name, 0, "", "", true};
    a.hold = name == "hold" ? 1 : name == "hold-sjf" ? 2 : 4;
    return a;
  }
  if (name.rfind("oracle-", 0) == 0) {
    const auto law = routing::parseLawMode(name.substr(7));
    if (!law || routing::isPeerLaw(*law)) return std::nullopt;
    return Arm{name, 0, "", "", true, *law};
  }
  // kv-LAW: Tier 1.5 with that law, misses (and hard-law spills) to round-robin (sel 0);
  // kv-LAW-lc: the same with least connections (sel 4) placing what Tier 1.5 does not;
  // kv-LAW-lcl: with lc_light (least connections while the pool is lightly loaded, else rr).
  for (const char* m :
       {"off", "hard", "soft", "adaptive", "adaptive-soft", "taper", "ttft", "predict",
        "predict-q"}) {
    if (name == std::string("kv-") + m) return Arm{name, 0, m, "", false};
    if (name == std::string("kv-") + m + "-lc") return Arm{name, 4, m, "", false};
    if (name == std::string("kv-") + m + "-lcl") return Arm{name, 0, m, "lc_light", false};
  }
  // Peer re-implementations that read the KV index: kvExactMode 3 with that kvLbMode.
  for (const char* m : {"lmetric", "dynamo", "dynamo-v1", "llm-d", "llm-d-sticky"})
    if (name == m) return Arm{name, 0, m, "", false};
  // profile-NAME: kvExactMode 3 with the built-in scoring profile NAME (kvScoringProfile).
  if (name.rfind("profile-", 0) == 0)
    for (auto b : config::builtinProfileNames())
      if (name.substr(8) == b) return Arm{name, 0, "profile:" + std::string(b), "", false};
  return std::nullopt;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t e = s.find(sep, start);
    if (e == std::string::npos) e = s.size();
    if (e > start) out.push_back(s.substr(start, e - start));
    start = e + 1;
  }
  return out;
}

bool parse(int argc, char** argv, Options& o, std::string& err) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "-h" || a == "--help") {
      err = "help";
      return false;
    }
    if (a == "--quick") {
      v = "true";
    } else if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      err = a + " needs a value";
      return false;
    }
    auto num = [&](double lo, double hi, double& out) {
      char* end = nullptr;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(x) || x < lo || x > hi) {
        err = "bad value '" + v + "' for " + a;
        return false;
      }
      out = x;
      return true;
    };
    double x = 0;
    if (a == "--workload") {
      o.workload = v;
    } else if (a == "--wl") {
      auto eq = v.find('=');
      if (eq == std::string::npos) {
        err = "--wl takes KEY=VALUE";
        return false;
      }
      std::string key = v.substr(0, eq);
      v = v.substr(eq + 1);
      if (!num(0, 1e7, x)) return false;
      o.wl[key] = x;
    } else if (a == "--seed") {
      if (!num(0, 1e18, x)) return false;
      o.seed = static_cast<uint64_t>(x);
    } else if (a == "--qps" || a == "--side-qps") {
      std::vector<double>& list = a == "--qps" ? o.qps : o.side_qps;
      list.clear();
      const std::string all = v;
      for (const auto& q : split(all, ',')) {
        v = q;
        if (!num(0.001, 100000, x)) return false;
        list.push_back(x);
      }
      if (list.empty()) {
        err = a + " needs at least one value";
        return false;
      }
    } else if (a == "--requests") {
      if (!num(1, 1e6, x)) return false;
      o.requests = static_cast<size_t>(x);
    } else if (a == "--arms" || a == "--side-arms") {
      std::vector<std::string>& list = a == "--arms" ? o.arms : o.side_arms;
      list = split(v, ',');
      for (const auto& name : list)
        if (!armOf(name)) {
          err = "unknown arm " + name;
          return false;
        }
      if (list.empty() && a == "--arms") {
        err = "--arms needs at least one arm";
        return false;
      }
    } else if (a == "--quick") {
      if (v != "true" && v != "1") {
        err = "--quick takes no value";
        return false;
      }
      // Every rung: the default law against round-robin, the seed's law, the peers' current
      // defaults and the oracle (issue 29's goals compare these); the rest at two points.
      o.arms = {"rr",           "kv-hard",   "kv-predict-q", "lmetric",
                "llm-d-sticky", "dynamo-v1", "smg",          "oracle"};
      o.side_arms = {"lc",          "random",           "chwbl",      "kv-soft",
                     "kv-adaptive", "kv-adaptive-soft", "kv-taper",   "kv-ttft",
                     "kv-predict",  "kv-taper-lc",      "kv-soft-lc", "sglang",
                     "sglang-cli",  "dynamo",           "llm-d"};
    } else if (a == "--warmup") {
      if (!num(0, 1e6, x)) return false;
      o.warmup = static_cast<int64_t>(x);
    } else if (a == "--timeout-s") {
      if (!num(1, 86400, x)) return false;
      o.timeout_s = static_cast<int>(x);
    } else if (a == "--workers") {
      if (!num(1, 64, x)) return false;
      o.workers = static_cast<size_t>(x);
    } else if (a == "--kv-fill") {
      if (!num(0.01, 100, o.kv_fill)) return false;
    } else if (a == "--num-blocks") {
      if (!num(1, 1e9, x)) return false;
      o.num_blocks = static_cast<size_t>(x);
    } else if (a == "--speedup") {
      if (!num(0.001, 1000, o.speedup)) return false;
    } else if (a == "--sim-arg") {
      o.sim_args.push_back(v);
    } else if (a == "--fleet") {
      for (const auto& hp : split(v, ',')) {
        auto c = hp.rfind(':');
        uint64_t port = 0;
        if (c == std::string::npos || !net::parseUint(hp.substr(c + 1), 65535, port) ||
            !net::isIpLiteral(hp.substr(0, c))) {
          err = "--fleet takes IP:PORT,...";
          return false;
        }
        o.fleet.emplace_back(hp.substr(0, c), static_cast<uint16_t>(port));
      }
    } else if (a == "--kv-port") {
      if (!num(1, 65535, x)) return false;
      o.kv_port = static_cast<uint16_t>(x);
    } else if (a == "--block-size") {
      if (!num(1, 4096, x)) return false;
      o.block_size = static_cast<size_t>(x);
    } else if (a == "--pd-prefill") {
      if (!num(0, 63, x)) return false;
      o.pd_prefill = static_cast<size_t>(x);
    } else if (a == "--model") {
      o.model = v;
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--md") {
      o.md = v;
    } else if (a == "--chart") {
      o.chart = v;
    } else if (a == "--work") {
      o.work = v;
    } else if (a == "--trace") {
      o.trace = v;
    } else if (a == "--trace-out") {
      o.trace_out = v;
    } else {
      err = "unknown option " + a;
      return false;
    }
  }
  if (o.pd_prefill > 0) {
    if (!o.fleet.empty()) {
      err = "--pd-prefill needs the simulated fleet";
      return false;
    }
    if (o.pd_prefill >= o.workers) {
      err = "--pd-prefill leaves no decode worker (it must be under --workers)";
      return false;
    }
    for (const auto* list : {&o.arms, &o.side_arms})
      for (const auto& name : *list) {
        const Arm arm = *armOf(name);
        // (a P/D ladder has no sel stage: lc, chwbl and kv-LAW-lc would repeat rr and kv-LAW)
        if (arm.oracle || !arm.selector.empty() || arm.sel != 0) {
          err = "arm " + name + " has no P/D form (--pd-prefill)";
          return false;
        }
      }
  }
  return true;
}

uint16_t freePort(const std::string& host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    socklen_t len = sizeof sa;
    getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  close(fd);
  return port;
}

// Calls f(name, labels, value) for every sample of the Prometheus text at url/metrics (labels:
// the raw `{...}` text, empty when none); nothing when the scrape fails.
template <typename F>
void forEachSample(const std::string& url, F f) {
  auto r = http::fetch(url, "GET", "/metrics");
  if (!r || r->status != 200) return;
  size_t pos = 0;
  const std::string& t = r->body;
  while (pos < t.size()) {
    size_t e = t.find('\n', pos);
    if (e == std::string::npos) e = t.size();
    std::string_view line(t.data() + pos, e - pos);
    pos = e + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t v = line.rfind(' ');
    if (name_end == std::string_view::npos || v == std::string_view::npos || v < name_end) continue;
    f(line.substr(0, name_end), line.substr(name_end, v - name_end),
      std::strtod(std::string(line.substr(v + 1)).c_str(), nullptr));
  }
}

// Sums of every sample of each metric name (labels ignored).
std::map<std::string, double> scrape(const std::string& url) {
  std::map<std::string, double> m;
  forEachSample(
      url, [&](std::string_view name, std::string_view, double v) { m[std::string(name)] += v; });
  return m;
}

// P/D (--pd-prefill): worker i is a prefill engine (the first pd_prefill), else a decode engine.
bool prefillWorker(const Options& o, size_t i) { return i < o.pd_prefill; }

// Tier 1.5's decisions in the gateway's /metrics: hits, spills, cold seeds and misses by reason
// (every rule summed: the bench's one service).
struct Tier15 {
  double hits = 0, spills = 0, seeds = 0;
  std::map<std::string, double> misses;  // reason -> count
};
Tier15 tier15(const std::string& api) {
  Tier15 t;
  forEachSample(api, [&](std::string_view name, std::string_view labels, double v) {
    if (name == "loxilb_pd_kv_tier15_hits_total") t.hits += v;
    if (name == "loxilb_pd_kv_tier15_spills_total") t.spills += v;
    if (name == "loxilb_pd_kv_tier15_cold_seeds_total") t.seeds += v;
    if (name != "loxilb_pd_kv_tier15_miss_reason_total") return;
    const size_t k = labels.find("reason=\"");
    const size_t e = k == std::string_view::npos ? k : labels.find('"', k + 8);
    if (e != std::string_view::npos) t.misses[std::string(labels.substr(k + 8, e - k - 8))] += v;
  });
  return t;
}

struct Worker {
  std::string host;
  uint16_t port = 0;
  std::string url() const { return "http://" + host + ":" + std::to_string(port); }
};

struct Run {
  Options o;
  Workload w;
  std::vector<Worker> workers;
  std::string api;  // the gateway's management API URL
  std::string vip = "127.0.0.1";
  uint16_t svc_port = 0;
  uint16_t kv_port = 0;
  Child* gateway = nullptr;
  size_t blocks = 0;  // KV blocks per worker (the oracle's capacity)
  // The gateway's tuning, read from the same environment the gateway child gets.
  routing::RoutingEnv env = [] {
    std::vector<std::string> warnings;
    return routing::readRoutingEnv(std::getenv, warnings);
  }();
  routing::LawParams law_env = [this] {
    routing::LawParams p = env.law;
    p.spill_relief = env.spill_relief.value_or(true);
    return p;
  }();
  // The gateway's cold-start seeding (kv_exact.cc), which the oracle mirrors.
  size_t seed_nth = env.coldstart_seed_nth;
  size_t seed_min_blocks = env.coldstart_min_blocks;
};

// The oracle's running counts over one rung.
struct OracleTally {
  size_t cursor = 0;  // round-robin over prompts nobody holds
  size_t spills = 0, cold = 0, hits = 0, seeds = 0;
};

// The service for `arm`. `generation` names it (fleet-<arm>-<generation>): each rung posts a new
// name, so the gateway builds a fresh pipeline and no stage state (the sglang trees) carries
// over from the rung before.
std::string ruleBody(const Run& r, const Arm& arm, size_t generation) {
  json sa = {{"externalIP", r.vip},
             {"port", r.svc_port},
             {"protocol", "tcp"},
             {"sel", arm.sel},
             {"mode", 4},
             {"sse_mode", true},
             {"name", "fleet-" + arm.name + "-" + std::to_string(generation)}};
  if (!arm.selector.empty()) sa["selector"] = arm.selector;
  const bool pd = r.o.pd_prefill > 0;
  if (pd) {
    sa["pd_disagg_mode"] = true;
    sa["kvEngineType"] = "vllm";
  }
  if (!arm.kv_mode.empty()) {
    sa["kvExactMode"] = pd ? 1 : 3;
    sa["kvZmqPort"] = r.kv_port;
    if (arm.kv_mode.rfind("profile:", 0) == 0)
      sa["kvScoringProfile"] = arm.kv_mode.substr(8);
    else
      sa["kvLbMode"] = arm.kv_mode;
    sa["kvBlockSize"] = r.o.block_size;
  }
  json eps = json::array();
  for (size_t i = 0; i < r.workers.size(); ++i) {
    const auto& w = r.workers[i];
    json ep = {{"endpointIP", w.host}, {"targetPort", w.port}, {"weight", 1}};
    if (pd) ep["ep_role"] = prefillWorker(r.o, i) ? 1 : 2;
    eps.push_back(std::move(ep));
  }
  return json{{"serviceArguments", sa}, {"endpoints", eps}}.dump();
}

// The gateway follows every worker's KV events (loxilb_kv_subscriber_connected per source; a
// P/D rule follows its prefill endpoints').
bool waitSubscribed(const Run& r) {
  const size_t sources = r.o.pd_prefill > 0 ? r.o.pd_prefill : r.workers.size();
  for (int i = 0; i < 300; ++i) {
    auto m = scrape(r.api);
    if (m["loxilb_kv_subscriber_connected"] >= static_cast<double>(sources)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

struct Totals {
  double hits = 0, queries = 0, steps = 0, slip = 0, slip_max = 0, preemptions = 0, gen = 0;
  std::vector<double> requests;  // per worker
};

Totals fleetTotals(const Run& r) {
  Totals t;
  for (size_t i = 0; i < r.workers.size(); ++i) {
    auto m = scrape(r.workers[i].url());
    // P/D: the prefill workers' cache (a decode's pulled blocks count as its hits)
    if (r.o.pd_prefill == 0 || prefillWorker(r.o, i)) {
      t.hits += m["vllm:prefix_cache_hits_total"];
      t.queries += m["vllm:prefix_cache_queries_total"];
    }
    t.steps += m["kvgate_sim_steps_total"];
    t.slip += m["kvgate_sim_timer_slip_seconds_total"];
    t.slip_max = std::max(t.slip_max, m["kvgate_sim_timer_slip_max_seconds"]);
    t.preemptions += m["vllm:num_preemptions_total"];
    t.requests.push_back(m["kvgate_sim_requests_total"] > 0 ? m["kvgate_sim_requests_total"]
                                                            : m["vllm:request_success_total"]);
  }
  return t;
}

// The oracle's decision, mirroring a kvExactMode 3 rule whose fallback is round-robin: the same
// selection law (hard, spill relief) fed with the true state at decision time (POST
// /sim/cache_state: no event lag, no loss): per worker the leading blocks its cache holds, or a
// request queued there shares (it will hold them when that one is admitted), or a request this
// oracle sent there in the last 2 s shares (still on its way); this client's in-flight requests
// per worker (what the gateway counts as load) and the workers' capacity. A prompt nobody holds
// goes round-robin, as Tier 1.5's `no_worker` miss does; every seed_nth decision by the law goes
// to the first worker whose cache holds fewer than seed_min_blocks blocks, as the gateway's
// cold-start seeding does (without it a worker that never got a prompt stays out of the affinity
// set for good once every other worker holds a prefix all prompts share).
// `pending` is the uncached blocks of this client's requests still awaiting a first byte, per
// worker (the ttft law's queued prefill). Returns the worker; `uncached` the pick's uncached
// blocks.
asio::awaitable<size_t> oraclePick(const Run& r, routing::LawMode law, StreamClient& state,
                                   const std::string& body, const std::vector<uint32_t>& tokens,
                                   OracleMemory& mem, const std::vector<uint32_t>& inflight,
                                   const std::vector<uint64_t>& pending, OracleTally& tally,
                                   uint32_t& uncached) {
  const auto now = std::chrono::steady_clock::now();
  StreamResult res = co_await state.post("/sim/cache_state", body, std::chrono::seconds(30), now);
  const std::vector<uint64_t> chain = OracleMemory::chain(tokens, r.o.block_size);
  std::vector<routing::LawCandidate> c(r.workers.size());
  for (size_t i = 0; i < c.size(); ++i) {
    c[i].load = inflight[i];
    c[i].pending_blocks = pending[i];
    c[i].capacity = static_cast<double>(r.blocks);
    c[i].overlap = mem.leading(i, chain, now);
  }
  // Cached blocks per worker; unknown (no answer, an older simulator) counts as warm: no seeding.
  std::vector<size_t> held(c.size(), SIZE_MAX);
  auto j = json::parse(res.body, nullptr, false);
  if (res.ok && j.is_object() && j.contains("workers")) {
    for (const auto& w : j["workers"]) {
      const size_t idx = w.value("worker", size_t{0});
      if (idx >= c.size()) continue;
      c[idx].overlap =
          std::max({c[idx].overlap, w.value("blocks", 0u), w.value("queued_blocks", 0u)});
      held[idx] = w.value("cached_blocks", SIZE_MAX);
    }
  }
  bool any = false;
  for (const auto& x : c) any = any || x.overlap > 0;
  size_t pick = 0;
  uncached = static_cast<uint32_t>(chain.size());
  if (!any) {
    ++tally.cold;
    pick = tally.cursor++ % c.size();
  } else {
    routing::LawParams p = r.law_env;
    p.mode = law;
    p.prompt_blocks = static_cast<uint32_t>(chain.size());
    p.predict_decode_weight_pct = 100;  // (the oracle counts no started streams: all whole)
    const routing::LawResult lr = routing::applyLaw(c, p);
    if (lr.spilled) ++tally.spills;
    pick = lr.index < 0 ? 0 : static_cast<size_t>(lr.index);
    uncached = lr.uncached;
    if (r.seed_nth > 0 && ++tally.hits % r.seed_nth == 0) {
      for (size_t i = 0; i < c.size(); ++i) {
        if (held[i] >= r.seed_min_blocks) continue;
        if (i != pick) {
          pick = i;
          ++tally.seeds;
          uncached =
              static_cast<uint32_t>(chain.size() - std::min<size_t>(c[i].overlap, chain.size()));
        }
        break;
      }
    }
  }
  mem.remember(pick, chain, now);
  co_return pick;
}

std::string requestBody(const Run& r, const Prompt& p) {
  std::string b = "{\"model\":" + json(r.o.model).dump() + ",\"prompt\":[";
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    if (i) b += ',';
    b += std::to_string(p.tokens[i]);
  }
  b += "],\"max_tokens\":" + std::to_string(p.output_len) +
       ",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
       "\"ignore_eos\":true}";
  return b;
}

// One step: --requests prompts at Poisson arrivals of `qps`; returns the step's JSON. Every arm
// gets the same prompts at the same times at a given rung of the ladder (seeded by the rung).
ojson runStep(Run& r, const Arm& arm, double qps, size_t rung) {
  // `warm` unmeasured requests first (the caches were emptied), then the measured ones; one
  // Poisson process (or trace) carries both.
  const size_t warm = r.o.warmup < 0 ? r.o.requests / 2 : static_cast<size_t>(r.o.warmup);
  const size_t n = warm + r.o.requests;
  const uint64_t seed = r.o.seed * 1000003 + rung;
  const auto order = drawOrder(r.w, n, seed);
  // A trace keeps its own arrival pattern, rescaled to this rung's mean rate.
  const auto at = r.w.trace_ms.empty() ? poissonArrivals(n, qps, seed) : traceArrivals(r.w, n, qps);
  std::vector<std::string> bodies;
  bodies.reserve(n);
  for (size_t i = 0; i < n; ++i) bodies.push_back(requestBody(r, r.w.prompts[order[i]]));
  const Totals before = fleetTotals(r);
  const Tier15 t15_before = arm.kv_mode.empty() ? Tier15{} : tier15(r.api);
  const double cpu0 = r.gateway ? r.gateway->cpuSeconds() : -1;

  asio::io_context io;
  StreamClient client(io.get_executor(), r.vip, r.svc_port);
  // The oracle: one client per worker (requests go direct) and one for the true cache state.
  std::vector<std::unique_ptr<StreamClient>> direct;
  std::vector<uint32_t> inflight(r.workers.size(), 0);
  std::vector<uint64_t> pending(r.workers.size(), 0);  // the oracle's queued prefill (ttft law)
  std::unique_ptr<StreamClient> state;
  if (arm.oracle) {
    for (const auto& w : r.workers)
      direct.push_back(std::make_unique<StreamClient>(io.get_executor(), w.host, w.port));
    state = std::make_unique<StreamClient>(io.get_executor(), r.workers[0].host, r.workers[0].port);
  }
  OracleTally tally;
  OracleMemory memory(r.workers.size());
  HoldQueue hold(r.workers.size(), r.o.block_size,
                 arm.hold == 2 ? HoldQueue::Order::kFewestUncached : HoldQueue::Order::kArrival,
                 arm.hold == 4 ? UINT64_MAX : HoldQueue::capFromEnv(), HoldQueue::spillFromEnv());
  size_t done = 0;
  if (arm.hold) {  // spill deadlines pass without an event: look at the queue every 5 ms
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer tick(co_await asio::this_coro::executor);
          while (done < n) {
            tick.expires_after(std::chrono::milliseconds(5));
            error_code ec;
            co_await tick.async_wait(useEc(ec));
            hold.pump(std::chrono::steady_clock::now());
          }
        },
        asio::detached);
  }
  std::vector<StreamResult> results(n);
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_end = t0;  // the last measured completion
  const auto timeout = std::chrono::seconds(r.o.timeout_s);
  for (size_t i = 0; i < n; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          asio::steady_timer tm(co_await asio::this_coro::executor);
          tm.expires_at(t0 + std::chrono::microseconds(static_cast<int64_t>(at[i] * 1000)));
          error_code ec;
          co_await tm.async_wait(useEc(ec));
          const auto scheduled = t0 + std::chrono::microseconds(static_cast<int64_t>(at[i] * 1000));
          if (!arm.oracle) {
            results[i] = co_await client.post("/v1/completions", bodies[i], timeout, scheduled);
          } else if (arm.hold == 3) {
            const size_t w = tally.cursor++ % direct.size();
            results[i] = co_await direct[w]->post("/v1/completions", bodies[i], timeout, scheduled);
          } else if (arm.hold) {
            HoldQueue::Item item;
            item.chain = OracleMemory::chain(r.w.prompts[order[i]].tokens, r.o.block_size);
            asio::steady_timer wake(co_await asio::this_coro::executor);
            wake.expires_at(std::chrono::steady_clock::time_point::max());
            item.on_bound = [&wake] { wake.cancel(); };
            hold.add(item, std::chrono::steady_clock::now());
            while (item.worker == SIZE_MAX) co_await wake.async_wait(useEc(ec));
            const size_t w = item.worker;
            const uint32_t uncached = item.uncached;
            bool queued = true;
            const std::function<void()> first = [&hold, &queued, w, uncached] {
              if (queued) {
                queued = false;
                hold.started(w, uncached, std::chrono::steady_clock::now());
              }
            };
            results[i] =
                co_await direct[w]->post("/v1/completions", bodies[i], timeout, scheduled, &first);
            first();
          } else {
            uint32_t uncached = 0;
            const size_t w = co_await oraclePick(r, arm.oracle_law, *state, bodies[i],
                                                 r.w.prompts[order[i]].tokens, memory, inflight,
                                                 pending, tally, uncached);
            ++inflight[w];
            pending[w] += uncached;
            bool queued = true;  // its prefill counts in pending[w] until the first byte
            const std::function<void()> first = [&pending, &queued, w, uncached] {
              if (queued) pending[w] -= uncached;
              queued = false;
            };
            results[i] =
                co_await direct[w]->post("/v1/completions", bodies[i], timeout, scheduled, &first);
            first();  // no byte came (an error): given back now
            --inflight[w];
          }
          if (i >= warm) t_end = std::max(t_end, std::chrono::steady_clock::now());
          ++done;
        },
        asio::detached);
  }
  io.run();
  // The measured window: from the first measured send to the last measured completion.
  const auto t_first = t0 + std::chrono::microseconds(static_cast<int64_t>(at[warm] * 1000));
  const double wall_s = std::max(0.0, std::chrono::duration<double>(t_end - t_first).count());
  const double cpu1 = r.gateway ? r.gateway->cpuSeconds() : -1;
  const Totals after = fleetTotals(r);
  const Tier15 t15_after = arm.kv_mode.empty() ? Tier15{} : tier15(r.api);

  std::vector<double> ttft, itl, e2e;
  size_t ok = 0, errors = 0;
  double tokens = 0;
  std::map<std::string, size_t> error_kinds;
  double prompt_sum = 0, cached_sum = 0;
  bool usage_seen = true;
  for (size_t i = warm; i < n; ++i) {
    const StreamResult& res = results[i];
    if (!res.ok) {
      ++errors;
      ++error_kinds[res.error.substr(0, 60)];
      continue;
    }
    ++ok;
    ttft.push_back(res.ttft_ms);
    e2e.push_back(res.e2e_ms);
    itl.insert(itl.end(), res.itl_ms.begin(), res.itl_ms.end());
    tokens += res.tokens;
    if (res.prompt_tokens > 0 && res.cached_tokens >= 0) {
      prompt_sum += static_cast<double>(res.prompt_tokens);
      cached_sum += static_cast<double>(res.cached_tokens);
    } else {
      usage_seen = false;
    }
  }
  size_t warm_errors = 0;
  for (size_t i = 0; i < warm; ++i) warm_errors += results[i].ok ? 0 : 1;
  std::vector<double> per_worker;
  for (size_t i = 0; i < after.requests.size(); ++i)
    per_worker.push_back(after.requests[i] - (i < before.requests.size() ? before.requests[i] : 0));
  const double mean_load = mean(per_worker);
  const double max_load =
      per_worker.empty() ? 0 : *std::max_element(per_worker.begin(), per_worker.end());
  const double dq = after.queries - before.queries;
  const double dsteps = after.steps - before.steps;
  ojson s;
  s["qps"] = qps;
  s["requests"] = n - warm;
  s["warmup_requests"] = warm;
  s["ok"] = ok;
  s["errors"] = errors;
  s["warmup_errors"] = warm_errors;
  s["ttft_p50_ms"] = percentile(ttft, 50);
  s["ttft_p90_ms"] = percentile(ttft, 90);
  s["ttft_p99_ms"] = percentile(ttft, 99);
  s["ttft_mean_ms"] = mean(ttft);
  // How far the p90 could move between runs (stats.h), and the measured values themselves (0.1
  // ms), so runs can be pooled or compared offline.
  const Interval ci = bootstrapPercentile(ttft, 90);
  s["ttft_p90_ci95_ms"] = ojson::array({ci.lo, ci.hi});
  ojson samples = ojson::array();
  for (double t : ttft) samples.push_back(std::round(t * 10) / 10);
  s["ttft_ms"] = std::move(samples);
  s["itl_p50_ms"] = percentile(itl, 50);
  s["itl_p99_ms"] = percentile(itl, 99);
  s["e2e_p50_ms"] = percentile(e2e, 50);
  s["e2e_p99_ms"] = percentile(e2e, 99);
  s["output_tok_s"] = wall_s > 0 ? tokens / wall_s : 0;
  s["wall_s"] = wall_s;
  // Token-weighted hit rate of the measured requests, from each answer's usage
  // (prompt_tokens_details.cached_tokens, the worker's own count); when an engine does not
  // report it, the workers' prefix-cache counters over the whole rung (warm-up included).
  const double metrics_hit = dq > 0 ? (after.hits - before.hits) / dq : 0;
  // (P/D: the decode's answer counts the pulled blocks as cached: the prefill workers' counters)
  const bool by_usage = usage_seen && prompt_sum > 0 && r.o.pd_prefill == 0;
  s["hit_rate"] = by_usage ? cached_sum / prompt_sum : metrics_hit;
  s["hit_rate_source"] = by_usage ? "usage" : "metrics";
  s["hit_rate_metrics"] = metrics_hit;
  s["load_per_worker"] = per_worker;                            // warm-up included
  s["load_spread"] = mean_load > 0 ? max_load / mean_load : 0;  // max / mean requests
  s["gateway_cpu_us_per_req"] =
      cpu0 >= 0 && cpu1 >= 0 && n > 0 ? (cpu1 - cpu0) * 1e6 / static_cast<double>(n) : -1;
  s["sim_slip_mean_ms"] = dsteps > 0 ? (after.slip - before.slip) * 1e3 / dsteps : 0;
  s["sim_slip_max_ms_since_start"] = after.slip_max * 1e3;  // the simulator's running maximum
  s["preemptions"] = after.preemptions - before.preemptions;
  s["connections_opened"] = client.connectionsOpened();
  if (!arm.kv_mode.empty()) {  // Tier 1.5 over the whole rung (warm-up included)
    ojson t;
    t["hits"] = t15_after.hits - t15_before.hits;
    t["spills"] = t15_after.spills - t15_before.spills;
    t["cold_seeds"] = t15_after.seeds - t15_before.seeds;
    ojson m = ojson::object();
    for (const auto& [reason, n] : t15_after.misses) {
      const auto it = t15_before.misses.find(reason);
      const double d = n - (it == t15_before.misses.end() ? 0 : it->second);
      if (d > 0) m[reason] = d;
    }
    t["misses"] = m;
    s["tier15"] = t;
  }
  if (arm.oracle) {
    s["gateway_cpu_us_per_req"] = -1;  // the oracle's requests go direct to the workers
    s["oracle_spills"] = tally.spills;
    s["oracle_cold"] = tally.cold;
    s["oracle_cold_seeds"] = tally.seeds;
    if (arm.hold == 1 || arm.hold == 2 || arm.hold == 4) {
      s["hold_cap_tokens"] = hold.capTokens();
      s["hold_spill_ms"] = hold.spill().count();
      s["hold_waited"] = hold.counts().waited;  // bound more than 1 ms after arrival
      s["hold_spills"] = hold.counts().spills;
      s["hold_cold"] = hold.counts().cold;
    }
  }
  if (!error_kinds.empty()) s["error_kinds"] = error_kinds;
  return s;
}

// scripts/fleet_chart.py RESULT OUT with /usr/bin/python3 (no shell: file names are arguments).
bool drawChart(const std::string& result, const std::string& png) {
  std::string py = "/usr/bin/python3", script = "scripts/fleet_chart.py";
  std::string a = result, b = png;
  char* argv[] = {py.data(), script.data(), a.data(), b.data(), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    execv(py.c_str(), argv);
    _exit(127);
  }
  if (pid < 0) return false;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

std::string fmt(double v, int prec = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

std::string markdown(const ojson& doc) {
  std::string md =
      "| arm | qps | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | "
      "output tok/s | hit rate | load max/mean | errors |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  // The peers' policies are re-implementations here, and every table says so.
  static const std::set<std::string> kPeers = {"sglang", "sglang-cli", "smg", "lmetric", "dynamo",
                                               "dynamo-v1", "llm-d", "llm-d-sticky",
                                               "profile-llm-d", "profile-llm-d-sticky"};
  for (const auto& arm : doc["arms"])
    for (const auto& s : arm["steps"])
      md += "| " + arm["arm"].get<std::string>() +
            (kPeers.count(arm["arm"].get<std::string>()) ? " (re-impl.)" : "") + " | " +
            fmt(s["qps"].get<double>(), 2) + " | " + fmt(s["ttft_p50_ms"].get<double>()) + " | " +
            fmt(s["ttft_p90_ms"].get<double>()) + " | " + fmt(s["ttft_p99_ms"].get<double>()) +
            " | " + fmt(s["itl_p50_ms"].get<double>()) + " | " +
            fmt(s["itl_p99_ms"].get<double>()) + " | " + fmt(s["output_tok_s"].get<double>(), 0) +
            " | " + fmt(s["hit_rate"].get<double>() * 100) + "% | " +
            fmt(s["load_spread"].get<double>(), 2) + " | " +
            std::to_string(s["errors"].get<size_t>()) + " |\n";
  return md;
}

}  // namespace

int fleetBench(int argc, char** argv) {
  Run r;
  std::string err;
  if (!parse(argc, argv, r.o, err)) {
    if (err == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "kvgate bench fleet: %s\n%s", err.c_str(), kUsage);
    return 2;
  }
  Options& o = r.o;
  const size_t per_rung =
      o.requests + (o.warmup < 0 ? o.requests / 2 : static_cast<size_t>(o.warmup));
  const size_t total_requests = per_rung * o.qps.size() * (o.arms.size() + o.side_arms.size());
  std::string trace_text;
  if (!o.trace.empty()) {
    std::ifstream f(o.trace);
    if (!f) {
      std::fprintf(stderr, "kvgate bench fleet: cannot read %s\n", o.trace.c_str());
      return 2;
    }
    trace_text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (trace_text.empty()) {
      std::fprintf(stderr, "kvgate bench fleet: %s is empty\n", o.trace.c_str());
      return 2;
    }
    o.workload = "mooncake";
  }
  if (!makeWorkload(o.workload, o.wl, o.seed, total_requests, r.w, err, trace_text)) {
    std::fprintf(stderr, "kvgate bench fleet: %s\n", err.c_str());
    return 2;
  }
  if (o.work.empty()) {
    char tmpl[] = "/tmp/kvgate-fleet.XXXXXX";
    if (!mkdtemp(tmpl)) {
      std::fprintf(stderr, "kvgate bench fleet: cannot create a work directory\n");
      return 1;
    }
    o.work = tmpl;
  }
  std::filesystem::create_directories(o.work);
  if (o.out.empty()) o.out = "build/bench/fleet-" + o.workload + ".json";
  if (!o.trace_out.empty()) {
    std::ofstream(o.trace_out) << mooncakeTraceJsonl(r.w);
    std::fprintf(stderr, "fleet bench: wrote the trace to %s\n", o.trace_out.c_str());
  }

  // The fleet.
  std::unique_ptr<Child> sim;
  size_t blocks = 0;
  if (o.fleet.empty()) {
    blocks = o.num_blocks;
    if (blocks == 0) {
      if (r.w.draw != Draw::kSequential || !r.w.trace_ms.empty() || r.w.ideal_hit > 0) {
        // Prompts share prefixes: the working set fills kv_fill of the fleet's capacity (P/D:
        // of the prefill workers', where prefixes are cached and matched).
        const double cap_tokens = static_cast<double>(r.w.working_set_tokens) / o.kv_fill;
        const size_t holders = o.pd_prefill > 0 ? o.pd_prefill : o.workers;
        blocks = static_cast<size_t>(
            std::ceil(cap_tokens / static_cast<double>(holders * o.block_size)));
      } else {
        blocks = 31250;
      }
      size_t longest = 0;  // every single request must fit one worker
      for (const auto& p : r.w.prompts)
        longest = std::max(longest, p.tokens.size() + static_cast<size_t>(p.output_len));
      blocks = std::max(blocks, 2 * (longest + o.block_size - 1) / o.block_size);
    }
    r.kv_port = freePort("127.0.1.1");
    // One worker per loopback address 127.0.1.1..N, all publishing KV events on one port (as
    // one vLLM per host), so one rule's kvZmqPort names them all.
    std::vector<std::string> args = {"sim",
                                     "--hosts",
                                     "127.0.1.1-127.0.1." + std::to_string(o.workers),
                                     "--port",
                                     "0",
                                     "--num-blocks",
                                     std::to_string(blocks),
                                     "--block-size",
                                     std::to_string(o.block_size),
                                     "--speedup",
                                     std::to_string(o.speedup),
                                     "--kv-events-port",
                                     std::to_string(r.kv_port),
                                     "--seed",
                                     std::to_string(o.seed),
                                     "--model",
                                     o.model};
    if (o.pd_prefill > 0) {  // the first N prefill, the rest decode (vLLM, NIXL pull)
      std::string roles;
      for (size_t i = 0; i < o.workers; ++i)
        roles += std::string(i ? "," : "") + (prefillWorker(o, i) ? "prefill" : "decode");
      args.insert(args.end(), {"--engine", "vllm", "--role", roles});
    }
    for (const auto& a : o.sim_args) args.push_back(a);
    sim = std::make_unique<Child>(args, o.work + "/sim.err");
    if (!sim->ok()) {
      std::fprintf(stderr, "kvgate bench fleet: %s\n", sim->error().c_str());
      return 1;
    }
    for (const auto& w : sim->ready().at("workers"))
      r.workers.push_back({w.at("host").get<std::string>(), w.at("port").get<uint16_t>()});
  } else {
    r.kv_port = o.kv_port;
    for (const auto& [h, p] : o.fleet) r.workers.push_back({h, p});
  }
  // The engines' /metrics every 50 ms, as llm-d scrapes them (its queue and KV scorers; the
  // other arms read only the KV capacity from them).
  setenv("LOXILB_KV_METRICS_INTERVAL_MS", "50", 0);
  Child gw({"serve", "--api-listen", "127.0.0.1:0", "--state-dir", o.work + "/state"},
           o.work + "/gateway.err");
  if (!gw.ok()) {
    std::fprintf(stderr, "kvgate bench fleet: %s\n", gw.error().c_str());
    return 1;
  }
  r.gateway = &gw;
  r.blocks = blocks;
  r.api = gw.ready().at("api").get<std::string>();
  r.svc_port = freePort(r.vip);

  ojson doc;
  doc["workload"] = o.workload;
  doc["workload_params"] = r.w.params;
  doc["working_set_tokens"] = r.w.working_set_tokens;
  doc["ideal_hit_rate"] = r.w.ideal_hit;
  doc["fleet"] = {{"workers", r.workers.size()},  {"pd_prefill_workers", o.pd_prefill},
                  {"simulated", o.fleet.empty()}, {"num_blocks_per_worker", blocks},
                  {"block_size", o.block_size},   {"speedup", o.speedup},
                  {"sim_args", o.sim_args}};
  doc["requests_per_step"] = o.requests;
  doc["seed"] = o.seed;
  doc["arms"] = ojson::array();
  std::fprintf(stderr,
               "fleet bench: workload %s (%zu prompts, working set %llu tokens), %zu workers x %zu "
               "blocks of %zu, speedup %g, work dir %s\n",
               o.workload.c_str(), r.w.prompts.size(),
               static_cast<unsigned long long>(r.w.working_set_tokens), r.workers.size(), blocks,
               o.block_size, o.speedup, o.work.c_str());
  // Key arms over the whole ladder, side arms at their load points (the same seeds at the same
  // QPS, so every arm meets the same prompts at the same times).
  std::vector<std::pair<std::string, std::vector<double>>> plan;
  for (const auto& name : o.arms) plan.emplace_back(name, o.qps);
  std::vector<double> side = o.side_qps;
  if (side.empty()) {
    if (o.qps.size() > 2)
      side = {o.qps[1], o.qps.back()};
    else
      side = o.qps;  // (a two-rung ladder: both, not its last rung twice)
  }
  for (const auto& name : o.side_arms) plan.emplace_back(name, side);
  auto rungOf = [&](double q, size_t j) {
    for (size_t i = 0; i < o.qps.size(); ++i)
      if (o.qps[i] == q) return i;
    return 1000 + j;
  };
  for (const auto& [name, ladder] : plan) {
    const Arm arm = *armOf(name);
    if (arm.oracle && !o.fleet.empty()) {
      std::fprintf(stderr, "kvgate bench fleet: the oracle arm needs the simulated fleet\n");
      return 2;
    }
    ojson a;
    a["arm"] = name;
    a["steps"] = ojson::array();
    for (size_t j = 0; j < ladder.size(); ++j) {
      const double qps = ladder[j];
      // The arm's rule, renamed per rung: a fresh pipeline (no stage state carried over).
      auto res = http::fetch(r.api, "POST", "/netlox/v1/config/loadbalancer", ruleBody(r, arm, j));
      if (!res || res->status != 200) {
        std::fprintf(stderr, "kvgate bench fleet: rule for arm %s refused: %s\n", name.c_str(),
                     res ? res->body.c_str() : res.error().what.c_str());
        return 1;
      }
      if (!arm.kv_mode.empty() && !waitSubscribed(r)) {
        std::fprintf(stderr, "kvgate bench fleet: the gateway did not subscribe to every worker\n");
        return 1;
      }
      // Every rung starts from empty caches (its warm-up requests fill them), so each is
      // measured alike whatever ran before it.
      for (const auto& w : r.workers) (void)http::fetch(w.url(), "POST", "/reset_prefix_cache");
      ojson s = runStep(r, arm, qps, rungOf(qps, j));
      std::fprintf(stderr,
                   "  %-16s qps %-7g TTFT p50 %8.1f p90 %8.1f ms (95%% %.1f-%.1f)  ITL p50 %6.1f ms  "
                   "%7.0f tok/s  hit %5.1f%%  errors %zu\n",
                   name.c_str(), qps, s["ttft_p50_ms"].get<double>(),
                   s["ttft_p90_ms"].get<double>(), s["ttft_p90_ci95_ms"][0].get<double>(),
                   s["ttft_p90_ci95_ms"][1].get<double>(), s["itl_p50_ms"].get<double>(),
                   s["output_tok_s"].get<double>(), s["hit_rate"].get<double>() * 100,
                   s["errors"].get<size_t>());
      a["steps"].push_back(std::move(s));
    }
    doc["arms"].push_back(std::move(a));
  }
  std::filesystem::path out(o.out);
  if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
  std::ofstream(o.out) << doc.dump(2) << "\n";
  std::fprintf(stderr, "fleet bench: wrote %s\n", o.out.c_str());
  if (!o.md.empty()) std::ofstream(o.md) << markdown(doc);
  if (!o.chart.empty() && !drawChart(o.out, o.chart))
    std::fprintf(stderr, "kvgate bench fleet: the chart was not drawn (scripts/fleet_chart.py)\n");
  return 0;
}

}  // namespace kvgate::bench::fleet
