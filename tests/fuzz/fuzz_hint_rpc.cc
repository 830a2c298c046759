// Fuzz target: what a gRPC client of `kvgate index` controls. The first byte picks the input:
// 0 a CacheStateUpdate (ReportCacheState), 1 a LookupRouteRequest, 2 a CacheEvent
// (PublishEvent), each as protobuf wire bytes applied to an index that already holds a few
// chains; 3 a CachePolicy file; 4 a --replicas file.
// Properties: nothing crashes or grows past its bound (holdings stay within maxEntries after an
// update); a lookup answers a known reason code with the scores that code allows (PREFIX_MATCH:
// positive matched tokens, best first; AFFINITY_HINT: exactly one; misses: none); a refused
// policy or replicas file names its error; an accepted policy keeps its documented ranges.
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "hints/hint_index.h"
#include "hints/lookup.h"
#include "hints/pd_topology.h"
#include "hints/policy.h"
#include "hints/rpc_convert.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::hints;
  namespace pb = inferencecache::v1alpha1;
  // (protobuf logs every message it refuses; the index counts them instead, so does this)
  static const bool quiet = [] {
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                       const std::string&) {});
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  const uint8_t kind = data[0] % 5;
  const auto* body = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;

  if (kind == 3) {
    auto p = parsePolicy(std::string_view(body, n));
    if (!p) {
      check(!p.error().what.empty());
    } else {
      check(p->eviction_ttl_ms > 0);
      check(p->minimum_prefix_tokens >= 0 && p->minimum_matched_tokens >= 0);
      check(std::isfinite(p->routing_floor_score) && p->routing_floor_score >= 0);
      check(p->block_size > 0 && p->max_entries > 0);
    }
    return 0;
  }
  if (kind == 4) {
    auto t = parseReplicas(std::string_view(body, n));
    if (!t) check(!t.error().what.empty());
    else
      for (const auto& r : t->replicas) check(!r.id.empty() && !r.model.empty());
    return 0;
  }

  kvgate::common::ManualClock clock;
  CachePolicy pol;
  pol.max_entries = 4096;
  pol.minimum_matched_tokens = 0;
  HintIndex ix(clock, pol);
  for (uint64_t c = 0; c < 4; ++c) {
    UpdateIn u = makeUpdate("r" + std::to_string(c), "m", "t", "vllm");
    PrefixIn p;
    for (uint64_t b = 0; b < 8; ++b) {
      p.block_hashes.push_back(be8(b < 4 ? b + 1 : 100 * (c + 1) + b));  // shared first 4
      p.block_token_counts.push_back(16);
    }
    u.prefixes.push_back(std::move(p));
    check(ix.report(u).accepted);
  }

  if (kind == 0) {
    pb::CacheStateUpdate m;
    if (!m.ParseFromArray(body, static_cast<int>(n))) return 0;
    uint64_t dropped = 0;
    IngestResult r = ix.report(toUpdate(m, 1'700'000'000'000'000, dropped));
    check(r.accepted || !r.reason.empty());
    check(ix.holdings() <= pol.max_entries);
    return 0;
  }
  if (kind == 2) {
    pb::CacheEvent ev;
    if (!ev.ParseFromArray(body, static_cast<int>(n))) return 0;
    IngestResult r = applyEvent(ix, ev);
    check(r.accepted || !r.reason.empty());
    return 0;
  }
  pb::LookupRouteRequest req;
  if (!req.ParseFromArray(body, static_cast<int>(n))) return 0;
  std::vector<std::string_view> blocks;
  LookupRequest q;
  if (!toLookup(req, blocks, q)) {
    check(static_cast<size_t>(req.block_hashes_size()) > LookupLimits{}.max_blocks);
    return 0;
  }
  LookupOutcome o = lookupRoute(ix, q, nullptr, 0);
  const std::string_view name = reasonName(o.reason);
  check(!name.empty());
  switch (o.reason) {
    case Reason::kPrefixMatch:
      check(!o.scores.empty());
      for (size_t i = 0; i < o.scores.size(); ++i) {
        check(o.scores[i].matched_tokens > 0);
        if (i > 0) check(o.scores[i - 1].score >= o.scores[i].score);
      }
      break;
    case Reason::kTenantHot:
      check(!o.scores.empty());
      break;
    case Reason::kAffinityHint:
      check(o.scores.size() == 1);
      break;
    default:
      check(o.scores.empty());
  }
  return 0;
}
