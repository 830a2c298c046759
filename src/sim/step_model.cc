#include "sim/step_model.h"

#include <algorithm>

namespace kvgate::sim {

double stepMs(const StepParams& p, const StepShape& s) {
  const double t_mem = p.w_ms + p.kv_ms_per_tok * s.context_tokens;
  const double t_cmp =
      p.prefill_factor * (p.p_ms_per_tok * s.new_tokens + p.a_ms_per_pair * s.pairs);
  const double t_ovh = p.o_step_ms + p.o_seq_ms * static_cast<double>(s.seqs);
  return std::max(t_mem, t_cmp) + t_ovh;
}

std::optional<StepParams> stepProfile(std::string_view name) {
  if (name == "8b-h100") return StepParams{};
  if (name == "70b-tp4-h100") {
    StepParams p;
    p.w_ms = 12;
    p.kv_ms_per_tok = 2.4e-5;
    p.p_ms_per_tok = 0.073;
    p.a_ms_per_pair = 1.4e-6;
    p.o_step_ms = 2.0;
    p.o_seq_ms = 0.05;
    return p;
  }
  return std::nullopt;
}

}  // namespace kvgate::sim
