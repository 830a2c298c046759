// ResponseHomes: which endpoint answered each OpenAI Responses API response a rule relayed (its
// id, read from the answer's first bytes), so that a request continuing it
// (previous_response_id) goes to that endpoint: the engine keeps the stored history in its own
// memory (vLLM with VLLM_ENABLE_RESPONSES_API_STORE), and no other endpoint can serve it.
//
// Each id is bound to the principal whose request produced it (the API key, else the tenant): a
// lookup by another principal finds nothing, so knowing another's id moves no traffic; the first
// answer with an id wins, so a client choosing its response id (vLLM's request_id) cannot move
// another's home. The owners are also kept in one table of the data plane (`owners`, the same
// class with no endpoints), so a response relayed by one rule is another principal's on every
// rule (rules may share engines: model pools, two listeners). Bounded: at most kMaxHomes ids per
// rule, the oldest forgotten first (a forgotten id is routed as any request, and an engine that
// still holds it answers it only if it is picked; ~400 bytes an entry at most). Shared by the
// workers: one mutex, held for a lookup or an insert, never across I/O. Kept with the rule's
// statistics (proxy/rule_stats.h), so a rule update keeps it; freed with the rule.
#pragma once
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kvgate::proxy {

class ResponseHomes {
 public:
  static constexpr size_t kMaxHomes = 65536;
  static constexpr size_t kMaxIdBytes = 256;

  explicit ResponseHomes(std::shared_ptr<ResponseHomes> owners = nullptr)
      : owners_(std::move(owners)) {}

  // `id` was answered by the endpoint labelled `endpoint` ("ip:port") for `owner` (the API key's
  // id, else the tenant, else "" for keyless traffic). The first answer wins: a later one with
  // the same id (a client that chose vLLM's request_id) moves nothing.
  // True when the id is new (remembered).
  bool remember(std::string_view id, std::string_view endpoint, std::string_view owner) {
    if (id.empty() || id.size() > kMaxIdBytes) return false;
    bool foreign = false;
    if (owners_) owners_->find(id, owner, &foreign);
    if (foreign) return false;  // (another principal's on another rule: not taken over)
    {
      std::lock_guard g(mu_);
      auto [it, fresh] =
          map_.try_emplace(std::string(id), Home{std::string(endpoint), std::string(owner)});
      if (!fresh) return false;
      order_.push_back(it->first);  // (a view of the map's key: nodes do not move)
      while (map_.size() > kMaxHomes) {
        map_.erase(std::string(order_.front()));
        order_.pop_front();
      }
    }
    if (owners_) owners_->remember(id, {}, owner);  // (only a fresh id: its first owner)
    return true;
  }
  // The label of the endpoint that answered `id` for `owner`; "" when it is not known, or was
  // another owner's (then `*foreign` is set: one principal cannot route by, read or cancel
  // another's response).
  std::string find(std::string_view id, std::string_view owner, bool* foreign = nullptr) const {
    std::string home;
    bool other = false;
    {
      std::lock_guard g(mu_);
      auto it = map_.find(std::string(id));
      other = it != map_.end() && it->second.owner != owner;
      if (it != map_.end() && !other) home = it->second.endpoint;
    }
    // (only an id this rule does not hold is asked of the data plane's owners: this rule's own
    // entry wins, so an owner the shared table forgot and re-learned cannot take it over here)
    if (home.empty() && !other && owners_) owners_->find(id, owner, &other);
    if (foreign) *foreign = other;
    return other ? std::string() : home;
  }
  size_t size() const {
    std::lock_guard g(mu_);
    return map_.size();
  }

 private:
  struct Home {
    std::string endpoint, owner;
  };
  std::shared_ptr<ResponseHomes> owners_;  // the data plane's table of owners (null: none)
  mutable std::mutex mu_;
  std::unordered_map<std::string, Home> map_;
  std::deque<std::string_view> order_;  // the map's keys, oldest first
};

// The id of a Responses API answer from its first bytes: the first `"id":"…"` member, which is
// the response object's own (a JSON answer's first member; a stream's first event,
// response.created, has it first in its "response" object). Returns "" while not found; an id
// must be 1-256 bytes of [A-Za-z0-9_-].
inline std::string_view responseIdIn(std::string_view head) {
  for (size_t at = head.find("\"id\""); at != std::string_view::npos;
       at = head.find("\"id\"", at + 4)) {
    size_t i = at + 4;
    while (i < head.size() && (head[i] == ' ' || head[i] == ':')) ++i;
    if (i >= head.size() || head[i] != '"') continue;
    const size_t start = ++i;
    while (i < head.size() && i - start <= ResponseHomes::kMaxIdBytes) {
      const char c = head[i];
      if (c == '"') return i > start ? head.substr(start, i - start) : std::string_view();
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '-'))
        return {};
      ++i;
    }
    return {};  // (cut: more bytes may complete it; the caller looks again)
  }
  return {};
}

}  // namespace kvgate::proxy
