#include "routing/pipeline.h"

#include <optional>

#include "routing/stage_registry.h"

namespace kvgate::routing {

Result<std::unique_ptr<Pipeline>> Pipeline::build(const std::vector<std::string>& names,
                                                  const StageServices& services,
                                                  std::shared_ptr<PipelineStats> stats) {
  if (names.empty()) return fail(400, "stages", "a pipeline needs at least one stage");
  if (names.size() > kMaxStages)
    return fail(400, "stages", "at most " + std::to_string(kMaxStages) + " stages per rule");
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<std::string> stage_names;
  for (const auto& n : names) {
    const StageInfo* info = findStage(n);
    if (!info) return fail(400, "stages", "unknown routing stage '" + n + "'");
    stages.push_back(info->make(services));
    stage_names.emplace_back(info->name);
  }
  return make(std::move(stages), std::move(stage_names), services.clock, std::move(stats));
}

std::unique_ptr<Pipeline> Pipeline::make(std::vector<std::unique_ptr<Stage>> stages,
                                         std::vector<std::string> names, const common::Clock& clock,
                                         std::shared_ptr<PipelineStats> stats) {
  std::unique_ptr<Pipeline> p(new Pipeline(clock, std::move(stats)));
  p->stages_ = std::move(stages);
  p->names_ = std::move(names);
  p->stages_.resize(std::min(p->stages_.size(), kMaxStages));
  p->names_.resize(p->stages_.size());
  for (auto& s : p->stages_) p->needs_ |= s->needs();
  auto& st = *p->stats_;
  st.stage_count = p->names_.size();
  for (size_t i = 0; i < p->names_.size(); ++i) {
    st.stage_names[i] = p->names_[i];
    const StageInfo* info = findStage(p->names_[i]);
    st.stage_ladder[i] = info ? info->ladder : Ladder::kNone;
    st.stage_reasons[i] = info ? info->reasons : std::span<const FallReason>(kSelectorReasons);
  }
  return p;
}

Decision Pipeline::run(const RequestContext& given, CandidateSet& c, size_t from) const {
  const int64_t t0 = clock_.nowNs();
  // Every stage sees a cycle state: the request's, or one lent for this run.
  std::optional<CycleState> lent;
  RequestContext lent_ctx;
  if (!given.cycle) {
    lent.emplace();
    lent->lent = true;
    lent_ctx = given;
    lent_ctx.cycle = &*lent;
  }
  const RequestContext& ctx = given.cycle ? given : lent_ctx;
  Decision d;
  auto& st = *stats_;
  uint32_t miss_prefill = 0;  // what a stage that fell said the pick will prefill (ttft law)
  for (size_t i = from; i < stages_.size(); ++i) {
    StageResult r =
        c.size() == 0 ? StageResult::fall(FallReason::kEmptyPool) : stages_[i]->evaluate(ctx, c);
    if (r.need_remote) {  // suspended, not decided: the caller asks and runs again
      d.need_remote = true;
      d.stage = static_cast<int>(i);
      return d;
    }
    if (r.index >= 0 && static_cast<size_t>(r.index) < c.size() &&
        !c.excluded[static_cast<size_t>(r.index)]) {
      d.index = r.index;
      d.stage = static_cast<int>(i);
      d.key = r.key;
      d.spilled = r.spilled;
      d.track_chain = r.track_chain;
      d.peer = r.peer;
      d.matched_blocks = r.matched_blocks;
      // (One kv stage per pipeline: a pick of 0 uncached blocks after a miss of another stage
      // cannot happen.)
      d.prefill_blocks = r.prefill_blocks > 0 ? r.prefill_blocks : miss_prefill;
      st.decided[i][static_cast<size_t>(r.key)].fetch_add(1, std::memory_order_relaxed);
      if (r.spilled) {
        st.spills.fetch_add(1, std::memory_order_relaxed);
        st.stage_spills[i].fetch_add(1, std::memory_order_relaxed);
      }
      if (r.seeded) st.stage_seeds[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
    st.fallthrough[i][static_cast<size_t>(r.reason)].fetch_add(1, std::memory_order_relaxed);
    miss_prefill = std::max(miss_prefill, r.prefill_blocks);
  }
  if (d.index < 0) {
    st.no_pick.fetch_add(1, std::memory_order_relaxed);
  } else {
    for (const auto& s : stages_) s->observe(ctx, d.index);
  }
  st.decision_seconds.observe(static_cast<double>(clock_.nowNs() - t0) / 1e9);
  return d;
}

}  // namespace kvgate::routing
