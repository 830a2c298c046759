// Tier 1.5's tokenize + render cost on the request path (issue 10 §5, reported beside the
// decision time of build/kv_index_bench): tok::RequestTokenizer::tokens() as the kv_exact stage
// calls it on a data-plane thread, for
//  - BM_Chat8k: a chat request of ~8k tokens (a long system prompt and a question, rendered with
//    the model's chat template, then tokenized; the per-thread incremental encoder is on, and
//    every call changes the question so only the system prompt can be reused);
//  - BM_Completion8k: a ~8k-token completions prompt (no incremental encoder on that path).
// Reports p50 / p99 per request. Needs a models folder (scripts/models_dir.mjs builds one):
//   node scripts/models_dir.mjs /tmp/models && KVGATE_MODELS_DIR=/tmp/models build/tier15_tokenize_bench
// Model: KVGATE_BENCH_MODEL (default Qwen/Qwen3-8B).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/request_tokenizer.h"

namespace {

using namespace kvgate;

struct Env {
  std::unique_ptr<tok::TokenizerRegistry> reg;
  std::unique_ptr<tok::RequestTokenizer> rt;
  std::string model;
  bool ok = false;
  Env() {
    const char* dir = std::getenv("KVGATE_MODELS_DIR");
    const char* m = std::getenv("KVGATE_BENCH_MODEL");
    model = m && *m ? m : "Qwen/Qwen3-8B";
    if (!dir) return;
    reg = std::make_unique<tok::TokenizerRegistry>(dir);
    rt = std::make_unique<tok::RequestTokenizer>(*reg);
    for (int i = 0; i < 600 && !rt->find(model); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ok = rt->find(model) != nullptr;
  }
};

Env& env() {
  static Env e;
  return e;
}

// ~8k tokens of English prose (a sentence repeated with a counter so BPE pieces vary).
std::string longText(size_t sentences) {
  std::string s;
  for (size_t i = 0; i < sentences; ++i)
    s += "Rule " + std::to_string(i) +
         ": answer the user's question politely, cite the relevant sources, and keep the "
         "answer short unless the user asks for details. ";
  return s;
}

std::string jsonString(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    o.push_back(c);
  }
  return o + "\"";
}

void report(benchmark::State& state, std::vector<double>& us, size_t tokens) {
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["tokens"] = static_cast<double>(tokens);
}

void BM_Chat8k(benchmark::State& state) {
  Env& e = env();
  if (!e.ok) {
    state.SkipWithError("set KVGATE_MODELS_DIR to a models folder holding the model");
    return;
  }
  const std::string system = jsonString(longText(280));
  routing::RequestFacts f;
  f.parsed = f.has_model = true;
  f.model = e.model;
  std::vector<uint32_t> ids;
  std::vector<double> us;
  size_t n = 0, tokens = 0;
  for (auto _ : state) {
    // (the chat input as the facts parser converts it, in its walk of the body: not timed here)
    f.chat = std::make_shared<nlohmann::ordered_json>(nlohmann::ordered_json::parse(
        R"({"messages":[{"role":"system","content":)" + system +
        R"(},{"role":"user","content":"question number )" + std::to_string(n++) + R"(?"}]})"));
    const auto t0 = std::chrono::steady_clock::now();
    auto st = e.rt->tokens(f, ids);
    const auto t1 = std::chrono::steady_clock::now();
    if (st != routing::TokensStatus::kOk) state.SkipWithError("tokens() failed");
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  report(state, us, tokens);
}
BENCHMARK(BM_Chat8k)->Iterations(400)->Unit(benchmark::kMicrosecond);

void BM_Completion8k(benchmark::State& state) {
  Env& e = env();
  if (!e.ok) {
    state.SkipWithError("set KVGATE_MODELS_DIR to a models folder holding the model");
    return;
  }
  const std::string text = longText(280);
  routing::RequestFacts f;
  f.parsed = f.has_model = true;
  f.model = e.model;
  std::vector<uint32_t> ids;
  std::vector<double> us;
  size_t n = 0, tokens = 0;
  for (auto _ : state) {
    f.prompt_text = text + " question number " + std::to_string(n++);
    const auto t0 = std::chrono::steady_clock::now();
    auto st = e.rt->tokens(f, ids);
    const auto t1 = std::chrono::steady_clock::now();
    if (st != routing::TokensStatus::kOk) state.SkipWithError("tokens() failed");
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    tokens = ids.size();
  }
  report(state, us, tokens);
}
BENCHMARK(BM_Completion8k)->Iterations(400)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
