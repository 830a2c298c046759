// `kvgate bench tokenize`: single-thread encode throughput of the C++ tokenizer, and latency of
// chat template + tokenize. Prints one JSON line; bench/tokenizer_bench.mjs runs it side by
// side with the HuggingFace reference (npm `tokenizers`) and writes the comparison.
//
//   --file F --chunk BYTES   encode F cut into chunks of ~BYTES (cut at UTF-8 boundaries), round
//                            robin, for --seconds S (default 3); reports MB/s and tokens/s
//   --chat-file F            F holds one OpenAI chat request per line; each is templated and
//                            encoded repeatedly; reports p50/p99 microseconds per request
//   --incremental            with --chat-file: encode through an IncrementalEncoder (lines that
//                            extend earlier ones reuse their ids); "tokens" is the longest
//   --once                   with --file: the whole file encoded at once, best of 3 (worst-case
//                            inputs); reports the time and the token count
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat.h"
#include "tokenizer/incremental.h"
#include "tokenizer/registry.h"

namespace kvgate::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::vector<std::string> chunks(const std::string& s, size_t size) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t e = std::min(s.size(), i + size);
    while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    out.push_back(s.substr(i, e - i));
    i = e;
  }
  return out;
}

}  // namespace

int tokenizeBenchImpl(int argc, char** argv);

// Bad numbers or JSON in the bench's own inputs end in a message, not an abort.
int tokenizeBench(int argc, char** argv) {
  try {
    return tokenizeBenchImpl(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvgate bench tokenize: %s\n", e.what());
    return 2;
  }
}

int tokenizeBenchImpl(int argc, char** argv) {
  std::string dir, model, file, chat_file;
  size_t chunk = 4096;
  double seconds = 3;
  bool once = false, incremental = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--models-dir")
      dir = v, ++i;
    else if (a == "--model")
      model = v, ++i;
    else if (a == "--file")
      file = v, ++i;
    else if (a == "--chat-file")
      chat_file = v, ++i;
    else if (a == "--incremental")
      incremental = true;
    else if (a == "--chunk")
      chunk = std::stoul(v), ++i;
    else if (a == "--seconds")
      seconds = std::stod(v), ++i;
    else if (a == "--once")
      once = true;
    else {
      std::fprintf(stderr,
                   "usage: kvgate bench tokenize --models-dir D --model M (--file F [--chunk B] "
                   "[--once] | --chat-file F) [--seconds S]\n");
      return 2;
    }
  }
  tok::TokenizerRegistry reg(dir);
  auto t = reg.get(model);
  if (!t) {
    std::fprintf(stderr, "kvgate bench tokenize: %s\n", t.error().what.c_str());
    return 2;
  }
  const tok::Tokenizer& tk = **t;
  if (!file.empty()) {
    std::ifstream f(file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    if (!f || text.empty() || chunk == 0) {
      std::fprintf(stderr, "kvgate bench tokenize: cannot read %s (or it is empty, or --chunk 0)\n",
                   file.c_str());
      return 2;
    }
    if (once) {  // best of 3 whole-file encodes
      double best = 1e9;
      size_t n = 0;
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = Clock::now();
        n = tk.encode(text, false).size();
        best = std::min(best, secondsSince(t0));
      }
      std::printf("{\"bytes\":%zu,\"tokens\":%zu,\"ms\":%.3f}\n", text.size(), n, best * 1e3);
      return 0;
    }
    auto parts = chunks(text, chunk);
    std::vector<uint32_t> ids;
    for (const auto& p : parts) tk.encodeInto(p, false, ids);  // warm-up pass (per-thread caches)
    size_t bytes = 0, tokens = 0, k = 0;
    auto t0 = Clock::now();
    while (secondsSince(t0) < seconds) {
      for (int rep = 0; rep < 16; ++rep) {
        ids.clear();
        const std::string& p = parts[k++ % parts.size()];
        tk.encodeInto(p, false, ids);
        bytes += p.size();
        tokens += ids.size();
      }
    }
    double s = secondsSince(t0);
    std::printf(
        "{\"bytes\":%zu,\"tokens\":%zu,\"seconds\":%.3f,\"mb_per_s\":%.2f,\"tokens_per_s\":%.0f}\n",
        bytes, tokens, s, bytes / s / 1e6, tokens / s);
    return 0;
  }
  std::ifstream f(chat_file);
  std::vector<nlohmann::ordered_json> reqs;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) reqs.push_back(nlohmann::ordered_json::parse(line));
  if (reqs.empty()) {
    std::fprintf(stderr, "kvgate bench tokenize: no chat requests\n");
    return 2;
  }
  std::vector<double> us;
  size_t tokens = 0;
  tok::IncrementalEncoder inc(tk);
  auto fmt =
      tk.templateWantsContentParts() ? tok::ContentFormat::kOpenAI : tok::ContentFormat::kString;
  auto t0 = Clock::now();
  while (secondsSince(t0) < seconds || us.size() < 20) {
    for (const auto& r : reqs) {
      auto a = Clock::now();
      auto in = tok::chatInputFromRequest(r, fmt);
      auto text = in ? tok::renderChat(tk, *in) : Result<std::string>(tl::unexpected(in.error()));
      if (!text) {
        std::fprintf(stderr, "kvgate bench tokenize: %s\n", text.error().what.c_str());
        return 1;
      }
      auto ids = incremental ? inc.encode(*text, in->add_special_tokens)
                             : tk.encode(*text, in->add_special_tokens);
      us.push_back(secondsSince(a) * 1e6);
      tokens = std::max(tokens, ids.size());
    }
  }
  double sum = 0;
  for (double x : us) sum += x;
  std::sort(us.begin(), us.end());
  std::printf(
      "{\"requests\":%zu,\"tokens\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f}\n",
      us.size(), tokens, us[us.size() / 2], us[us.size() * 99 / 100], sum / us.size());
  return 0;
}

}  // namespace kvgate::bench
