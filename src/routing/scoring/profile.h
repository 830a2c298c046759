// A scoring profile: a rule's filters, weighted scorers and picker (config/scoring_profile.h says
// how a rule writes one), built once when the rule is committed and run by the kv_exact stage in
// place of a selection law, over the same candidates and signals.
//
// Algorithm, per decision: every candidate starts kept; each filter in order drops some (a filter
// that would drop them all is undone); each scorer scores the kept candidates in [0, 1]; a
// candidate's total is the weighted sum; the picker chooses among the kept:
//  - max: the highest total; ties (exactly equal totals: every candidate's total is summed in the
//    same order, and a law's profile form keeps a cost gap its normalization can still tell) to
//    more overlap, then less load,
//    then the first at or after a cursor the stage advances per decision (equal holders take
//    turns; the laws break ties by less load, then the lowest index: a built-in profile picks as
//    its law but among tied candidates);
//  - random: at random with probability proportional to the total (uniform when all are 0),
//    drawn from the stage's cursor and a salt drawn once per profile (replicas differ).
// A pick holding less of the prompt than the best holder is a spill (metrics `spilled`).
// onMiss score: prompts nobody holds are placed by the profile too; selector: they fall through
// to the rule's selector as Tier 1.5 misses (kv_exact decides that, before the profile runs).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "common/result.h"
#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"
#include "routing/stages/selection_law.h"

namespace kvgate::routing::scoring {

class ScoringProfile {
 public:
  // Null parts are a 400 naming the part (a name config knows that this build does not have).
  static Result<std::shared_ptr<const ScoringProfile>> build(const config::ScoringProfileSpec& s);

  // The pick among `c` for a prompt of p.prompt_blocks blocks (p.block_tokens each), with cursor
  // p.rotate; index -1 only when `c` is empty.
  LawResult pick(std::span<const LawCandidate> c, const LawParams& p) const;

  // Each candidate's weighted total after the filters (-infinity for one a filter dropped): what
  // pick() chooses from (diagnostics, tests).
  std::vector<double> totals(std::span<const LawCandidate> c, const LawParams& p) const;

  bool scoresMisses() const { return spec_.score_misses; }
  bool seedsColdStart() const { return spec_.cold_start_seeding; }
  bool readsActive() const { return reads_active_; }
  const config::ScoringProfileSpec& spec() const { return spec_; }

 private:
  // Filters and scorers over `c`: keep[i] and total[i] for every candidate.
  void evaluate(const ScoringRequest& req, std::span<uint8_t> keep, std::span<uint8_t> prev,
                std::span<double> total, std::span<double> tmp) const;
  config::ScoringProfileSpec spec_;
  std::vector<std::unique_ptr<Filter>> filters_;
  std::vector<std::pair<double, std::unique_ptr<Scorer>>> scorers_;  // (weight, scorer)
  uint64_t salt_ = 0;          // random per profile: replicas' random pickers draw differently
  bool reads_active_ = false;  // a part reads the active blocks (the data plane tracks them)
};

}  // namespace kvgate::routing::scoring
