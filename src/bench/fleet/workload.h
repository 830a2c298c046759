// The fleet benchmark's workloads: seeded generators of token-id prompt sets
// (shared/reference/benchmarks.md §1b). Prompts are token ids, sent as `"prompt":[ids]`, so
// equal ids mean equal tokens whatever the tokenizer (the simulator hashes ids as given).
//
//   gsp        SGLang's generated-shared-prefix defaults: 64 groups x 16 prompts, a 2,048-token
//              system prompt per group, a 128-token question per prompt, 256 output tokens.
//              Ideal prompt-token hit with perfect routing and an unbounded cache:
//              (15/16) x (2048/2176) = 88 %.
//   llmd       llm-d's precise-routing shape (inference-perf shared_prefix, X-70R): 150 groups x 5
//              prompts, 6,000-token system prompt, 1,200-token question, 1,000 output tokens.
//              The bench sizes the simulated fleet's KV so this working set fills 60-100 % of it.
//   nosharing  the control: every request a fresh 1,024-token prompt, 128 output tokens.
//
// Parameters can be overridden (`--wl key=value`); every value used is echoed in the output.
// Requests of a shared workload are drawn uniformly, with replacement, from its prompt set (the
// prompt set replays, as llm-d's ladders do); nosharing's never repeat.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvgate::bench::fleet {

struct Prompt {
  std::vector<uint32_t> tokens;
  int output_len = 0;
  uint32_t group = 0;
};

struct Workload {
  std::string name;
  nlohmann::ordered_json params;  // every parameter used, for the output file
  std::vector<Prompt> prompts;
  bool with_replacement = true;     // draw uniformly from prompts; false: in order, no repeats
  uint64_t working_set_tokens = 0;  // distinct prompt tokens (shared prefixes counted once)
  double ideal_hit = 0;             // prompt-token hit rate with perfect routing, infinite cache
};

// Generates `name` with the given overrides (unknown keys or names are an error, in `err`);
// `requests` bounds how many prompts nosharing needs. Deterministic in `seed`.
bool makeWorkload(const std::string& name, const std::map<std::string, double>& overrides,
                  uint64_t seed, size_t requests, Workload& out, std::string& err);

// The order in which `n` requests draw prompts from `w` (seeded).
std::vector<size_t> drawOrder(const Workload& w, size_t n, uint64_t seed);

// Open-loop Poisson arrivals: `n` offsets in ms from the start, exponential gaps of mean
// 1000 / qps (seeded).
std::vector<double> poissonArrivals(size_t n, double qps, uint64_t seed);

}  // namespace kvgate::bench::fleet
