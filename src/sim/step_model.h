// The duration of one continuous-batching engine step (shared/reference/benchmarks.md §2,
// "Recommended timing model", vLLM-v1-like):
//
//   step_ms = max(t_mem, t_cmp) + t_ovh
//   t_mem   = W_ms + kv_ms_per_tok * K              weights and KV reads (decode-bound)
//   t_cmp   = p_ms_per_tok * T + a_ms_per_pair * pairs    prefill compute
//   t_ovh   = o_step_ms + o_seq_ms * S
//
// over the sequences scheduled in the step: T = new tokens (a prefill chunk's n, 1 per decode),
// pairs = sum over prefill chunks of n*c + n*n/2 (n new tokens after c tokens already in the KV
// cache: cached prefix tokens cost nothing in T but still appear in pairs, as attention reads),
// K = context tokens of all scheduled sequences (c + n each), S = scheduled sequences.
//
// Parameters (StepParams defaults = the reference's 8B dense BF16 on one H100 column; the
// 70B TP4 column is the profile "70b-tp4-h100"):
//   w_ms            4.8      weights 16.1 GB / 3.35 TB/s
//   kv_ms_per_tok   3.9e-5   128 KiB of KV per token / HBM bandwidth
//   p_ms_per_tok    0.027    2 x params FLOP per token at ~600 TF/s effective (~37k tokens/s)
//   a_ms_per_pair   8.5e-7   4 x layers x d_model FLOP per attention pair (Dynamo's polynomial
//                            N^2 term agrees)
//   o_step_ms       1.0      per step; with W a one-sequence decode step is ~5.8 ms, Dynamo's
//   o_seq_ms        0.05     per scheduled sequence        5.74 ms intercept
// Sanity (reference §2, reproduced by step_model_test.cc): 8,192 fresh prompt tokens in one step
// take ~249 ms; 64 decodes over 2k-token contexts take ~14 ms per step (the ITL).
//
// prefill_factor multiplies p_ms_per_tok and a_ms_per_pair (the benchmark's sensitivity runs:
// prefill cost halved and doubled). jitter is the standard deviation of a Gaussian factor on the
// step (clamped to +-70%), as the llm-d simulator does; the caller draws it.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::sim {

struct StepParams {
  double w_ms = 4.8;
  double kv_ms_per_tok = 3.9e-5;
  double p_ms_per_tok = 0.027;
  double a_ms_per_pair = 8.5e-7;
  double o_step_ms = 1.0;
  double o_seq_ms = 0.05;
  double prefill_factor = 1.0;
};

// What a step schedules (see the header comment for each term).
struct StepShape {
  double new_tokens = 0;      // T
  double pairs = 0;           // attention pairs of the prefill chunks
  double context_tokens = 0;  // K
  size_t seqs = 0;            // S

  void addPrefill(double n, double c) {
    new_tokens += n;
    pairs += n * c + n * n / 2;
    context_tokens += c + n;
    ++seqs;
  }
  void addDecode(double context) {  // one new token after `context` tokens
    new_tokens += 1;
    context_tokens += context + 1;
    ++seqs;
  }
};

double stepMs(const StepParams& p, const StepShape& s);

// Named parameter sets: "8b-h100" (the defaults) and "70b-tp4-h100".
std::optional<StepParams> stepProfile(std::string_view name);

}  // namespace kvgate::sim
