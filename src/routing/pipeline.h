// The routing pipeline of one rule: an ordered list of stages.
//
// Algorithm: stages run in order over one CandidateSet; the first that picks decides; one that
// falls through records its reason and the next runs, honouring every exclusion made so far.
// When no stage picks, the request has no endpoint (the data plane answers 503). The pipeline
// records, per rule, which stage decided and with which key, every fall-through reason and the
// decision time (PipelineStats, kept across snapshots by the data plane); the access log's
// `tier` field is the deciding stage's name.
//
// Today a rule's pipeline is its selector stage (`sel`, see stage_registry.h); the seed's ladder
// (session, prefix trie, KV-exact, min-load, decode, rescue) plugs in as further stages.
#pragma once
#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "metrics/histogram.h"
#include "routing/stage.h"

namespace kvgate::routing {

constexpr size_t kMaxStages = 8;

// Counters of one rule's pipeline; they outlive snapshots (owned through shared_ptr).
struct PipelineStats {
  std::array<std::string, kMaxStages> stage_names;
  std::array<Ladder, kMaxStages> stage_ladder{};  // each stage's registry tier
  std::array<std::span<const FallReason>, kMaxStages> stage_reasons{};  // each stage's reasons
  size_t stage_count = 0;
  // decided[stage][key]
  std::array<std::array<std::atomic<uint64_t>, static_cast<size_t>(DecisionKey::kCount)>,
             kMaxStages>
      decided{};
  // fallthrough[stage][reason]
  std::array<std::array<std::atomic<uint64_t>, static_cast<size_t>(FallReason::kCount)>, kMaxStages>
      fallthrough{};
  std::atomic<uint64_t> spills{0};                               // all stages
  std::array<std::atomic<uint64_t>, kMaxStages> stage_spills{};  // by stage
  std::array<std::atomic<uint64_t>, kMaxStages> stage_seeds{};   // cold-start seeds, by stage
  std::atomic<uint64_t> no_pick{0};                              // every stage fell through
  metrics::Histogram decision_seconds{1e-3};                     // buckets 1 us .. 60 ms
};

struct Decision {
  int index = -1;  // endpoint index in the rule's pool, -1 = none
  int stage = -1;  // index of the deciding stage
  DecisionKey key = DecisionKey::kRr;
  bool spilled = false;
  bool track_chain = false;     // the request's chain joins the endpoint's active set (dynamo law)
  uint32_t prefill_blocks = 0;  // uncached blocks counted as queued prefill there (ttft law)
  int32_t matched_blocks = -1;  // kv_exact's pick: leading blocks held there (-1: another stage)
  int peer = -1;                // session (P/D): the pinned decode endpoint
  // A stage needs the remote index's answer (RequestContext::remote, state kWanted): the caller
  // asks it (never blocking its loop) and runs the pipeline again.
  bool need_remote = false;
};

class Pipeline {
 public:
  // Builds the pipeline for a list of stage names or aliases (stage_registry.h); an unknown name
  // or more than kMaxStages stages is an error naming the culprit.
  static Result<std::unique_ptr<Pipeline>> build(const std::vector<std::string>& names,
                                                 const StageServices& services,
                                                 std::shared_ptr<PipelineStats> stats);

  // A pipeline over given stages (names label them in metrics); build() uses it, tests too.
  static std::unique_ptr<Pipeline> make(std::vector<std::unique_ptr<Stage>> stages,
                                        std::vector<std::string> names, const common::Clock& clock,
                                        std::shared_ptr<PipelineStats> stats);

  // Runs the stages in order and records the outcome in stats(); `c.excluded` keeps the
  // exclusions the stages made. A run that a stage suspended (need_remote: its answer must be
  // fetched first) is resumed with `from` = that stage, so the stages before it are neither run
  // nor counted twice.
  Decision run(const RequestContext& ctx, CandidateSet& c, size_t from = 0) const;

  uint32_t needs() const { return needs_; }  // union of the stages' FactNeeds
  const std::string& stageName(int i) const { return names_[static_cast<size_t>(i)]; }
  Ladder stageLadder(int i) const { return stats_->stage_ladder[static_cast<size_t>(i)]; }

 private:
  Pipeline(const common::Clock& clock, std::shared_ptr<PipelineStats> stats)
      : clock_(clock), stats_(std::move(stats)) {}
  const common::Clock& clock_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::string> names_;
  std::shared_ptr<PipelineStats> stats_;
  uint32_t needs_ = 0;
};

}  // namespace kvgate::routing
