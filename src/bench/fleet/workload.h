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
//   multiround multi-round chat (vLLM production-stack's multi-round QA, scaled): 16 users x 8
//              rounds; every prompt is a 1,000-token system prompt shared by all, the user's
//              2,000-token context, then each earlier round's 64-token question and 64-token
//              answer, then this round's question; 64 output tokens. Requests pick a random user
//              and send that user's next round (after the last, the user starts over). The
//              answers in the history are generated here (token ids cannot carry the engine's
//              own answer text back), so an engine caches a round's prompt, not its answer.
//   mooncake   a Mooncake-format trace (FAST'25: JSONL {"timestamp" ms, "input_length",
//              "output_length", "hash_ids"} with 512-token blocks, equal hash ids = equal
//              tokens), replayed in order at its own timestamps (each QPS rung rescales time to
//              that mean rate): --trace FILE, or generated: 600 requests over 60 conversations
//              that all start with block 0 (as the conversation trace does), a conversation's
//              first turn 4 blocks and each later turn 2 more (at most 24), the last block cut
//              at random, 64 output tokens, Poisson at 4 requests/s.
//   agentic    agent traffic (issue 29 §4): `requests` requests in arrival order, replayed from
//              the start at every rung. 60 % agent turns: 16 live sessions, each over one of 4
//              tool preambles (6,000 tokens: system prompt and tool schemas); a turn sends the
//              whole context so far plus a 200-token message, asks 200 output tokens, and adds
//              the model's 150-token answer and a 2,400-token tool output to the context; after
//              20 turns (~60k tokens) the session restarts on a random preamble. 30 % RAG: one
//              of 64 3,000-token documents, Zipf-popular (s = 1.1), plus a 100-token question,
//              128 output tokens. 10 % cold: a fresh 2,000-token prompt, 128 output tokens. The
//              ideal hit rate is computed over the sequence (16-token blocks, infinite cache).
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

// How requests draw prompts: uniformly with replacement; in order (no repeats); or multi-round
// sessions (a random user's next round: prompts are user-major, `rounds` per user).
enum class Draw { kUniform, kSequential, kRounds };

struct Workload {
  std::string name;
  nlohmann::ordered_json params;  // every parameter used, for the output file
  std::vector<Prompt> prompts;
  Draw draw = Draw::kUniform;
  size_t rounds = 0;             // kRounds: prompts per user
  std::vector<double> trace_ms;  // traces: each prompt's arrival (ms), replayed in order
  std::vector<std::vector<uint64_t>> hash_ids;  // traces: each prompt's 512-token block ids
  uint64_t working_set_tokens = 0;  // distinct prompt tokens (shared prefixes counted once)
  double ideal_hit = 0;             // prompt-token hit rate with perfect routing, infinite cache
};

// Generates `name` with the given overrides (unknown keys or names are an error, in `err`);
// `requests` bounds how many prompts nosharing needs; `trace` is a Mooncake JSONL text for
// "mooncake" (empty: generate one). Deterministic in `seed`.
bool makeWorkload(const std::string& name, const std::map<std::string, double>& overrides,
                  uint64_t seed, size_t requests, Workload& out, std::string& err,
                  const std::string& trace = {});

// A generated Mooncake-format trace (the "mooncake" workload's default), one JSON object a line.
std::string mooncakeTraceJsonl(const Workload& w);

// The tokens of Mooncake block `hash_id` (512 of them; equal ids give equal tokens).
void mooncakeBlockTokens(uint64_t hash_id, size_t n, std::vector<uint32_t>& out);

// The order in which `n` requests draw prompts from `w` (seeded).
std::vector<size_t> drawOrder(const Workload& w, size_t n, uint64_t seed);

// Open-loop Poisson arrivals: `n` offsets in ms from the start, exponential gaps of mean
// 1000 / qps (seeded).
std::vector<double> poissonArrivals(size_t n, double qps, uint64_t seed);

// A trace's first `n` arrivals (cycling when n exceeds it) rescaled to a mean rate of `qps`.
std::vector<double> traceArrivals(const Workload& w, size_t n, double qps);

}  // namespace kvgate::bench::fleet
