// `kvgate serve`: the gateway process (data plane workers + management API on the control thread).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "admin/api.h"
#include "admin/api_tokens.h"
#include "admin/rule_store.h"
#include "common/env.h"
#include "common/flag_file.h"
#include "common/log.h"
#include "common/net.h"
#include "events/event_plane.h"
#include "events/kv_sources.h"
#include "governance/quota.h"
#include "governance/redis_counters.h"
#include "governance/services.h"
#include "governance/state.h"
#include "http/server.h"
#include "http/tls.h"
#include "l4/l4_plane.h"
#include "metrics/ai_requests.h"
#include "proxy/data_plane.h"
#include "proxy/overload.h"
#include "routing/routing_env.h"
#include "routing/rule_profile.h"
#include "sockmap/sockmap_relay.h"
#include "telemetry/tracer.h"
#include "tokenizer/registry.h"
#include "tokenizer/request_tokenizer.h"

namespace kvgate {
namespace {

const char* kServeHelp =
    "usage: kvgate serve [flags]\n\n"
    "  --api-listen ADDR:PORT     management REST API address (default 127.0.0.1:11111;\n"
    "                             port 0 picks a free port, printed in the ready line)\n"
    "  --api-token-file FILE      bearer tokens the management API requires (one per line, >= 16\n"
    "                             characters; the file owned by this user, mode 0600 or 0400);\n"
    "                             /healthz stays open. Without it the API must listen on loopback\n"
    "  --api-insecure             allow a non-loopback --api-listen without --api-token-file\n"
    "  --api-tls-cert FILE        serve the management API over HTTPS with this PEM certificate\n"
    "  --api-tls-key FILE         (chain) and key; both files are reloaded when they change\n"
    "  --tls-cert FILE            the data plane's PEM certificate (chain) and key, for rules\n"
    "  --tls-key FILE             with security 1 (TLS terminated here); reloaded on change\n"
    "  --state-dir DIR            where the rule set persists (default ./kvgate-state)\n"
    "  --state-db CONNINFO        API keys, JWT profiles and limits in PostgreSQL, shared by\n"
    "                             replicas (libpq conninfo or postgresql:// URI; default: SQLite\n"
    "                             in --state-dir)\n"
    "  --redis HOST:PORT          quota counters in Redis, shared by replicas (default: in this\n"
    "                             process; unreachable: 429 token_quota_warming for 3 s, then\n"
    "                             requests pass uncounted)\n"
    "  --redis-auth-file FILE     Redis credentials (mode 0600): a password=SECRET line and\n"
    "                             optionally user=NAME (a Redis 6 ACL user); AUTH on connect\n"
    "  --redis-pipeline N         at most N quota script calls per Redis round trip (1..4096,\n"
    "                             default 128)\n"
    "  --workers N                data-plane worker threads (default: one per core)\n"
    "  --max-header-bytes N       request head limit, larger gets 431 (default 16384)\n"
    "  --max-body-bytes N         request body limit, larger gets 413 (default 33554432)\n"
    "  --max-heap-bytes N         memory bound: at 90 % of N in use new requests get 503\n"
    "                             gateway_overloaded, at 98 % connections wait in the backlog\n"
    "                             (default: 70 % of what the cgroup's memory limit leaves\n"
    "                             above the resident set at startup; no cgroup limit: off)\n"
    "  --header-timeout-ms N      time to receive a request head/body, else 408 (default 10000)\n"
    "  --http2 on|off             HTTP/2: by prior knowledge (h2c) on plain listeners, by ALPN\n"
    "                             on TLS listeners whose rules allow it (default on)\n"
    "  --l4-ifaces IF[,IF...]     the L4 data path (mode 0-3 and 5 rules: DNAT, one-arm, full\n"
    "                             NAT, DSR, host one-arm in eBPF at tc ingress) on these\n"
    "                             interfaces; needs root (CAP_BPF, CAP_NET_ADMIN); without it\n"
    "                             those rules are refused (docs/l4.md)\n"
    "  --l4-on-exit keep|detach   on a stop, keep the L4 program forwarding with its pinned maps\n"
    "                             (flows live on through a restart; default) or detach it and\n"
    "                             remove the maps\n"
    "  --l4-pin-dir DIR           the bpf filesystem the L4 maps are pinned on (default\n"
    "                             /sys/fs/bpf, mounted when it is not; under `ip netns exec`,\n"
    "                             which remounts /sys, give one mounted outside it)\n"
    "  --h2-max-streams N         concurrent request streams per HTTP/2 connection (1..1000,\n"
    "                             default 100)\n"
    "  --idle-timeout-ms N        client keep-alive idle timeout (default 60000; a rule's\n"
    "                             inactiveTimeOut overrides it)\n"
    "  --upstream-timeout-ms N    default upstream data timeout, else 504 (default 600000;\n"
    "                             a rule's timeoutMemberData overrides it)\n"
    "  --upstream-idle-ms N       max idle age of a pooled upstream connection (default 30000)\n"
    "  --prefix-key-bytes K       rendered-prompt bytes in the CHWBL prefix key (default 1024)\n"
    "  --sockmap-min-bytes N      sockMapMode response/both rules: a response body with at least\n"
    "                             N bytes left is spliced in the kernel (default 65536; 0: every\n"
    "                             Content-Length body)\n"
    "  --sockmap-budget-bytes N   body bytes armed in the sockmap relay at once (default 256 MiB:\n"
    "                             the kernel queues them for slow clients; beyond it, userspace)\n"
    "  --quota-max-tokens N       completion tokens a token quota reserves for a request without\n"
    "                             max_tokens (default 256; settlement charges what was used)\n"
    "  --probe-interval-ms N      active health probe period (default 5000)\n"
    "  --probe-timeout-ms N       probe timeout unless the rule sets probeTimeout (default 2000)\n"
    "  --cb-failures N            consecutive connect failures that open a breaker (default 5)\n"
    "  --cb-open-ms N             how long an open breaker excludes its endpoint (default 30000)\n"
    "  --passive-failures N       consecutive connect failures that mark an endpoint down\n"
    "                             (default 3), for --passive-hold-ms (default 5000)\n"
    "  env LLB_PD_ORIGIN_ERR_THRESHOLD: consecutive 5xx that open a breaker (default 3, 0 = off)\n"
    "  --models-dir DIR           tokenizer folders <DIR>/<model>/ (tokenizer.json,\n"
    "                             tokenizer_config.json); enables POST /kvgate/v1/tokenize\n"
    "  --drain-timeout-ms N       on SIGTERM: stop accepting, let in-flight requests and\n"
    "                             streams finish for up to N ms, then exit (default 30000);\n"
    "                             a second SIGTERM exits at once\n"
    "  --access-log               one structured log line per proxied request\n"
    "  --otlp-endpoint URL        OpenTelemetry traces: a span per request (gates, routing,\n"
    "                             each upstream leg) sent as OTLP/HTTP JSON to URL (a bare\n"
    "                             http://host:port gets /v1/traces); traceparent passed to\n"
    "                             the engines (default off: no tracing work at all)\n"
    "  --otlp-sample-ratio R      share of new traces sampled, 0..1 (default 1; a client's\n"
    "                             traceparent decides for its own trace)\n"
    "  --otlp-queue-spans N       spans waiting for export at most (default 8192; more are\n"
    "                             dropped and counted)\n"
    "  --otlp-batch-spans N       spans per export request (default 512)\n"
    "  --otlp-interval-ms N       export at least this often (default 1000)\n"
    "  --otlp-timeout-ms N        one export request's bound (default 5000)\n"
    "  --log-level LEVEL          debug | info | warn | error (default info)\n"
    "  --config FILE              flags from FILE, one per line (`name value`, `name = value`\n"
    "                             or `name`; `#` comments); the command line's win. SIGHUP\n"
    "                             reads it again and applies --log-level and\n"
    "                             --api-token-file, and re-reads the TLS certificates; other\n"
    "                             flags take effect at the next start\n\n"
    "Prints one JSON line {\"event\":\"ready\",\"api\":URL} on stdout once serving.\n";

bool parseMs(const char* v, std::chrono::milliseconds& out) {
  uint64_t x;
  if (!net::parseUint(v, 86400000ULL * 7, x)) return false;
  out = std::chrono::milliseconds(x);
  return true;
}

struct ServeFlags {
  std::string api_listen = "127.0.0.1:11111";
  std::string api_token_file;
  bool api_insecure = false;
  std::string api_tls_cert, api_tls_key;  // HTTPS for the management API
  std::string tls_cert, tls_key;          // the data plane's certificate (rules with security 1)
  std::string state_dir = "kvgate-state";
  std::string state_db;  // PostgreSQL conninfo for governance state shared by replicas
  std::string redis;     // host:port of the Redis holding quota counters shared by replicas
  std::string redis_auth_file;  // its credentials
  uint64_t redis_pipeline = governance::RedisCounters::kDefaultPipeline;
  bool max_heap_set = false;  // --max-heap-bytes given (else the cgroup's default)
  std::string models_dir;
  std::vector<std::string> l4_ifaces;  // interfaces of the L4 data path (mode 0-3 and 5 rules)
  bool l4_keep = true;                 // --l4-on-exit keep (or detach)
  std::string l4_pin_dir = "/sys/fs/bpf";  // --l4-pin-dir
  std::string log_level = "info";
  telemetry::TracerOptions otlp;  // otlp.endpoint empty: no tracing
  proxy::ProxyOptions opts;
};

void applyLogLevel(const std::string& l) {
  log::setLevel(l == "debug"   ? log::Level::kDebug
                : l == "warn"  ? log::Level::kWarn
                : l == "error" ? log::Level::kError
                               : log::Level::kInfo);
}

int parseServeFlags(const std::vector<std::string>& args, ServeFlags& f);

// Flags from the command line and --config FILE (common/flag_file.h); -1 to go on, else the
// exit code.
int readServeFlags(const std::vector<std::string>& cli, ServeFlags& f, std::string* config) {
  auto args = expandConfigFlag(cli, config);
  if (!args) {
    std::fprintf(stderr, "kvgate serve: %s\n", args.error().what.c_str());
    return 2;
  }
  return parseServeFlags(*args, f);
}

// Parses the flags (`args` without the program name, --config already expanded); returns -1
// to go on, else the exit code (0 after --help, 2 on an error, said on stderr). No side effects
// besides `f` (the log level is applied by the caller), so a reload can parse again.
int parseServeFlags(const std::vector<std::string>& args, ServeFlags& f) {
  std::string& api_listen = f.api_listen;
  std::string& state_dir = f.state_dir;
  std::string& models_dir = f.models_dir;
  proxy::ProxyOptions& opts = f.opts;
  for (size_t i = 0; i < args.size(); ++i) {
    // `--name=value` (how --config passes a file's lines) or `--name value`; a value that
    // looks like a flag is refused (`--name=--x` gives one), so a flag missing its value never
    // swallows the next flag.
    const size_t eq = args[i].rfind("--", 0) == 0 ? args[i].find('=') : std::string::npos;
    const std::string a = args[i].substr(0, eq);
    const std::optional<std::string> inline_value =
        eq == std::string::npos ? std::nullopt : std::optional(args[i].substr(eq + 1));
    bool missing = false, used_inline = false;
    auto next = [&]() -> const char* {
      if (inline_value) {
        used_inline = true;
        return inline_value->c_str();
      }
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
        missing = true;
        return "";
      }
      return args[++i].c_str();
    };
    uint64_t x = 0;
    bool ok = true;
    if (a == "--help" || a == "-h") {
      std::fputs(kServeHelp, stdout);
      return 0;
    } else if (a == "--api-token-file") {
      f.api_token_file = next();
    } else if (a == "--api-tls-cert") {
      f.api_tls_cert = next();
    } else if (a == "--api-tls-key") {
      f.api_tls_key = next();
    } else if (a == "--tls-cert") {
      f.tls_cert = next();
    } else if (a == "--tls-key") {
      f.tls_key = next();
    } else if (a == "--api-insecure") {
      f.api_insecure = true;
    } else if (a == "--api-listen") {
      api_listen = next();
    } else if (a == "--state-dir") {
      state_dir = next();
    } else if (a == "--state-db") {
      f.state_db = next();
    } else if (a == "--redis") {
      f.redis = next();
    } else if (a == "--redis-auth-file") {
      f.redis_auth_file = next();
    } else if (a == "--redis-pipeline") {
      ok = net::parseUint(next(), governance::RedisCounters::kMaxPipeline, f.redis_pipeline) &&
           f.redis_pipeline > 0;
    } else if (a == "--workers") {
      ok = net::parseUint(next(), 256, x) && x > 0;
      opts.workers = static_cast<int>(x);
    } else if (a == "--max-header-bytes") {
      ok = net::parseUint(next(), 1 << 20, x) && x >= 1024;
      opts.max_head_bytes = x;
    } else if (a == "--max-heap-bytes") {
      ok = net::parseUint(next(), 1ULL << 50, x) && (x == 0 || x >= (16ULL << 20));
      opts.max_heap_bytes = x;
      f.max_heap_set = true;
    } else if (a == "--max-body-bytes") {
      ok = net::parseUint(next(), 1ULL << 32, x);
      opts.max_body_bytes = x;
    } else if (a == "--header-timeout-ms") {
      ok = parseMs(next(), opts.header_timeout);
    } else if (a == "--l4-ifaces") {
      const std::string v = next();
      f.l4_ifaces.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        if (comma > at) f.l4_ifaces.push_back(v.substr(at, comma - at));
        at = comma + 1;
      }
      ok = !f.l4_ifaces.empty() && f.l4_ifaces.size() <= 64;
      for (const auto& n : f.l4_ifaces) ok &= n.size() < 16;  // (IFNAMSIZ)
    } else if (a == "--l4-pin-dir") {
      f.l4_pin_dir = next();
      ok = !f.l4_pin_dir.empty() && f.l4_pin_dir.size() < 200 && f.l4_pin_dir[0] == '/';
    } else if (a == "--l4-on-exit") {
      const std::string v = next();
      ok = v == "keep" || v == "detach";
      f.l4_keep = v == "keep";
    } else if (a == "--http2") {
      const std::string v = next();
      ok = v == "on" || v == "off";
      opts.http2 = v == "on";
    } else if (a == "--h2-max-streams") {
      ok = net::parseUint(next(), 1000, x) && x >= 1;
      opts.h2_max_streams = static_cast<uint32_t>(x);
    } else if (a == "--idle-timeout-ms") {
      ok = parseMs(next(), opts.client_idle_timeout);
    } else if (a == "--upstream-timeout-ms") {
      ok = parseMs(next(), opts.upstream_data_timeout);
    } else if (a == "--upstream-idle-ms") {
      ok = parseMs(next(), opts.upstream_idle_timeout);
    } else if (a == "--sockmap-budget-bytes") {
      ok = net::parseUint(next(), uint64_t(1) << 40, x) && x > 0;
      sockmap::Relay::setBudget(x);
    } else if (a == "--sockmap-min-bytes") {
      ok = net::parseUint(next(), uint64_t(1) << 40, x);
      opts.sockmap_min_bytes = x;
    } else if (a == "--prefix-key-bytes") {
      ok = net::parseUint(next(), 1 << 20, x) && x > 0;
      opts.prefix_key_bytes = x;
    } else if (a == "--quota-max-tokens") {
      ok = net::parseUint(next(), 1'000'000'000, x);
      opts.quota_max_tokens = static_cast<int64_t>(x);
    } else if (a == "--probe-interval-ms") {
      ok = parseMs(next(), opts.probe_interval) && opts.probe_interval.count() > 0;
    } else if (a == "--probe-timeout-ms") {
      ok = parseMs(next(), opts.probe_timeout) && opts.probe_timeout.count() > 0;
    } else if (a == "--cb-failures") {
      ok = net::parseUint(next(), 1000, x) && x > 0;
      opts.health.cb_failures = static_cast<int>(x);
    } else if (a == "--cb-open-ms") {
      ok = parseMs(next(), opts.health.cb_open);
    } else if (a == "--passive-failures") {
      ok = net::parseUint(next(), 1000, x) && x > 0;
      opts.health.passive_failures = static_cast<int>(x);
    } else if (a == "--passive-hold-ms") {
      ok = parseMs(next(), opts.health.passive_hold);
    } else if (a == "--drain-timeout-ms") {
      ok = parseMs(next(), opts.drain_timeout);
    } else if (a == "--models-dir") {
      models_dir = next();
    } else if (a == "--otlp-endpoint") {
      f.otlp.endpoint = next();
      ok = !f.otlp.endpoint.empty();
    } else if (a == "--otlp-sample-ratio") {
      const std::string v = next();
      char* end = nullptr;
      f.otlp.sample_ratio = std::strtod(v.c_str(), &end);
      ok = !v.empty() && end && *end == 0 && f.otlp.sample_ratio >= 0 && f.otlp.sample_ratio <= 1;
    } else if (a == "--otlp-queue-spans") {
      ok = net::parseUint(next(), 1'000'000, x) && x >= 1;
      f.otlp.queue_spans = x;
    } else if (a == "--otlp-batch-spans") {
      ok = net::parseUint(next(), 1'000'000, x) && x >= 1;
      f.otlp.batch_spans = x;
    } else if (a == "--otlp-interval-ms") {
      ok = parseMs(next(), f.otlp.interval);
    } else if (a == "--otlp-timeout-ms") {
      ok = parseMs(next(), f.otlp.timeout);
    } else if (a == "--access-log") {
      opts.access_log = true;
    } else if (a == "--log-level") {
      const std::string l = next();
      ok = l == "debug" || l == "info" || l == "warn" || l == "error";
      f.log_level = l;
    } else {
      std::fprintf(stderr, "kvgate serve: unknown flag '%s' (see --help)\n", a.c_str());
      return 2;
    }
    if (missing) {
      std::fprintf(stderr, "kvgate serve: %s needs a value\n", a.c_str());
      return 2;
    }
    if (inline_value && !used_inline) {
      std::fprintf(stderr, "kvgate serve: %s takes no value\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate serve: invalid value for %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  return -1;
}

// The first SIGTERM/SIGINT drains (no new connections; requests and streams in flight finish,
// up to --drain-timeout-ms; the API keeps serving); a second one exits at once.
class Shutdown {
 public:
  Shutdown(asio::io_context& control, proxy::DataPlane& dp, std::chrono::milliseconds timeout)
      : control_(control),
        dp_(dp),
        timeout_(timeout),
        signals_(control, SIGINT, SIGTERM),
        timer_(control) {
    wait();
  }

 private:
  void wait() {
    signals_.async_wait([this](const error_code& ec, int sig) {
      if (!ec) onSignal(sig);
    });
  }
  void onSignal(int sig) {
    if (dp_.draining()) {
      log::info("serve", "signal " + std::to_string(sig) + " again: exiting now");
      control_.stop();
      return;
    }
    log::info("serve", "signal " + std::to_string(sig) + ": draining (up to " +
                           std::to_string(timeout_.count()) + " ms)");
    dp_.drain();  // the API keeps serving (metrics show kvgate_draining 1; rule changes get 503)
    deadline_ = std::chrono::steady_clock::now() + timeout_;
    wait();
    poll();
  }
  void poll() {
    if (dp_.idle() || std::chrono::steady_clock::now() >= deadline_) {
      if (!dp_.idle()) log::warn("serve", "drain timeout: closing the connections still open");
      control_.stop();
      return;
    }
    timer_.expires_after(std::chrono::milliseconds(50));
    timer_.async_wait([this](const error_code& ec) {
      if (!ec) poll();
    });
  }
  asio::io_context& control_;
  proxy::DataPlane& dp_;
  std::chrono::milliseconds timeout_;
  asio::signal_set signals_;
  asio::steady_timer timer_;
  std::chrono::steady_clock::time_point deadline_;
};

// Environment knobs and the API-address warning.
void applyEnvironment(proxy::ProxyOptions& opts, const std::string& api_host) {
  if (const char* v = std::getenv("LLB_PD_ORIGIN_ERR_THRESHOLD")) {
    uint64_t x = 0;
    if (net::parseUint(v, 1000, x)) {
      opts.health.origin_5xx = static_cast<int>(x);
    } else {
      log::warn("serve", std::string("ignoring LLB_PD_ORIGIN_ERR_THRESHOLD='") + v +
                             "' (not a number 0..1000); using 3");
    }
  }
  if (const char* v = std::getenv("LOXILB_KV_METRICS_INTERVAL_MS")) {
    uint64_t x = 0;
    if (net::parseUint(v, 3'600'000, x)) {
      opts.scrape_interval = std::chrono::milliseconds(x);
    } else {
      log::warn("serve", std::string("ignoring LOXILB_KV_METRICS_INTERVAL_MS='") + v +
                             "' (not a number 0..3600000); using 1000");
    }
  }
}

}  // namespace

// A SIGHUP that arrives before the reload handler is installed (systemctl reload while the
// gateway starts): remembered, and applied once serving, instead of its default action (exit).
volatile std::sig_atomic_t g_early_hup = 0;
extern "C" void noteEarlyHup(int) { g_early_hup = 1; }

int serveMain(int argc, char** argv) {
  std::signal(SIGHUP, noteEarlyHup);
  ServeFlags flags;
  const std::vector<std::string> cli(argv + 1, argv + argc);
  std::string config_file;
  if (int rc = readServeFlags(cli, flags, &config_file); rc >= 0) return rc;
  applyLogLevel(flags.log_level);
  const std::string& api_listen = flags.api_listen;
  const std::string& models_dir = flags.models_dir;
  proxy::ProxyOptions& opts = flags.opts;
  if (!flags.max_heap_set) {
    const proxy::OverloadLimits d = proxy::defaultHeapLimits();
    opts.max_heap_bytes = d.limit;
    opts.heap_budget_bytes = d.budget;
  }
  if (opts.max_heap_bytes > 0)
    log::info("serve",
              "memory bound " + std::to_string(opts.max_heap_bytes >> 20) + " MiB of heap (" +
                  (flags.max_heap_set ? std::string("--max-heap-bytes")
                                      : "70 % of the cgroup's limit above the resident set; the "
                                        "whole heap, KV index included, within " +
                                            std::to_string(opts.heap_budget_bytes >> 20) +
                                            " MiB") +
                  "): shedding at 90 %, not accepting at 98 %");
  auto hp = net::parseHostPort(api_listen);
  if (!hp) {
    std::fprintf(stderr, "kvgate serve: --api-listen must be ADDR:PORT, got '%s'\n",
                 api_listen.c_str());
    return 2;
  }
  std::shared_ptr<http::TlsFiles> api_tls;
  if (flags.api_tls_cert.empty() != flags.api_tls_key.empty()) {
    std::fprintf(stderr, "kvgate serve: --api-tls-cert and --api-tls-key go together\n");
    return 2;
  }
  if (!flags.api_tls_cert.empty()) {
    auto t = http::TlsFiles::load(flags.api_tls_cert, flags.api_tls_key);
    if (!t) {
      std::fprintf(stderr, "kvgate serve: %s\n", t.error().what.c_str());
      return 2;
    }
    api_tls = std::move(*t);
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    std::fprintf(stderr, "kvgate serve: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (!flags.tls_cert.empty()) {
    http::ServerTlsOptions base;  // (the data plane's listeners: h2 by ALPN unless --http2 off)
    base.h2 = flags.opts.http2;
    auto t = http::TlsFiles::load(flags.tls_cert, flags.tls_key, base);
    if (!t) {
      std::fprintf(stderr, "kvgate serve: %s\n", t.error().what.c_str());
      return 2;
    }
    flags.opts.tls = std::move(*t);
  }
  admin::ApiTokens api_tokens;
  if (!flags.api_token_file.empty()) {
    auto t = admin::ApiTokens::load(flags.api_token_file);
    if (!t) {
      std::fprintf(stderr, "kvgate serve: %s\n", t.error().what.c_str());
      return 2;
    }
    api_tokens = std::move(*t);
  } else if (!net::isLoopbackLiteral(hp->host) && flags.api_insecure) {
    log::warn("serve", "the management API listens on " + hp->host +
                           " and has no authentication (--api-insecure): anyone who reaches it "
                           "can change the rules");
  } else if (!net::isLoopbackLiteral(hp->host)) {
    std::fprintf(stderr,
                 "kvgate serve: --api-listen %s is not a loopback address and the API has no\n"
                 "  --api-token-file: anyone who reaches it could change every rule. Give a token\n"
                 "  file, or pass --api-insecure to serve it unauthenticated anyway.\n",
                 api_listen.c_str());
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  applyEnvironment(opts, hp->host);
  std::unique_ptr<tok::TokenizerRegistry> tokenizers;
  if (!models_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(models_dir, ec)) {
      std::fprintf(stderr, "kvgate serve: --models-dir %s is not a directory\n",
                   models_dir.c_str());
      return 2;
    }
    tokenizers = std::make_unique<tok::TokenizerRegistry>(models_dir);
  }

  // The KV event plane: follows the publishers that kvExactMode rules name (docs/kv_index.md).
  // Declared before the data plane, whose routes' Tier 1.5 stages refer to both.
  // LOXILB_KV_MAX_BLOCKS: the KV index's cap per worker inventory.
  kv::KvIndex kv_index(
      static_cast<size_t>(common::envInt("LOXILB_KV_MAX_BLOCKS", 1, int64_t{1} << 32, 1'000'000)));
  kv::SpeculativeOverlay kv_overlay;    // speculative insert, beside the index
  kv_index.attachOverlay(&kv_overlay);  // a worker's clear drops its credits too
  events::EventPlaneOptions kv_opts;
  // What one publisher socket may queue: at most rcv_hwm messages of at most max_message_bytes
  // (ZMQ counts messages, not bytes: their product is the per-socket worst case).
  kv_opts.max_message_bytes =
      common::envInt("LOXILB_KV_MAX_MESSAGE_BYTES", 65536, 256 << 20, 8 << 20);
  kv_opts.rcv_hwm = static_cast<int>(common::envInt("LOXILB_KV_RCV_HWM", 16, 1000000, 256));
  if (const char* seed = std::getenv("LLB_KV_NONE_HASH_SEED"); seed) {
    // The declared hash contract: the engines' PYTHONHASHSEED (upstream: non-empty, <= 23 bytes).
    const size_t n = std::strlen(seed);
    if (n == 0 || n > 23) {
      std::fprintf(stderr,
                   "kvgate serve: LLB_KV_NONE_HASH_SEED must be 1-23 bytes (the engines' "
                   "PYTHONHASHSEED), got %zu bytes\n",
                   n);
      return 2;
    }
    kv_opts.none_hash_seed = seed;
    log::info("serve",
              "hash contract declared: KV-event block hashes are checked against "
              "LLB_KV_NONE_HASH_SEED for rules with kvHashAlgo sha256_cbor/xxhash_cbor");
  }
  events::EventPlane kv_plane(kv_index, kv_opts);
  // Text and chat prompts -> token ids for Tier 1.5 (tokenizers load on their own thread).
  std::unique_ptr<tok::RequestTokenizer> prompt_tokens;
  if (tokenizers)
    prompt_tokens = std::make_unique<tok::RequestTokenizer>(
        *tokenizers, tok::RequestTokenizer::optionsFromEnv());
  // Shared quota counters (--redis): an I/O thread of their own; workers never wait on Redis.
  // Made before the data plane and destroyed after it: requests still in flight at shutdown
  // settle into it, and its destructor sends the queued settlements.
  std::unique_ptr<governance::RedisCounters> redis;
  if (flags.redis.empty() && !flags.redis_auth_file.empty()) {
    std::fprintf(stderr, "kvgate serve: --redis-auth-file needs --redis\n");
    return 2;
  }
  if (!flags.redis.empty()) {
    auto rhp = net::parseHostPort(flags.redis);
    if (!rhp) {
      std::fprintf(stderr, "kvgate serve: --redis must be HOST:PORT, got '%s'\n",
                   flags.redis.c_str());
      return 2;
    }
    governance::RedisCounters::Auth auth;
    if (!flags.redis_auth_file.empty()) {
      auto a = governance::loadRedisAuth(flags.redis_auth_file);
      if (!a) {
        std::fprintf(stderr, "kvgate serve: %s\n", a.error().what.c_str());
        return 2;
      }
      auth = std::move(*a);
    }
    redis = std::make_unique<governance::RedisCounters>(rhp->host, rhp->port, std::move(auth));
    redis->setPipeline(flags.redis_pipeline);
    if (auto st = redis->start(); !st) {
      std::fprintf(stderr, "kvgate serve: %s\n", st.error().what.c_str());
      return 2;
    }
    governance::setRedisCounters(redis.get());
  }
  // The environment's routing defaults, read once here (routing/routing_env.h).
  std::vector<std::string> env_warnings;
  const routing::RoutingEnv routing_env = routing::readRoutingEnv(std::getenv, env_warnings);
  for (const auto& w : env_warnings) log::warn("config", w);
  // The L4 data path (mode 0-3 and 5 rules), before the data plane that refers to it.
  std::unique_ptr<l4::L4Plane> l4;
  if (!flags.l4_ifaces.empty()) {
    auto p = l4::L4Plane::start(flags.l4_ifaces, flags.l4_keep, flags.l4_pin_dir);
    if (!p) {
      std::fprintf(stderr, "kvgate serve: %s\n", p.error().what.c_str());
      return 2;
    }
    l4 = std::move(*p);
  }
  // The facts parser converts a chat input up to what the tokenizer renders (twice its bound).
  if (prompt_tokens) opts.chat_max_bytes = 2 * prompt_tokens->textBound();
  std::shared_ptr<telemetry::Tracer> tracer;
  if (!flags.otlp.endpoint.empty()) {
    auto t = telemetry::Tracer::create(flags.otlp);
    if (!t) {
      std::fprintf(stderr, "kvgate serve: %s\n", t.error().what.c_str());
      return 2;
    }
    tracer = std::move(*t);
    tracer->start();
    opts.tracer = tracer;
    log::info("serve", "tracing to " + flags.otlp.endpoint);
  }
  proxy::DataPlane dp(opts);
  dp.setL4(l4.get());
  // (Both before start(): the overload monitor's thread reads the index pointer.)
  dp.setKv(&kv_index, &kv_plane, prompt_tokens.get(), &kv_overlay);  // Tier 1.5 (kvExactMode 3)
  dp.setTokenizers(prompt_tokens.get());  // /tokenize, /detokenize answered by the gateway
  dp.setRoutingEnv(&routing_env);
  {
    // The gates' governance services: this process's registries and the shared counters.
    governance::Services gov = governance::Services::processWide();
    gov.shared = redis.get();
    dp.setGovernance(gov);
  }
  dp.start();
  kv_plane.start();
  admin::RuleStore store(flags.state_dir, dp);
  store.setListener(
      [](const std::vector<config::RuleSpec>& rules) -> Result<void> {
        auto s = events::kvSources(rules);
        if (!s) return tl::unexpected(s.error());
        return {};
      },
      [&kv_plane, &dp](const std::vector<config::RuleSpec>& rules) {
        // TensorRT-LLM engines behind security 2 rules are drained over the rule's TLS.
        auto tls_of = [&dp](const config::RuleSpec& r) { return dp.backendTlsFor(r); };
        if (auto s = events::kvSources(rules, tls_of)) kv_plane.setSources(std::move(*s));
      });
  auto loaded = store.load();
  // (pinned services no restored rule took: removed; kept when the restore failed, for the next
  // start)
  if (l4 && loaded) l4->finishAdoption();
  if (!loaded) {
    log::error("serve", loaded.error().what);
    dp.stop();
    return 1;
  }
  log::info("serve", "restored " + std::to_string(*loaded) + " rule(s) from " + store.statePath());

  // Governance state (opened before api and control, which use it): keys, JWT profiles and
  // limits in SQLite in the state directory, or in PostgreSQL shared with other replicas
  // (--state-db). Without it their routes answer 503 and rules that need keys refuse every
  // request (policy_store_unavailable), never pass them.
  governance::GovernanceState gov(flags.state_dir, flags.state_db);
  gov.open();
  // api before control: control's destructor destroys suspended handler frames that use api.
  admin::Api api(
      store,
      [&dp, &kv_plane, &prompt_tokens, &store] {
        return dp.renderMetrics() + kv_plane.renderMetrics() +
               kv_plane.renderRuleBlocks(store.rules()) +
               (prompt_tokens ? prompt_tokens->renderMetrics() : std::string()) +
               metrics::aiRequests().render() + governance::renderKeyMetrics() +
               governance::renderJwtMetrics() +
               (governance::redisCounters() ? governance::redisCounters()->renderMetrics()
                                             : std::string()) +
               governance::quotaMetrics().render(
                   *governance::limitRegistry().current(), governance::quotaLedger(),
                   std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count());
      },
      tokenizers.get());
  auto handOut = [&] {
    api.setKeyStore(gov.keys());
    api.setProfileStore(gov.profiles());
    api.setLimitStore(gov.limits());
  };
  handOut();
  api.setDecisionFeed(&dp.decisions());
  api.setTokens(std::move(api_tokens));
  api.setEffective([&routing_env](const config::RuleSpec& r) {
    return routing::effectiveRouting(r, routing_env);
  });
  api.setInventory([&kv_plane](const std::string& key, int rank, size_t offset,
                               size_t limit) -> Result<admin::Api::KvInventory> {
    auto inv = kv_plane.inventory(key, rank, offset, limit);
    if (!inv) return tl::unexpected(inv.error());
    return admin::Api::KvInventory{std::move(inv->hashes), inv->total};
  });
  asio::io_context control(1);
  http::ServerOptions sopts;
  sopts.max_body_bytes = 4 * 1024 * 1024;
  http::Server server(
      control, [&api](http::Request& r, http::ResponseWriter& w) { return api.handle(r, w); },
      sopts);
  if (api_tls) server.setTls(api_tls);
  auto port = server.listen(hp->host, hp->port);
  if (!port) {
    log::error("serve", port.error().what);
    dp.stop();
    return 1;
  }
  std::string host = hp->host == "0.0.0.0" ? "127.0.0.1" : hp->host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  std::printf("{\"event\":\"ready\",\"api\":\"%s://%s:%u\"}\n", api_tls ? "https" : "http",
              host.c_str(), *port);
  std::fflush(stdout);
  log::info("serve", "management API on " + hp->host + ":" + std::to_string(*port) + ", " +
                         std::to_string(dp.options().workers) + " data-plane worker(s)");

  Shutdown shutdown(control, dp, opts.drain_timeout);
  // SIGHUP: the flags again (command line and --config), what can change without dropping a
  // request applied on this (the API's) thread; a file that does not parse changes nothing.
  asio::signal_set hup(control, SIGHUP);
  std::function<void()> reload = [&] {
    ServeFlags again;
    std::string file;
    if (readServeFlags(cli, again, &file) >= 0) {
      log::warn("serve", "SIGHUP: the flags do not parse (stderr says why); nothing changed");
    } else {
      applyLogLevel(again.log_level);
      std::string what = "log level " + again.log_level;
      if (!again.api_token_file.empty()) {
        if (auto t = admin::ApiTokens::load(again.api_token_file)) {
          api.setTokens(std::move(*t));
          what += ", API tokens from " + again.api_token_file;
        } else {
          log::warn("serve", "SIGHUP: " + t.error().what + "; the API tokens are unchanged");
        }
      } else {
        what += ", API tokens unchanged (removing them needs a restart)";
      }
      if (api_tls) api_tls->refresh();
      dp.refreshTls();
      log::info("serve", "SIGHUP: reloaded (" + what +
                             ", changed TLS certificate files taken); other flags apply at the "
                             "next start");
    }
  };
  std::function<void()> on_hup = [&] {
    hup.async_wait([&](const error_code& ec, int) {
      if (ec) return;
      reload();
      on_hup();
    });
  };
  on_hup();  // (from here asio's handler receives SIGHUP; one that came earlier is applied now)
  if (g_early_hup) asio::post(control, [&] { reload(); });
  // Every second on the control thread: another replica's governance changes (a shared store),
  // and renewed TLS certificate files (never read on an event loop).
  asio::steady_timer housekeeping(control);
  std::function<void()> tick = [&] {
    housekeeping.expires_after(std::chrono::seconds(1));
    housekeeping.async_wait([&](const error_code& ec) {
      if (ec) return;
      if (gov.poll()) handOut();
      if (api_tls) api_tls->refresh();
      dp.refreshTls();
      for (const auto& c : dp.syncL4Health()) {
        if (c.size() > 5 && c.compare(c.size() - 5, 5, " down") == 0)
          log::warn("l4", "endpoint " + c + ": no new flows (its flows go on)");
        else if (c.find(": addresses ") != std::string::npos)
          log::info("l4", "rule " + c + ": the node's addresses changed; the rule serves these");
        else if (c.find(" source ") != std::string::npos)
          log::info("l4",
                    "endpoint " + c + ": the route to it changed; new flows take this source");
        else
          log::info("l4", "endpoint " + c + ": new flows again");
      }
      tick();
    });
  };
  tick();
  control.run();
  // (asio restores SIGHUP's default action, exit, when the set is cleared: a reload during the
  // teardown below must not end it midway)
  hup.clear();
  std::signal(SIGHUP, SIG_IGN);
  server.stop();
  api.stopTokenizer();  // before the control loop's frames are destroyed (they point into api)
  kv_plane.stop();
  dp.stop();
  if (tracer) tracer->stop();  // (what is queued is sent once more)
  log::info("serve", "stopped");
  log::flush();
  return 0;
}

}  // namespace kvgate
