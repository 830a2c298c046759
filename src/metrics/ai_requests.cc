// AiRequests: see ai_requests.h.
#include "metrics/ai_requests.h"

#include <algorithm>
#include <vector>

#include "metrics/text.h"

namespace kvgate::metrics {

namespace {
constexpr std::string_view kOther = "_other";

// The last series this thread counted (the hot path: one atomic add).
struct Hint {
  uint64_t owner = 0;  // AiRequests::id_
  std::string model, tenant;
  int status = 0;
  AiOutcome outcome = AiOutcome::kCompleted;
  std::atomic<uint64_t>* counter = nullptr;
};
thread_local Hint t_hint;

// A label value Prometheus accepts whatever the client sent: at most kMaxModelBytes, cut at a
// character boundary, each byte that is not part of a well-formed UTF-8 character or is a
// control character replaced by '?'.
std::string labelOf(std::string_view v) {
  std::string out;
  out.reserve(std::min(v.size(), AiRequests::kMaxModelBytes));
  size_t i = 0;
  while (i < v.size()) {
    const auto c = static_cast<unsigned char>(v[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= v.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(v[i + k]) & 0xC0) == 0x80;
    if (ok && len == 2) ok = c >= 0xC2;  // (no overlong forms)
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(v[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(v[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok && len == 1) ok = c >= 0x20 && c != 0x7F;
    if (!ok) len = 1;
    if (out.size() + (ok ? len : 1) > AiRequests::kMaxModelBytes) break;
    if (ok)
      out.append(v.substr(i, len));
    else
      out += '?';
    i += len;
  }
  return out;
}

// What the hint compares: enough of the raw value to decide its label.
std::string_view hintKey(std::string_view model) {
  return model.substr(0, 4 * AiRequests::kMaxModelBytes);
}
}  // namespace

const char* aiOutcomeName(AiOutcome o) {
  switch (o) {
    case AiOutcome::kCompleted: return "completed";
    case AiOutcome::kDenied: return "denied";
    case AiOutcome::kFailed: return "failed";
    case AiOutcome::kCancelled: return "cancelled";
  }
  return "failed";
}

std::string AiRequests::modelLabel(std::string_view model) {
  std::string label = labelOf(model);
  if (models_.count(label)) return label;
  if (models_.size() >= kMaxModels) return std::string(kOther);
  return *models_.emplace(std::move(label)).first;
}

std::string AiRequests::tenantLabel(std::string_view tenant) {
  std::string label = labelOf(tenant);
  if (tenants_.count(label)) return label;
  if (tenants_.size() >= kMaxTenants) return std::string(kOther);
  return *tenants_.emplace(std::move(label)).first;
}

void AiRequests::count(std::string_view model, std::string_view tenant, int status,
                       AiOutcome outcome) {
  model = hintKey(model);
  Hint& h = t_hint;
  if (h.owner == id_ && h.status == status && h.outcome == outcome && h.model == model &&
      h.tenant == tenant) {
    h.counter->fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::atomic<uint64_t>* c;
  {
    std::lock_guard g(mu_);
    Key k{modelLabel(model), tenantLabel(tenant), status, outcome};
    auto it = requests_.find(k);
    if (it == requests_.end() && requests_.size() >= kMaxSeries) {
      // Full: model and tenant "_other", the status by its class (an engine chooses it).
      k.model = k.tenant = std::string(kOther);
      k.status = std::clamp(status / 100, 0, 9) * 100;
      it = requests_.find(k);
    }
    if (it == requests_.end())
      it = requests_.emplace(std::move(k), std::make_unique<std::atomic<uint64_t>>(0)).first;
    c = it->second.get();
  }
  c->fetch_add(1, std::memory_order_relaxed);
  h.owner = id_;
  h.model.assign(model);
  h.tenant.assign(tenant);
  h.status = status;
  h.outcome = outcome;
  h.counter = c;
}

std::atomic<int64_t>& AiRequests::streamOpened(std::string_view model) {
  std::atomic<int64_t>* g;
  {
    std::lock_guard lk(mu_);
    const std::string label = modelLabel(model);
    auto it = streams_.find(label);
    if (it == streams_.end())
      it = streams_.emplace(label, std::make_unique<std::atomic<int64_t>>(0)).first;
    g = it->second.get();
  }
  g->fetch_add(1, std::memory_order_relaxed);
  return *g;
}

std::string AiRequests::render() const {
  struct Row {
    std::string model, tenant;
    int status;
    AiOutcome outcome;
    uint64_t n;
  };
  std::vector<Row> rows;
  std::vector<std::pair<std::string, int64_t>> streams;
  {
    std::lock_guard g(mu_);  // (copied, then formatted without holding workers up)
    rows.reserve(requests_.size());
    for (const auto& [k, c] : requests_)
      rows.push_back({k.model, k.tenant, k.status, k.outcome, c->load()});
    for (const auto& [m, c] : streams_) streams.emplace_back(m, c->load());
  }
  std::string s =
      "# HELP loxilb_ai_requests_total Requests, by model (the rule's model_name, else the "
      "request's model when a credential was admitted, else \"\"), tenant (of the admitted "
      "credential), HTTP status sent (0: none) and outcome (completed, denied, failed, "
      "cancelled).\n"
      "# TYPE loxilb_ai_requests_total counter\n";
  for (const auto& r : rows)
    s += "loxilb_ai_requests_total{model=\"" + escapeLabel(r.model) + "\",tenant=\"" +
         escapeLabel(r.tenant) + "\",status=\"" + std::to_string(r.status) + "\",outcome=\"" +
         aiOutcomeName(r.outcome) + "\"} " + std::to_string(r.n) + "\n";
  s += "# HELP loxilb_ai_active_streams Responses relayed as text/event-stream now, by model.\n"
       "# TYPE loxilb_ai_active_streams gauge\n";
  for (const auto& [m, n] : streams)
    s += "loxilb_ai_active_streams{model=\"" + escapeLabel(m) + "\"} " + std::to_string(n) + "\n";
  return s;
}

AiRequests& aiRequests() {
  static AiRequests t;
  return t;
}

}  // namespace kvgate::metrics
