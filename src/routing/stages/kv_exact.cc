#include "routing/stages/kv_exact.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <vector>

#include "common/log.h"
#include "kv/fingerprint.h"

namespace kvgate::routing {
namespace {

class KvExactStage : public Stage {
 public:
  KvExactStage(const StageServices& s, const kv::KvIndex& index, const kv::WorkerLookup& lookup,
               KvExactOptions opts)
      : index_(index), lookup_(lookup), opts_(opts) {
    for (const auto& ep : s.endpoints)
      keys_.push_back(ep.state->ip + ":" + std::to_string(opts_.zmq_port));
  }

  uint32_t needs() const override { return kNeedPromptText | kNeedPromptPrefix; }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    const RequestFacts* f = ctx.facts;
    if (!f || f->prompt_token_ids.empty() || opts_.block_size == 0)
      return StageResult::fall(FallReason::kTokenize);
    // Per-thread scratch: no allocation per request once warm.
    thread_local std::vector<uint32_t> tokens;
    thread_local std::vector<uint64_t> chain;
    thread_local std::vector<LawCandidate> cands;
    thread_local std::vector<int> index_of;
    tokens.clear();
    for (int64_t t : f->prompt_token_ids) {
      if (t < 0 || t > UINT32_MAX) return StageResult::fall(FallReason::kTokenize);
      tokens.push_back(static_cast<uint32_t>(t));
    }
    const size_t blocks = tokens.size() / opts_.block_size;
    chain.resize(blocks);
    const size_t n = kv::prefixChain(tokens.data(), tokens.size(), opts_.block_size,
                                     kv::partitionRoot("", f->cache_salt), chain.data(), blocks);
    uint64_t all = 0;
    thread_local std::vector<uint64_t> masks;
    masks.assign(c.size(), 0);
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.excluded[i]) continue;
      masks[i] = lookup_.workersOf(keys_[i]);
      all |= masks[i];
    }
    if (all == 0) return StageResult::fall(FallReason::kNoWorker);
    std::array<uint32_t, kv::kMaxWorkers> overlap{};
    index_.score(chain.data(), n, all, overlap);
    cands.clear();
    index_of.clear();
    uint32_t best = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.excluded[i]) continue;
      uint32_t ov = 0;
      for (uint64_t m = masks[i]; m; m &= m - 1)
        ov = std::max(ov, overlap[static_cast<size_t>(std::countr_zero(m))]);
      best = std::max(best, ov);
      const auto load = c.endpoints[i].state->active.load(std::memory_order_relaxed);
      cands.push_back({ov, static_cast<uint32_t>(std::max<int64_t>(0, load)), 0});
      index_of.push_back(static_cast<int>(i));
    }
    if (cands.empty()) return StageResult::fall(FallReason::kAllExcluded);
    if (static_cast<uint64_t>(best) * opts_.block_size < opts_.min_match_tokens)
      return StageResult::fall(FallReason::kShallow);
    LawParams p = opts_.law;
    p.prompt_blocks = static_cast<uint32_t>(n);
    LawResult r = applyLaw(cands, p);
    if (r.index < 0) return StageResult::fall(FallReason::kAllExcluded);
    return StageResult::pick(index_of[static_cast<size_t>(r.index)], DecisionKey::kKvOverlap,
                             r.spilled);
  }

 private:
  const kv::KvIndex& index_;
  const kv::WorkerLookup& lookup_;
  KvExactOptions opts_;
  std::vector<std::string> keys_;  // per endpoint: its publisher's key
};

class NoKvStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    return StageResult::fall(FallReason::kNoWorker);
  }
};

int64_t envInt(const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    log::warn("routing", std::string("ignoring ") + name + "='" + v + "' (not " +
                             std::to_string(lo) + ".." + std::to_string(hi) + "); using " +
                             std::to_string(dflt));
    return dflt;
  }
  return x;
}

}  // namespace

KvExactOptions kvExactOptions(const config::RuleSpec& rule) {
  KvExactOptions o;
  const auto& sa = rule.service_args;
  o.block_size = static_cast<uint32_t>(sa.value("kvBlockSize", 16));
  o.zmq_port = static_cast<uint16_t>(sa.value("kvZmqPort", 5557));
  o.min_match_tokens = static_cast<uint32_t>(envInt("LLB_KV_MIN_MATCH_TOKENS", 0, 4096, 16));
  o.law.mean_load_factor_pct =
      static_cast<uint32_t>(envInt("LOXILB_KV_MEAN_LOAD_FACTOR", 100, 300, 175));
  if (const char* m = std::getenv("LOXILB_KV_LB_MODE"); m && *m) {
    if (auto mode = parseLawMode(m))
      o.law.mode = *mode;
    else
      log::warn("routing", std::string("LOXILB_KV_LB_MODE='") + m +
                               "' is not off, hard, soft, "
                               "adaptive or adaptive-soft: using hard");
  }
  if (const char* r = std::getenv("LOXILB_KV_SPILL_RELIEF"); r && *r)
    o.law.spill_relief = std::string_view(r) != "off" && std::string_view(r) != "0";
  return o;
}

std::unique_ptr<Stage> makeKvExactFromServices(const StageServices& s) {
  if (!s.kv_index || !s.kv_lookup) return std::make_unique<NoKvStage>();
  return makeKvExact(s, *s.kv_index, *s.kv_lookup, kvExactOptions(s.rule));
}

std::unique_ptr<Stage> makeKvExact(const StageServices& s, const kv::KvIndex& index,
                                   const kv::WorkerLookup& lookup, KvExactOptions opts) {
  return std::make_unique<KvExactStage>(s, index, lookup, opts);
}

}  // namespace kvgate::routing
