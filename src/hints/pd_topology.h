// The replicas file of `kvgate index --replicas FILE`: each replica's identity in the index
// (id, model, tenant, hash scheme), where its engine publishes KV events, and its P/D role.
//
//   {"replicas": [{"id": "r1", "model": "m", "tenant": "t", "hash_scheme": "vllm",
//                  "engine": "vllm" | "sglang", "events": "tcp://127.0.0.1:5557",
//                  "block_size": 16, "role": "prefill" | "decode" | "both",
//                  "transport": "NIXL" | "Mooncake" | "Direct"}]}
//
// id and model are required; tenant defaults to "default" (what a gateway rule sends unless its
// kvIndexTenant says otherwise: an empty tenant never matches a lookup), hash_scheme to
// "vllm", role to "both", transport to "NIXL", block_size to 16. LookupPDRoute answers from the
// roles (upstream ships a stub that always answers NO_HINT): the prefill replica holding the
// prefix (PREFIX_MATCH), else both picked by the affinity formula over the role's replicas
// (AFFINITY_HINT); NO_HINT without a prefix key or without both roles for the model.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::hints {

struct ReplicaConfig {
  std::string id, model, tenant = "default", hash_scheme = "vllm", engine = "vllm", events, role = "both",
                                  transport = "NIXL";
  uint32_t block_size = 16;
  bool prefill() const { return role == "prefill" || role == "both"; }
  bool decode() const { return role == "decode" || role == "both"; }
};

struct PdTopology {
  std::vector<ReplicaConfig> replicas;
};

Result<PdTopology> parseReplicas(std::string_view json);

// The affinity formula: sorted(ids)[BE_u64(SHA256(seed)[:8]) % n]; "" when ids is empty.
std::string affinityPick(std::vector<std::string> ids, std::string_view seed);

}  // namespace kvgate::hints
