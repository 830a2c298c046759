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
#include <xxhash.h>

#include <algorithm>
#include <list>
#include <mutex>
#include <unordered_map>

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
};

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

}  // namespace kvgate::routing
