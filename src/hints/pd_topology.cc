#include "hints/pd_topology.h"

#include <openssl/sha.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace kvgate::hints {

std::string affinityPick(std::vector<std::string> ids, std::string_view seed) {
  if (ids.empty()) return {};
  std::sort(ids.begin(), ids.end());
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(seed.data()), seed.size(), d);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return ids[v % ids.size()];
}

Result<PdTopology> parseReplicas(std::string_view text) {
  using nlohmann::json;
  if (text.size() > 4 * 1024 * 1024) return fail(400, "replicas", "replicas file over 4 MiB");
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("replicas") ||
      !doc["replicas"].is_array())
    return fail(400, "replicas", "the replicas file is a JSON object with a \"replicas\" array");
  PdTopology t;
  std::set<std::string> ids;
  size_t i = 0;
  for (const json& r : doc["replicas"]) {
    const std::string at = "replicas[" + std::to_string(i++) + "]";
    if (!r.is_object()) return fail(400, at, at + " must be an object");
    ReplicaConfig c;
    for (auto it = r.begin(); it != r.end(); ++it) {
      const std::string& k = it.key();
      const std::string f = at + "." + k;
      auto str = [&](std::string& out) -> Result<void> {
        if (!it->is_string() || it->get<std::string>().size() > 256)
          return fail(400, f, f + " must be a string of at most 256 bytes");
        out = it->get<std::string>();
        return {};
      };
      Result<void> ok;
      if (k == "id") ok = str(c.id);
      else if (k == "model") ok = str(c.model);
      else if (k == "tenant") ok = str(c.tenant);
      else if (k == "hash_scheme") ok = str(c.hash_scheme);
      else if (k == "engine") ok = str(c.engine);
      else if (k == "events") ok = str(c.events);
      else if (k == "role") ok = str(c.role);
      else if (k == "transport") ok = str(c.transport);
      else if (k == "block_size") {
        if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > 4096)
          return fail(400, f, f + " must be an integer in [1, 4096]");
        c.block_size = static_cast<uint32_t>(it->get<uint64_t>());
      } else {
        return fail(400, f, "unknown field " + f);
      }
      if (!ok) return tl::unexpected(ok.error());
    }
    if (c.id.empty()) return fail(400, at + ".id", at + ".id is required");
    if (c.model.empty()) return fail(400, at + ".model", at + ".model is required");
    if (c.hash_scheme.empty()) return fail(400, at + ".hash_scheme", "hash_scheme is empty");
    if (c.role != "prefill" && c.role != "decode" && c.role != "both")
      return fail(400, at + ".role", at + ".role must be prefill, decode or both");
    if (c.engine != "vllm" && c.engine != "sglang")
      return fail(400, at + ".engine", at + ".engine must be vllm or sglang");
    if (!ids.insert(c.id).second) return fail(400, at + ".id", "replica id " + c.id + " repeats");
    t.replicas.push_back(std::move(c));
  }
  return t;
}

}  // namespace kvgate::hints
