// parseEngineMetrics: see engine_metrics.h.
#include "engines/engine_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "common/lines.h"

namespace kvgate::engines {
namespace {

// One sample line: name, the raw label section (without braces), the value. False when malformed.
bool splitSample(std::string_view line, std::string_view& name, std::string_view& labels,
                 double& value) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
  name = line.substr(0, i);
  if (name.empty()) return false;
  labels = {};
  if (i < line.size() && line[i] == '{') {
    const size_t start = ++i;
    bool quoted = false;
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '\\') {
        ++i;  // an escaped character
      } else if (c == '"') {
        quoted = !quoted;
      } else if (!quoted && c == '}') {
        break;
      }
    }
    if (i >= line.size()) return false;  // unterminated label set
    labels = line.substr(start, i - start);
    ++i;
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t end = i;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  const std::string_view v = line.substr(i, end - i);
  if (v.empty()) return false;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), value);
  if (r.ec != std::errc() || r.ptr != v.data() + v.size()) return false;
  return std::isfinite(value) && value >= 0;
}

// The value of label `key` in a raw label section (escapes kept; the values read here are digits).
std::optional<std::string_view> label(std::string_view labels, std::string_view key) {
  size_t i = 0;
  while (i < labels.size()) {
    while (i < labels.size() && (labels[i] == ',' || labels[i] == ' ')) ++i;
    const size_t eq = labels.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= labels.size() || labels[eq + 1] != '"')
      return std::nullopt;
    const std::string_view k = labels.substr(i, eq - i);
    size_t j = eq + 2;
    const size_t vstart = j;
    while (j < labels.size() && labels[j] != '"') j += labels[j] == '\\' ? 2 : 1;
    if (j >= labels.size()) return std::nullopt;
    if (k == key) return labels.substr(vstart, j - vstart);
    i = j + 1;
  }
  return std::nullopt;
}

std::optional<int64_t> labelInt(std::string_view labels, std::string_view key) {
  auto v = label(labels, key);
  if (!v || v->empty() || v->size() > 15) return std::nullopt;
  int64_t x = 0;
  const auto r = std::from_chars(v->data(), v->data() + v->size(), x);
  if (r.ec != std::errc() || r.ptr != v->data() + v->size() || x < 0) return std::nullopt;
  return x;
}

constexpr int64_t kMaxBlocks = 1'000'000'000'000'000;

}  // namespace

EngineLoad parseEngineMetrics(std::string_view text) {
  EngineLoad out;
  double usage_sum = 0;
  int usage_n = 0;
  auto add = [](std::optional<double>& slot, double v) { slot = slot.value_or(0) + v; };
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view line = nextLine(text, pos);
    if (line.empty() || line.front() == '#' || line.size() > kMaxMetricsLine) continue;
    std::string_view name, labels;
    double v = 0;
    if (!splitSample(line, name, labels, v)) continue;
    if (name == "vllm:cache_config_info") {
      if (auto b = labelInt(labels, "num_gpu_blocks"))  // (each at most 15 digits: no overflow)
        out.num_gpu_blocks = std::min<int64_t>(out.num_gpu_blocks.value_or(0) + *b, kMaxBlocks);
      if (auto s = labelInt(labels, "block_size")) out.block_size = *s;
    } else if (name == "vllm:num_requests_running" || name == "sglang:num_running_reqs") {
      add(out.running, v);
    } else if (name == "vllm:num_requests_waiting" || name == "sglang:num_queue_reqs") {
      add(out.waiting, v);
    } else if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc" ||
               name == "sglang:token_usage") {
      usage_sum += v;
      ++usage_n;
    }
  }
  if (usage_n > 0) out.kv_usage = usage_sum / usage_n;
  return out;
}

}  // namespace kvgate::engines
