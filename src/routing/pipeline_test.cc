// The routing pipeline on plain data: stage order, fall-through reasons, exclusions honoured by
// later stages, and what it records.
#include "routing/pipeline.h"

#include <gtest/gtest.h>

namespace kvgate::routing {
namespace {

common::ManualClock g_clock;

std::vector<PoolEndpoint> pool(size_t n) {
  std::vector<PoolEndpoint> eps;
  for (size_t i = 0; i < n; ++i) {
    PoolEndpoint p;
    p.state = std::make_shared<endpoints::EndpointState>(
        static_cast<endpoints::EndpointId>(i + 1), "10.0.0." + std::to_string(i + 1), 80, g_clock);
    eps.push_back(p);
  }
  return eps;
}

// A scripted stage: excludes `exclude` (if >= 0), then picks `pick` or falls with `why`, and
// notes the order it ran in.
class Scripted : public Stage {
 public:
  Scripted(std::vector<int>& log, int id, int pick, FallReason why, int exclude = -1,
           uint32_t needs = 0)
      : log_(log), id_(id), pick_(pick), why_(why), exclude_(exclude), needs_(needs) {}
  uint32_t needs() const override { return needs_; }
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    log_.push_back(id_);
    if (exclude_ >= 0) c.excluded[static_cast<size_t>(exclude_)] = true;
    if (pick_ >= 0) return StageResult::pick(pick_, DecisionKey::kPrefix);
    return StageResult::fall(why_);
  }

 private:
  std::vector<int>& log_;
  int id_, pick_;
  FallReason why_;
  int exclude_;
  uint32_t needs_;
};

// Picks the first endpoint not excluded (a stand-in for a plain selector).
class FirstFree : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    for (size_t i = 0; i < c.size(); ++i)
      if (!c.excluded[i]) return StageResult::pick(static_cast<int>(i));
    return StageResult::fall(FallReason::kAllExcluded);
  }
};

TEST(Pipeline, FirstPickingStageDecidesAndLaterStagesDoNotRun) {
  std::vector<int> log;
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<Scripted>(log, 1, -1, FallReason::kNoKey, -1, kNeedPromptPrefix));
  st.push_back(std::make_unique<Scripted>(log, 2, 2, FallReason::kNoKey, -1, kNeedUser));
  st.push_back(std::make_unique<Scripted>(log, 3, 0, FallReason::kNoKey));
  auto stats = std::make_shared<PipelineStats>();
  auto p = Pipeline::make(std::move(st), {"a", "b", "c"}, g_clock, stats);
  EXPECT_EQ(p->needs(), kNeedPromptPrefix | kNeedUser);
  auto eps = pool(3);
  std::vector<bool> ex(3, false);
  CandidateSet c{eps, ex};
  Decision d = p->run(RequestContext{}, c);
  EXPECT_EQ(d.index, 2);
  EXPECT_EQ(d.stage, 1);
  EXPECT_EQ(p->stageName(d.stage), "b");
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
  EXPECT_EQ(stats->fallthrough[0][static_cast<size_t>(FallReason::kNoKey)].load(), 1u);
  EXPECT_EQ(stats->decided[1][static_cast<size_t>(DecisionKey::kPrefix)].load(), 1u);
  EXPECT_EQ(stats->decided[2][static_cast<size_t>(DecisionKey::kPrefix)].load(), 0u);
  EXPECT_EQ(stats->stage_names[2], "c");
}

// A stage that falls with a prefill estimate (kv_exact's miss under the ttft law) hands it to
// whichever later stage picks.
class MissWithPrefill : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    StageResult r = StageResult::fall(FallReason::kNoWorker);
    r.prefill_blocks = 37;
    return r;
  }
};

// Suspends once (need_remote), then picks 1: a stand-in for kv_exact with kvIndexAddr.
class AsksFirst : public Stage {
 public:
  explicit AsksFirst(std::vector<int>& log) : log_(log) {}
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    log_.push_back(9);
    if (!asked_) {
      asked_ = true;
      StageResult r;
      r.need_remote = true;
      return r;
    }
    return StageResult::pick(1);
  }

 private:
  std::vector<int>& log_;
  bool asked_ = false;
};

TEST(Pipeline, AResumedRunStartsAtTheSuspendedStageAndCountsEachFallOnce) {
  std::vector<int> log;
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<Scripted>(log, 1, -1, FallReason::kNoKey));
  st.push_back(std::make_unique<AsksFirst>(log));
  auto stats = std::make_shared<PipelineStats>();
  auto p = Pipeline::make(std::move(st), {"a", "kv"}, g_clock, stats);
  auto eps = pool(2);
  std::vector<bool> ex(2, false);
  CandidateSet c{eps, ex};
  Decision d = p->run(RequestContext{}, c);
  ASSERT_TRUE(d.need_remote);
  EXPECT_EQ(d.stage, 1);
  EXPECT_EQ(stats->no_pick.load(), 0u);  // a suspension is not a failed decision
  d = p->run(RequestContext{}, c, static_cast<size_t>(d.stage));
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(log, (std::vector<int>{1, 9, 9}));  // stage "a" ran once
  EXPECT_EQ(stats->fallthrough[0][static_cast<size_t>(FallReason::kNoKey)].load(), 1u);
  EXPECT_EQ(stats->decided[1][static_cast<size_t>(DecisionKey::kRr)].load(), 1u);
}

TEST(Pipeline, AMissesPrefillGoesToTheLaterPick) {
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<MissWithPrefill>());
  st.push_back(std::make_unique<FirstFree>());
  auto p = Pipeline::make(std::move(st), {"kv", "rr"}, g_clock, std::make_shared<PipelineStats>());
  auto eps = pool(2);
  std::vector<bool> ex{true, false};
  CandidateSet c{eps, ex};
  Decision d = p->run(RequestContext{}, c);
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.stage, 1);
  EXPECT_EQ(d.prefill_blocks, 37u);
}

TEST(Pipeline, AnExclusionIsHonouredByTheNextStage) {
  std::vector<int> log;
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<Scripted>(log, 1, -1, FallReason::kAllExcluded, /*exclude=*/0));
  st.push_back(std::make_unique<FirstFree>());
  auto p =
      Pipeline::make(std::move(st), {"mask", "first"}, g_clock, std::make_shared<PipelineStats>());
  auto eps = pool(2);
  std::vector<bool> ex(2, false);
  CandidateSet c{eps, ex};
  Decision d = p->run(RequestContext{}, c);
  EXPECT_EQ(d.index, 1);  // endpoint 0 was excluded by the first stage
  EXPECT_TRUE(ex[0]);     // and the exclusion stays for the caller (retries)
}

TEST(Pipeline, APickOfAnExcludedEndpointIsIgnoredAndNoPickIsCounted) {
  std::vector<int> log;
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<Scripted>(log, 1, 0, FallReason::kNoKey));  // picks excluded 0
  auto stats = std::make_shared<PipelineStats>();
  auto p = Pipeline::make(std::move(st), {"bad"}, g_clock, stats);
  auto eps = pool(1);
  std::vector<bool> ex{true};
  CandidateSet c{eps, ex};
  EXPECT_EQ(p->run(RequestContext{}, c).index, -1);
  EXPECT_EQ(stats->no_pick.load(), 1u);
}

TEST(Pipeline, EmptyPoolFallsThroughWithItsReason) {
  std::vector<int> log;
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<Scripted>(log, 1, 0, FallReason::kNoKey));
  auto stats = std::make_shared<PipelineStats>();
  auto p = Pipeline::make(std::move(st), {"x"}, g_clock, stats);
  std::vector<PoolEndpoint> none;
  std::vector<bool> ex;
  CandidateSet c{none, ex};
  EXPECT_EQ(p->run(RequestContext{}, c).index, -1);
  EXPECT_TRUE(log.empty());  // the stage is not asked to pick from nothing
  EXPECT_EQ(stats->fallthrough[0][static_cast<size_t>(FallReason::kEmptyPool)].load(), 1u);
}

TEST(Pipeline, BuildByNameAndAliasRejectsUnknownStages) {
  auto eps = pool(2);
  config::RuleSpec rule;
  StageServices s{g_clock, rule, eps};
  auto ok = Pipeline::build({"8", "rr"}, s, std::make_shared<PipelineStats>());
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)->stageName(0), "chwbl");
  EXPECT_EQ((*ok)->stageName(1), "rr");
  EXPECT_TRUE((*ok)->needs() & kNeedPromptPrefix);
  auto bad = Pipeline::build({"rr", "teleport"}, s, std::make_shared<PipelineStats>());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().what.find("teleport"), std::string::npos);
  EXPECT_FALSE(Pipeline::build({}, s, std::make_shared<PipelineStats>()));
}

TEST(Pipeline, DecisionTimeComesFromTheInjectedClock) {
  std::vector<std::unique_ptr<Stage>> st;
  st.push_back(std::make_unique<FirstFree>());
  auto stats = std::make_shared<PipelineStats>();
  common::ManualClock clock;
  auto p = Pipeline::make(std::move(st), {"first"}, clock, stats);
  auto eps = pool(1);
  std::vector<bool> ex{false};
  CandidateSet c{eps, ex};
  p->run(RequestContext{}, c);
  EXPECT_EQ(stats->decision_seconds.bucket(0), 1u);  // a manual clock that did not move: 0 s
  EXPECT_EQ(stats->decision_seconds.sumSeconds(), 0.0);
}

}  // namespace
}  // namespace kvgate::routing
