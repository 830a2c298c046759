#include "metrics/text.h"

#include <cmath>
#include <cstdio>

namespace kvgate::metrics {
namespace {
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

void TextWriter::header(const Family& f) {
  out_.append("# HELP ").append(f.name).append(" ").append(f.help).append("\n");
  out_.append("# TYPE ").append(f.name).append(" ");
  out_.append(f.type == Type::kCounter ? "counter"
              : f.type == Type::kGauge ? "gauge"
                                       : "histogram");
  out_.append("\n");
}

void TextWriter::labelSet(Labels labels, std::string_view extra_key, std::string_view extra_val) {
  if (labels.size() == 0 && extra_key.empty()) return;
  out_.push_back('{');
  bool first = true;
  for (auto& [k, v] : labels) {
    if (!first) out_.push_back(',');
    first = false;
    out_.append(k).append("=\"").append(escapeLabel(v)).append("\"");
  }
  if (!extra_key.empty()) {
    if (!first) out_.push_back(',');
    out_.append(extra_key).append("=\"").append(extra_val).append("\"");
  }
  out_.push_back('}');
}

void TextWriter::sample(const Family& f, Labels labels, double value, std::string_view suffix) {
  out_.append(f.name).append(suffix);
  labelSet(labels);
  out_.append(" ").append(number(value)).append("\n");
}

void TextWriter::histogram(const Family& f, Labels labels, const Histogram& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= Histogram::kBounds.size(); ++i) {
    cumulative += h.bucket(i);
    std::string le = i < Histogram::kBounds.size() ? number(h.bound(i)) : "+Inf";
    out_.append(f.name).append("_bucket");
    labelSet(labels, "le", le);
    out_.append(" ").append(number(static_cast<double>(cumulative))).append("\n");
  }
  out_.append(f.name).append("_sum");
  labelSet(labels);
  out_.append(" ").append(number(h.sumSeconds())).append("\n");
  out_.append(f.name).append("_count");
  labelSet(labels);
  out_.append(" ").append(number(static_cast<double>(cumulative))).append("\n");
}

}  // namespace kvgate::metrics
