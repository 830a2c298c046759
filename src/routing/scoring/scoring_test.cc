// Scoring profiles: the rule field's parser (hostile input included), each scorer and filter on
// a case worked by hand, the pickers, and the built-in peer profiles against the independent
// law implementations of the same published policies (stages/selection_law.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/splitmix.h"
#include "config/scoring_profile.h"
#include "routing/rule_profile.h"
#include "routing/scoring/profile.h"
#include "routing/scoring/registry.h"

namespace kvgate::routing::scoring {
namespace {

using nlohmann::json;

config::ScoringProfileSpec spec(const json& v) {
  auto s = config::parseScoringProfile(v, "p");
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().what);
  return s ? *s : config::ScoringProfileSpec{};
}

std::string errorOf(const json& v) {
  auto s = config::parseScoringProfile(v, "p");
  return s ? std::string("accepted") : s.error().what;
}

std::shared_ptr<const ScoringProfile> profile(const json& v) {
  auto p = ScoringProfile::build(spec(v));
  EXPECT_TRUE(p.has_value());
  return p ? *p : nullptr;
}

// One scorer's scores over every candidate (all kept), its parameters at their defaults.
std::vector<double> scores(const char* name, std::vector<LawCandidate> c, uint32_t prompt) {
  config::ScoringPart part{name, 1, {}};
  auto make = findScorer(name);
  EXPECT_NE(make, nullptr) << name;
  std::vector<uint8_t> keep(c.size(), 1);
  std::vector<double> out(c.size(), -1);
  make(part)->score({c, prompt, 16}, keep, out);
  return out;
}

std::vector<uint8_t> kept(const char* name, std::map<std::string, double> params,
                          std::vector<LawCandidate> c, uint32_t prompt) {
  config::ScoringPart part{name, 1, std::move(params)};
  std::vector<uint8_t> keep(c.size(), 1);
  findFilter(name)(part)->apply({c, prompt, 16}, keep);
  return keep;
}

LawCandidate cand(uint32_t overlap, uint32_t load, int64_t waiting = -1, double kv = -1,
                  uint64_t pending = 0, double capacity = 0) {
  LawCandidate x;
  x.overlap = overlap;
  x.load = load;
  x.capacity = capacity;
  x.waiting = waiting;
  x.kv_usage = kv;
  x.pending_blocks = pending;
  return x;
}

TEST(ScoringProfileSpec, BuiltinsExpandToTheirParts) {
  auto s = spec("llm-d-sticky");
  EXPECT_EQ(s.builtin, "llm-d-sticky");
  ASSERT_EQ(s.filters.size(), 1u);
  EXPECT_EQ(s.filters[0].name, "prefix_affinity");
  EXPECT_DOUBLE_EQ(s.filters[0].param("threshold"), 0.8);        // llm-d's 0.8
  EXPECT_DOUBLE_EQ(s.filters[0].param("tauTokens"), 286720.0);  // 20,480 tokens/s x 14 s
  ASSERT_EQ(s.scorers.size(), 1u);
  EXPECT_EQ(s.scorers[0].name, "token_load");
  EXPECT_TRUE(s.score_misses);
  auto l = spec("llm-d");
  ASSERT_EQ(l.scorers.size(), 3u);
  EXPECT_DOUBLE_EQ(l.scorers[0].weight + l.scorers[1].weight + l.scorers[2].weight, 7.0);  // 2+2+3
  EXPECT_FALSE(spec("predict").score_misses);
  EXPECT_TRUE(spec("predict").cold_start_seeding);  // the predict law's seeding, on hits
  auto q = spec("predict-q");  // the default law: misses placed, seeding on hits kept
  ASSERT_EQ(q.scorers.size(), 1u);
  EXPECT_EQ(q.scorers[0].name, "predict_q");
  EXPECT_TRUE(q.score_misses);
  EXPECT_TRUE(q.cold_start_seeding);
  EXPECT_FALSE(s.cold_start_seeding);        // llm-d-sticky: the peer has none
  // coldStartSeeding unset: on exactly when misses fall through; set: as set.
  EXPECT_TRUE(
      spec(json{{"scorers", {{{"name", "load"}}}}, {"onMiss", "selector"}}).cold_start_seeding);
  EXPECT_FALSE(spec(json{{"scorers", {{{"name", "load"}}}}}).cold_start_seeding);
  EXPECT_TRUE(
      spec(json{{"scorers", {{{"name", "load"}}}}, {"coldStartSeeding", true}}).cold_start_seeding);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}}}}, {"coldStartSeeding", "yes"}})
                .find("p.coldStartSeeding: must be true or false"),
            std::string::npos);
  // The effective block spells every default out.
  json j = spec(json{{"scorers", {{{"name", "load"}}}}, {"filters", {{{"name", "kv_usage_below"}}}}})
               .toJson();
  EXPECT_EQ(j["picker"], "max");
  EXPECT_EQ(j["onMiss"], "score");
  EXPECT_EQ(j["coldStartSeeding"], false);
  EXPECT_EQ(j["scorers"][0]["weight"], 1.0);
  EXPECT_EQ(j["filters"][0]["threshold"], 0.95);
}

// The effective block's form of a profile is itself a valid field value, meaning the same.
TEST(ScoringProfileSpec, TheSpelledOutFormParsesBackToItself) {
  for (auto b : config::builtinProfileNames()) {
    const json once = spec(std::string(b)).toJson();
    EXPECT_EQ(spec(once).toJson(), once) << b;
  }
}

TEST(ScoringProfileSpec, BadProfilesAreRefusedNamingTheCulprit) {
  EXPECT_NE(errorOf("llm-x").find("unknown built-in profile 'llm-x'"), std::string::npos);
  EXPECT_NE(errorOf(7).find("a built-in profile's name or an object"), std::string::npos);
  EXPECT_NE(errorOf(json::object()).find("p.scorers: at least one scorer"), std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "nope"}}}}}).find("p.scorers[0].name: unknown scorer 'nope'"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "prefix_affinity"}}}}}).find("unknown scorer"),
            std::string::npos);  // a filter is not a scorer
  EXPECT_NE(errorOf(json{{"scorers", {{{"weight", 1}}}}}).find("p.scorers[0].name: is required"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {"load"}}}).find("must be an object"), std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}, {"weight", -1}}}}}).find("0..1000"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}, {"weight", "2"}}}}}).find("0..1000"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}, {"weight", 0}}}}}).find("must not all be 0"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}, {"depth", 1}}}}})
                .find("p.scorers[0].depth: unknown parameter of load"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}}, {{"name", "load"}}}}}).find("listed twice"),
            std::string::npos);
  json thr = {{"scorers", {{{"name", "load"}}}},
              {"filters", {{{"name", "prefix_affinity"}, {"threshold", 1.5}}}}};
  EXPECT_NE(errorOf(thr).find("p.filters[0].threshold: must be a number in 0..1"), std::string::npos);
  thr["filters"][0]["threshold"] = nullptr;
  EXPECT_NE(errorOf(thr).find("must be a number"), std::string::npos);
  json many = {{"scorers", json::array()}};
  for (const char* n : {"prefix", "prefix_minmax", "queue", "kv_utilization", "load", "token_load",
                        "predict", "prefix", "load"})
    many["scorers"].push_back({{"name", n}});
  EXPECT_NE(errorOf(many).find("at most 8"), std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}}}}, {"picker", "min"}}).find("max or random"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}}}}, {"onMiss", true}}).find("score or selector"),
            std::string::npos);
  EXPECT_NE(errorOf(json{{"scorers", {{{"name", "load"}}}}, {"weights", 1}}).find("p.weights: unknown field"),
            std::string::npos);
  // A hostile name is not echoed whole.
  const std::string huge(5000, 'x');
  EXPECT_LT(errorOf(json{{"scorers", {{{"name", huge}}}}}).size(), 400u);
  EXPECT_LT(errorOf(huge).size(), 400u);
}

TEST(ScoringRegistry, EveryPartTheConfigKnowsIsBuilt) {
  for (const auto& s : config::scorerInfos()) EXPECT_NE(findScorer(s.name), nullptr) << s.name;
  for (const auto& f : config::filterInfos()) EXPECT_NE(findFilter(f.name), nullptr) << f.name;
  EXPECT_EQ(findScorer("prefix_affinity"), nullptr);
  // A part built without its parameters reads their registered defaults (a parsed one has them).
  const config::ScoringPart bare{"predict", 1, {}};
  EXPECT_EQ(bare.param("batchOffset"), 1);
  EXPECT_EQ(bare.param("capacityShare"), 1);
  EXPECT_EQ(bare.param("decodeWeight"), 0.5);
  EXPECT_EQ(bare.param("nonesuch"), 0);
  for (auto b : config::builtinProfileNames()) EXPECT_NE(profile(std::string(b)), nullptr) << b;
}

TEST(Scorers, EachScoresAWorkedExample) {
  // prefix: overlap / prompt, prompt of 10 blocks.
  EXPECT_EQ(scores("prefix", {cand(10, 0), cand(5, 0), cand(0, 0)}, 10),
            (std::vector<double>{1, 0.5, 0}));
  EXPECT_EQ(scores("prefix", {cand(3, 0)}, 0), (std::vector<double>{0}));  // empty prompt
  // prefix_minmax: overlaps 8, 4, 2 -> (m - 2) / 6 = 1, 1/3, 0; nobody -> 0; all equal -> 1.
  auto mm = scores("prefix_minmax", {cand(8, 0), cand(4, 0), cand(2, 0)}, 10);
  EXPECT_DOUBLE_EQ(mm[0], 1);
  EXPECT_DOUBLE_EQ(mm[1], 1.0 / 3);
  EXPECT_DOUBLE_EQ(mm[2], 0);
  EXPECT_EQ(scores("prefix_minmax", {cand(0, 0), cand(0, 0)}, 10), (std::vector<double>{0, 0}));
  EXPECT_EQ(scores("prefix_minmax", {cand(4, 0), cand(4, 0)}, 10), (std::vector<double>{1, 1}));
  // queue: waiting 5, 1, unknown, 3 -> (5 - w) / 4 = 0, 1, 1 (unknown), 0.5.
  EXPECT_EQ(scores("queue", {cand(0, 0, 5), cand(0, 0, 1), cand(0, 0, -1), cand(0, 0, 3)}, 10),
            (std::vector<double>{0, 1, 1, 0.5}));
  // kv_utilization: 1 - usage; unknown 1; out of range clamped.
  EXPECT_EQ(scores("kv_utilization", {cand(0, 0, -1, 0.25), cand(0, 0, -1, -1),
                                      cand(0, 0, -1, 1.5)},
                   10),
            (std::vector<double>{0.75, 1, 0}));
  // load: loads 4, 2, 0 -> (4 - l) / 4 = 0, 0.5, 1.
  EXPECT_EQ(scores("load", {cand(0, 4), cand(0, 2), cand(0, 0)}, 10),
            (std::vector<double>{0, 0.5, 1}));
  // token_load: prompt 10; overlaps 10, 0, 5; pending 6, 0, 2 -> 6 + 0, 0 + 10, 2 + 5 = 6, 10, 7
  // -> (10 - t) / 4 = 1, 0, 0.75.
  EXPECT_EQ(scores("token_load", {cand(10, 0, -1, -1, 6), cand(0, 0, -1, -1, 0),
                                  cand(5, 0, -1, -1, 2)},
                   10),
            (std::vector<double>{1, 0, 0.75}));
  // predict: prompt 10; (uncached + 1) x (load + 1): (0 + 1) x 4 = 4 and (10 + 1) x 1 = 11 ->
  // 4 / 4 = 1 and 4 / 11; capacities 1000 and 3000 (mean 2000): 4 x 2 = 8 and 11 x 2/3 = 7.33
  // -> 7.33 / 8 = 0.9167 and 1.
  auto pr = scores("predict", {cand(10, 3), cand(0, 0)}, 10);
  EXPECT_DOUBLE_EQ(pr[0], 1);
  EXPECT_DOUBLE_EQ(pr[1], 4.0 / 11);
  pr = scores("predict", {cand(10, 3, -1, -1, 0, 1000), cand(0, 0, -1, -1, 0, 3000)}, 10);
  EXPECT_NEAR(pr[0], (22.0 / 3) / 8, 1e-12);
  EXPECT_DOUBLE_EQ(pr[1], 1);
  // decodeWeight (the built-in profile's default 0.5): 2 of the 3 in flight are streams past
  // their first token: batch 1 + 0.5 x 2 = 2, (0 + 1) x 3 = 3 against 11 -> 1 and 3 / 11.
  const auto builtin = spec("predict");
  ASSERT_EQ(builtin.scorers.size(), 1u);
  EXPECT_EQ(builtin.scorers[0].param("decodeWeight"), 0.5);
  std::vector<LawCandidate> c = {cand(10, 3), cand(0, 0)};
  c[0].started = 2;
  std::vector<uint8_t> keep(2, 1);
  std::vector<double> out(2, -1);
  findScorer("predict")(builtin.scorers[0])->score({c, 10, 16}, keep, out);
  EXPECT_DOUBLE_EQ(out[0], 1);
  EXPECT_DOUBLE_EQ(out[1], 3.0 / 11);
  // predict_q: while someone holds the prompt, predict's scores (above: 1 and 4 / 11); nobody:
  // queued prefill 6, 2, 2, 4 blocks -> (6 - q) / 4 = 0, 1, 1, 0.5 (loads play no part).
  pr = scores("predict_q", {cand(10, 3), cand(0, 0)}, 10);
  EXPECT_DOUBLE_EQ(pr[0], 1);
  EXPECT_DOUBLE_EQ(pr[1], 4.0 / 11);
  EXPECT_EQ(scores("predict_q",
                   {cand(0, 0, -1, -1, 6), cand(0, 5, -1, -1, 2), cand(0, 1, -1, -1, 2),
                    cand(0, 0, -1, -1, 4)},
                   10),
            (std::vector<double>{0, 1, 1, 0.5}));
  // batchOffset 4 (the law's LOXILB_KV_PREDICT_BATCH_OFFSET): (0 + 1) x (3 + 4) = 7 and
  // (10 + 1) x (0 + 4) = 44 -> 1 and 7 / 44.
  config::ScoringPart q4{"predict_q", 1, {{"decodeWeight", 0.5}, {"batchOffset", 4}}};
  std::vector<LawCandidate> c4 = {cand(10, 3), cand(0, 0)};
  findScorer("predict_q")(q4)->score({c4, 10, 16}, keep, out);
  EXPECT_DOUBLE_EQ(out[0], 1);
  EXPECT_DOUBLE_EQ(out[1], 7.0 / 44);
  // soft_cost, prompt 10, capacity unknown (1), lambda 32: overlaps 10, 0, 5 with loads 3, 0, 1 ->
  // 0 + 96, 10000 + 0, 5000 + 32 -> (10000 - c) / 9904 = 1, 0, 4968 / 9904.
  auto so = scores("soft_cost", {cand(10, 3), cand(0, 0), cand(5, 1)}, 10);
  EXPECT_DOUBLE_EQ(so[0], 1);
  EXPECT_DOUBLE_EQ(so[1], 0);
  EXPECT_DOUBLE_EQ(so[2], 4968.0 / 9904);
  // ttft_cost, miss weight 8, 2 blocks per request: pending 4, 0, 2 -> 4 + 0 + 6 = 10,
  // 0 + 80 + 0 = 80, 2 + 40 + 2 = 44 -> (80 - c) / 70 = 1, 0, 36 / 70.
  auto tt = scores("ttft_cost", {cand(10, 3, -1, -1, 4), cand(0, 0), cand(5, 1, -1, -1, 2)}, 10);
  EXPECT_DOUBLE_EQ(tt[0], 1);
  EXPECT_DOUBLE_EQ(tt[1], 0);
  EXPECT_DOUBLE_EQ(tt[2], 36.0 / 70);
  // dynamo_cost: uncached + active blocks, active 6, 0, 3 -> 6, 10, 8 -> 1, 0, 0.5; dynamo_v1_cost
  // adds the queued prefill 4, 0, 0 -> 10, 10, 8 -> 0, 0, 1.
  std::vector<LawCandidate> dy = {cand(10, 0, -1, -1, 4), cand(0, 0), cand(5, 0)};
  dy[0].active_blocks = 6;
  dy[2].active_blocks = 3;
  EXPECT_EQ(scores("dynamo_cost", dy, 10), (std::vector<double>{1, 0, 0.5}));
  EXPECT_EQ(scores("dynamo_v1_cost", dy, 10), (std::vector<double>{0, 0, 1}));
  // predict without capacity shares (lmetric): capacities 1000 and 3000 no longer count:
  // (0 + 1) x (3 + 1) = 4 and (10 + 1) x 1 = 11 -> 1 and 4 / 11.
  config::ScoringPart lm{
      "predict", 1, {{"decodeWeight", 1}, {"batchOffset", 1}, {"capacityShare", 0}}};
  std::vector<LawCandidate> lc2 = {cand(10, 3, -1, -1, 0, 1000), cand(0, 0, -1, -1, 0, 3000)};
  findScorer("predict")(lm)->score({lc2, 10, 16}, keep, out);
  EXPECT_DOUBLE_EQ(out[0], 1);
  EXPECT_DOUBLE_EQ(out[1], 4.0 / 11);
  // Exact totals decide (a review's case, by hand): soft, lambda 32, prompt 1000 blocks; A holds
  // it all with load 2 on 1000 blocks of KV (cost 32 x 2 / 1000 = 0.064), B all with load 1 on 499
  // (0.064128), C nothing (1,000,000). The law takes A; the profile form must too, though C's cost
  // stretches the normalization (B's score is 1 - 1.3e-10, not 1).
  {
    LawParams sp;
    sp.mode = LawMode::kSoft;
    sp.prompt_blocks = 1000;
    const std::vector<LawCandidate> abc = {
        cand(1000, 2, -1, -1, 0, 1000), cand(1000, 1, -1, -1, 0, 499), cand(0, 0, -1, -1, 0, 1000)};
    EXPECT_EQ(applyLaw(abc, sp).index, 0);
    auto form = ScoringProfile::build(*lawAsProfile(sp));
    ASSERT_TRUE(form.has_value());
    EXPECT_EQ((*form)->pick(abc, sp).index, 0);
  }
  // "Nobody holds it" is judged over every candidate, not the ones a filter kept (as the law and
  // the stage judge a miss): the only holder (KV usage 0.99) dropped by kv_usage_below, the kept
  // two are scored by predict, (10 + 1) x (0 + 1) = 11 against (10 + 1) x (1 + 1) = 22 -> the
  // idle one (1), not the least queued prefill (2).
  auto filtered = profile(
      json{{"filters", {{{"name", "kv_usage_below"}}}}, {"scorers", {{{"name", "predict_q"}}}}});
  const std::vector<LawCandidate> fc = {cand(10, 0, -1, 0.99), cand(0, 0, -1, 0.1, 5),
                                        cand(0, 1, -1, 0.1, 1)};
  LawParams fp;
  fp.prompt_blocks = 10;
  EXPECT_EQ(filtered->pick(fc, fp).index, 1);
}

TEST(Scorers, NormalizeOverTheKeptCandidatesOnly) {
  // loads 9, 2, 0 with the idle one filtered out: over {9, 2}: 0 and 1.
  std::vector<LawCandidate> c = {cand(0, 9), cand(0, 2), cand(0, 0)};
  std::vector<uint8_t> keep = {1, 1, 0};
  std::vector<double> out(3, -1);
  findScorer("load")({"load", 1, {}})->score({c, 10, 16}, keep, out);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(out[2], -1);  // not written
}

TEST(Filters, EachKeepsAWorkedExample) {
  // prefix_affinity at 0.8 of a 10-block prompt: overlaps 8, 7, 10 -> 0 and 2 kept.
  EXPECT_EQ(kept("prefix_affinity", {{"threshold", 0.8}, {"tauTokens", 1e9}},
                 {cand(8, 0), cand(7, 0), cand(10, 0)}, 10),
            (std::vector<uint8_t>{1, 0, 1}));
  // tau of 48 tokens = 3 blocks of 16: token loads 2 (uncached), 3 + 5 pending, 0 + 4 pending.
  EXPECT_EQ(kept("prefix_affinity", {{"threshold", 0.8}, {"tauTokens", 48}},
                 {cand(8, 0), cand(7, 0, -1, -1, 5), cand(10, 0, -1, -1, 4)}, 10),
            (std::vector<uint8_t>{1, 0, 0}));
  // tauSeconds: tau from the candidate's prefill rate measured online (rate x seconds) once one is
  // known, else tauTokens. 2 s at 64 tokens/s = 128 tokens = 8 blocks: token loads 2 + 5 = 7 kept,
  // 0 + 9 = 9 dropped; the third has no rate (0): tauTokens 48 (3 blocks) drops its load 2 + 5.
  {
    auto rated = [](LawCandidate x, double rate) {
      x.prefill_rate = rate;
      return x;
    };
    EXPECT_EQ(kept("prefix_affinity", {{"threshold", 0.8}, {"tauTokens", 48}, {"tauSeconds", 2}},
                   {rated(cand(8, 0, -1, -1, 5), 64), rated(cand(10, 0, -1, -1, 9), 64),
                    cand(8, 0, -1, -1, 5)},
                   10),
              (std::vector<uint8_t>{1, 0, 0}));
  }
  // An empty prompt has no affinity.
  EXPECT_EQ(kept("prefix_affinity", {{"threshold", 0.8}, {"tauTokens", 1e9}, {"tauSeconds", 0}},
                 {cand(0, 0)}, 0),
            (std::vector<uint8_t>{0}));
  // kv_usage_below 0.9: 0.95 dropped, unknown and 0.5 kept, exactly 0.9 kept.
  EXPECT_EQ(kept("kv_usage_below", {{"threshold", 0.9}},
                 {cand(0, 0, -1, 0.95), cand(0, 0, -1, -1), cand(0, 0, -1, 0.5),
                  cand(0, 0, -1, 0.9)},
                 10),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  // bounded_load: loads 3, 1, 0 of equal (unknown) capacity, this request counted: L = 5.
  // factor 1.75: cap = ceil(1.75 x 5 / 3) = ceil(2.92) = 3, so the load-3 endpoint is at its cap;
  // 3.0: ceil(5) = 5, all under; adaptive (L' = 4 < 16: 1.75) as fixed; taper (m = 5 / 3 < 2:
  // 3.0) all under; capacities 3000, 1000, 1000: caps ceil(5.25) = 6, ceil(1.75) = 2, 2: all under.
  const std::vector<LawCandidate> loads = {cand(0, 3), cand(0, 1), cand(0, 0)};
  EXPECT_EQ(kept("bounded_load", {{"factorPct", 175}, {"shape", 0}}, loads, 10),
            (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(kept("bounded_load", {{"factorPct", 300}, {"shape", 0}}, loads, 10),
            (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(kept("bounded_load", {{"factorPct", 300}, {"shape", 1}}, loads, 10),
            (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(kept("bounded_load", {{"factorPct", 100}, {"shape", 2}}, loads, 10),
            (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(
      kept("bounded_load", {{"factorPct", 175}, {"shape", 0}},
           {cand(0, 3, -1, -1, 0, 3000), cand(0, 1, -1, -1, 0, 1000), cand(0, 0, -1, -1, 0, 1000)},
           10),
      (std::vector<uint8_t>{1, 1, 1}));
  // shape is a whole number.
  EXPECT_NE(errorOf(json{{"filters", {{{"name", "bounded_load"}, {"shape", 1.5}}}},
                         {"scorers", {{{"name", "prefix"}}}}})
                .find("must be a whole number in 0..2"),
            std::string::npos);
}

LawParams prompt(uint32_t blocks, uint64_t rotate = 0) {
  LawParams p;
  p.prompt_blocks = blocks;
  p.rotate = rotate;
  return p;
}

TEST(ScoringProfile, MaxPicksTheWeightedSum) {
  // prefix x 3 + load x 1, prompt 10: overlaps 10, 6, 0; loads 8, 0, 4.
  // prefix: 1, 0.6, 0; load: (8 - l) / 8 = 0, 1, 0.5 -> 3, 2.8, 0.5: endpoint 0.
  auto p = profile(json{{"scorers", {{{"name", "prefix"}, {"weight", 3}}, {{"name", "load"}}}}});
  std::vector<LawCandidate> c = {cand(10, 8), cand(6, 0), cand(0, 4)};
  auto r = p->pick(c, prompt(10));
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
  EXPECT_EQ(r.uncached, 0u);
  // prefix x 1 + load x 1: 1, 1.6, 0.5: endpoint 1, a spill (it holds less than endpoint 0).
  p = profile(json{{"scorers", {{{"name", "prefix"}}, {{"name", "load"}}}}});
  r = p->pick(c, prompt(10));
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(r.uncached, 4u);
}

TEST(ScoringProfile, AFilterThatKeepsNoneIsUndone) {
  // Nobody holds 0.8 of the prompt: the affinity filter is dropped, token load decides over all:
  // overlaps 7, 2, 0 of 10 -> token loads 3, 8 + 0, 10 -> endpoint 0.
  auto p = profile("llm-d-sticky");
  EXPECT_EQ(p->pick(std::vector<LawCandidate>{cand(7, 5), cand(2, 0), cand(0, 0)}, prompt(10)).index,
            0);
  // With a holder over 0.8 (endpoint 1, 9 of 10), it alone is kept, however loaded its queue.
  EXPECT_EQ(
      p->pick(std::vector<LawCandidate>{cand(7, 0), cand(9, 9, -1, -1, 50), cand(0, 0)}, prompt(10))
          .index,
      1);
  EXPECT_TRUE(p->scoresMisses());
}

TEST(ScoringProfile, TiesGoToOverlapThenLoadThenTheCursor) {
  auto p = profile(json{{"scorers", {{{"name", "kv_utilization"}}}}});  // all score 1
  std::vector<LawCandidate> c = {cand(2, 1), cand(4, 1), cand(4, 0), cand(4, 0)};
  EXPECT_EQ(p->pick(c, prompt(10, 0)).index, 2);  // overlap 4, load 0; the cursor at 0
  EXPECT_EQ(p->pick(c, prompt(10, 3)).index, 3);  // the cursor at 3 takes 3 before 2
  EXPECT_EQ(p->pick(c, prompt(10, 4)).index, 2);  // and wraps
  EXPECT_FALSE(p->pick(c, prompt(10, 3)).spilled);  // an equal holder is not a spill
}

TEST(ScoringProfile, RandomPicksInProportionToTheScore) {
  // prefix scores 0.75 and 0.25 of a 4-block prompt (overlaps 3, 1): 3 to 1 over 4000 cursors.
  auto p = profile(json{{"scorers", {{{"name", "prefix"}}}}, {"picker", "random"}});
  std::vector<LawCandidate> c = {cand(3, 0), cand(1, 0), cand(0, 0)};
  int first = 0, third = 0;
  for (uint64_t k = 0; k < 4000; ++k) {
    const int i = p->pick(c, prompt(4, k)).index;
    first += i == 0;
    third += i == 2;
  }
  EXPECT_EQ(third, 0);  // score 0: never
  EXPECT_GT(first, 2800);
  EXPECT_LT(first, 3200);
  // All zero: uniform over the candidates.
  std::vector<LawCandidate> z = {cand(0, 0), cand(0, 0)};
  int zero = 0;
  for (uint64_t k = 0; k < 4000; ++k) zero += p->pick(z, prompt(4, k)).index == 0;
  EXPECT_GT(zero, 1800);
  EXPECT_LT(zero, 2200);
  EXPECT_EQ(p->pick(std::vector<LawCandidate>{}, prompt(4)).index, -1);
}

TEST(ScoringProfile, PicksBeyondTheInlineBuffer) {
  // 100 candidates (past the 64 kept on the stack): the only holder wins.
  auto p = profile(json{{"scorers", {{{"name", "prefix"}}}}});
  std::vector<LawCandidate> c(100, cand(0, 0));
  c[77] = cand(5, 3);
  EXPECT_EQ(p->pick(c, prompt(10)).index, 77);
}

// The built-in profiles and every law's profile form (lawAsProfile, the rule's effective
// kvLbModeProfile), composed of parts, against the laws that implement the same policies in one
// formula (written independently, before the framework): on random fleets they pick the same
// endpoint, or, where the law's pick and the profile's differ, the two tie (equal totals: most
// laws break ties by less load then the lowest index, the profile by more overlap, less load,
// then its cursor; the predict laws as the profile). A third of the fleets are drawn from narrow
// ranges so ties happen; for llm-d-sticky, queued prefill is drawn around tau (17,920 blocks) and
// overlaps near the whole prompt, so the affinity filter keeps some candidates and drops others;
// loads up to 1,000 with random capacities put the capped laws' candidates over and under their
// caps.
TEST(ScoringProfile, BuiltinProfilesAndLawProfileFormsAgreeWithTheLaws) {
  common::SplitMix64 rng{42};
  auto below = [&](uint64_t n) { return rng.next() % n; };
  struct Case {
    LawMode law;
    const char* builtin = nullptr;  // else lawAsProfile
    uint32_t batch_offset = 1;      // the predict laws'
    uint32_t factor_pct = 175;      // hard's
  };
  for (Case k : {Case{LawMode::kLlmd, "llm-d"},
                 Case{LawMode::kLlmdSticky, "llm-d-sticky"},
                 Case{LawMode::kPredict, "predict"},
                 Case{LawMode::kPredictQ, "predict-q"},
                 Case{LawMode::kHard, "hard"},
                 Case{LawMode::kAdaptive, "adaptive"},
                 Case{LawMode::kTaper, "taper"},
                 Case{LawMode::kOff},
                 Case{LawMode::kHard},
                 Case{LawMode::kHard, nullptr, 1, 120},
                 Case{LawMode::kAdaptive},
                 Case{LawMode::kTaper},
                 Case{LawMode::kPredict, nullptr, 4},
                 Case{LawMode::kPredictQ, nullptr, 4},
                 Case{LawMode::kLlmd},
                 Case{LawMode::kLlmdSticky},
                 Case{LawMode::kSoft},
                 Case{LawMode::kAdaptiveSoft},
                 Case{LawMode::kTtft},
                 Case{LawMode::kLmetric},
                 Case{LawMode::kDynamo},
                 Case{LawMode::kDynamoV1}}) {
    const bool predict = k.law == LawMode::kPredict || k.law == LawMode::kPredictQ;
    LawParams base;
    base.mode = k.law;
    base.spill_relief = true;
    base.predict_decode_weight_pct = predict ? 50 : 100;
    base.predict_batch_offset = k.batch_offset;
    base.mean_load_factor_pct = k.factor_pct;
    const std::string name = k.builtin ? std::string(k.builtin)
                                       : std::string(lawModeName(k.law)) + " as its profile form";
    SCOPED_TRACE(name + " offset " + std::to_string(k.batch_offset) + " factor " +
                 std::to_string(k.factor_pct));
    std::shared_ptr<const ScoringProfile> p;
    if (k.builtin) {
      p = profile(k.builtin);
    } else {
      const auto form = lawAsProfile(base);
      ASSERT_TRUE(form.has_value());
      auto built = ScoringProfile::build(*form);
      ASSERT_TRUE(built.has_value());
      p = *built;
    }
    int same = 0, tied = 0, filtered = 0, misses = 0;
    for (int t = 0; t < 3000; ++t) {
      const bool narrow = t % 3 == 0;
      // (a sixth of the trials: loads summing to about 10-30, where the adaptive laws' factor
      // and lambda move between their clamps)
      const bool middle = t % 6 == 1;
      const uint32_t blocks = 1 + static_cast<uint32_t>(below(narrow ? 4 : 400));
      std::vector<LawCandidate> c(2 + below(7));
      for (auto& x : c) {
        if (narrow) {
          x.overlap = static_cast<uint32_t>(below(2) ? 0 : blocks - below(2) * (blocks > 1));
          x.load = static_cast<uint32_t>(below(3));
          x.waiting = below(2) ? -1 : static_cast<int64_t>(below(3));
          x.kv_usage = -1;
          x.pending_blocks = below(3);
          x.active_blocks = below(3);
          x.capacity = 1000;
        } else {
          x.overlap = below(3) == 0 ? 0
                      : below(2)    ? blocks - static_cast<uint32_t>(below(blocks / 5 + 1))
                                    : static_cast<uint32_t>(below(blocks + 1));
          x.load = static_cast<uint32_t>(middle ? below(8) : below(1000));
          x.waiting = below(5) == 0 ? -1 : static_cast<int64_t>(below(100000));
          x.kv_usage = below(5) == 0 ? -1 : rng.uniform();
          x.pending_blocks = 17000 + below(2000);  // around tau
          x.active_blocks = below(1000);
          x.capacity = below(3) == 0 ? 0 : 1000 + static_cast<double>(below(100000));
        }
        x.started = static_cast<uint32_t>(below(x.load + 1));  // streams past their first token
        x.last_pick_ns = static_cast<int64_t>(below(narrow ? 3 : 1000000));  // (0: never)
      }
      LawParams lp = base;
      lp.block_tokens = below(2) ? 16 : 32;  // (llm-d-sticky's tau is in tokens)
      lp.prompt_blocks = blocks;
      lp.rotate = below(1000);
      const auto law = applyLaw(c, lp);
      const auto got = p->pick(c, lp);
      misses +=
          std::all_of(c.begin(), c.end(), [](const LawCandidate& x) { return x.overlap == 0; });
      const auto total = p->totals(c, lp);
      for (double x : total) filtered += std::isinf(x);
      if (law.index == got.index) {
        ++same;
        EXPECT_EQ(law.uncached, got.uncached);
        // (the predict laws call a pick holding less than the best holder a spill, as profiles
        // do; the others any pick but their tie-broken overlap argmax)
        if (predict) EXPECT_EQ(law.spilled, got.spilled);
        continue;
      }
      ++tied;
      const double a = total[static_cast<size_t>(law.index)];
      const double b = total[static_cast<size_t>(got.index)];
      EXPECT_NEAR(a, b, 1e-9 * std::max(std::fabs(a), std::fabs(b)))
          << name << " trial " << t << ": the law's pick " << law.index << " scores " << a
          << ", the profile's " << got.index << " scores " << b;
    }
    EXPECT_GT(same, 2000);  // mostly the same pick
    if (!predict) {         // (the predict laws' tie-break is the profile's)
      EXPECT_GT(tied, 0) << "no tie was drawn";
    } else {
      EXPECT_EQ(tied, 0);
    }
    if (k.law == LawMode::kLlmdSticky || k.law == LawMode::kHard || k.law == LawMode::kAdaptive ||
        k.law == LawMode::kTaper) {
      EXPECT_GT(filtered, 100) << "the filter never dropped";
    }
    EXPECT_GT(misses, 20) << "no fleet where nobody holds the prompt";
  }
}

// Every law has a profile form but the capped laws without spill relief (P/D rules), which keep
// a saturated request on its affinity set; each form is a valid field value (it parses back to
// itself) with the law's miss rule and seeding.
TEST(ScoringProfile, EveryLawHasAProfileFormButTheCappedOnesWithoutRelief) {
  for (LawMode m :
       {LawMode::kOff, LawMode::kHard, LawMode::kSoft, LawMode::kAdaptive, LawMode::kAdaptiveSoft,
        LawMode::kTaper, LawMode::kTtft, LawMode::kPredict, LawMode::kPredictQ, LawMode::kLmetric,
        LawMode::kDynamo, LawMode::kDynamoV1, LawMode::kLlmd, LawMode::kLlmdSticky}) {
    LawParams p;
    p.mode = m;
    const auto form = lawAsProfile(p);
    ASSERT_TRUE(form.has_value()) << lawModeName(m);
    EXPECT_EQ(spec(form->toJson()).toJson(), form->toJson()) << lawModeName(m);
    EXPECT_EQ(form->score_misses, placesMisses(m)) << lawModeName(m);
    EXPECT_EQ(form->cold_start_seeding, !isPeerLaw(m)) << lawModeName(m);
  }
  for (LawMode m : {LawMode::kHard, LawMode::kAdaptive, LawMode::kTaper}) {
    LawParams p;
    p.mode = m;
    p.spill_relief = false;
    EXPECT_FALSE(lawAsProfile(p).has_value()) << lawModeName(m);
  }
  // The dynamo costs read the active blocks (the data plane tracks chains for them).
  EXPECT_TRUE(spec(json{{"scorers", {{{"name", "dynamo_v1_cost"}}}}}).readsActive());
  EXPECT_TRUE(spec(json{{"scorers", {{{"name", "dynamo_cost"}}}}}).readsActive());
  EXPECT_FALSE(spec("predict-q").readsActive());
  LawParams hard;
  hard.spill_relief = true;
  hard.mean_load_factor_pct = 150;
  const auto form = lawAsProfile(hard);
  ASSERT_TRUE(form.has_value());
  ASSERT_EQ(form->filters.size(), 1u);
  EXPECT_EQ(form->filters[0].name, "bounded_load");
  EXPECT_EQ(form->filters[0].param("factorPct"), 150);  // the law's factor, not the built-in's
  EXPECT_FALSE(form->score_misses);
  EXPECT_TRUE(form->cold_start_seeding);
}

}  // namespace
}  // namespace kvgate::routing::scoring
