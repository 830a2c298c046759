#include "events/event_plane.h"

#include <pthread.h>
#include <signal.h>

#include <bit>
#include <stdexcept>
#include <zmq.hpp>

#include "common/log.h"
#include "engines/vllm_events.h"
#include "events/sequence.h"
#include "metrics/text.h"

namespace kvgate::events {

struct EventPlane::Source {
  SourceSpec spec;
  std::vector<int> slots;            // one index worker per DP rank
  std::vector<zmq::socket_t> subs;   // one per DP rank
  std::vector<SequenceTracker> seq;  // one per DP rank (each rank numbers its own batches)
  SourceStats st;
  engines::KvEventBatch batch;  // reused between batches
  std::string error;
  uint64_t logged_errors = 0;  // decode errors logged (the first, then every 1000th)
};

EventPlane::EventPlane(kv::KvIndex& index, EventPlaneOptions opts)
    : index_(index), opts_(opts), ctx_(std::make_unique<zmq::context_t>(1)) {}

EventPlane::~EventPlane() { stop(); }

void EventPlane::start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
}

void EventPlane::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  // The thread is gone: this thread may close the sockets and free the inventories now.
  while (!sources_.empty()) closeSource(sources_.begin());
}

void EventPlane::setSources(std::vector<SourceSpec> specs) {
  std::lock_guard<std::mutex> g(mu_);
  pending_ = std::move(specs);
}

std::optional<uint64_t> EventPlane::slotsOf(const std::string& key) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = slots_.find(key);
  if (it == slots_.end()) return std::nullopt;
  return it->second;
}

std::optional<SourceStats> EventPlane::stats(const std::string& key) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = stats_.find(key);
  if (it == stats_.end()) return std::nullopt;
  return it->second;
}

std::shared_ptr<const kv::WorkerMap> EventPlane::snapshot() const {
  return lookup_.load(std::memory_order_acquire);
}

void EventPlane::publishLookup() {
  lookup_.store(std::make_shared<const kv::WorkerMap>(slots_), std::memory_order_release);
}

std::vector<std::string> EventPlane::sourceKeys() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::string> keys;
  for (auto& [k, v] : slots_) keys.push_back(k);
  return keys;
}

std::string EventPlane::renderMetrics() const {
  using namespace metrics;
  TextWriter w;
  std::map<std::string, std::pair<uint64_t, SourceStats>> snap;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [k, mask] : slots_) {
      uint64_t blocks = 0;
      for (uint64_t m = mask; m; m &= m - 1) blocks += index_.blocks(std::countr_zero(m));
      auto st = stats_.find(k);
      snap[k] = {blocks, st == stats_.end() ? SourceStats{} : st->second};
    }
  }
  auto each = [&](const Family& f, auto value) {
    w.header(f);
    for (auto& [k, v] : snap) w.sample(f, {{"source", k}}, static_cast<double>(value(v)));
  };
  using V = std::pair<uint64_t, SourceStats>;
  each(kKvBlocks, [](const V& v) { return v.first; });
  each(kKvBatches, [](const V& v) { return v.second.batches; });
  each(kKvLostBatches, [](const V& v) { return v.second.lost_batches; });
  each(kKvRestarts, [](const V& v) { return v.second.restarts; });
  each(kKvClears, [](const V& v) { return v.second.clears + v.second.apply.clears; });
  w.header(kKvRejected);
  for (auto& [k, v] : snap) {
    w.sample(kKvRejected, {{"source", k}, {"reason", "malformed"}},
             static_cast<double>(v.second.malformed));
    w.sample(kKvRejected, {{"source", k}, {"reason", "decode"}},
             static_cast<double>(v.second.decode_errors));
  }
  w.header(kKvSkipped);
  for (auto& [k, v] : snap) {
    const auto& a = v.second.apply;
    const std::pair<const char*, uint64_t> rows[] = {{"orphan", a.orphan_events},
                                                     {"misfit", a.misfit_events},
                                                     {"other_medium", a.skipped_events},
                                                     {"unknown_removal", a.unknown_removals},
                                                     {"unknown_event", v.second.unknown_events}};
    for (auto& [reason, n] : rows)
      w.sample(kKvSkipped, {{"source", k}, {"reason", reason}}, static_cast<double>(n));
  }
  w.header(kKvIndexBytes);
  w.sample(kKvIndexBytes, {}, static_cast<double>(index_.bytes()));
  return w.str();
}

namespace {
std::string zmqAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}
}  // namespace

void EventPlane::closeSource(std::map<std::string, std::unique_ptr<Source>>::iterator it) {
  {  // readers stop seeing the source before its slots are freed (and maybe reused)
    std::lock_guard<std::mutex> g(mu_);
    slots_.erase(it->first);
    stats_.erase(it->first);
    publishLookup();
  }
  for (int slot : it->second->slots) index_.removeWorker(slot);
  log::info("events", "stopped following KV events of " + it->first);
  sources_.erase(it);
}

void EventPlane::openSource(const std::string& key, const SourceSpec& spec) {
  const int ranks = spec.dp_ranks < 1 ? 1 : spec.dp_ranks;
  if (spec.host.empty() || ranks > kMaxRanks || int{spec.port} + ranks - 1 > 65535 ||
      spec.port == 0) {
    log::warn("events", "not following KV events of " + key +
                            ": host must be set, port 1-65535 "
                            "and port + dp ranks - 1 <= 65535, at most " +
                            std::to_string(kMaxRanks) + " ranks");
    return;
  }
  auto src = std::make_unique<Source>();
  src->spec = spec;
  uint64_t mask = 0;
  try {
    for (int r = 0; r < ranks; ++r) {
      int slot = index_.addWorker();
      if (slot < 0)
        throw std::runtime_error("the KV index is full (" + std::to_string(kv::kMaxWorkers) +
                                 " workers)");
      src->slots.push_back(slot);
      mask |= uint64_t{1} << slot;
      zmq::socket_t s(*ctx_, zmq::socket_type::sub);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::ipv6, 1);  // IPv6 endpoint addresses too
      s.set(zmq::sockopt::rcvhwm, opts_.rcv_hwm);
      s.set(zmq::sockopt::maxmsgsize, opts_.max_message_bytes);
      s.set(zmq::sockopt::reconnect_ivl, 100);
      s.set(zmq::sockopt::reconnect_ivl_max, 5000);
      s.set(zmq::sockopt::subscribe, spec.topic);
      s.connect(zmqAddress(spec.host, spec.port + r));
      src->subs.push_back(std::move(s));
      src->seq.emplace_back();
    }
  } catch (const std::exception& e) {
    for (int slot : src->slots) index_.removeWorker(slot);
    log::warn("events", "not following KV events of " + key + ": " + e.what());
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    slots_[key] = mask;
    stats_[key] = SourceStats{};
    publishLookup();
  }
  log::info("events", "following KV events of " + key + " (" + std::to_string(ranks) +
                          " rank(s), topic \"" + spec.topic + "\")");
  sources_.emplace(key, std::move(src));
}

// Event thread: opens new sources, closes removed or changed ones (their inventory freed).
void EventPlane::applySpecs() {
  std::optional<std::vector<SourceSpec>> next;
  {
    std::lock_guard<std::mutex> g(mu_);
    next.swap(pending_);
  }
  if (!next) return;
  std::map<std::string, SourceSpec> want;
  for (auto& s : *next) want.emplace(s.key(), s);
  for (auto it = sources_.begin(); it != sources_.end();) {
    auto w = want.find(it->first);
    auto cur = it++;
    if (w == want.end() || !(w->second == cur->second->spec)) closeSource(cur);
  }
  for (auto& [key, spec] : want)
    if (!sources_.count(key)) openSource(key, spec);
}

void EventPlane::run() {
  // Signals are the main thread's (SIGTERM drains the gateway): never delivered here, where they
  // would interrupt zmq_poll.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  while (!stop_.load()) {
    try {
      loop();
    } catch (const std::exception& e) {  // zmq::error_t, bad_alloc: survive, count, go on
      std::lock_guard<std::mutex> g(mu_);
      for (auto& [key, st] : stats_) ++st.errors;
      log::warn("events", std::string("event plane error: ") + e.what());
    }
  }
}

void EventPlane::loop() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<Source*, size_t>> owners;
  while (!stop_.load()) {
    applySpecs();
    items.clear();
    owners.clear();
    for (auto& [key, src] : sources_)
      for (size_t r = 0; r < src->subs.size(); ++r) {
        items.push_back({src->subs[r].handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(src.get(), r);
      }
    if (items.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opts_.poll_ms));
      continue;
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(opts_.poll_ms));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      // At most 256 messages per socket per round, so one busy publisher cannot starve others.
      for (int n = 0; n < 256 && onMessage(*owners[i].first, owners[i].second); ++n) {
      }
      publishStats(*owners[i].first);
    }
  }
}

// One PUB message: [topic, seq (8 bytes BE), payload].
bool EventPlane::onMessage(Source& src, size_t rank) {
  zmq::socket_t& s = src.subs[rank];
  zmq::message_t frames[3];
  size_t n = 0;
  bool more = true;
  while (more) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) return n > 0;  // nothing (more) waiting
    more = m.more();
    if (n < 3) frames[n] = std::move(m);
    ++n;  // extra frames are counted and dropped
  }
  if (n != 3 || frames[1].size() != 8) {
    ++src.st.malformed;
    return true;
  }
  uint64_t seq = 0;
  const auto* b = static_cast<const unsigned char*>(frames[1].data());
  for (int i = 0; i < 8; ++i) seq = (seq << 8) | b[i];
  std::string_view payload(static_cast<const char*>(frames[2].data()), frames[2].size());
  if (!engines::decodeVllmBatch(payload, src.batch, src.error)) {
    ++src.st.decode_errors;  // not applied, and not counted as seen: the next batch shows a gap
    if (src.logged_errors++ % 1000 == 0)
      log::warn("events", "bad KV-event batch from " + src.spec.key() + " (" +
                              std::to_string(src.st.decode_errors) + " so far): " + src.error);
    return true;
  }
  const int slot = src.slots[rank];
  SequenceTracker::Decision d = src.seq[rank].onBatch(seq, /*can_replay=*/false);
  if (!d.apply) {
    ++src.st.duplicate_batches;
    return true;
  }
  src.st.lost_batches += d.lost;
  if (d.restart) ++src.st.restarts;
  if (d.clear) {
    kv::ApplyStats scratch;  // counted once, below (apply.clears counts AllBlocksCleared)
    index_.clear(slot, scratch);
    ++src.st.clears;
  }
  index_.apply(slot, src.batch, src.st.apply);
  ++src.st.batches;
  src.st.unknown_events += src.batch.unknown_events;
  return true;
}

void EventPlane::publishStats(const Source& src) {
  std::lock_guard<std::mutex> g(mu_);
  stats_[src.spec.key()] = src.st;
}

}  // namespace kvgate::events
