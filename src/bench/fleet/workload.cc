#include "bench/fleet/workload.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_set>

#include <xxhash.h>

#include "common/splitmix.h"

namespace kvgate::bench::fleet {
namespace {

using Rng = common::SplitMix64;

// Token ids away from the special-token range of common vocabularies.
void randomTokens(Rng& r, size_t n, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(1000 + r.next() % 29000));
}

bool take(std::map<std::string, double>& o, const std::map<std::string, double>& defaults,
          nlohmann::ordered_json& params, std::string& err, std::map<std::string, int64_t>& v) {
  for (const auto& [k, d] : defaults) {
    double x = d;
    if (auto it = o.find(k); it != o.end()) {
      x = it->second;
      o.erase(it);
    }
    if (x < 0 || x > 1e7 || x != std::floor(x)) {
      err = "workload parameter " + k + " must be a whole number in 0..10000000";
      return false;
    }
    v[k] = static_cast<int64_t>(x);
    params[k] = v[k];
  }
  if (!o.empty()) {
    err = "unknown workload parameter " + o.begin()->first;
    return false;
  }
  return true;
}

// Groups sharing a system prompt, each prompt its own question (gsp and llmd).
void sharedPrefix(Rng& r, int64_t groups, int64_t per_group, int64_t sys, int64_t q, int64_t out,
                  Workload& w) {
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<uint32_t> system;
    randomTokens(r, static_cast<size_t>(sys), system);
    for (int64_t i = 0; i < per_group; ++i) {
      Prompt p;
      p.tokens = system;
      randomTokens(r, static_cast<size_t>(q), p.tokens);
      p.output_len = static_cast<int>(out);
      p.group = static_cast<uint32_t>(g);
      w.prompts.push_back(std::move(p));
    }
  }
  w.working_set_tokens = static_cast<uint64_t>(groups * sys + groups * per_group * q);
  const double total = static_cast<double>(sys + q);
  w.ideal_hit = per_group > 0 && total > 0
                    ? (static_cast<double>(per_group - 1) / static_cast<double>(per_group)) *
                          (static_cast<double>(sys) / total)
                    : 0;
}

constexpr size_t kMooncakeBlock = 512;

// Multi-round chat: prompts user-major, `rounds` per user (see workload.h).
void multiRound(Rng& r, int64_t users, int64_t rounds, int64_t sys, int64_t ctx, int64_t q,
                int64_t a, int64_t out, Workload& w) {
  std::vector<uint32_t> system;
  randomTokens(r, static_cast<size_t>(sys), system);
  for (int64_t u = 0; u < users; ++u) {
    std::vector<uint32_t> history = system;
    randomTokens(r, static_cast<size_t>(ctx), history);
    for (int64_t k = 0; k < rounds; ++k) {
      randomTokens(r, static_cast<size_t>(q), history);  // this round's question
      Prompt p;
      p.tokens = history;
      p.output_len = static_cast<int>(out);
      p.group = static_cast<uint32_t>(u);
      w.prompts.push_back(std::move(p));
      randomTokens(r, static_cast<size_t>(a), history);  // the answer, in the next round's history
    }
  }
  w.draw = Draw::kRounds;
  w.rounds = static_cast<size_t>(rounds);
  w.working_set_tokens = w.prompts.empty()
                             ? 0
                             : static_cast<uint64_t>(sys) +
                                   static_cast<uint64_t>(users) *
                                       (w.prompts[static_cast<size_t>(rounds - 1)].tokens.size() -
                                        static_cast<uint64_t>(sys));
  // A user's round k reuses everything but its new question (and the previous answer, which the
  // engine never computed): with perfect routing, sum over rounds of reused / prompt tokens.
  double reused = 0, total = 0;
  for (int64_t k = 0; k < rounds; ++k) {
    const double len = static_cast<double>(sys + ctx + k * (q + a) + q);
    total += len;
    reused +=
        k == 0 ? static_cast<double>(sys) : static_cast<double>(sys + ctx + (k - 1) * (q + a) + q);
  }
  w.ideal_hit = total > 0 ? reused / total : 0;
}

// Infinite-cache bound of a sequential workload: the share of prompt tokens in leading 16-token
// blocks an earlier request already sent (any worker), and the distinct blocks' tokens.
void sequentialBound(Workload& w) {
  std::unordered_set<uint64_t> seen;
  double hit = 0, total = 0;
  for (const auto& p : w.prompts) {
    uint64_t h = 0;
    bool leading = true;
    for (size_t b = 0; b + 16 <= p.tokens.size(); b += 16) {
      h = XXH3_64bits_withSeed(p.tokens.data() + b, 16 * sizeof(uint32_t), h);
      const bool had = !seen.insert(h).second;
      leading = leading && had;
      if (leading) hit += 16;
    }
    total += static_cast<double>(p.tokens.size());
  }
  w.ideal_hit = total > 0 ? hit / total : 0;
  w.working_set_tokens = static_cast<uint64_t>(seen.size()) * 16;
}

// Agent traffic (see workload.h): sessions over shared tool preambles that grow turn by turn,
// Zipf-popular RAG documents and cold prompts, as one sequence in arrival order.
struct AgenticShape {
  int64_t requests, tools, tool_len, sessions, turns, user_len, tool_out_len, answer_len,
      agent_output, agent_pct, rag_pct, docs, doc_len, zipf_milli, question_len, rag_output,
      cold_len, cold_output;
};

void agentic(Rng& r, const AgenticShape& a, Workload& w) {
  std::vector<std::vector<uint32_t>> preambles(static_cast<size_t>(a.tools));
  for (auto& t : preambles) randomTokens(r, static_cast<size_t>(a.tool_len), t);
  std::vector<std::vector<uint32_t>> docs(static_cast<size_t>(a.docs));
  for (auto& d : docs) randomTokens(r, static_cast<size_t>(a.doc_len), d);
  // Zipf over documents: P(rank k) ~ 1 / k^s.
  const double s = static_cast<double>(a.zipf_milli) / 1000.0;
  std::vector<double> cdf;
  double acc = 0;
  for (int64_t k = 1; k <= a.docs; ++k) cdf.push_back(acc += 1.0 / std::pow(double(k), s));
  struct Session {
    std::vector<uint32_t> history;
    int64_t turn = 0;
    uint32_t id = 0;
  };
  std::vector<Session> live(static_cast<size_t>(a.sessions));
  uint32_t next_id = 0;
  auto restart = [&](Session& ss) {
    ss.history = preambles[r.next() % preambles.size()];
    ss.turn = 0;
    ss.id = next_id++;
  };
  for (auto& ss : live) restart(ss);
  for (int64_t i = 0; i < a.requests; ++i) {
    Prompt p;
    const int64_t kind = static_cast<int64_t>(r.next() % 100);
    if (kind < a.agent_pct) {
      Session& ss = live[r.next() % live.size()];
      randomTokens(r, static_cast<size_t>(a.user_len), ss.history);  // this turn's message
      p.tokens = ss.history;
      p.output_len = static_cast<int>(a.agent_output);
      p.group = ss.id;
      // The model's answer (a tool call) and the tool's output join the next turn's context.
      randomTokens(r, static_cast<size_t>(a.answer_len), ss.history);
      randomTokens(r, static_cast<size_t>(a.tool_out_len), ss.history);
      if (++ss.turn >= a.turns) restart(ss);
    } else if (kind < a.agent_pct + a.rag_pct) {
      const double u = r.uniform() * acc;
      const size_t d = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      p.tokens = docs[std::min(d, docs.size() - 1)];
      randomTokens(r, static_cast<size_t>(a.question_len), p.tokens);
      p.output_len = static_cast<int>(a.rag_output);
      p.group = 1'000'000 + static_cast<uint32_t>(d);
    } else {
      randomTokens(r, static_cast<size_t>(a.cold_len), p.tokens);
      p.output_len = static_cast<int>(a.cold_output);
      p.group = 2'000'000 + static_cast<uint32_t>(i);
    }
    w.prompts.push_back(std::move(p));
  }
  w.draw = Draw::kSequential;
  sequentialBound(w);
}

// A Mooncake-format trace, parsed (JSONL) into prompts.
bool parseTrace(const std::string& text, Workload& w, std::string& err) {
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("timestamp") || !j["timestamp"].is_number() ||
        !j.contains("input_length") || !j["input_length"].is_number_unsigned() ||
        !j.contains("output_length") || !j["output_length"].is_number_unsigned() ||
        !j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      err = "trace line " + std::to_string(n) +
            ": expected {\"timestamp\", \"input_length\", \"output_length\", \"hash_ids\"}";
      return false;
    }
    const uint64_t in_len = j["input_length"].get<uint64_t>();
    const uint64_t out_len = j["output_length"].get<uint64_t>();
    std::vector<uint64_t> ids;
    for (const auto& h : j["hash_ids"]) {
      if (!h.is_number_unsigned()) {
        err = "trace line " + std::to_string(n) + ": hash_ids must be non-negative integers";
        return false;
      }
      ids.push_back(h.get<uint64_t>());
    }
    if (in_len == 0 || out_len == 0 || ids.size() > 4096 || in_len > ids.size() * kMooncakeBlock ||
        in_len <= (ids.size() - 1) * kMooncakeBlock) {
      err = "trace line " + std::to_string(n) + ": input_length " + std::to_string(in_len) +
            " does not fit " + std::to_string(ids.size()) + " blocks of 512 tokens";
      return false;
    }
    Prompt p;
    for (size_t b = 0; b < ids.size(); ++b)
      mooncakeBlockTokens(ids[b], std::min<uint64_t>(kMooncakeBlock, in_len - b * kMooncakeBlock),
                          p.tokens);
    p.output_len = static_cast<int>(std::min<uint64_t>(out_len, 1u << 20));
    w.prompts.push_back(std::move(p));
    w.trace_ms.push_back(j["timestamp"].get<double>());
    w.hash_ids.push_back(std::move(ids));
  }
  if (w.prompts.empty()) {
    err = "the trace has no requests";
    return false;
  }
  for (size_t i = 1; i < w.trace_ms.size(); ++i)
    if (w.trace_ms[i] < w.trace_ms[i - 1]) {
      err = "trace timestamps must not go back (line " + std::to_string(i + 1) + ")";
      return false;
    }
  w.draw = Draw::kSequential;
  // Distinct blocks (shared prefixes once) and the hit rate of perfect routing with an infinite
  // cache: a block's second and later references are hits.
  // A block's tokens were computed before up to the longest part of it seen so far: a block
  // first seen cut (a prompt's last block) and later whole is a hit only for that part.
  std::map<uint64_t, size_t> seen;
  double hits = 0, total = 0;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    const auto& ids = w.hash_ids[i];
    for (size_t b = 0; b < ids.size(); ++b) {
      const size_t len =
          std::min<size_t>(kMooncakeBlock, w.prompts[i].tokens.size() - b * kMooncakeBlock);
      total += static_cast<double>(len);
      size_t& before = seen[ids[b]];
      hits += static_cast<double>(std::min(len, before));
      before = std::max(before, len);
    }
  }
  w.working_set_tokens = seen.size() * kMooncakeBlock;
  w.ideal_hit = total > 0 ? hits / total : 0;
  return true;
}

// The built-in generator of Mooncake-shaped traces (see workload.h).
std::string generateTrace(Rng& r, int64_t requests, int64_t conversations, int64_t first,
                          int64_t per_turn, int64_t max_blocks, int64_t out, double rate) {
  std::vector<int64_t> turn(static_cast<size_t>(conversations), 0);
  std::string jsonl;
  double t = 0;
  uint64_t next_id = 1;  // 0 is the block every request starts with
  std::vector<std::vector<uint64_t>> conv(static_cast<size_t>(conversations));
  for (int64_t i = 0; i < requests; ++i) {
    const size_t c = static_cast<size_t>(r.next() % static_cast<uint64_t>(conversations));
    const int64_t blocks = std::min(max_blocks, first + per_turn * turn[c]++);
    while (static_cast<int64_t>(conv[c].size()) + 1 < blocks) conv[c].push_back(next_id++);
    std::vector<uint64_t> ids{0};
    for (int64_t b = 1; b < blocks; ++b) ids.push_back(conv[c][static_cast<size_t>(b - 1)]);
    const uint64_t cut = r.next() % kMooncakeBlock;  // the last block, cut at random
    const uint64_t in_len = static_cast<uint64_t>(blocks) * kMooncakeBlock - cut;
    nlohmann::ordered_json j;
    j["timestamp"] = static_cast<int64_t>(std::llround(t));
    j["input_length"] = in_len;
    j["output_length"] = out;
    j["hash_ids"] = ids;
    jsonl += j.dump() + "\n";
    t += -std::log(r.uniform()) * 1000.0 / rate;
  }
  return jsonl;
}

}  // namespace

void mooncakeBlockTokens(uint64_t hash_id, size_t n, std::vector<uint32_t>& out) {
  Rng r{hash_id * 0x9E3779B97F4A7C15ULL ^ 0x6d6f6f6e63616b65ULL};
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(1000 + r.next() % 29000));
}

std::string mooncakeTraceJsonl(const Workload& w) {
  std::string jsonl;
  for (size_t i = 0; i < w.prompts.size() && i < w.hash_ids.size(); ++i) {
    nlohmann::ordered_json j;
    j["timestamp"] = static_cast<int64_t>(std::llround(w.trace_ms[i]));
    j["input_length"] = w.prompts[i].tokens.size();
    j["output_length"] = w.prompts[i].output_len;
    j["hash_ids"] = w.hash_ids[i];
    jsonl += j.dump() + "\n";
  }
  return jsonl;
}

bool makeWorkload(const std::string& name, const std::map<std::string, double>& overrides,
                  uint64_t seed, size_t requests, Workload& w, std::string& err,
                  const std::string& trace) {
  w = Workload{};
  w.name = name;
  Rng r{seed ^ 0x6b76676174652d77ULL};
  std::map<std::string, double> o = overrides;
  std::map<std::string, int64_t> v;
  if (name == "gsp") {
    if (!take(o,
              {{"num_groups", 64},
               {"prompts_per_group", 16},
               {"system_prompt_len", 2048},
               {"question_len", 128},
               {"output_len", 256}},
              w.params, err, v))
      return false;
    sharedPrefix(r, v["num_groups"], v["prompts_per_group"], v["system_prompt_len"],
                 v["question_len"], v["output_len"], w);
  } else if (name == "llmd") {
    if (!take(o,
              {{"num_groups", 150},
               {"prompts_per_group", 5},
               {"system_prompt_len", 6000},
               {"question_len", 1200},
               {"output_len", 1000}},
              w.params, err, v))
      return false;
    sharedPrefix(r, v["num_groups"], v["prompts_per_group"], v["system_prompt_len"],
                 v["question_len"], v["output_len"], w);
  } else if (name == "nosharing") {
    if (!take(o, {{"input_len", 1024}, {"output_len", 128}}, w.params, err, v)) return false;
    for (size_t i = 0; i < requests; ++i) {
      Prompt p;
      randomTokens(r, static_cast<size_t>(v["input_len"]), p.tokens);
      p.output_len = static_cast<int>(v["output_len"]);
      p.group = static_cast<uint32_t>(i);
      w.prompts.push_back(std::move(p));
    }
    w.draw = Draw::kSequential;
    w.working_set_tokens = static_cast<uint64_t>(v["input_len"]) * requests;
    w.ideal_hit = 0;
  } else if (name == "multiround") {
    if (!take(o,
              {{"users", 16},
               {"rounds", 8},
               {"system_prompt_len", 1000},
               {"user_context_len", 2000},
               {"question_len", 64},
               {"answer_len", 64},
               {"output_len", 64}},
              w.params, err, v))
      return false;
    if (v["users"] < 1 || v["rounds"] < 1) {
      err = "multiround needs at least one user and one round";
      return false;
    }
    multiRound(r, v["users"], v["rounds"], v["system_prompt_len"], v["user_context_len"],
               v["question_len"], v["answer_len"], v["output_len"], w);
  } else if (name == "agentic") {
    if (!take(o,
              {{"requests", 600},
               {"tools", 4},
               {"tool_len", 6000},
               {"sessions", 16},
               {"turns", 20},
               {"user_len", 200},
               {"tool_out_len", 2400},
               {"answer_len", 150},
               {"agent_output", 200},
               {"agent_pct", 60},
               {"rag_pct", 30},
               {"docs", 64},
               {"doc_len", 3000},
               {"zipf_milli", 1100},
               {"question_len", 100},
               {"rag_output", 128},
               {"cold_len", 2000},
               {"cold_output", 128}},
              w.params, err, v))
      return false;
    if (v["requests"] < 1 || v["tools"] < 1 || v["sessions"] < 1 || v["turns"] < 1 ||
        v["docs"] < 1 || v["agent_pct"] + v["rag_pct"] > 100 || v["agent_output"] < 1 ||
        v["rag_output"] < 1 || v["cold_output"] < 1 || v["requests"] > 100000) {
      err =
          "agentic: requests (1..100000), tools, sessions, turns, docs and the outputs must be "
          "positive, agent_pct + rag_pct at most 100";
      return false;
    }
    agentic(r,
            {v["requests"], v["tools"], v["tool_len"], v["sessions"], v["turns"], v["user_len"],
             v["tool_out_len"], v["answer_len"], v["agent_output"], v["agent_pct"], v["rag_pct"],
             v["docs"], v["doc_len"], v["zipf_milli"], v["question_len"], v["rag_output"],
             v["cold_len"], v["cold_output"]},
            w);
  } else if (name == "mooncake") {
    std::string text = trace;
    if (text.empty()) {
      if (!take(o,
                {{"requests", 600},
                 {"conversations", 60},
                 {"first_turn_blocks", 4},
                 {"blocks_per_turn", 2},
                 {"max_blocks", 24},
                 {"output_len", 64},
                 {"rate_milli_qps", 4000}},
                w.params, err, v))
        return false;
      if (v["requests"] < 1 || v["conversations"] < 1 || v["first_turn_blocks"] < 1 ||
          v["max_blocks"] < 1 || v["max_blocks"] > 4096 || v["output_len"] < 1 ||
          v["rate_milli_qps"] < 1) {
        err =
            "mooncake: requests, conversations, first_turn_blocks, output_len and "
            "rate_milli_qps must be positive, max_blocks 1..4096";
        return false;
      }
      text = generateTrace(r, v["requests"], v["conversations"], v["first_turn_blocks"],
                           v["blocks_per_turn"], v["max_blocks"], v["output_len"],
                           static_cast<double>(v["rate_milli_qps"]) / 1000.0);
    } else {
      if (!o.empty()) {
        err = "workload parameters do not apply to a --trace file";
        return false;
      }
      w.params["trace"] = "file";
    }
    if (!parseTrace(text, w, err)) return false;
  } else {
    err = "unknown workload " + name + " (gsp, llmd, nosharing, multiround, mooncake, agentic)";
    return false;
  }
  if (w.prompts.empty()) {
    err = "workload " + name + " has no prompts with these parameters";
    return false;
  }
  for (const auto& p : w.prompts)
    if (p.tokens.empty() || p.output_len < 1) {
      err = "workload " + name + ": prompts and outputs need at least one token";
      return false;
    }
  return true;
}

std::vector<size_t> drawOrder(const Workload& w, size_t n, uint64_t seed) {
  std::vector<size_t> order;
  order.reserve(n);
  Rng r{seed ^ 0x6472617721ULL};
  std::vector<size_t> next_round(w.rounds ? w.prompts.size() / w.rounds : 0, 0);
  for (size_t i = 0; i < n; ++i) {
    switch (w.draw) {
      case Draw::kUniform:
        order.push_back(static_cast<size_t>(r.next() % w.prompts.size()));
        break;
      case Draw::kSequential:
        order.push_back(i % w.prompts.size());
        break;
      case Draw::kRounds: {
        const size_t u = static_cast<size_t>(r.next() % next_round.size());
        order.push_back(u * w.rounds + next_round[u] % w.rounds);
        ++next_round[u];
        break;
      }
    }
  }
  return order;
}

std::vector<double> traceArrivals(const Workload& w, size_t n, double qps) {
  std::vector<double> at;
  if (w.trace_ms.empty() || qps <= 0) return at;
  const double span = w.trace_ms.back() - w.trace_ms.front();
  const size_t m = w.trace_ms.size();
  // The trace's own mean rate, and one gap of it between a replay's end and the next start.
  const double rate = span > 0 ? static_cast<double>(m - 1) * 1000.0 / span : qps;
  const double scale = rate / qps;
  const double period = span + (span > 0 ? span / static_cast<double>(m - 1) : 1000.0 / rate);
  for (size_t i = 0; i < n; ++i) {
    const double t = w.trace_ms[i % m] - w.trace_ms.front() + static_cast<double>(i / m) * period;
    at.push_back(t * scale);
  }
  return at;
}

std::vector<double> poissonArrivals(size_t n, double qps, uint64_t seed) {
  std::vector<double> at;
  at.reserve(n);
  Rng r{seed ^ 0x706f6973736f6eULL};
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    at.push_back(t);
    t += -std::log(r.uniform()) * 1000.0 / qps;
  }
  return at;
}

}  // namespace kvgate::bench::fleet
