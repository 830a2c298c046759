// JWT auth profiles (/netlox/v1/config/ai/jwtauthprofile): rows of kind "jwtprofile" in the
// governance RowStore (row_store.h; one transaction per change, like the keys; reload() re-reads
// them when a shared store changed) and each profile's JWKS keyset, read
// from its file when the profile is stored (a file that does not load is a 400) and again by a
// background thread whenever the file changes or every 5 minutes. A keyset that cannot be
// reloaded keeps its keys until it is 24 h old, then its tokens fail closed (jwt_auth.h).
// Changes come from the control thread; the refresh thread only replaces keysets.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "governance/jwt_auth.h"
#include "governance/row_store.h"

namespace kvgate::governance {

class ProfileStore {
 public:
  static Result<std::unique_ptr<ProfileStore>> open(RowStore& rows, JwtRegistry& registry);
  Result<void> reload();  // every row again; unchanged profiles keep their keysets
  ~ProfileStore();
  ProfileStore(const ProfileStore&) = delete;
  ProfileStore& operator=(const ProfileStore&) = delete;

  Result<void> put(const JwtProfile& p);  // create or replace
  Result<void> remove(const std::string& name);  // 404 when absent
  std::vector<JwtProfile> list() const;
  std::optional<JwtProfile> find(const std::string& name) const;
  // The keyset's state for GET: keys, loaded_at, last error.
  std::shared_ptr<const JwtKeyset> keyset(const std::string& name) const;
  // Reloads changed (or 5-minute-old) JWKS files; the refresh thread calls it every 5 s.
  void refresh();
  void startRefresh();
  static constexpr size_t kMaxProfiles = 256;

 private:
  ProfileStore(RowStore& rows, JwtRegistry& registry) : rows_(rows), registry_(registry) {}
  struct State {
    JwtProfile profile;
    std::shared_ptr<const JwtKeyset> keyset;
    int64_t mtime_ns = 0;
    int64_t checked_s = 0;
  };
  // Loads `p`'s JWKS file into a keyset (keeping `old`'s keys when it fails).
  static std::shared_ptr<const JwtKeyset> load(const JwtProfile& p,
                                               const std::shared_ptr<const JwtKeyset>& old,
                                               int64_t now_s, int64_t& mtime_ns);
  static std::shared_ptr<const JwtKeyset> parsed(std::shared_ptr<JwtKeyset> ks,
                                                 const std::string& text, int64_t now_s);
  void publishLocked();
  RowStore& rows_;
  JwtRegistry& registry_;
  mutable std::mutex mu_;
  std::map<std::string, State, std::less<>> states_;
  std::thread refresher_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace kvgate::governance
