// prefix_trie: Tier 1 of the P/D ladder (seed 000, "Tier 1 — radix-trie prefix affinity").
//
// Algorithm: bypassed (falls, reason imbalance) when the in-flight counts of the prefill
// candidates differ by more than pd_balance_abs_threshold (max - min; a hot endpoint is not made
// hotter). Otherwise the request's rendered prompt walks the rule's PrefixTrie; the deepest
// matched node names the endpoint that last served that prefix, which is picked when the match
// covers at least pd_cache_threshold percent of the prompt (of its first 16 KiB when longer; else
// falls: shallow) and it is still a
// candidate (else: excluded). Every P/D pick, by any tier, is recorded in the trie (observe).
// Knobs: pd_cache_aware_mode (the stage is in the ladder), pd_cache_threshold (percent,
// default 20), pd_balance_abs_threshold (default 3), LOXILB_PD_TRIE_MAX_NODES (262144).
// Falls: no_key (no prompt), imbalance, no_worker (nothing matched), shallow, excluded.
#include "routing/stages/prefix_trie.h"

#include <xxhash.h>

#include "routing/stages/pd_ladder.h"

namespace kvgate::routing {

void trieChain(std::string_view model, std::string_view salt, std::string_view text,
               std::vector<TrieNode>& out) {
  out.clear();
  // Each chunk is hashed unseeded (a seeded XXH3 of more than 240 bytes derives a secret per
  // call) and folded into the chain with a seeded hash of the 8-byte pair.
  auto fold = [](uint64_t h, uint64_t c) { return XXH3_64bits_withSeed(&c, sizeof c, h); };
  uint64_t h = XXH3_64bits_withSeed(model.data(), model.size(), 0x7472'6965);  // "trie"
  h = fold(h, XXH3_64bits(salt.data(), salt.size()));
  for (size_t at = 0; at < text.size();) {
    const size_t step = at < kTrieFineBytes ? kTrieChunk : kTrieCoarseChunk;
    const size_t n = std::min(step, text.size() - at);
    h = fold(h, XXH3_64bits(text.data() + at, n));
    at += n;
    out.push_back({h, at});
  }
}

namespace {

class PrefixTrieStage : public Stage {
 public:
  PrefixTrieStage(const StageServices& s, PrefixTrie& trie) : endpoints_(s.endpoints), trie_(trie) {
    const auto& sa = s.rule.service_args;
    if (sa.is_object()) {
      threshold_pct_ = sa.value("pd_cache_threshold", int64_t{20});
      balance_abs_ = sa.value("pd_balance_abs_threshold", int64_t{3});
    }
  }
  uint32_t needs() const override { return kNeedPromptPrefix | kNeedPromptRender; }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    const std::vector<TrieNode>* chain = chainOf(ctx);
    if (!chain) return StageResult::fall(FallReason::kNoKey);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.excluded[i]) continue;
      const int64_t a = c.endpoints[i].state->active.load(std::memory_order_relaxed);
      lo = std::min(lo, a);
      hi = std::max(hi, a);
    }
    if (lo == INT64_MAX) return StageResult::fall(FallReason::kAllExcluded);
    if (hi - lo > balance_abs_) return StageResult::fall(FallReason::kImbalance);
    const PrefixTrie::Match m = matchOf(ctx);
    if (m.bytes == 0) return StageResult::fall(FallReason::kNoWorker);
    // Coverage of the prompt, or of its first kTrieRenderBytes when it is longer (the trie sees
    // no further): a long prompt can still match.
    const size_t total = std::min(ctx.facts->prompt_render_total, ctx.facts->prompt_prefix.size());
    if (static_cast<int64_t>(m.bytes) * 100 < threshold_pct_ * static_cast<int64_t>(total))
      return StageResult::fall(FallReason::kShallow);
    for (size_t i = 0; i < c.size(); ++i)
      if (c.endpoints[i].state->id == m.endpoint)
        return c.excluded[i] ? StageResult::fall(FallReason::kExcluded)
                             : StageResult::pick(static_cast<int>(i), DecisionKey::kPrefix);
    return StageResult::fall(FallReason::kExcluded);  // the endpoint left the rule
  }

  void observe(const RequestContext& ctx, int chosen) override {
    if (const std::vector<TrieNode>* chain = chainOf(ctx)) {
      trie_.insert(*chain, endpoints_[static_cast<size_t>(chosen)].state->id, matchOf(ctx));
      memo(ctx)->match_ready = false;  // the trie changed: a later look matches again
    }
  }

 private:
  // The request's chain and its match, computed once per request (its cycle-state slot).
  struct Memo {
    std::vector<TrieNode> chain;
    bool chain_ready = false;
    PrefixTrie::Match match;
    bool match_ready = false;
    void reset() {  // (a new request: the chain's capacity stays)
      chain.clear();
      chain_ready = match_ready = false;
    }
  };
  Memo* memo(const RequestContext& ctx) const {
    return ctx.cycle ? &ctx.cycle->slot<Memo>(this) : nullptr;
  }
  const std::vector<TrieNode>* chainOf(const RequestContext& ctx) const {
    const RequestFacts* f = ctx.facts;
    Memo* m = memo(ctx);
    if (!m || !f || !f->parsed || !f->has_prompt || f->prompt_prefix.empty()) return nullptr;
    if (!m->chain_ready) {
      trieChain(f->model, f->cache_salt, f->prompt_prefix, m->chain);
      m->chain_ready = true;
    }
    return &m->chain;
  }
  PrefixTrie::Match matchOf(const RequestContext& ctx) const {
    Memo* m = memo(ctx);
    if (!m) return {};
    if (!m->match_ready) {
      m->match = chainOf(ctx) ? trie_.longest(m->chain) : PrefixTrie::Match{};
      m->match_ready = true;
    }
    return m->match;
  }
  const std::vector<PoolEndpoint>& endpoints_;
  PrefixTrie& trie_;
  int64_t threshold_pct_ = 20;
  int64_t balance_abs_ = 3;
};

class NoTrieStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    return StageResult::fall(FallReason::kNoWorker);
  }
};

}  // namespace

std::unique_ptr<Stage> makePrefixTrie(const StageServices& s) {
  if (!s.trie) return std::make_unique<NoTrieStage>();
  return std::make_unique<PrefixTrieStage>(s, *s.trie);
}


}  // namespace kvgate::routing
