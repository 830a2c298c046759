#include "governance/profile_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "http/client.h"

namespace kvgate::governance {

namespace {

int64_t nowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t mtimeNs(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}


}  // namespace

Result<std::unique_ptr<ProfileStore>> ProfileStore::open(RowStore& rows, JwtRegistry& registry) {
  std::unique_ptr<ProfileStore> st(new ProfileStore(rows, registry));
  if (auto r = st->reload(); !r) return tl::unexpected(r.error());
  return st;
}

Result<void> ProfileStore::reload() {
  auto rows = rows_.load("jwtprofile");
  if (!rows) return tl::unexpected(rows.error());
  std::vector<JwtProfile> profiles;
  for (const Row& row : *rows) {
    auto p = parseProfile(row.body);
    if (!p) {  // (a damaged row: skipped, so rules that name it fail closed)
      log::error("governance", "JWT profile row refused: " + p.error().what);
      continue;
    }
    profiles.push_back(std::move(*p));
  }
  auto unchanged = [&](const JwtProfile& p) {  // (mu_ held)
    auto it = states_.find(p.name);
    return it != states_.end() && profileJson(it->second.profile) == profileJson(p);
  };
  // Keysets of new or changed profiles: their files are read outside the lock.
  std::vector<const JwtProfile*> todo;
  {
    std::lock_guard g(mu_);
    for (const auto& p : profiles)
      if (!unchanged(p)) todo.push_back(&p);
  }
  const int64_t now = nowS();
  std::map<std::string, State, std::less<>> fresh;
  for (const JwtProfile* p : todo) {
    State s;
    s.profile = *p;
    s.keyset = load(*p, nullptr, now, s.mtime_ns);
    s.checked_s = now;
    fresh[p->name] = std::move(s);
  }
  // One critical section: an unchanged profile keeps the keyset it has now (the refresh thread
  // may have replaced it meanwhile: a revocation must not be undone).
  std::lock_guard g(mu_);
  std::map<std::string, State, std::less<>> next;
  for (const auto& p : profiles) {
    if (unchanged(p)) next[p.name] = states_[p.name];
    else if (auto it = fresh.find(p.name); it != fresh.end()) next[p.name] = std::move(it->second);
    else {  // (changed again meanwhile: no file or URL is read under the lock; the refresh
            // thread loads it within 5 s, until then its tokens fail closed)
      State s;
      s.profile = p;
      auto ks = std::make_shared<JwtKeyset>();
      ks->error = "loading";
      s.keyset = std::move(ks);
      s.checked_s = 0;
      next[p.name] = std::move(s);
    }
  }
  states_ = std::move(next);
  publishLocked();
  return {};
}

ProfileStore::~ProfileStore() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (refresher_.joinable()) refresher_.join();
}

// The keys of a JWKS document into `ks` (a malformed one keeps the previous keys).
std::shared_ptr<const JwtKeyset> ProfileStore::parsed(std::shared_ptr<JwtKeyset> ks,
                                                      const std::string& text, int64_t now_s) {
  auto keys = parseJwks(text);
  if (!keys) {
    ks->error = keys.error().what;
    return ks;
  }
  // A well-formed set is authoritative, empty included: emptying the file revokes every key.
  ks->keys = std::move(*keys);
  ks->loaded_at_s = now_s;
  ks->error.clear();
  return ks;
}

std::shared_ptr<const JwtKeyset> ProfileStore::load(const JwtProfile& p,
                                                    const std::shared_ptr<const JwtKeyset>& old,
                                                    int64_t now_s, int64_t& mtime_ns) {
  auto ks = std::make_shared<JwtKeyset>();
  if (old) *ks = *old;
  std::string text;
  if (!p.jwks_url.empty()) {
    // Fetched with a 5 s timeout and a 1 MiB bound, the server verified (https); a failure keeps
    // the previous keys (until 24 h old).
    mtime_ns = 0;
    http::FetchOptions fo;
    fo.ca_file = p.jwks_ca_file;
    fo.max_body_bytes = 1 << 20;
    fo.send_token = false;
    auto r = http::fetch(p.jwks_url, "GET", "", "", "application/json",
                         std::chrono::seconds(5), fo);
    if (!r || r->status != 200) {
      ks->error = "jwks_url: " + (r ? "HTTP " + std::to_string(r->status) : r.error().what);
      return ks;
    }
    text = std::move(r->body);
    return parsed(std::move(ks), text, now_s);
  }
  mtime_ns = mtimeNs(p.jwks_file);
  // A regular file of at most 1 MiB, opened without blocking (a FIFO must not hang the control
  // thread or the refresher). Unreadable or malformed: the previous keys stay (until 24 h old).
  const int fd = ::open(p.jwks_file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
    if (fd >= 0) ::close(fd);
    ks->error = "jwks_file is not a readable regular file of at most 1 MiB";
    return ks;
  }
  text.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  text.resize(got);
  return parsed(std::move(ks), text, now_s);
}

void ProfileStore::publishLocked() {
  auto t = std::make_shared<JwtTable>();
  t->loaded = true;
  for (const auto& [name, s] : states_) t->by_name[name] = {s.profile, s.keyset};
  registry_.publish(std::move(t));
}

Result<void> ProfileStore::put(const JwtProfile& p) {
  int64_t mtime = 0;
  auto ks = load(p, nullptr, nowS(), mtime);
  const std::string field = p.jwks_url.empty() ? "jwks_file" : "jwks_url";
  if (ks->loaded_at_s == 0) {
    std::string why = ks->error;  // (the file's message names jwks_file itself)
    if (!why.starts_with(field)) why = field + ": " + why;
    return fail(400, field, why);
  }
  if (ks->keys.empty()) return fail(400, field, field + ": no usable RS256 or ES256 public key");
  {
    std::lock_guard g(mu_);
    if (!states_.count(p.name) && states_.size() >= kMaxProfiles)
      return fail(409, "name", "at most " + std::to_string(kMaxProfiles) + " JWT profiles");
  }
  if (auto r = rows_.put("jwtprofile", p.name, profileJson(p)); !r) return r;
  std::lock_guard g(mu_);
  State& s = states_[p.name];
  s.profile = p;
  s.keyset = std::move(ks);
  s.mtime_ns = mtime;
  s.checked_s = nowS();
  publishLocked();
  return {};
}

Result<void> ProfileStore::remove(const std::string& name) {
  {
    std::lock_guard g(mu_);
    if (!states_.count(name)) return fail(404, "name", "no JWT profile " + name);
  }
  if (auto r = rows_.erase("jwtprofile", name); !r) return tl::unexpected(r.error());
  std::lock_guard g(mu_);
  states_.erase(name);
  publishLocked();
  return {};
}

std::vector<JwtProfile> ProfileStore::list() const {
  std::lock_guard g(mu_);
  std::vector<JwtProfile> out;
  for (const auto& [n, s] : states_) out.push_back(s.profile);
  return out;
}

std::optional<JwtProfile> ProfileStore::find(const std::string& name) const {
  std::lock_guard g(mu_);
  auto it = states_.find(name);
  if (it == states_.end()) return std::nullopt;
  return it->second.profile;
}

std::shared_ptr<const JwtKeyset> ProfileStore::keyset(const std::string& name) const {
  std::lock_guard g(mu_);
  auto it = states_.find(name);
  return it == states_.end() ? nullptr : it->second.keyset;
}

void ProfileStore::refresh() {
  // The files are read outside the lock (a slow disk holds no one up); what changed is swapped
  // in under it.
  std::vector<std::pair<JwtProfile, std::shared_ptr<const JwtKeyset>>> todo;
  const int64_t now = nowS();
  {
    std::lock_guard g(mu_);
    for (const auto& [n, s] : states_)
      // A file when it changes or every 5 minutes; a URL every 5 minutes, 30 s after a failure.
      if ((s.profile.jwks_url.empty() && mtimeNs(s.profile.jwks_file) != s.mtime_ns) ||
          now - s.checked_s >= (s.keyset && !s.keyset->error.empty() ? 30 : 300))
        todo.emplace_back(s.profile, s.keyset);
  }
  if (todo.empty()) return;
  struct Done {
    std::string name;
    std::shared_ptr<const JwtKeyset> old, keyset;
    int64_t mtime;
  };
  std::vector<Done> done;
  for (auto& [p, old] : todo) {
    int64_t mtime = 0;
    auto ks = load(p, old, now, mtime);
    if (!ks->error.empty())
      log::warn("governance", "JWT profile " + p.name + ": JWKS reload failed: " + ks->error);
    done.push_back({p.name, old, std::move(ks), mtime});
  }
  std::lock_guard g(mu_);
  for (auto& d : done) {
    auto it = states_.find(d.name);
    // (removed, or stored again, while the file was read: that newer keyset stands)
    if (it == states_.end() || it->second.keyset != d.old) continue;
    it->second.keyset = std::move(d.keyset);
    it->second.mtime_ns = d.mtime;
    it->second.checked_s = now;
  }
  publishLocked();
}

void ProfileStore::startRefresh() {
  refresher_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::seconds(5), [&] { return stop_; });
      if (stop_) break;
      lk.unlock();
      refresh();
      lk.lock();
    }
  });
}

}  // namespace kvgate::governance
