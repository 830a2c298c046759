#include "routing/prefix_key.h"

#include <xxhash.h>

#include <string>

namespace kvgate::routing {

std::optional<uint64_t> prefixKey(const RequestFacts& f) {
  if (!f.parsed || !f.has_prompt || f.prompt_prefix.empty()) return std::nullopt;
  thread_local std::string material;  // reused: no allocation once warm
  material.assign(f.model);
  material.push_back('\0');
  material += f.cache_salt;
  material.push_back('\0');
  material.append(f.prompt_prefix, 0, std::min(f.prompt_prefix.size(), f.prefix_key_len));
  return XXH3_64bits(material.data(), material.size());
}

}  // namespace kvgate::routing
