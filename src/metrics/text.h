// Prometheus text exposition format 0.0.4: family headers, samples, histograms.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "metrics/families.h"
#include "metrics/histogram.h"

namespace kvgate::metrics {

using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

class TextWriter {
 public:
  void header(const Family& f);  // # HELP and # TYPE
  void sample(const Family& f, Labels labels, double value, std::string_view suffix = {});
  void histogram(const Family& f, Labels labels, const Histogram& h);
  const std::string& str() const { return out_; }

 private:
  void labelSet(Labels labels, std::string_view extra_key = {}, std::string_view extra_val = {});
  std::string out_;
};

std::string escapeLabel(std::string_view v);

}  // namespace kvgate::metrics
