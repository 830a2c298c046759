#include "routing/stages/kv_exact.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <optional>
#include <vector>

#include "common/log.h"
#include "kv/fingerprint.h"

namespace kvgate::routing {
namespace {


// Blocks of a prompt that are scored (128k tokens at block size 16); the rest is not looked at.
constexpr size_t kMaxBlocks = 8192;
constexpr size_t kKeepScratch = 64 * 1024;  // scratch elements kept per thread between requests

// Per-thread temporaries of one decision (no per-request allocation once warm); nothing in them
// outlives the call (what a later call needs is in the request's cycle state).
struct Scratch {
  std::vector<uint8_t> connected;  // per candidate: its publisher's subscribers are connected
  std::vector<uint32_t> tokens;    // a token-id prompt's ids, narrowed
  std::vector<LawCandidate> cands;
  std::vector<int> index_of;
  std::vector<uint32_t> remote_ov;  // kvIndexAddr: each candidate's overlap from the answer
};
thread_local Scratch t_scratch;

// This stage's slot in the request's cycle state: what observe() needs after the decision.
struct KvSlot {
  std::vector<uint64_t> masks;  // per candidate: its publisher's index workers
  bool scored = false;          // the cycle's chain was scored by this stage in this request
  void reset() {  // (a new request: the capacity stays)
    masks.clear();
    scored = false;
  }
};

class KvExactStage : public Stage {
 public:
  KvExactStage(const StageServices& s, const kv::KvIndex& index, const kv::WorkerLookup& lookup,
               KvExactOptions opts)
      : index_(index),
        lookup_(lookup),
        tokens_(s.prompt_tokens),
        overlay_(s.kv_overlay),
        clock_(s.clock),
        opts_(opts) {
    for (const auto& ep : s.endpoints)
      keys_.push_back(ep.state->ip + ":" +
                      std::to_string(opts_.serving_port_key ? ep.state->port : opts_.zmq_port));
    // Endpoints sharing one address share one publisher key: their caches cannot be told apart,
    // so none of them is scored (empty key: not followed).
    std::map<std::string, int> seen;
    for (const auto& k : keys_) ++seen[k];
    for (auto& k : keys_)
      if (seen[k] > 1) k.clear();
  }

  uint32_t needs() const override {
    return kNeedModel | kNeedPromptTokenIds | kNeedMessages | kNeedRequestShape |
           (tokens_ ? tokens_->needs() : 0);
  }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    Scratch& sc = t_scratch;
    std::optional<CycleState> local;  // (only when called outside a pipeline without one: tests)
    CycleState& cy = ctx.cycle ? *ctx.cycle : local.emplace();
    KvSlot& slot = cy.slot<KvSlot>(this);
    slot.scored = false;
    if (!c.anyLeft()) return StageResult::fall(FallReason::kAllExcluded);
    const RequestFacts* f = ctx.facts;
    if (!f || !f->parsed) return StageResult::fall(FallReason::kTextEmpty);
    const bool chat = f->hasChat() || f->chat_too_large;
    if ((opts_.api_mode == ApiMode::kCompletions && chat) ||
        (opts_.api_mode == ApiMode::kChat && !chat))
      return StageResult::fall(FallReason::kApiMode);
    const bool ids_given = !chat && !f->prompt_token_ids.empty();
    // Which candidates' caches are known (excluded ones too: the `excluded` reason), and whether
    // one is warm: the warm-up guard comes first in upstream's ladder.
    std::vector<uint64_t>& masks = slot.masks;
    masks.assign(c.size(), 0);
    sc.connected.assign(c.size(), 0);
    uint64_t all = 0;
    bool warm = opts_.warmup_sec == 0, broken = false;
    const int64_t warm_before = clock_.nowNs() - int64_t{opts_.warmup_sec} * 1'000'000'000;
    const std::shared_ptr<const kv::WorkerMap> workers = lookup_.snapshot();  // one per decision
    for (size_t i = 0; i < c.size(); ++i) {
      if (keys_[i].empty()) continue;
      auto it = workers->find(keys_[i]);
      if (it == workers->end()) continue;
      if (it->second.contract_broken) {  // breaks the declared hash contract: not trusted
        broken = true;
        continue;
      }
      masks[i] = it->second.bits;
      sc.connected[i] = it->second.connected_ns >= 0;
      all |= masks[i];
      if (!c.excluded[i] && it->second.connected_ns >= 0 && it->second.connected_ns <= warm_before)
        warm = true;
    }
    if (opts_.remote) warm = true;  // the remote index follows the engines, not this gateway
    if (!warm) return StageResult::fall(FallReason::kWarmup);
    if (!ids_given) {
      // No usable "prompt" (has_prompt: the parser saw a string or token ids) and no messages.
      if (!chat && f->prompt_text.empty()) return StageResult::fall(FallReason::kTextEmpty);
      if (!f->has_model || f->model.empty()) return StageResult::fall(FallReason::kModelEmpty);
      if (!tokens_) return StageResult::fall(FallReason::kTokenize);  // no --models-dir
    }
    if (opts_.block_size == 0) return StageResult::fall(FallReason::kHashes);
    // The chain of at most kMaxBlocks leading blocks (a huge prompt costs a bounded walk), in the
    // request's cycle state: a retry of the same request takes it from there instead of
    // tokenizing and hashing again.
    std::vector<uint32_t>& tokens = sc.tokens;
    std::vector<uint64_t>& chain = cy.chain;
    size_t n = 0;
    uint32_t tail = 0;  // blocks of the prompt beyond the chain, estimated
    if (cy.chain_ready) {
      n = chain.size();
      tail = cy.tail_blocks;
    } else {
      tokens.clear();
      const std::vector<uint32_t>* ids = &tokens;  // the prompt's ids
      size_t cut = 0;  // ids the tokenizer's bound left out, estimated
      if (ids_given) {
        const size_t take = std::min(f->prompt_token_ids.size(), kMaxBlocks * opts_.block_size);
        for (size_t i = 0; i < take; ++i) {
          const int64_t t = f->prompt_token_ids[i];
          if (t < 0 || t > UINT32_MAX) return StageResult::fall(FallReason::kHashes);
          tokens.push_back(static_cast<uint32_t>(t));
        }
      } else if (cy.tokens_ready) {
        // Tokenized earlier in this request (the quota gate's count): the same facts, the same
        // ids, not computed twice.
        if (!cy.tokens_ok) return StageResult::fall(FallReason::kTokenize);
        ids = &cy.tokens;
        cut = cy.tokens_cut;
      } else {
        // Into the request's cycle state (a retry, or nothing else, reuses them).
        const bool ok = tokens_ && tokens_->tokens(*f, cy.tokens, &cut) == TokensStatus::kOk;
        cy.tokens_ready = true;
        cy.tokens_ok = ok;
        cy.tokens_cut = cut;
        if (!ok) return StageResult::fall(FallReason::kTokenize);
        ids = &cy.tokens;
      }
      const size_t blocks = std::min<size_t>(ids->size() / opts_.block_size, kMaxBlocks);
      chain.resize(blocks);
      // The partition: a LoRA adapter named by the request (SGLang's lora_path, else a "model"
      // that the publishers' events name as an adapter: vLLM selects adapters by model name) and
      // the cache salt; the base model's partition otherwise.
      std::string_view adapter = f->lora_adapter;
      if (adapter.empty() && f->has_model) {
        const std::shared_ptr<const kv::AdapterSet> loras = lookup_.adapters();
        if (!loras->empty() && loras->count(std::string_view(f->model))) adapter = f->model;
      }
      n = kv::prefixChain(ids->data(), blocks * opts_.block_size, opts_.block_size,
                          kv::partitionRoot(adapter, f->cache_salt), chain.data(), blocks);
      chain.resize(n);
      // The prompt's whole length in blocks: ids past the 8192-block bound, and what the
      // tokenizer's text bound cut (its estimate).
      const size_t total = (ids_given ? f->prompt_token_ids.size() : ids->size()) + cut;
      const size_t whole = total / opts_.block_size;
      tail = static_cast<uint32_t>(std::min<size_t>(whole > n ? whole - n : 0, UINT32_MAX / 2));
      cy.tail_blocks = tail;
      cy.chain_ready = true;
    }
    // Remote mode: ask the index once per request (the proxy runs the pipeline again with the
    // answer); a failed or late answer falls through, counted by its reason.
    std::vector<uint32_t>& remote_ov = sc.remote_ov;
    remote_ov.clear();
    if (opts_.remote) {
      if (n == 0) return StageResult::fall(FallReason::kShallow);
      // (only the data plane's own cycle state is asked: one the pipeline lent has nobody to ask)
      if (!ctx.cycle || cy.lent) return StageResult::fall(FallReason::kRemoteError);
      RemoteHint* rh = &cy.remote;
      if (rh->state == RemoteHint::State::kNone) {
        rh->state = RemoteHint::State::kWanted;
        StageResult ask;
        ask.need_remote = true;
        return ask;
      }
      if (rh->state != RemoteHint::State::kAnswered)
        return StageResult::fall(rh->timed_out ? FallReason::kRemoteTimeout
                                               : FallReason::kRemoteError);
      if (rh->reason_code.starts_with("UNKNOWN_"))
        return StageResult::fall(FallReason::kRemoteUnknown);
      remote_ov.assign(c.size(), 0);
      for (size_t i = 0; i < c.size(); ++i)
        for (const auto& [id, tokens] : rh->replicas)
          if (id == c.endpoints[i].state->label && tokens > 0)
            remote_ov[i] = std::min<uint32_t>(static_cast<uint32_t>(tokens) / opts_.block_size,
                                              static_cast<uint32_t>(n));
    }
    // No candidate's events are followed (or only contract breakers): upstream's no_worker,
    // after tokenize and hashes as its ladder orders them.
    if (all == 0 && !opts_.remote) {
      StageResult miss =
          StageResult::fall(broken ? FallReason::kHashContract : FallReason::kNoWorker);
      miss.prefill_blocks = static_cast<uint32_t>(n) + tail;  // (the whole prompt, wherever)
      return miss;
    }
    std::array<uint32_t, kv::kMaxWorkers> overlap{};
    if (opts_.remote) {
      // (the overlaps are remote_ov's)
    } else if (overlay_ && opts_.speculative_ttl_ms > 0) {
      const uint64_t via =
          index_.scoreWithOverlay(chain.data(), n, all, *overlay_, clock_.nowNs(), overlap);
      if (via) overlay_->countHits(via);
    } else {
      index_.score(chain.data(), n, all, overlap);
    }
    if (tokens.capacity() > kKeepScratch) std::vector<uint32_t>().swap(tokens);
    slot.scored = ctx.cycle != nullptr;  // (observe() credits the cycle's chain)
    std::vector<LawCandidate>& cands = sc.cands;
    const scoring::ScoringProfile* profile = opts_.profile.get();  // replaces the law when set
    // (the dynamo laws, or a profile with a part reading the active blocks)
    const bool dynamo =
        profile ? profile->readsActive()
                : opts_.law.mode == LawMode::kDynamo || opts_.law.mode == LawMode::kDynamoV1;
    std::vector<int>& index_of = sc.index_of;
    cands.clear();
    index_of.clear();
    // An endpoint's overlap: the best of its publisher's ranks.
    auto overlapOf = [&](size_t i) {
      if (!remote_ov.empty()) return remote_ov[i];
      uint32_t ov = 0;
      for (uint64_t m = masks[i]; m; m &= m - 1)
        ov = std::max(ov, overlap[static_cast<size_t>(std::countr_zero(m))]);
      return ov;
    };
    uint32_t best = 0, best_excluded = 0;
    const int64_t now = clock_.nowNs();
    for (size_t i = 0; i < c.size(); ++i) {
      const uint32_t ov = overlapOf(i);
      if (c.excluded[i]) {
        best_excluded = std::max(best_excluded, ov);
        continue;
      }
      best = std::max(best, ov);
      const auto& st = *c.endpoints[i].state;
      const auto load = st.active.load(std::memory_order_relaxed);
      // Capacity, scaled by the external controller's weight (1 without one; seed 000).
      LawCandidate lc{ov, static_cast<uint32_t>(std::max<int64_t>(0, load)),
                      st.kvCapacity() * st.controller(now).weight};
      // Dynamo's decode term: the distinct blocks in flight there with this prompt's added.
      if (dynamo)
        lc.active_blocks = st.active_set.unionSize(chain.data(), n);

      lc.waiting = st.engine_waiting.load(std::memory_order_relaxed);
      const int64_t ppm = st.kv_usage_ppm.load(std::memory_order_relaxed);
      lc.kv_usage = ppm < 0 ? -1.0 : static_cast<double>(ppm) / 1e6;
      lc.pending_blocks = static_cast<uint64_t>(
          std::max<int64_t>(0, st.pending_prefill_blocks.load(std::memory_order_relaxed)));
      lc.started = static_cast<uint32_t>(
          std::clamp<int64_t>(st.started_streams.load(std::memory_order_relaxed), 0, UINT32_MAX));
      lc.prefill_rate = st.prefill_rate.tokensPerSecond();
      lc.last_pick_ns = st.last_pick_ns.load(std::memory_order_relaxed);
      cands.push_back(lc);
      index_of.push_back(static_cast<int>(i));
    }
    if (n == 0) return StageResult::fall(FallReason::kShallow);  // under one block
    // Nobody holds a leading block; or only excluded endpoints do (an excluded winner already
    // fell to the next-best overlap above: the law only sees candidates left). The peer laws
    // decide misses by their own formula.
    // (a profile says itself whether it places misses and reads queued prefill: the law, which
    // LOXILB_KV_LB_MODE may still name, does not run)
    const bool peer = profile ? profile->scoresMisses() : placesMisses(opts_.law.mode);
    // Whichever stage places the request, its prefill is queued there until its first byte (the
    // data plane counts it for streams, and for P/D prefill legs until their answer: the laws
    // and scorers that read queued prefill, and the endpoint's online prefill-rate estimate,
    // endpoints/prefill_rate.h): on a miss the whole prompt (a shallow match: what the index does
    // not hold).
    const uint32_t miss_blocks = static_cast<uint32_t>(n - std::min<size_t>(best, n)) + tail;
    if (best == 0 && !peer) {
      StageResult miss =
          StageResult::fall(best_excluded > 0 ? FallReason::kExcluded : FallReason::kNoWorker);
      miss.prefill_blocks = miss_blocks;
      return miss;
    }
    if (!peer && static_cast<uint64_t>(best) * opts_.block_size < opts_.min_match_tokens) {
      StageResult miss = StageResult::fall(FallReason::kShallow);
      miss.prefill_blocks = miss_blocks;
      return miss;
    }
    LawParams p = opts_.law;
    p.prompt_blocks = static_cast<uint32_t>(n) + tail;  // (the tail is nobody's overlap)
    if (p.mode == LawMode::kPredict || p.mode == LawMode::kPredictQ || profile)
      p.rotate = turns_.fetch_add(1, std::memory_order_relaxed);
    LawResult r = profile ? profile->pick(cands, p) : applyLaw(cands, p);
    if (r.index < 0) return StageResult::fall(FallReason::kAllExcluded);
    // A prompt nobody holds, placed by a peer law (they decide misses themselves): key `load`,
    // so Tier 1.5's hit count stays the requests routed by cache overlap.
    StageResult res = StageResult::pick(index_of[static_cast<size_t>(r.index)],
                                        best == 0 ? DecisionKey::kLoad : DecisionKey::kKvOverlap,
                                        r.spilled);
    res.track_chain = dynamo;
    res.prefill_blocks = r.uncached;
    res.matched_blocks = static_cast<int32_t>(std::min<size_t>(overlapOf(res.index), n));
    // No cold-start seeding under the peer laws (the re-implemented policies have none), a profile
    // without it (coldStartSeeding), or on a miss placed by the law or profile (predict-q).
    if (best == 0 || (profile ? !profile->seedsColdStart() : isPeerLaw(opts_.law.mode))) return res;
    // Cold-start seeding, after the law (and its spill relief), on every Nth hit.
    const uint64_t hit = hits_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (opts_.coldstart_seed_nth > 0 && hit % opts_.coldstart_seed_nth == 0) {
      for (size_t i = 0; i < c.size(); ++i) {
        // Only a connected publisher is seeded: one whose events never arrive (a wrong port)
        // would stay cold, and take every Nth hit, for good.
        if (c.excluded[i] || masks[i] == 0 || !sc.connected[i]) continue;
        size_t held = 0;
        for (uint64_t m = masks[i]; m; m &= m - 1) held += index_.blocks(std::countr_zero(m));
        if (held >= opts_.coldstart_min_blocks) continue;
        if (static_cast<int>(i) != res.index) {
          res.index = static_cast<int>(i);
          res.seeded = true;
          // what the seeded endpoint must prefill
          res.prefill_blocks = static_cast<uint32_t>(n - std::min<size_t>(overlapOf(i), n)) + tail;
          res.matched_blocks = static_cast<int32_t>(std::min<size_t>(overlapOf(i), n));
        }
        break;
      }
    }
    return res;
  }

  // Speculative insert: the chain just scored is credited to the endpoint the pipeline chose
  // (whichever stage chose it), for speculative_ttl_ms, if its publisher is followed.
  void observe(const RequestContext& ctx, int chosen) override {
    if (!overlay_ || opts_.speculative_ttl_ms == 0 || !ctx.cycle) return;
    CycleState& cy = *ctx.cycle;
    KvSlot& slot = cy.slot<KvSlot>(this);
    if (!slot.scored) return;  // this request's chain was not scored here (a guard fell)
    slot.scored = false;
    if (chosen < 0 || static_cast<size_t>(chosen) >= slot.masks.size() || cy.chain.empty())
      return;
    const uint64_t m = slot.masks[static_cast<size_t>(chosen)];
    if (m == 0) return;
    overlay_->credit(cy.chain.data(), cy.chain.size(), std::countr_zero(m),
                     clock_.nowNs() + int64_t{opts_.speculative_ttl_ms} * 1'000'000);
  }

 private:
  const kv::KvIndex& index_;
  const kv::WorkerLookup& lookup_;
  const PromptTokens* tokens_;
  kv::SpeculativeOverlay* overlay_;
  const common::Clock& clock_;
  KvExactOptions opts_;
  std::atomic<uint64_t> hits_{0};   // decisions so far (cold-start seeding's counter)
  std::atomic<uint64_t> turns_{0};  // predict's tie-break cursor
  std::vector<std::string> keys_;  // per endpoint: its publisher's key
};

class NoKvStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    return StageResult::fall(FallReason::kNoWorker);
  }
};

}  // namespace

KvExactOptions kvExactOptions(const config::RuleSpec& rule, const RoutingEnv& env) {
  KvExactOptions o;
  static const nlohmann::json kNone = nlohmann::json::object();
  const auto& sa = rule.service_args.is_object() ? rule.service_args : kNone;
  o.block_size = static_cast<uint32_t>(sa.value("kvBlockSize", 16));
  o.zmq_port = static_cast<uint16_t>(sa.value("kvZmqPort", 5557));
  o.warmup_sec = static_cast<uint32_t>(sa.value("kvWarmupSec", 0));
  o.remote = !sa.value("kvIndexAddr", std::string()).empty();
  o.serving_port_key = sa.value("kvEngineType", std::string("vllm")) == "trtllm";
  o.min_match_tokens = env.min_match_tokens;
  o.speculative_ttl_ms = env.speculative_ttl_ms;
  o.coldstart_min_blocks = env.coldstart_min_blocks;
  o.coldstart_seed_nth = env.coldstart_seed_nth;
  const std::string api = sa.value("kvExactApiMode", std::string("both"));
  o.api_mode = api == "completions" ? ApiMode::kCompletions
               : api == "chat"      ? ApiMode::kChat
                                    : ApiMode::kBoth;
  o.law = env.law;
  // The default law: predict-q on single-pool (kvExactMode 3) rules (issue 29: predict on held
  // prompts, misses to the least queued prefill, equal queues to the endpoint picked least
  // recently (docs/benchmarks.md "predict-q's miss rule"); over three seeds of GSP and one-tool
  // agentic sessions at most 1.07x the best arm at every rung, where predict, which left misses to
  // the rule's selector, was up to 1.57x; docs/benchmarks.md "predict-q over seeds"); predict on
  // P/D rules (kvExactMode 1): held prompts by new prefill x batch over the prefill endpoints,
  // misses left to the seed's Tier 2 (min-load); the seed's hard law, their default before, was
  // 1.07-1.35x predict's TTFT p90 over three seeds of P/D Mooncake at every rung, its cap a
  // constant factor of requests in flight (docs/benchmarks.md "P/D: the prefill law").
  o.law.mode = sa.value("kvExactMode", 0) == 3 ? LawMode::kPredictQ : LawMode::kPredict;
  o.law.block_tokens = o.block_size;
  // Seed 000: pressure relief is on for single-pool mode 3 and off for P/D mode 1 unless
  // LOXILB_KV_SPILL_RELIEF says otherwise.
  o.law.spill_relief = env.spill_relief.value_or(!sa.value("pd_disagg_mode", false));
  // (P/D rules: a request's decode endpoint is not its prefill endpoint; the decode weight, a
  // single-pool law's, does not apply there)
  if (sa.value("pd_disagg_mode", false)) o.law.predict_decode_weight_pct = 100;
  if (auto sp = sa.find("kvScoringProfile"); sp != sa.end()) {
    // (validated when the rule was stored; a profile replaces the law, kvLbMode is refused)
    auto spec = config::parseScoringProfile(*sp, "kvScoringProfile");
    auto built = spec ? scoring::ScoringProfile::build(*spec)
                      : Result<std::shared_ptr<const scoring::ScoringProfile>>(
                            tl::unexpected(spec.error()));
    if (built)
      o.profile = *built;
    else
      log::warn("routing", "rule " + rule.key() + ": kvScoringProfile not applied: " +
                               built.error().what);
  }
  if (o.profile) {
    // (no law runs: neither kvLbMode, refused with a profile, nor LOXILB_KV_LB_MODE applies)
  } else if (auto m = sa.find("kvLbMode"); m != sa.end() && m->is_string()) {
    // The rule's field beats the environment (validated when the rule was stored).
    if (auto mode = parseLawMode(m->get<std::string>())) o.law.mode = *mode;
  } else if (env.lb_mode) {
    o.law.mode = *env.lb_mode;
  }
  return o;
}

std::unique_ptr<Stage> makeKvExactFromServices(const StageServices& s) {
  if (!s.kv_index || !s.kv_lookup) return std::make_unique<NoKvStage>();
  return makeKvExact(s, *s.kv_index, *s.kv_lookup, kvExactOptions(s.rule, s.envOrDefault()));
}

std::unique_ptr<Stage> makeKvExact(const StageServices& s, const kv::KvIndex& index,
                                   const kv::WorkerLookup& lookup, KvExactOptions opts) {
  return std::make_unique<KvExactStage>(s, index, lookup, opts);
}

}  // namespace kvgate::routing
