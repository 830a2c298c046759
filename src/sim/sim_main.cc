// `kvgate sim`: a fleet of simulated vLLM workers in one process (one io_context, one thread).
#include <arpa/inet.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/net.h"
#include "sim/worker.h"

namespace kvgate::sim {

int main(int argc, char** argv);

namespace {

constexpr const char* kUsage = R"(Usage: kvgate sim [flags]

Runs simulated LLM engine workers that speak vLLM's OpenAI-compatible HTTP dialect. When every
worker listens, prints one JSON line to stdout:
  {"event":"ready","engine":"vllm","workers":[{"host":...,"port":...,"url":...},...]}
and runs until SIGINT/SIGTERM. See docs/simulator.md.

Fleet:
  --engine NAME                 vllm (default), sglang or trtllm: the KV events' format and
                                transport (trtllm: POST /kv_cache_events drains them); the HTTP
                                API is the same OpenAI-compatible one
  --workers N                   number of workers (default 1)
  --host ADDR                   listen address (default 127.0.0.1)
  --port P                      first port; workers use P, P+1, ... (default 8000; 0 = free ports)
  --hosts LIST                  one worker per address, all on port P: a range such as
                                127.0.0.10-13 or 127.0.0.10-127.0.0.13, or a comma list
Model:
  --model NAME                  served model name, repeatable; the first is the default
                                (default sim-model)
  --seed S                      seed of the deterministic output (default 1)
  --max-model-len N             context length reported and enforced (default 131072)
  --default-max-tokens N        max_tokens when a request gives none (default 16)
  --detokenize-clean-up M       /detokenize applies transformers' clean_up_tokenization_spaces
                                as the model's tokenizer_config.json says (model, the default:
                                transformers before 5.7), always (on) or never (off: 5.7 and
                                later skip it for BPE tokenizers); SGLang never applies it
  --models-dir DIR              tokenizer folders <DIR>/<model>/ (tokenizer.json, ...): a model
                                found there is tokenized exactly as vLLM would (real tokenizer
                                and chat template); others use the stand-in tokenizer
Timing (all delays are divided by --speedup; docs/simulator.md):
  --speedup F                   time compression factor (default 1.0)
  --timing M                    step (default): continuous batching, each step timed by the
                                model of shared/reference/benchmarks.md §2; fixed: a FIFO of
                                --max-concurrency slots, fixed prefill cost, constant ITL
 step model:
  --profile P                   8b-h100 (default) or 70b-tp4-h100: the parameters below
  --step-weights-ms W           per-step weight read time (8b-h100: 4.8)
  --step-kv-ms-per-token K      per context token read in a step (3.9e-5)
  --step-prefill-ms-per-token P per new token computed (0.027)
  --step-attn-ms-per-pair A     per attention pair of a prefill chunk (8.5e-7)
  --step-overhead-ms O          per step (1.0)
  --step-seq-overhead-ms S      per scheduled sequence (0.05)
  --prefill-factor F            multiplies the prefill compute terms (default 1; 0.5 and 2 for
                                sensitivity runs)
  --max-num-seqs N              sequences per step (default 256)
  --max-num-batched-tokens N    new tokens per step (default 8192)
  --api-ms MS                   per-request API overhead before the engine queue (default 0)
  --step-jitter SD              Gaussian sd of each step's duration, clamped +-70% (default
                                0.03; 0 = none)
 fixed model:
  --prefill-base-ms B           fixed prefill cost per request (default 5)
  --prefill-us-per-token U      prefill cost per UNCACHED prompt token (default 100)
  --itl-ms T                    delay between generated tokens (default 10)
  --keepalive-timeout-ms MS     close idle keep-alive connections after MS (default 5000)
  --kv-events                   publish vLLM KV events over ZMQ PUB (see docs/simulator.md): one
                                [topic, seq, msgpack batch] per admitted request (evictions,
                                then the prompt's new blocks); the ready line gives each worker's
                                "kv_events_port". Any --kv-events-* flag turns it on.
  --kv-events-port P            worker i publishes on P + i; with --hosts every worker on P
                                (default 0: a free port each)
  --kv-events-topic T           first frame of every message (default empty)
  --kv-events-encoding E        map (vLLM after PR #42892, default) or positional
  --kv-events-hash-algo A       sha256_cbor (default) or xxhash_cbor
  --kv-events-hash-seed S       PYTHONHASHSEED of the block hashes (default: random per process)
  --kv-events-replay-port P     serve replay on a ROUTER (worker i on P + i, with --hosts every
                                worker on P; 0 = a free port each); the ready line gives
                                "kv_replay_port"
  --kv-events-replay-buffer N   batches kept for replay (default 10000)
  --kv-events-dp-ranks N        data-parallel engines per worker (1-16, default 1): each has its
                                own --num-blocks cache and publisher on the event port + rank
                                (replay port + rank); requests go to the ranks round-robin
  --kv-events-full-report       every store re-sends the prompt's blocks from block 0, cached ones
                                included (vLLM's full report mode)
  --stamp-events                add "kvgate_sent_us" (wall-clock send time) to each token event,
                                for measuring relay delay (bench/sse_bench.sh)
  --max-concurrency C           running requests; the rest wait FIFO (default 64)
P/D disaggregation (docs/simulator.md "P/D"; the dialect is --engine's):
  --role R                      prefill, decode or both (default both: plain requests); a comma
                                list gives worker i the i-th role (cycled), e.g. prefill,decode
  --pd-transfer-us-per-block U  decode: KV transfer time per pulled block (default 80)
  --pd-hold-ms MS               prefill: how long blocks wait for their decode (default 480000,
                                vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT)
  --pd-wait-ms MS               SGLang decode: how long it waits for its room's prefill
                                (default 30000)
  --pd-bootstrap-port P         SGLang prefill: the bootstrap port it expects (default 8998)
  --pd-connector C              vLLM: nixl (default; the decode pulls with the prefill's
                                kv_transfer_params) or p2p (P2P NCCL: the prefill pushes to the
                                decode its X-Request-Id names, ___prefill_addr_<p>___decode_addr_<d>_,
                                each worker's address being its own host:port)
KV cache:
  --block-size N                tokens per KV block (default 16)
  --num-blocks N                KV capacity in blocks, per data-parallel rank (default 31250:
                                ~500k tokens, an 8B model on one H100)
  --responses-store             keep the Responses API's answers (as vLLM with
                                VLLM_ENABLE_RESPONSES_API_STORE): a previous_response_id this
                                worker answered is served, another one is a 404 (default: none is)
  --anthropic-usage             Messages streams report usage as Anthropic's API does
                                (message_start: input and 1 output token; message_delta: the
                                output count only) instead of vLLM's (both counts in message_delta)
  --unknown-events              Messages and Responses streams carry one event of an unknown type
                                after their first (an engine newer than its clients)
  --kv-cache-decode             blocks completed during decode (prompt + generated tokens) enter
                                the cache and are published, as in vLLM (off by default: earlier
                                benchmark figures assume prompt blocks only)
Faults (also settable at runtime with POST /sim/fault):
  --fail-requests N             the next N inference requests fail (default 0)
  --fail-status S               HTTP status of those failures, 400..599 (default 500)
  --refuse-connections          close the listening sockets after startup
  --stall-ms MS                 sleep before sending response headers (default 0)
  --close-mid-stream-after K    cut streams after K events, without the final chunk
  --event-delay-ms MS           extra delay between stream events (default 0)
  (runtime only) kv_drop_batches N: the next N KV-event batches are kept off the live stream
                                (still replayable); kv_restart true: a publisher restart
  --tls-cert FILE --tls-key FILE  serve HTTPS (PEM certificate chain and key), as an engine
                                behind TLS (the gateway's security 2)
  --log-level L                 debug, info, warn, error (default info; logs go to stderr)
  -h, --help                    show this help
)";

struct Options {
  SimConfig cfg;
  std::string tls_cert, tls_key;
  size_t workers = 1;
  bool workers_set = false;
  bool models_set = false;
  std::string host = "127.0.0.1";
  uint64_t port = 8000;
  std::vector<std::string> hosts;
};

bool parseDouble(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  out = v;
  return true;
}

// "a.b.c.d", "a.b.c.d-e", "a.b.c.d-w.x.y.z", or a comma list of those.
bool parseHosts(const std::string& spec, std::vector<std::string>& out, std::string& err) {
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item = spec.substr(start, comma == std::string::npos ? comma : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      if (!net::isIpLiteral(item)) return err = "'" + item + "' is not an IP address", false;
      out.push_back(item);
      continue;
    }
    std::string first = item.substr(0, dash), last = item.substr(dash + 1);
    in_addr a{}, b{};
    if (inet_pton(AF_INET, first.c_str(), &a) != 1)
      return err = "'" + first + "' is not an IPv4 address", false;
    if (last.find('.') == std::string::npos) {
      uint64_t octet = 0;
      if (!net::parseUint(last, 255, octet))
        return err = "bad range end '" + last + "' (want an octet 0..255)", false;
      b.s_addr = htonl((ntohl(a.s_addr) & 0xFFFFFF00u) | static_cast<uint32_t>(octet));
    } else if (inet_pton(AF_INET, last.c_str(), &b) != 1) {
      return err = "'" + last + "' is not an IPv4 address", false;
    }
    uint32_t lo = ntohl(a.s_addr), hi = ntohl(b.s_addr);
    if (hi < lo) return err = "empty address range '" + item + "'", false;
    if (hi - lo >= 1024) return err = "address range '" + item + "' is too large", false;
    for (uint32_t x = lo;; ++x) {
      in_addr c{};
      c.s_addr = htonl(x);
      char buf[INET_ADDRSTRLEN];
      out.emplace_back(inet_ntop(AF_INET, &c, buf, sizeof buf));
      if (x == hi) break;
    }
  }
  if (out.empty()) return err = "no addresses", false;
  return true;
}

// Returns 0 to run, 1 after --help, 2 on a usage error (message already printed).
int parseArgs(int argc, char** argv, Options& o) {
  auto usage = [](const std::string& msg) {
    std::cerr << "kvgate sim: " << msg << "\n(see kvgate sim --help)\n";
    return 2;
  };
  FaultState& f = o.cfg.faults;
  std::string fixed_flag, step_flag;  // the last knob given of each timing model
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool has_inline = false;
    if (flag == "-h" || flag == "--help") {
      std::cout << kUsage;
      std::cout.flush();
      return 1;
    }
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
      has_inline = true;
    }
    if (flag == "--stamp-events") {
      o.cfg.stamp_events = true;
      continue;
    }
    if (flag == "--responses-store") {
      o.cfg.responses_store = true;
      continue;
    }
    if (flag == "--anthropic-usage") {
      o.cfg.anthropic_usage = true;
      continue;
    }
    if (flag == "--unknown-events") {
      o.cfg.unknown_events = true;
      continue;
    }
    if (flag == "--kv-cache-decode") {
      o.cfg.cache_decode = true;
      continue;
    }
    if (flag == "--kv-events") {
      if (has_inline && value != "true" && value != "false")
        return usage("--kv-events takes no value (or =true/=false)");
      o.cfg.kv_events.enabled = !has_inline || value == "true";
      continue;
    }
    if (flag == "--kv-events-full-report") {
      if (has_inline && value != "true" && value != "false")
        return usage("--kv-events-full-report takes no value (or =true/=false)");
      o.cfg.kv_events.full_report = !has_inline || value == "true";
      o.cfg.kv_events.enabled = true;
      continue;
    }
    if (flag == "--refuse-connections") {
      if (has_inline && value != "true" && value != "false")
        return usage("--refuse-connections takes no value (or =true/=false)");
      f.refuse_connections = !has_inline || value == "true";
      continue;
    }
    auto need = [&]() -> bool {
      if (has_inline) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    auto uintArg = [&](uint64_t lo, uint64_t hi, uint64_t& out) {
      uint64_t v = 0;
      if (!net::parseUint(value, hi, v) || v < lo) return false;
      out = v;
      return true;
    };
    auto intArg = [&](uint64_t lo, uint64_t hi, auto& out) {
      uint64_t v = 0;
      if (!uintArg(lo, hi, v)) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return true;
    };
    auto realArg = [&](double& out, bool positive) {
      double v = 0;
      if (!parseDouble(value, v) || v < 0 || (positive && v == 0)) return false;
      out = v;
      return true;
    };
    if (flag.rfind("--", 0) != 0) return usage("unexpected argument '" + flag + "'");
    static const std::string kKnown =
        " --engine --workers --host --port --hosts --model --seed --speedup --block-size"
        " --num-blocks --prefill-us-per-token --prefill-base-ms --itl-ms --keepalive-timeout-ms "
        "--max-concurrency"
        " --default-max-tokens --max-model-len --fail-requests --fail-status --stall-ms"
        " --close-mid-stream-after --event-delay-ms --log-level --models-dir"
        " --kv-events-port --kv-events-topic --kv-events-encoding --kv-events-hash-algo"
        " --kv-events-hash-seed --kv-events-replay-port --kv-events-replay-buffer"
        " --kv-events-dp-ranks --timing --profile --step-weights-ms --step-kv-ms-per-token"
        " --step-prefill-ms-per-token --step-attn-ms-per-pair --step-overhead-ms"
        " --step-seq-overhead-ms --prefill-factor --max-num-seqs --max-num-batched-tokens"
        " --role --pd-transfer-us-per-block --pd-hold-ms --pd-wait-ms --pd-bootstrap-port"
        " --pd-connector"
        " --api-ms --step-jitter --tls-cert --tls-key --detokenize-clean-up ";
    bool known =
        flag.find(' ') == std::string::npos && kKnown.find(" " + flag + " ") != std::string::npos;
    if (!known) return usage("unknown flag '" + flag + "'");
    if (!need()) return usage(flag + " needs a value");
    constexpr uint64_t kBig = uint64_t{1} << 40;
    bool ok = true;
    if (flag == "--engine") {
      if (value != "vllm" && value != "sglang" && value != "trtllm")
        return usage("engine " + value + " not supported yet (vllm, sglang, trtllm)");
      o.cfg.engine = value;
      o.cfg.kv_events.sglang = value == "sglang";
      o.cfg.kv_events.trtllm = value == "trtllm";
    } else if (flag == "--role") {
      o.cfg.roles.clear();
      for (size_t a = 0; a <= value.size();) {
        size_t b = value.find(',', a);
        if (b == std::string::npos) b = value.size();
        std::string r = value.substr(a, b - a);
        if (r != "prefill" && r != "decode" && r != "both")
          return usage("--role takes prefill, decode or both (or a comma list), not '" + r + "'");
        o.cfg.roles.push_back(r == "both" ? "" : r);
        a = b + 1;
      }
    } else if (flag == "--pd-transfer-us-per-block") {
      ok = realArg(o.cfg.pd_transfer_us_per_block, false);
    } else if (flag == "--pd-hold-ms") {
      ok = intArg(1, kBig, o.cfg.pd_hold_ms);
    } else if (flag == "--pd-wait-ms") {
      ok = intArg(1, kBig, o.cfg.pd_wait_ms);
    } else if (flag == "--pd-connector") {
      if (value != "nixl" && value != "p2p")
        return usage("--pd-connector takes nixl or p2p, not '" + value + "'");
      o.cfg.pd_push = value == "p2p";
    } else if (flag == "--pd-bootstrap-port") {
      ok = intArg(1, 65535, o.cfg.pd_bootstrap_port);
    } else if (flag == "--tls-cert") {
      o.tls_cert = value;
    } else if (flag == "--tls-key") {
      o.tls_key = value;
    } else if (flag == "--workers") {
      ok = intArg(1, 1024, o.workers);
      o.workers_set = true;
    } else if (flag == "--host") {
      ok = net::isIpLiteral(value);
      o.host = value;
    } else if (flag == "--port") {
      ok = uintArg(0, 65535, o.port);
    } else if (flag == "--hosts") {
      std::string err;
      o.hosts.clear();
      if (!parseHosts(value, o.hosts, err)) return usage("--hosts: " + err);
    } else if (flag == "--model") {
      if (value.empty()) return usage("--model needs a non-empty name");
      if (!o.models_set) o.cfg.models.clear();
      o.models_set = true;
      o.cfg.models.push_back(value);
    } else if (flag == "--detokenize-clean-up") {
      if (value == "model")
        o.cfg.detokenize_clean_up.reset();
      else if (value == "on" || value == "off")
        o.cfg.detokenize_clean_up = value == "on";
      else
        return usage("--detokenize-clean-up takes model, on or off");
    } else if (flag == "--models-dir") {
      if (value.empty()) return usage("--models-dir needs a directory");
      o.cfg.models_dir = value;
    } else if (flag == "--seed") {
      ok = uintArg(0, UINT64_MAX, o.cfg.seed);
    } else if (flag == "--speedup") {
      ok = realArg(o.cfg.speedup, true);
    } else if (flag == "--block-size") {
      ok = intArg(1, 4096, o.cfg.block_size);
    } else if (flag == "--num-blocks") {
      ok = intArg(1, uint64_t{1} << 32, o.cfg.num_blocks);
    } else if (flag == "--prefill-us-per-token") {
      ok = realArg(o.cfg.prefill_us_per_token, false);
    } else if (flag == "--prefill-base-ms") {
      ok = realArg(o.cfg.prefill_base_ms, false);
    } else if (flag == "--keepalive-timeout-ms") {
      ok = uintArg(1, 86400000, o.cfg.keepalive_timeout_ms);
    } else if (flag == "--itl-ms") {
      ok = realArg(o.cfg.itl_ms, false);
    } else if (flag == "--timing") {
      ok = value == "step" || value == "fixed";
      o.cfg.fixed_timing = value == "fixed";
    } else if (flag == "--profile") {
      auto p = stepProfile(value);
      ok = p.has_value();
      if (p) {  // keeps a --prefill-factor given before it
        p->prefill_factor = o.cfg.step.prefill_factor;
        o.cfg.step = *p;
      }
    } else if (flag == "--step-weights-ms") {
      ok = realArg(o.cfg.step.w_ms, false);
    } else if (flag == "--step-kv-ms-per-token") {
      ok = realArg(o.cfg.step.kv_ms_per_tok, false);
    } else if (flag == "--step-prefill-ms-per-token") {
      ok = realArg(o.cfg.step.p_ms_per_tok, false);
    } else if (flag == "--step-attn-ms-per-pair") {
      ok = realArg(o.cfg.step.a_ms_per_pair, false);
    } else if (flag == "--step-overhead-ms") {
      ok = realArg(o.cfg.step.o_step_ms, false);
    } else if (flag == "--step-seq-overhead-ms") {
      ok = realArg(o.cfg.step.o_seq_ms, false);
    } else if (flag == "--prefill-factor") {
      ok = realArg(o.cfg.step.prefill_factor, true);
    } else if (flag == "--max-num-seqs") {
      ok = intArg(1, 1u << 20, o.cfg.limits.max_num_seqs);
    } else if (flag == "--max-num-batched-tokens") {
      ok = intArg(1, 1u << 24, o.cfg.limits.max_batched_tokens);
    } else if (flag == "--api-ms") {
      ok = realArg(o.cfg.api_ms, false);
    } else if (flag == "--step-jitter") {
      ok = realArg(o.cfg.jitter, false);
    } else if (flag == "--max-concurrency") {
      ok = intArg(1, 1u << 20, o.cfg.max_concurrency);
    } else if (flag == "--default-max-tokens") {
      ok = intArg(1, 1u << 24, o.cfg.default_max_tokens);
    } else if (flag == "--max-model-len") {
      ok = intArg(1, 1u << 30, o.cfg.max_model_len);
    } else if (flag == "--fail-requests") {
      ok = intArg(0, kBig, f.fail_requests);
    } else if (flag == "--fail-status") {
      ok = intArg(400, 599, f.fail_status);
    } else if (flag == "--stall-ms") {
      ok = intArg(0, kBig, f.stall_ms);
    } else if (flag == "--close-mid-stream-after") {
      ok = intArg(0, kBig, f.close_mid_stream_after);
    } else if (flag == "--log-level") {
      static const std::pair<const char*, log::Level> kLevels[] = {{"debug", log::Level::kDebug},
                                                                   {"info", log::Level::kInfo},
                                                                   {"warn", log::Level::kWarn},
                                                                   {"error", log::Level::kError}};
      ok = false;
      for (const auto& [name, level] : kLevels)
        if (value == name) {
          log::setLevel(level);
          ok = true;
        }
    } else if (flag == "--event-delay-ms") {
      ok = intArg(0, kBig, f.event_delay_ms);
    } else if (flag == "--kv-events-port") {
      ok = intArg(0, 65535, o.cfg.kv_events.port);
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-topic") {
      o.cfg.kv_events.topic = value;
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-encoding") {
      ok = value == "map" || value == "positional";
      o.cfg.kv_events.encoding = value == "positional" ? engines::VllmEventEncoding::kPositional
                                                       : engines::VllmEventEncoding::kMap;
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-hash-algo") {
      auto a = engines::parseVllmHashAlgo(value);
      ok = a.has_value();
      if (a) o.cfg.kv_events.algo = *a;
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-replay-port") {
      ok = intArg(0, 65535, o.cfg.kv_events.replay_port);
      o.cfg.kv_events.replay = true;
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-dp-ranks") {
      ok = intArg(1, 16, o.cfg.kv_events.dp_ranks);
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-replay-buffer") {
      ok = intArg(1, 1000000, o.cfg.kv_events.replay_buffer);
      o.cfg.kv_events.enabled = true;
    } else if (flag == "--kv-events-hash-seed") {
      o.cfg.kv_events.hash_seed = value;
      o.cfg.kv_events.enabled = true;
    }
    if (!ok) return usage("bad value '" + value + "' for " + flag);
    static const std::string kFixedOnly =
        " --prefill-us-per-token --prefill-base-ms --itl-ms --max-concurrency ";
    static const std::string kStepOnly =
        " --profile --step-weights-ms --step-kv-ms-per-token --step-prefill-ms-per-token"
        " --step-attn-ms-per-pair --step-overhead-ms --step-seq-overhead-ms --prefill-factor"
        " --max-num-seqs --max-num-batched-tokens --api-ms --step-jitter ";
    if (kFixedOnly.find(" " + flag + " ") != std::string::npos) fixed_flag = flag;
    if (kStepOnly.find(" " + flag + " ") != std::string::npos) step_flag = flag;
  }
  // A knob of the other timing model would be ignored: say so instead.
  if (!o.cfg.fixed_timing && !fixed_flag.empty())
    return usage(fixed_flag + " belongs to --timing fixed (the default is --timing step)");
  if (o.cfg.fixed_timing && !step_flag.empty())
    return usage(step_flag + " belongs to --timing step, not --timing fixed");
  if (!o.hosts.empty()) {
    if (o.workers_set && o.workers != o.hosts.size())
      return usage("--workers " + std::to_string(o.workers) + " conflicts with --hosts (" +
                   std::to_string(o.hosts.size()) + " addresses)");
    o.workers = o.hosts.size();
  }
  if (o.hosts.empty() && o.cfg.kv_events.port != 0 &&
      o.cfg.kv_events.port + o.workers - 1 > 65535) {
    return usage("KV-event ports " + std::to_string(o.cfg.kv_events.port) + ".." +
                 std::to_string(o.cfg.kv_events.port + o.workers - 1) + " exceed 65535");
  }
  if (o.hosts.empty() && o.port != 0 && o.port + o.workers - 1 > 65535) {
    return usage("ports " + std::to_string(o.port) + ".." + std::to_string(o.port + o.workers - 1) +
                 " exceed 65535");
  }
  return 0;
}

std::string urlOf(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Binds every worker; returns an error message or "".
std::string bindAll(const Options& o, Fleet& fleet) {
  if (o.hosts.empty()) {
    for (size_t i = 0; i < fleet.size(); ++i) {
      auto port = static_cast<uint16_t>(o.port == 0 ? 0 : o.port + i);
      auto r = fleet[i]->listen(o.host, port);
      if (!r) return r.error().what;
    }
    return {};
  }
  if (o.port != 0) {
    for (size_t i = 0; i < fleet.size(); ++i) {
      auto r = fleet[i]->listen(o.hosts[i], static_cast<uint16_t>(o.port));
      if (!r) return r.error().what;
    }
    return {};
  }
  // --port 0 with --hosts: a port free on the first host, then the same port on the others.
  std::string last_err;
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto first = fleet[0]->listen(o.hosts[0], 0);
    if (!first) return first.error().what;
    bool ok = true;
    for (size_t i = 1; i < fleet.size() && ok; ++i) {
      auto r = fleet[i]->listen(o.hosts[i], *first);
      if (!r) {
        last_err = r.error().what;
        ok = false;
      }
    }
    if (ok) return {};
    for (auto& w : fleet) w->unlisten();
  }
  return "no common free port on all hosts: " + last_err;
}

// Stops every worker and drains the io_context for up to 2 s. True when nothing was left.
bool shutdown(asio::io_context& io, Fleet& fleet) {
  for (auto& w : fleet) w->stop();
  io.stop();
  io.restart();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (io.run_one_until(until) != 0) {
  }
  return io.stopped();
}

// Frees the fleet and the io_context after a clean drain; otherwise leaves them (the process is
// exiting, and pending coroutines still point into the workers).
void release(asio::io_context* io, Fleet* fleet, bool clean) {
  if (!clean) return;
  fleet->clear();
  delete fleet;
  delete io;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parseArgs(argc, argv, o); rc != 0) return rc == 1 ? 0 : rc;
  std::signal(SIGPIPE, SIG_IGN);
  // Tokenizers: the real one for each model whose files are in --models-dir, else the stand-in.
  nlohmann::ordered_json tokenizers = nlohmann::ordered_json::object();
  for (const auto& m : o.cfg.models) {
    auto t = makeTokenizer(m, o.cfg.models_dir);
    if (!t) {
      std::cerr << "kvgate sim: tokenizer for model " << m << ": " << t.error().what << "\n";
      return 2;
    }
    o.cfg.tokenizers[m] = *t;
    tokenizers[m] = (*t)->kind();
  }

  if (o.tls_cert.empty() != o.tls_key.empty()) {
    std::cerr << "kvgate sim: --tls-cert and --tls-key go together\n";
    return 2;
  }
  if (!o.tls_cert.empty()) {
    auto t = http::TlsFiles::load(o.tls_cert, o.tls_key);
    if (!t) {
      std::cerr << "kvgate sim: " << t.error().what << "\n";
      return 2;
    }
    o.cfg.tls = std::move(*t);
  }
  o.cfg.kv_events.same_port = !o.hosts.empty();
  o.cfg.kv_hash_seed =
      o.cfg.kv_events.hash_seed.empty() ? randomHashSeed() : o.cfg.kv_events.hash_seed;
  auto* io = new asio::io_context(1);
  auto* fleet = new Fleet;
  static PdExchange exchange;  // outlives the fleet (its holds never release into a gone worker)
  o.cfg.pd_exchange = &exchange;
  for (size_t i = 0; i < o.workers; ++i)
    fleet->push_back(std::make_unique<Worker>(*io, o.cfg, i, fleet));
  if (std::string err = bindAll(o, *fleet); !err.empty()) {
    std::cerr << "kvgate sim: " << err << "\n";
    release(io, fleet, shutdown(*io, *fleet));
    return 1;
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (auto& w : *fleet) {
    if (auto r = w->applyInitialFaults(); !r) {
      std::cerr << "kvgate sim: " << r.error().what << "\n";
      release(io, fleet, shutdown(*io, *fleet));
      return 1;
    }
    nlohmann::ordered_json entry = {
        {"host", w->host()}, {"port", w->port()}, {"url", urlOf(w->host(), w->port())}};
    if (!w->role().empty()) entry["role"] = w->role();
    if (w->kvEventsPort()) entry["kv_events_port"] = w->kvEventsPort();
    if (w->kvReplayPort()) entry["kv_replay_port"] = w->kvReplayPort();
    list.push_back(entry);
  }
  nlohmann::ordered_json ready = {
      {"event", "ready"}, {"engine", o.cfg.engine}, {"workers", list}, {"tokenizers", tokenizers}};
  std::cout << ready.dump() << "\n";
  std::cout.flush();
  log::info("sim", "ready: " + std::to_string(fleet->size()) + " " + o.cfg.engine + " worker(s)");

  {
    asio::signal_set signals(*io, SIGINT, SIGTERM);
    signals.async_wait([io](const error_code& ec, int sig) {
      if (ec) return;
      log::info("sim", "signal " + std::to_string(sig) + ": stopping");
      io->stop();
    });
    io->run();
  }  // the signal_set goes before the io_context can be freed
  bool clean = shutdown(*io, *fleet);
  if (!clean) log::warn("sim", "requests still pending after 2 s; exiting anyway");
  release(io, fleet, clean);
  return 0;
}

}  // namespace kvgate::sim
