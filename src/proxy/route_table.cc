#include "proxy/route_table.h"

#include "http/parser.h"

namespace kvgate::proxy {
namespace {

bool hostMatches(const config::RuleSpec& r, std::string_view host) {
  return r.host.empty() || http::iequals(r.host, host);
}

bool pathMatches(const config::RuleSpec& r, std::string_view path) {
  if (r.path_match_mode == "prefix") return path.starts_with(r.path_prefix);
  if (r.path_match_mode == "exact") return path == r.path_prefix;
  return true;
}

// Higher is more specific: a named host beats the wildcard, then exact path, then longer prefix.
size_t specificity(const config::RuleSpec& r) {
  size_t s = r.host.empty() ? 0 : (1u << 20);
  if (r.path_match_mode == "exact") s += (1u << 19);
  if (r.path_match_mode != "disabled") s += r.path_prefix.size();
  return s;
}

}  // namespace

std::string_view hostWithoutPort(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(1, close - 1);
  }
  size_t colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}

const Route* VipConfig::find(std::string_view host, std::string_view path, std::string_view model,
                             bool& host_path_matched) const {
  const Route* best_named = nullptr;
  const Route* best_any = nullptr;
  host_path_matched = false;
  for (auto& rp : routes) {
    const auto& r = rp->rule;
    if (!hostMatches(r, host) || !pathMatches(r, path)) continue;
    host_path_matched = true;
    if (!r.model_name.empty() && r.model_name == model) {
      if (!best_named || specificity(r) > specificity(best_named->rule)) best_named = rp.get();
    } else if (r.model_name.empty()) {
      if (!best_any || specificity(r) > specificity(best_any->rule)) best_any = rp.get();
    }
  }
  return best_named ? best_named : best_any;
}

std::vector<std::string> VipConfig::models(std::string_view host, std::string_view path) const {
  std::vector<std::string> out;
  for (auto& rp : routes) {
    const auto& r = rp->rule;
    if (r.model_name.empty() || !hostMatches(r, host) || !pathMatches(r, path)) continue;
    bool dup = false;
    for (auto& m : out) dup |= m == r.model_name;
    if (!dup) out.push_back(r.model_name);
  }
  return out;
}

}  // namespace kvgate::proxy
