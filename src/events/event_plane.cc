#include "events/event_plane.h"

#include <zmq.hpp>

#include "common/log.h"
#include "engines/vllm_events.h"
#include "events/sequence.h"

namespace kvgate::events {

struct EventPlane::Source {
  SourceSpec spec;
  int slot = -1;
  std::vector<zmq::socket_t> subs;       // one per DP rank
  std::vector<SequenceTracker> seq;      // one per DP rank (each rank numbers its own batches)
  SourceStats st;
  engines::KvEventBatch batch;           // reused between batches
  std::string error;
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
  sources_.clear();  // closes the sockets (linger 0)
}

void EventPlane::setSources(std::vector<SourceSpec> specs) {
  std::lock_guard<std::mutex> g(mu_);
  pending_ = std::move(specs);
}

std::optional<int> EventPlane::slotOf(const std::string& key) const {
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

namespace {
std::string zmqAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}
}  // namespace

// Event thread: opens new sources, closes removed ones (their inventory freed).
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
    if (w != want.end() && w->second == it->second->spec) {
      ++it;
      continue;
    }
    index_.removeWorker(it->second->slot);
    {
      std::lock_guard<std::mutex> g(mu_);
      slots_.erase(it->first);
      stats_.erase(it->first);
    }
    log::info("events", "stopped following KV events of " + it->first);
    it = sources_.erase(it);
  }
  for (auto& [key, spec] : want) {
    if (sources_.count(key)) continue;
    int slot = index_.addWorker();
    if (slot < 0) {
      log::warn("events", "KV index full (" + std::to_string(kv::kMaxWorkers) +
                              " workers): not following " + key);
      continue;
    }
    auto src = std::make_unique<Source>();
    src->spec = spec;
    src->slot = slot;
    const int ranks = spec.dp_ranks < 1 ? 1 : spec.dp_ranks;
    for (int r = 0; r < ranks; ++r) {
      zmq::socket_t s(*ctx_, zmq::socket_type::sub);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::rcvhwm, opts_.rcv_hwm);
      s.set(zmq::sockopt::maxmsgsize, opts_.max_message_bytes);
      s.set(zmq::sockopt::reconnect_ivl, 100);
      s.set(zmq::sockopt::reconnect_ivl_max, 5000);
      s.set(zmq::sockopt::subscribe, spec.topic);
      s.connect(zmqAddress(spec.host, spec.port + r));
      src->subs.push_back(std::move(s));
      src->seq.emplace_back();
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      slots_[key] = slot;
      stats_[key] = SourceStats{};
    }
    log::info("events", "following KV events of " + key + " (" + std::to_string(ranks) +
                            " rank(s), topic \"" + spec.topic + "\")");
    sources_.emplace(key, std::move(src));
  }
}

void EventPlane::run() {
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
    log::warn("events", "bad KV-event batch from " + src.spec.key() + ": " + src.error);
    return true;
  }
  SequenceTracker::Decision d = src.seq[rank].onBatch(seq, /*can_replay=*/false);
  if (!d.apply) {
    ++src.st.duplicate_batches;
    return true;
  }
  src.st.lost_batches += d.lost;
  if (d.restart) ++src.st.restarts;
  if (d.clear) {
    index_.clear(src.slot, src.st.apply);
    ++src.st.clears;
  }
  index_.apply(src.slot, src.batch, src.st.apply);
  ++src.st.batches;
  src.st.unknown_events += src.batch.unknown_events;
  return true;
}

void EventPlane::publishStats(const Source& src) {
  std::lock_guard<std::mutex> g(mu_);
  stats_[src.spec.key()] = src.st;
}

}  // namespace kvgate::events
