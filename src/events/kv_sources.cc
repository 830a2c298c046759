#include "events/kv_sources.h"

#include <map>

namespace kvgate::events {

namespace {
template <typename T>
T argOr(const nlohmann::json& sa, const char* k, T dflt) {
  auto it = sa.find(k);
  if (it == sa.end() || it->is_null()) return dflt;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return dflt;
  }
}
}  // namespace

std::string publisherKey(const config::RuleSpec& r, size_t ep_idx) {
  const int mode = argOr<int>(r.service_args, "kvExactMode", 0);
  const auto engine = argOr<std::string>(r.service_args, "kvEngineType", "vllm");
  if ((mode != 1 && mode != 3) || ep_idx >= r.endpoints.size() || engine == "llamacpp") return "";
  if (!argOr<std::string>(r.service_args, "kvIndexAddr", "").empty()) return "";  // remote index
  const auto& ep = r.endpoints[ep_idx];
  if (mode == 1 && ep.role != 1) return "";
  const int port = engine == "trtllm" ? ep.port : argOr<int>(r.service_args, "kvZmqPort", 5557);
  return ep.ip + ":" + std::to_string(port);
}

std::string hashAlgoOf(const config::RuleSpec& r) {
  const auto engine = argOr<std::string>(r.service_args, "kvEngineType", "vllm");
  return argOr<std::string>(r.service_args, "kvHashAlgo",
                            engine == "sglang"   ? "sha256_sglang"
                            : engine == "trtllm" ? "blockhash_trtllm"
                                                 : "sha256_cbor");
}

Result<std::vector<SourceSpec>> kvSources(const std::vector<config::RuleSpec>& rules,
                                          const BackendTlsOf& tls_of) {
  struct Seen {
    SourceSpec spec;
    std::string engine;
    int block_size;
    std::string rule;
  };
  std::map<std::string, Seen> seen;
  for (const auto& r : rules) {
    const int mode = argOr<int>(r.service_args, "kvExactMode", 0);
    if (mode != 1 && mode != 3) continue;
    // A rule reading a remote `kvgate index` follows no events itself.
    if (!argOr<std::string>(r.service_args, "kvIndexAddr", "").empty()) continue;
    const auto port = argOr<int>(r.service_args, "kvZmqPort", 5557);
    const auto ranks = argOr<int>(r.service_args, "kvDpRankCount", 1);
    const auto engine = argOr<std::string>(r.service_args, "kvEngineType", "vllm");
    const auto block_size = argOr<int>(r.service_args, "kvBlockSize", 16);
    const auto replay = argOr<int>(r.service_args, "kvReplayPort", 0);
    const auto algo = hashAlgoOf(r);
    // vLLM and SGLang publish over ZMQ (SGLang's events are positional vLLM events with signed
    // hashes: one decoder); TensorRT-LLM is drained over HTTP on its serving port; llama.cpp
    // publishes none.
    if (engine != "vllm" && engine != "sglang" && engine != "trtllm") continue;
    const bool drain = engine == "trtllm";
    if (port + ranks - 1 > 65535)
      return fail(400, "kvDpRankCount",
                  "rule " + r.key() + ": kvZmqPort " + std::to_string(port) + " + " +
                      std::to_string(ranks) + " DP ranks runs past port 65535");
    if (replay > 0 && replay + ranks - 1 > 65535)
      return fail(400, "kvReplayPort",
                  "rule " + r.key() + ": kvReplayPort " + std::to_string(replay) + " + " +
                      std::to_string(ranks) + " DP ranks runs past port 65535");
    if (replay > 0 && replay < port + ranks && port < replay + ranks)
      return fail(400, "kvReplayPort",
                  "rule " + r.key() + ": the replay ports " + std::to_string(replay) + ".." +
                      std::to_string(replay + ranks - 1) + " overlap the event ports " +
                      std::to_string(port) + ".." + std::to_string(port + ranks - 1));
    for (const auto& ep : r.endpoints) {
      if (mode == 1 && ep.role != 1) continue;  // P/D: only prefill endpoints publish and score
      SourceSpec s{ep.ip,
                   drain ? ep.port : static_cast<uint16_t>(port),
                   ranks,
                   "",
                   drain ? uint16_t{0} : static_cast<uint16_t>(replay),
                   algo,
                   drain,
                   static_cast<uint32_t>(block_size)};
      if (drain && r.security == 2) {
        s.tls = r.backend_tls;
        if (tls_of) s.tls_files = tls_of(r);
        s.tls_name = ep.json.is_object() ? ep.json.value("domainName", "") : "";
        if (s.tls_name.empty()) s.tls_name = ep.ip;
      }
      auto [it, fresh] = seen.emplace(s.key(), Seen{s, engine, block_size, r.key()});
      if (fresh) continue;
      const Seen& o = it->second;
      if (o.spec.hash_algo != algo)
        return fail(400, "kvHashAlgo",
                    "KV events of " + s.key() + " are named by rule " + o.rule + " (kvHashAlgo " +
                        o.spec.hash_algo + ") and by rule " + r.key() + " (kvHashAlgo " + algo +
                        "): one engine hashes one way");
      if (o.engine != engine || o.block_size != block_size || o.spec.dp_ranks != ranks ||
          o.spec.replay_port != s.replay_port)
        return fail(400, "kvZmqPort",
                    "KV events of " + s.key() + " are named by rule " + o.rule + " (" + o.engine +
                        ", block size " + std::to_string(o.block_size) + ", " +
                        std::to_string(o.spec.dp_ranks) + " rank(s), replay port " +
                        std::to_string(o.spec.replay_port) + ") and by rule " + r.key() + " (" +
                        engine + ", block size " + std::to_string(block_size) + ", " +
                        std::to_string(ranks) + " rank(s), replay port " + std::to_string(replay) +
                        "): one inventory cannot be both");
      if (o.spec.tls != s.tls || o.spec.tls_name != s.tls_name)
        return fail(400, "security",
                    "the TensorRT-LLM engine " + s.key() + " is drained by rule " + o.rule +
                        (o.spec.tls ? " over TLS" : " over plain HTTP") + " and by rule " +
                        r.key() + (s.tls ? " over TLS" : " over plain HTTP") +
                        (o.spec.tls && s.tls ? " with other mtls_backend fields or domainName"
                                             : "") +
                        ": one engine serves one way");
    }
  }
  std::vector<SourceSpec> out;
  size_t slots = 0;
  for (auto& [k, s] : seen) {
    out.push_back(s.spec);
    slots += static_cast<size_t>(s.spec.dp_ranks);
  }
  if (slots > kv::kMaxWorkers)
    return fail(400, "kvExactMode",
                "the rules name " + std::to_string(slots) +
                    " KV-event publishers (ranks counted); "
                    "the KV index follows at most " +
                    std::to_string(kv::kMaxWorkers));
  return out;
}

}  // namespace kvgate::events
