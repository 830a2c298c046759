#include "hints/engine_feed.h"

#include <bit>

#include "common/log.h"
#include "common/net.h"

namespace kvgate::hints {

Result<events::SourceSpec> sourceOf(const ReplicaConfig& r) {
  std::string_view a = r.events;
  if (a.substr(0, 6) == "tcp://") a.remove_prefix(6);
  auto hp = net::parseHostPort(a);
  if (!hp || hp->port == 0)
    return fail(400, "events", "replica " + r.id + ": events must be tcp://HOST:PORT");
  events::SourceSpec s;
  s.host = hp->host;
  s.port = hp->port;
  s.block_size = r.block_size;
  return s;
}

EngineFeed::EngineFeed(HintIndex& index, const PdTopology& topology, events::EventPlaneOptions opts)
    : kv_(1'000'000) {
  std::vector<events::SourceSpec> specs;
  for (const ReplicaConfig& r : topology.replicas) {
    if (r.events.empty()) continue;
    auto spec = sourceOf(r);
    if (!spec) {
      log::error("index", spec.error().what);
      continue;
    }
    subs_.push_back({r, index.ensureReplica(r.id), spec->key()});
    specs.push_back(*spec);
  }
  plane_ = std::make_unique<events::EventPlane>(kv_, opts);
  plane_->setSources(std::move(specs));
  index.attachFeed(this);
}

EngineFeed::~EngineFeed() { stop(); }
void EngineFeed::start() { plane_->start(); }
void EngineFeed::stop() { plane_->stop(); }

uint64_t EngineFeed::bitsOf(const Sub& s, const kv::WorkerMap& map) const {
  auto it = map.find(s.key);
  return it == map.end() ? 0 : it->second.bits;
}

bool EngineFeed::holds(uint64_t bits) const {
  for (uint64_t m = bits; m; m &= m - 1)
    if (kv_.blocks(std::countr_zero(m)) > 0) return true;
  return false;
}

void EngineFeed::members(std::string_view tenant, std::string_view model, std::string_view scheme,
                         std::vector<Member>& out) const {
  out.clear();
  if (subs_.empty()) return;
  auto map = plane_->snapshot();
  for (const Sub& s : subs_) {
    if (s.cfg.tenant != tenant || s.cfg.model != model || s.cfg.hash_scheme != scheme) continue;
    uint64_t bits = bitsOf(s, *map);
    if (bits && holds(bits)) out.push_back({s.replica, bits});
  }
}

void EngineFeed::runs(const uint64_t* chain, size_t n, const std::vector<Member>& members,
                      std::vector<uint32_t>& out) const {
  out.assign(members.size(), 0);
  uint64_t all = 0;
  for (const Member& m : members) all |= m.bits;
  if (!all || n == 0) return;
  std::array<uint32_t, kv::kMaxWorkers> overlap{};
  kv_.score(chain, n, all, overlap);
  for (size_t i = 0; i < members.size(); ++i)
    for (uint64_t b = members[i].bits; b; b &= b - 1)  // a replica: its best rank
      out[i] = std::max(out[i], overlap[static_cast<size_t>(std::countr_zero(b))]);
}

int EngineFeed::known(std::string_view tenant, std::string_view model,
                      std::string_view scheme) const {
  int level = 0;
  auto map = plane_->snapshot();
  for (const Sub& s : subs_) {
    if (s.cfg.tenant != tenant) continue;
    uint64_t bits = bitsOf(s, *map);
    if (!bits || !holds(bits)) continue;
    int l = s.cfg.model != model ? 1 : s.cfg.hash_scheme != scheme ? 2 : 3;
    level = std::max(level, l);
  }
  return level;
}

bool EngineFeed::empty() const {
  auto map = plane_->snapshot();
  for (const Sub& s : subs_) {
    uint64_t bits = bitsOf(s, *map);
    if (bits && holds(bits)) return false;
  }
  return true;
}

}  // namespace kvgate::hints
