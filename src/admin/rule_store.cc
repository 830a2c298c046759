#include "admin/rule_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/ids.h"
#include "common/log.h"

namespace kvgate::admin {
namespace {

// 507 Insufficient Storage when the state disk is full (or the quota spent): the operator's
// problem, not the request's; anything else 500.
int storageStatus(int err) { return err == ENOSPC || err == EDQUOT ? 507 : 500; }

Result<void> writeAll(int fd, const std::string& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(storageStatus(errno), "persist", "write " + path + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

Result<void> mkdirs(const std::string& dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(500, "persist", "mkdir " + cur + ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace

nlohmann::json storedJson(const config::RuleSpec& r) {
  nlohmann::json sa = nlohmann::json::object(), out = nlohmann::json::object();
  for (auto& [k, v] : r.service_args.items()) {
    if (k.starts_with("_"))
      out[k.substr(1)] = v;
    else
      sa[k] = v;
  }
  nlohmann::json eps = nlohmann::json::array();
  for (auto& e : r.endpoints) eps.push_back(e.json);
  out["serviceArguments"] = sa;
  out["endpoints"] = eps;
  return out;
}

Result<size_t> RuleStore::load() {
  if (auto r = mkdirs(dir_); !r) return tl::unexpected(r.error());
  std::ifstream in(statePath());
  if (!in) return size_t{0};
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("rules") || !j["rules"].is_array())
    return fail(500, "state", "state file " + statePath() + " is corrupt");
  // A saved rule this build refuses (stricter validation than the build that stored it: a
  // deterministic refusal) is moved, with the reason, to rules.rejected.json beside the state
  // file (durably, before the state file drops it), so the gateway starts with the others.
  std::vector<config::RuleSpec> rules;
  nlohmann::json rejected = nlohmann::json::array();
  for (auto& rj : j["rules"]) {
    auto r = config::parseRule(rj);
    if (!r) {
      rejected.push_back({{"rule", rj}, {"error", r.error().what}});
      continue;
    }
    rules.push_back(std::move(*r));
  }
  // A saved set the listener refuses (rules stored before it existed) still starts the gateway:
  // the listener just does not follow it until the rules are fixed.
  if (check_)
    if (auto c = check_(rules); !c)
      log::warn("state", "restored rules: " + c.error().what + " (not followed until fixed)");
  // Rules the data plane cannot serve now (a certificate, CA bundle or CRL file not there yet, a
  // VIP not assigned yet: often temporary) are kept in the store and in the state file, but not
  // served: the data plane gets the others. Until each is fixed (re-POSTed) or deleted, every
  // other rule change is refused with its reason (the store applies the whole set).
  if (auto a = dp_.apply(rules); !a) {
    std::vector<config::RuleSpec> served;
    for (auto& r : rules) {
      served.push_back(r);
      if (auto one = dp_.apply(served); !one) {
        served.pop_back();
        log::error("state", "restored rule " + r.key() + " is not served until fixed or deleted: " +
                                one.error().what);
      }
    }
    if (auto again = dp_.apply(served); !again) return tl::unexpected(again.error());
  }
  if (!rejected.empty()) {
    if (auto k = keepRejected(rejected); !k) return tl::unexpected(k.error());
  }
  rules_ = std::move(rules);
  if (applied_) applied_(rules_);
  if (!rejected.empty())
    if (auto p = persist(rules_); !p) return tl::unexpected(p.error());
  return rules_.size();
}

// rules.rejected.json: the refused rules with their reasons, after any kept earlier; written to
// the side, fsynced (file and directory) and renamed in before the state file forgets them.
Result<void> RuleStore::keepRejected(const nlohmann::json& rejected) {
  const std::string side = dir_ + "/rules.rejected.json";
  for (auto& e : rejected)
    log::error("state", "restored rule refused, kept in " + side + ": " + e["error"].get<std::string>());
  nlohmann::json all = {{"version", 1}, {"rejected", nlohmann::json::array()}};
  std::ifstream old(side);
  auto prev = old ? nlohmann::json::parse(old, nullptr, false) : nlohmann::json();
  if (old && !(prev.is_object() && prev.contains("rejected") && prev["rejected"].is_array()))
    return fail(500, "state", side + " is corrupt; move it away to start");
  if (old)
    for (auto& e : prev["rejected"]) all["rejected"].push_back(e);
  for (auto& e : rejected) all["rejected"].push_back(e);
  const std::string tmp = side + ".tmp";  // (0600: a rule may hold an inline private key)
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail(500, "state", "open " + tmp + ": " + std::strerror(errno));
  auto w = writeAll(fd, all.dump(2) + "\n", tmp);
  if (w && ::fsync(fd) != 0) w = fail(500, "state", "fsync " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  if (!w) return w;
  if (::rename(tmp.c_str(), side.c_str()) != 0)
    return fail(500, "state", "cannot keep the refused rules in " + side);
  if (int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Result<void> RuleStore::persist(const std::vector<config::RuleSpec>& rules) {
  if (auto w = writeTemp(rules); !w) return w;
  return publishTemp();
}

// Step 1 of a save: the whole rule set written to rules.json.tmp and fsynced, where a full disk
// (ENOSPC, EDQUOT: 507) or any other write error shows, before anything else changes.
Result<void> RuleStore::writeTemp(const std::vector<config::RuleSpec>& rules) {
  if (auto r = mkdirs(dir_); !r) return r;
  nlohmann::json j = {{"version", 1}, {"rules", nlohmann::json::array()}};
  for (auto& r : rules) j["rules"].push_back(storedJson(r));
  std::string data = j.dump(2) + "\n";
  std::string tmp = statePath() + ".tmp";
  ::unlink(tmp.c_str());  // (a left-over file keeps its mode: always create it 0600 afresh)
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return fail(storageStatus(errno), "persist", "open " + tmp + ": " + std::strerror(errno));
  auto w = writeAll(fd, data, tmp);
  if (w && ::fsync(fd) != 0)
    w = fail(storageStatus(errno), "persist", "fsync " + tmp + ": " + std::strerror(errno));
  ::close(fd);
  if (!w) {
    ::unlink(tmp.c_str());  // (a half-written file would hold the space the next try needs)
    log::error("state", "rules not saved, change refused: " + w.error().what);
    return w;
  }
  return {};
}

// Step 2: the written file renamed over rules.json (atomic) and the directory fsynced.
Result<void> RuleStore::publishTemp() {
  const std::string tmp = statePath() + ".tmp";
  if (::rename(tmp.c_str(), statePath().c_str()) != 0) {
    auto e = fail(500, "persist", "rename " + tmp + ": " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return e;
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Result<void> RuleStore::commit(std::vector<config::RuleSpec> next) {
  if (check_)
    if (auto c = check_(next); !c) return c;
  // Written first: a full disk refuses the change before the data plane sees any of it (no VIP
  // bound for a moment, no endpoint state dropped and recreated by a rollback).
  if (auto w = writeTemp(next); !w) return w;
  if (auto a = dp_.apply(next); !a) {
    ::unlink((statePath() + ".tmp").c_str());
    return a;
  }
  if (auto p = publishTemp(); !p) {
    if (auto back = dp_.apply(rules_); !back)  // the change is not acknowledged: roll back
      log::error("state", "rolling the data plane back failed: " + back.error().what);
    return p;
  }
  rules_ = std::move(next);
  if (applied_) applied_(rules_);
  return {};
}

Result<void> RuleStore::post(config::RuleSpec rule) {
  std::vector<config::RuleSpec> next = rules_;
  auto key = rule.key();
  for (size_t i = 0; i < next.size(); ++i) {
    if (next[i].key() != key) continue;
    if (rule.endpoints.empty()) {  // an empty endpoint list deletes the rule
      next.erase(next.begin() + static_cast<long>(i));
      return commit(std::move(next));
    }
    if (rule.sameDefinition(next[i]))
      return fail(409, "rule", "lbrule-exists error: an identical rule already exists");
    auto& old = next[i].service_args;
    // (a field at its zero value is the field left out: GET /all omits zeros, so posting back
    // what GET returned must not read as a change)
    auto given = [](const nlohmann::json& sa, const char* k) {
      nlohmann::json v = sa.value(k, nlohmann::json());
      return v == 0 || v == false || v == "" ? nlohmann::json() : v;
    };
    for (const char* k : {"security", "egress", "mode", "kvEngineType"}) {
      if (given(old, k) != given(rule.service_args, k))
        return fail(
            409, std::string("serviceArguments.") + k,
            std::string("lbrule cant modify ") + k + " of an existing rule; delete it first");
    }
    // Keep the rule's identity.
    std::string id = old.value("id", "");
    if (rule.service_args.value("id", "").empty()) rule.service_args["id"] = id;
    next[i] = std::move(rule);
    return commit(std::move(next));
  }
  if (rule.endpoints.empty())
    return fail(404, "rule", "no-rule error: no such rule (an empty endpoint list deletes one)");
  if (rule.service_args.value("id", "").empty()) rule.service_args["id"] = newUuidV4();
  next.push_back(std::move(rule));
  return commit(std::move(next));
}

Result<size_t> RuleStore::removeIf(const std::function<bool(const config::RuleSpec&)>& pred,
                                   const std::string& what) {
  std::vector<config::RuleSpec> next;
  size_t removed = 0;
  for (auto& r : rules_) {
    if (pred(r))
      ++removed;
    else
      next.push_back(r);
  }
  if (removed == 0) return fail(404, "rule", "no-rule error: no rule matches " + what);
  if (auto c = commit(std::move(next)); !c) return tl::unexpected(c.error());
  return removed;
}

}  // namespace kvgate::admin
