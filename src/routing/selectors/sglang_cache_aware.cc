// sglang, sglang-cli (no sel number; rule field `selector`): a re-implementation, from its
// published description (shared/reference/peers.md §1a and corrections), of the SGLang model
// gateway's `cache_aware` policy; not its code. It does not read KV events: it remembers which
// prompts it sent where (an approximate tree per worker) and assumes they are cached there.
//
//   1. Imbalanced when max_load - min_load > balance_abs AND max_load > balance_rel x min_load
//      (load = this gateway's in-flight requests): the least-loaded endpoint.
//   2. Otherwise the endpoint whose tree matches the longest prefix of the prompt, when
//      matched / prompt length > cache_threshold; else the endpoint with the smallest tree.
//   3. The prompt is inserted into the chosen endpoint's tree.
//   Eviction: every eviction_interval, each tree larger than max_tree_size loses its least
//   recently used entries until it fits (SGLang's background eviction).
//
// Parameter sets:            cache_threshold  balance_abs  balance_rel  eviction  max_tree_size
//   sglang (library struct)  0.5              32           1.1          30 s      10,000
//   sglang-cli (main.rs)     0.3              64           1.5          120 s     67,108,864
// Differences, documented: the tree is kept at 16-token block granularity over token ids (a
// token-id prompt), or over 64-byte chunks of the prompt text (SGLang's HTTP router matches
// characters), a partial last block is one more entry, sizes count entries x 16 (tokens; chunks
// of text count as 16 too); ties go to the lower index (SGLang's tree returns one tenant); a
// tree holds at most 2^20 entries whatever max_tree_size says, and eviction trims at most 65,536
// entries a decision. The trees are per stage: a rule update (a new pipeline) starts them empty.
// Threads: the data-plane threads share one mutex, held for the match and insert (no I/O).
//
// smg (no sel number): SMG's (Shepherd Model Gateway, ex-SGLang gateway) current cache_aware
// (smg-project/smg after PRs #2161 and #2341, command-line defaults; facts in
// shared/reference/peers.md and the PRs), over the same trees:
//   1. Prefix match as above (ratio > cache_threshold 0.3). On a hit, the candidates are the
//      endpoints holding the longest match (at most 8, SMG's matched-tenant cap; the lowest
//      indexes here, SMG's map order being arbitrary), minus those the load gate drops:
//      load_i > balance_rel (1.5) x mean load AND load_i > mean load + balance_abs (64), load =
//      this gateway's in-flight requests over the candidates not excluded. The pick is the least
//      expected wait among those left; if the gate dropped them all (a spill), among the
//      endpoints it does not drop, or among all when it drops every one.
//   2. A miss: the least expected wait over every candidate (no smallest-tree rule any more).
//   3. The chosen endpoint is inserted into its tree (hits, misses and spills alike).
//   Expected wait (SMG's LeastLoad model with the inputs an HTTP vLLM worker gives it, its
//   internal constants): (waiting_i x 1024 + 1024 x dispatched_i) / 2000 + 0.15 x k/(1 - k),
//   waiting_i the engine's waiting requests and k its KV usage (clamped to 0..0.999) from its
//   /metrics (this gateway scrapes the endpoints of smg rules, LOXILB_KV_METRICS_INTERVAL_MS,
//   default 1 s; SMG polls every 10 s), dispatched_i the requests sent there since the last
//   successful scrape. Endpoints without metrics (never scraped, or the last scrape failed): the
//   best reporting score + in-flight x 1024 / 2000; none reporting: the least in-flight. Ties at
//   random, as SMG's. Use it alone (not behind kvExactMode: it does not see Tier 1.5's picks).
#include <xxhash.h>

#include <algorithm>
#include <list>
#include <mutex>
#include <random>
#include <unordered_map>

#include "common/splitmix.h"

#include "routing/request_context.h"
#include "routing/request_facts.h"
#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

struct SglangParams {
  double cache_threshold;
  int64_t balance_abs;
  double balance_rel;
  int64_t eviction_ms;
  uint64_t max_tree_size;
  bool smg = false;  // SMG's current decision (gate, expected wait) instead of the older one
};
constexpr size_t kSmgMatchedTenants = 8;

constexpr size_t kTokensPerBlock = 16;
constexpr size_t kBytesPerChunk = 64;
constexpr size_t kMaxChain = 8192;  // a huge prompt keys its first 8192 blocks
constexpr size_t kEvictPerRound = 65536;

class SglangStage : public Stage {
 public:
  SglangStage(const StageServices& s, SglangParams p)
      : clock_(s.clock), p_(p), trees_(s.endpoints.size()) {}

  uint32_t needs() const override { return kNeedPromptText | kNeedPromptTokenIds; }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    if (p_.smg) return evaluateSmg(ctx, c);
    const size_t n = c.size();
    int64_t lo = INT64_MAX, hi = -1;
    int least = -1;
    for (size_t i = 0; i < n; ++i) {
      if (c.excluded[i]) continue;
      const int64_t l = c.endpoints[i].state->active.load(std::memory_order_relaxed);
      if (least < 0 || l < lo) least = static_cast<int>(i);
      lo = std::min(lo, l);
      hi = std::max(hi, l);
    }
    if (least < 0) return StageResult::fall(FallReason::kAllExcluded);
    std::vector<uint64_t> chain;
    size_t unit = 0;  // tokens (or bytes) per chain entry
    const size_t total = keyChain(ctx, chain, unit);
    std::lock_guard<std::mutex> g(mu_);
    if (trees_.size() != n) trees_.assign(n, Tree{});
    evictIfDue();
    int pick = least;
    bool spilled = false;
    const bool imbalanced = hi - lo > p_.balance_abs &&
                            static_cast<double>(hi) > p_.balance_rel * static_cast<double>(lo);
    if (!imbalanced && total > 0) {
      int best = -1;
      size_t best_len = 0;
      for (size_t i = 0; i < n; ++i) {
        if (c.excluded[i]) continue;
        size_t m = 0;
        while (m < chain.size() && trees_[i].pos.count(chain[m])) ++m;
        if (best < 0 || m > best_len) {
          best = static_cast<int>(i);
          best_len = m;
        }
      }
      const double rate =
          static_cast<double>(std::min(best_len * unit, total)) / static_cast<double>(total);
      if (rate > p_.cache_threshold) {
        pick = best;
      } else {  // the smallest tree
        pick = -1;
        for (size_t i = 0; i < n; ++i)
          if (!c.excluded[i] &&
              (pick < 0 || trees_[i].pos.size() < trees_[static_cast<size_t>(pick)].pos.size()))
            pick = static_cast<int>(i);
      }
    } else if (imbalanced) {
      spilled = true;
    }
    insert(trees_[static_cast<size_t>(pick)], chain);
    return StageResult::pick(pick, DecisionKey::kPrefix, spilled);
  }

 private:
  // SMG's current cache_aware (the file's comment, "smg").
  StageResult evaluateSmg(const RequestContext& ctx, CandidateSet& c) {
    const size_t n = c.size();
    std::vector<int64_t> load(n, 0);
    double sum = 0;
    size_t eligible = 0;
    for (size_t i = 0; i < n; ++i) {
      if (c.excluded[i]) continue;
      load[i] = c.endpoints[i].state->active.load(std::memory_order_relaxed);
      sum += static_cast<double>(load[i]);
      ++eligible;
    }
    if (eligible == 0) return StageResult::fall(FallReason::kAllExcluded);
    const double avg = sum / static_cast<double>(eligible);
    auto gated = [&](size_t i) {
      const double l = static_cast<double>(load[i]);
      return l > p_.balance_rel * avg && l > avg + static_cast<double>(p_.balance_abs);
    };
    std::vector<uint64_t> chain;
    size_t unit = 0;
    const size_t total = keyChain(ctx, chain, unit);
    std::lock_guard<std::mutex> g(mu_);
    if (trees_.size() != n) trees_.assign(n, Tree{});
    if (since_.size() != n) since_.assign(n, Since{});
    evictIfDue();
    // Requests dispatched since each endpoint's last successful scrape.
    for (size_t i = 0; i < n; ++i) {
      const uint64_t ok = c.endpoints[i].state->scrapes_ok.load(std::memory_order_relaxed);
      if (ok != since_[i].scrapes) since_[i] = Since{ok, 0};
    }
    std::vector<uint8_t> in(n, 0);  // the set the expected wait chooses from
    bool hit = false, spilled = false;
    if (total > 0) {
      std::vector<size_t> m(n, 0);
      size_t best = 0;
      for (size_t i = 0; i < n; ++i) {
        if (c.excluded[i]) continue;
        while (m[i] < chain.size() && trees_[i].pos.count(chain[m[i]])) ++m[i];
        best = std::max(best, m[i]);
      }
      const double rate =
          static_cast<double>(std::min(best * unit, total)) / static_cast<double>(total);
      if (best > 0 && rate > p_.cache_threshold) {
        hit = true;
        size_t tenants = 0;
        for (size_t i = 0; i < n && tenants < kSmgMatchedTenants; ++i)
          if (!c.excluded[i] && m[i] == best) {
            ++tenants;
            if (!gated(i)) in[i] = 1;
          }
        if (std::find(in.begin(), in.end(), uint8_t{1}) == in.end()) {
          spilled = true;  // every holder gated: the endpoints the gate lets through
          for (size_t i = 0; i < n; ++i) in[i] = !c.excluded[i] && !gated(i);
        }
      }
    }
    if (std::find(in.begin(), in.end(), uint8_t{1}) == in.end())
      for (size_t i = 0; i < n; ++i) in[i] = !c.excluded[i];
    const int pick = leastExpectedWait(c, in, load);
    ++since_[static_cast<size_t>(pick)].sent;
    insert(trees_[static_cast<size_t>(pick)], chain);
    return StageResult::pick(pick, hit ? DecisionKey::kPrefix : DecisionKey::kLoad, spilled);
  }

  // SMG's LeastLoad expected wait over the endpoints in `in` (the file's comment); under mu_.
  int leastExpectedWait(const CandidateSet& c, const std::vector<uint8_t>& in,
                        const std::vector<int64_t>& load) {
    const size_t n = c.size();
    std::vector<double> score(n, 0);
    std::vector<uint8_t> known(n, 0);
    bool any = false;
    double best_known = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!in[i]) continue;
      const auto& st = *c.endpoints[i].state;
      const int64_t waiting = st.engine_waiting.load(std::memory_order_relaxed);
      // (values a failed scrape left behind are not now's: as SMG, no metrics)
      if (waiting < 0 || !st.scrape_fresh.load(std::memory_order_relaxed)) continue;
      const int64_t ppm = st.kv_usage_ppm.load(std::memory_order_relaxed);
      const double k = std::clamp(ppm < 0 ? 0.0 : static_cast<double>(ppm) / 1e6, 0.0, 0.999);
      score[i] = (static_cast<double>(waiting) * 1024 + 1024 * static_cast<double>(since_[i].sent)) /
                     2000 +
                 0.15 * k / (1 - k);
      known[i] = 1;
      best_known = any ? std::min(best_known, score[i]) : score[i];
      any = true;
    }
    for (size_t i = 0; i < n; ++i)
      if (in[i] && !known[i])
        score[i] = any ? best_known + static_cast<double>(load[i]) * 1024 / 2000
                       : static_cast<double>(load[i]);  // none reporting: the shortest queue
    int pick = -1;
    uint64_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!in[i]) continue;
      const size_t b = static_cast<size_t>(pick);
      if (pick < 0 || score[i] < score[b]) {
        pick = static_cast<int>(i);
        ties = 1;
      } else if (score[i] == score[b] && rng_.next() % ++ties == 0) {
        pick = static_cast<int>(i);  // reservoir sampling: each tied endpoint alike
      }
    }
    return pick;
  }

  struct Since {
    uint64_t scrapes = 0;  // the endpoint's successful scrapes when counting started
    uint64_t sent = 0;     // requests dispatched there since
  };
  std::vector<Since> since_;
  common::SplitMix64 rng_{std::random_device{}()};

  struct Tree {
    std::list<uint64_t> lru;  // front = least recently used
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos;
  };

  // The prompt as a chain of block keys; returns its length in tokens (or bytes).
  static size_t keyChain(const RequestContext& ctx, std::vector<uint64_t>& chain, size_t& unit) {
    const RequestFacts* f = ctx.facts;
    if (!f || !f->parsed) return 0;
    uint64_t parent = 0x73676c616e67ULL;  // "sglang"
    if (!f->prompt_token_ids.empty()) {
      unit = kTokensPerBlock;
      const auto& ids = f->prompt_token_ids;
      for (size_t b = 0; b + kTokensPerBlock <= ids.size() && chain.size() < kMaxChain;
           b += kTokensPerBlock) {
        parent = XXH3_64bits_withSeed(ids.data() + b, kTokensPerBlock * sizeof(int64_t), parent);
        chain.push_back(parent);
      }
      tail(parent, ids.data() + ids.size() / kTokensPerBlock * kTokensPerBlock,
           ids.size() % kTokensPerBlock * sizeof(int64_t), chain);
      return ids.size();
    }
    unit = kBytesPerChunk;
    const std::string& t = f->prompt_text;
    for (size_t b = 0; b + kBytesPerChunk <= t.size() && chain.size() < kMaxChain;
         b += kBytesPerChunk) {
      parent = XXH3_64bits_withSeed(t.data() + b, kBytesPerChunk, parent);
      chain.push_back(parent);
    }
    tail(parent, t.data() + t.size() / kBytesPerChunk * kBytesPerChunk, t.size() % kBytesPerChunk,
         chain);
    return t.size();
  }

  // A partial last block is an entry too (keyed by its bytes and length), so short prompts
  // grow the trees as SGLang's character trees do.
  static void tail(uint64_t parent, const void* p, size_t bytes, std::vector<uint64_t>& chain) {
    if (bytes == 0 || chain.size() >= kMaxChain) return;
    chain.push_back(XXH3_64bits_withSeed(p, bytes, parent ^ (0x7461696cULL + bytes)));
  }

  void insert(Tree& t, const std::vector<uint64_t>& chain) {
    for (uint64_t k : chain) {
      auto it = t.pos.find(k);
      if (it != t.pos.end()) {
        t.lru.splice(t.lru.end(), t.lru, it->second);  // touched: most recently used
      } else {
        t.lru.push_back(k);
        t.pos.emplace(k, std::prev(t.lru.end()));
      }
    }
    // A hard bound between evictions: twice the configured size, and at most 2^20 entries (about
    // 64 MiB) per endpoint whatever the configured size.
    const size_t hard = static_cast<size_t>(
        std::min<uint64_t>(p_.max_tree_size / kTokensPerBlock * 2 + 1, 1u << 20));
    while (t.pos.size() > hard) trim(t);
  }

  static void trim(Tree& t) {
    t.pos.erase(t.lru.front());
    t.lru.pop_front();
  }

  void evictIfDue() {
    const int64_t now = clock_.nowNs();
    if (now - last_evict_ns_ < p_.eviction_ms * 1'000'000) return;
    last_evict_ns_ = now;
    // At most kEvictPerRound entries a round under the lock: a large tree shrinks over a few
    // rounds instead of stalling every data-plane thread at once.
    const size_t keep = static_cast<size_t>(p_.max_tree_size / kTokensPerBlock);
    size_t budget = kEvictPerRound;
    for (auto& t : trees_)
      while (t.pos.size() > keep && budget > 0) {
        trim(t);
        --budget;
      }
    if (budget == 0) last_evict_ns_ = now - p_.eviction_ms * 1'000'000;  // go on next decision
  }

  const common::Clock& clock_;
  SglangParams p_;
  std::mutex mu_;
  std::vector<Tree> trees_;
  int64_t last_evict_ns_ = 0;
};

}  // namespace

std::unique_ptr<Stage> makeSglang(const StageServices& s) {
  return std::make_unique<SglangStage>(s, SglangParams{0.5, 32, 1.1, 30'000, 10'000});
}
std::unique_ptr<Stage> makeSglangCli(const StageServices& s) {
  return std::make_unique<SglangStage>(s, SglangParams{0.3, 64, 1.5, 120'000, 67'108'864});
}
std::unique_ptr<Stage> makeSmg(const StageServices& s) {
  return std::make_unique<SglangStage>(s, SglangParams{0.3, 64, 1.5, 120'000, 67'108'864, true});
}

}  // namespace kvgate::routing
