// The stages of the P/D ladder (seed 000): a P/D rule's prefill pick runs
// [kv_exact (kvExactMode 1)] -> min_load, over the prefill endpoints (ep_role 1) that are not
// masked (down, breaker open, failed for this request); its decode pick runs min_load over the
// decode endpoints (ep_role 2). Tier 0 (session) and Tier 1 (prefix trie) join in front.
#pragma once
#include <memory>

#include "routing/stage.h"

namespace kvgate::routing {

std::unique_ptr<Stage> makeMinLoad(const StageServices& s);  // min_load (Tier 2): min_load.cc

}  // namespace kvgate::routing
