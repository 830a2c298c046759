#include "events/event_plane.h"

#include <pthread.h>
#include <signal.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <stdexcept>
#include <zmq.hpp>

#include "common/log.h"
#include "engines/trtllm.h"
#include "engines/vllm_events.h"
#include "events/hash_contract.h"
#include "events/kv_sources.h"
#include "events/sequence.h"
#include "http/async_fetch.h"
#include "metrics/text.h"

namespace kvgate::events {

namespace {
// One rank's replay: the DEALER to the engine's ROUTER and the replay in progress.
struct Replay {
  std::unique_ptr<zmq::socket_t> dealer;  // null without a replay port
  bool active = false;
  uint64_t from = 0, to = 0;  // the missing batches
  uint64_t next = 0;          // the next batch of the gap to apply
  bool lost = false;          // history was lost (the engine no longer had the gap): cleared
  std::chrono::steady_clock::time_point deadline;
  std::deque<std::pair<uint64_t, std::string>> held;  // live batches received meanwhile
  size_t held_bytes = 0;
  // After a replay that failed (timeout, overflow, lost history, or a request that could not be
  // sent) gaps follow the no-replay rule until then: a wrong or dead replay port must not turn
  // every gap into a held stream and a clear.
  std::chrono::steady_clock::time_point cooldown_until{};
};
}  // namespace

struct EventPlane::Source {
  SourceSpec spec;
  std::vector<Replay> replay;                            // one per DP rank
  std::vector<std::unique_ptr<zmq::socket_t>> monitors;  // per rank: its SUB's socket monitor
  std::vector<uint8_t> up;                               // per rank: connected now
  std::vector<uint64_t> connects;                        // per rank: connections made
  std::vector<std::unique_ptr<HashContract>> contracts;  // per rank; null: no declared contract
  std::vector<uint8_t> broken;  // per rank: its last checked store broke the contract
  std::set<std::string, std::less<>> adapters;  // LoRA names its stores carried (bounded)
  std::vector<int> slots;                       // one index worker per DP rank
  std::vector<zmq::socket_t> subs;              // one per DP rank
  std::vector<SequenceTracker> seq;  // one per DP rank (each rank numbers its own batches)
  SourceStats st;
  engines::KvEventBatch batch;  // reused between batches
  std::string error;
  uint64_t logged_errors = 0;  // decode errors logged (the first, then every 1000th)
};

struct EventPlane::InventoryRequest {
  std::string key;
  int rank = 0;
  size_t offset = 0, limit = 0;
  std::promise<Result<Inventory>> answer;
};

EventPlane::EventPlane(kv::KvIndex& index, EventPlaneOptions opts, const common::Clock& clock)
    : index_(index), opts_(opts), clock_(clock), ctx_(std::make_unique<zmq::context_t>(1)) {}

EventPlane::~EventPlane() { stop(); }

void EventPlane::start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { run(); });
  drain_thread_ = std::thread([this] { drainLoop(); });
}

void EventPlane::stop() {
  stop_.store(true);
  if (drain_thread_.joinable()) drain_thread_.join();
  if (thread_.joinable()) thread_.join();
  {  // nobody will answer these now
    std::lock_guard<std::mutex> g(mu_);
    for (auto& r : inventory_requests_)
      r->answer.set_value(fail(503, "kv_inventory", "the KV event plane is stopping"));
    inventory_requests_.clear();
  }
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
  return it->second.bits;
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

std::string EventPlane::renderRuleBlocks(const std::vector<config::RuleSpec>& rules) const {
  metrics::TextWriter w;
  w.header(metrics::kPdKvBlocks);
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& r : rules)
    for (size_t i = 0; i < r.endpoints.size(); ++i) {
      const std::string key = publisherKey(r, i);
      if (key.empty()) continue;
      auto it = slots_.find(key);
      if (it == slots_.end()) continue;
      uint64_t blocks = 0;
      for (uint64_t m = it->second.bits; m; m &= m - 1)
        blocks += index_.blocks(std::countr_zero(m));
      w.sample(metrics::kPdKvBlocks,
               {{"service", r.name.empty() ? r.key() : r.name}, {"ep_idx", std::to_string(i)}},
               static_cast<double>(blocks));
    }
  return w.str();
}

std::shared_ptr<const kv::AdapterSet> EventPlane::adapters() const {
  return adapters_.load(std::memory_order_acquire);
}

void EventPlane::noteAdapters(Source& src) {
  bool added = false;
  for (const auto& e : src.batch.events) {
    // Names longer than any adapter name are not remembered (a hostile publisher cannot pin
    // kMaxAdapters x 8 MiB); their blocks still sit in their own partition.
    if (e.kind != engines::KvEvent::Kind::kStored || e.lora_name.empty() ||
        e.lora_name.size() > 256)
      continue;
    if (src.adapters.count(e.lora_name) || src.adapters.size() >= kMaxAdapters) continue;
    src.adapters.insert(e.lora_name);
    added = true;
  }
  if (added) publishAdapters();
}

// The union of the followed sources' adapter names (at most kMaxAdapters), republished when it
// changes; a closed source's names go with it.
void EventPlane::publishAdapters() {
  auto next = std::make_shared<kv::AdapterSet>();
  for (const auto& [key, src] : sources_)
    for (const auto& a : src->adapters)
      if (next->size() < kMaxAdapters) next->insert(a);
  adapters_.store(std::move(next), std::memory_order_release);
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
    for (auto& [k, pub] : slots_) {
      const uint64_t mask = pub.bits;
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
  w.header(kKvReplays);
  for (auto& [k, v] : snap) {
    const auto& st = v.second;
    const std::pair<const char*, uint64_t> rows[] = {
        {"ok", st.replays_ok},           {"partial", st.replays_partial},
        {"timeout", st.replays_timeout}, {"overflow", st.replays_overflow},
        {"busy", st.replays_busy},       {"unsent", st.replays_unsent}};
    for (auto& [outcome, n] : rows)
      w.sample(kKvReplays, {{"source", k}, {"outcome", outcome}}, static_cast<double>(n));
  }
  each(kKvReplayedBatches, [](const V& v) { return v.second.replayed_batches; });
  each(kKvSubscriberConnected, [](const V& v) { return v.second.connected ? 1 : 0; });
  each(kKvSubscriberReconnects, [](const V& v) { return v.second.reconnects; });
  w.header(kKvHashChecks);
  for (auto& [k, v] : snap) {
    const auto& st = v.second;
    for (auto [result, n] : {std::pair<const char*, uint64_t>{"ok", st.hash_ok},
                             {"mismatch", st.hash_mismatch},
                             {"unverifiable", st.hash_unverifiable}})
      w.sample(kKvHashChecks, {{"source", k}, {"result", result}}, static_cast<double>(n));
  }
  each(kKvHashContractBroken, [](const V& v) { return v.second.contract_broken ? 1 : 0; });
  each(kKvEvicted, [](const V& v) { return v.second.apply.evicted_blocks; });
  each(kKvProbeLimited, [](const V& v) { return v.second.apply.probe_limited_blocks; });
  w.header(kKvLag);
  for (auto& [k, v] : snap) w.sample(kKvLag, {{"source", k}}, v.second.lag_seconds);
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
    const std::pair<const char*, uint64_t> rows[] = {{"duplicate_block", a.duplicate_blocks},
                                                     {"orphan", a.orphan_events},
                                                     {"misfit", a.misfit_events},
                                                     {"other_medium", a.skipped_events},
                                                     {"unknown_removal", a.unknown_removals},
                                                     {"unknown_event", v.second.unknown_events},
                                                     {"block_size", v.second.block_size_mismatch}};
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

// (Re)opens a rank's DEALER to its replay port (no-op without one). ZMQ connects in the
// background and reconnects with backoff.
void EventPlane::openDealer(Source& src, size_t rank) {
  Replay& rp = src.replay[rank];
  rp.dealer.reset();
  if (src.spec.replay_port == 0) return;
  auto d = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::dealer);
  d->set(zmq::sockopt::linger, 0);
  d->set(zmq::sockopt::ipv6, 1);
  d->set(zmq::sockopt::rcvhwm, opts_.rcv_hwm);
  d->set(zmq::sockopt::maxmsgsize, opts_.max_message_bytes);
  d->set(zmq::sockopt::reconnect_ivl, 100);
  d->set(zmq::sockopt::reconnect_ivl_max, 5000);
  d->connect(zmqAddress(src.spec.host, src.spec.replay_port + static_cast<int>(rank)));
  rp.dealer = std::move(d);
}

void EventPlane::closeSource(std::map<std::string, std::unique_ptr<Source>>::iterator it) {
  for (auto& rp : it->second->replay)
    if (rp.active) --replays_running_;
  {  // readers stop seeing the source before its slots are freed (and maybe reused)
    std::lock_guard<std::mutex> g(mu_);
    drain_specs_.erase(it->first);
    slots_.erase(it->first);
    stats_.erase(it->first);
    publishLookup();
  }
  for (int slot : it->second->slots) index_.removeWorker(slot);
  log::info("events", "stopped following KV events of " + it->first);
  const bool had_adapters = !it->second->adapters.empty();
  sources_.erase(it);
  if (had_adapters) publishAdapters();
}

void EventPlane::openSource(const std::string& key, const SourceSpec& spec) {
  const int ranks = spec.dp_ranks < 1 ? 1 : spec.dp_ranks;
  if (spec.host.empty() || ranks > kMaxRanks || int{spec.port} + ranks - 1 > 65535 ||
      spec.port == 0 || int{spec.replay_port} + ranks - 1 > 65535) {
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
      src->seq.emplace_back();
      src->replay.emplace_back();
      src->up.push_back(0);
      src->connects.push_back(0);
      src->contracts.push_back(opts_.none_hash_seed.empty()
                                   ? nullptr
                                   : HashContract::make(spec.hash_algo, opts_.none_hash_seed));
      src->broken.push_back(0);
      if (spec.http_drain) continue;  // polled over HTTP by the drain thread: no sockets
      zmq::socket_t s(*ctx_, zmq::socket_type::sub);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::ipv6, 1);  // IPv6 endpoint addresses too
      s.set(zmq::sockopt::rcvhwm, opts_.rcv_hwm);
      s.set(zmq::sockopt::maxmsgsize, opts_.max_message_bytes);
      s.set(zmq::sockopt::reconnect_ivl, 100);
      s.set(zmq::sockopt::reconnect_ivl_max, 5000);
      s.set(zmq::sockopt::subscribe, spec.topic);
      // Connection state through a socket monitor (before connecting: no event is missed).
      static std::atomic<uint64_t> monitor_ids{0};
      const std::string mon_addr = "inproc://kvgate-kv-monitor-" + std::to_string(monitor_ids++);
      if (zmq_socket_monitor(s.handle(), mon_addr.c_str(),
                             ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0)
        throw zmq::error_t();
      auto mon = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pair);
      mon->set(zmq::sockopt::linger, 0);
      mon->connect(mon_addr);
      src->monitors.push_back(std::move(mon));
      s.connect(zmqAddress(spec.host, spec.port + r));
      src->subs.push_back(std::move(s));
    }
    if (!spec.http_drain)
      for (size_t r = 0; r < src->replay.size(); ++r) openDealer(*src, r);
  } catch (const std::exception& e) {
    for (int slot : src->slots) index_.removeWorker(slot);
    log::warn("events", "not following KV events of " + key + ": " + e.what());
    return;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    slots_[key] = kv::Publisher{mask, -1};
    if (spec.http_drain) drain_specs_[key] = spec;
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
    if (w == want.end() || !(w->second == cur->second->spec)) {
      closeSource(cur);
    } else if (w->second.tls_files != cur->second->spec.tls_files) {
      // The same source, a new client context (a re-planned rule set): no reopening.
      cur->second->spec.tls_files = w->second.tls_files;
      std::lock_guard<std::mutex> g(mu_);
      if (auto d = drain_specs_.find(cur->first); d != drain_specs_.end())
        d->second.tls_files = w->second.tls_files;
    }
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
    serveInventoryRequests();
    serveDrainResults();
    items.clear();
    owners.clear();
    checkReplayTimeouts();
    // Owners: (source, rank) for SUBs, (source, kDealer + rank) for replay DEALERs.
    for (auto& [key, src] : sources_)
      for (size_t r = 0; r < src->subs.size(); ++r) {
        items.push_back({src->subs[r].handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(src.get(), r);
        items.push_back({src->monitors[r]->handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(src.get(), kMonitor + r);
        if (src->replay[r].dealer) {  // polled while idle too: stray answers are discarded
          items.push_back({src->replay[r].dealer->handle(), 0, ZMQ_POLLIN, 0});
          owners.emplace_back(src.get(), kDealer + r);
        }
      }
    if (items.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opts_.poll_ms));
      continue;
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(opts_.poll_ms));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      // At most 256 messages per socket per round, so one busy publisher cannot starve others.
      auto [src, r] = owners[i];
      if (r >= kMonitor) {
        for (int n = 0; n < 64 && onMonitorEvent(*src, r - kMonitor); ++n) {
        }
      } else if (r >= kDealer) {
        for (int n = 0; n < 256 && onReplayMessage(*src, r - kDealer); ++n) {
        }
      } else {
        for (int n = 0; n < 256 && onMessage(*src, r); ++n) {
        }
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
  Replay& rp = src.replay[rank];
  if (rp.active) {  // hold it until the replay is done, within bounds
    if (rp.held.size() < kMaxHeldBatches && rp.held_bytes + payload.size() <= kMaxHeldBytes) {
      rp.held.emplace_back(seq, std::string(payload));
      rp.held_bytes += payload.size();
      return true;
    }
    finishReplay(src, rank, "overflow");  // processes what was held, then this one below
    if (rp.active) {  // a held batch started another replay: this one waits for it
      rp.held_bytes += payload.size();
      rp.held.emplace_back(seq, std::string(payload));
      return true;
    }
  }
  processLive(src, rank, seq, payload);
  return true;
}

// Counts (and logs the first of every 1000) a payload that did not decode: nothing applied.
void EventPlane::noteDecodeError(Source& src) {
  ++src.st.decode_errors;
  if (src.logged_errors++ % 1000 == 0)
    log::warn("events", "bad KV-event batch from " + src.spec.key() + " (" +
                            std::to_string(src.st.decode_errors) + " so far): " + src.error);
}

// Decodes and applies one batch to the rank's inventory; false (counted) when it does not decode.
bool EventPlane::applyPayload(Source& src, size_t rank, std::string_view payload) {
  if (!engines::decodeVllmBatch(payload, src.batch, src.error)) {
    noteDecodeError(src);
    return false;
  }
  applyBatch(src, rank);
  return true;
}

// The one way a decoded batch (src.batch) reaches the rank's inventory, whatever its transport:
// adapter names, lag, the declared hash contract, then the index and the counters.
void EventPlane::applyBatch(Source& src, size_t rank) {
  skipOtherBlockSizes(src);
  noteAdapters(src);
  if (src.batch.ts > 0) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    src.st.lag_seconds = std::max(0.0, now - src.batch.ts);
  }
  checkContract(src, rank);
  index_.apply(src.slots[rank], src.batch, src.st.apply);
  ++src.st.batches;
  src.st.unknown_events += src.batch.unknown_events;
}

// Stores of a block size other than the rule's kvBlockSize never match a prompt chain (Tier 1.5
// cuts prompts by kvBlockSize): skipped and counted, and the first one logged, so a fleet whose
// engines run another block size (TensorRT-LLM's default is 32) shows why it has no hits.
void EventPlane::skipOtherBlockSizes(Source& src) {
  auto& ev = src.batch.events;
  const uint32_t want = src.spec.block_size;
  auto other = [want](const engines::KvEvent& e) {
    return e.kind == engines::KvEvent::Kind::kStored && e.block_size != 0 && e.block_size != want;
  };
  auto first = std::find_if(ev.begin(), ev.end(), other);
  if (first == ev.end()) return;
  if (src.st.block_size_mismatch == 0)
    log::warn("events", "KV events of " + src.spec.key() + " store blocks of " +
                            std::to_string(first->block_size) + " tokens but the rule's " +
                            "kvBlockSize is " + std::to_string(want) +
                            ": those stores are skipped (set kvBlockSize to the engine's block "
                            "size)");
  for (auto it = first; it != ev.end(); ++it)
    if (other(*it)) src.st.block_size_mismatch += it->block_hashes.size();
  ev.erase(std::remove_if(first, ev.end(), other), ev.end());
}

void EventPlane::checkContract(Source& src, size_t rank) {
  HashContract* c = src.contracts[rank].get();
  if (!c) return;
  const HashContract::Result r = c->check(src.batch);
  src.st.hash_ok += r.ok;
  src.st.hash_mismatch += r.mismatch;
  src.st.hash_unverifiable += r.unverifiable;
  if (r.ok == 0 && r.mismatch == 0) return;  // no verdict from this batch
  src.st.contract_checked = true;
  src.broken[rank] = r.mismatch > 0;
  // The source breaks the contract while any of its ranks does (each rank is its own engine).
  bool broken = false;
  for (uint8_t b : src.broken) broken = broken || b;
  if (broken == src.st.contract_broken) return;
  src.st.contract_broken = broken;
  log::warn("events", "KV events of " + src.spec.key() +
                          (broken ? ": block hashes break the declared contract (kvHashAlgo " +
                                        src.spec.hash_algo + ", LLB_KV_NONE_HASH_SEED): " +
                                        "Tier 1.5 stops trusting this publisher"
                                  : ": block hashes match the declared contract again"));
  std::lock_guard<std::mutex> g(mu_);
  auto it = slots_.find(src.spec.key());
  if (it != slots_.end()) {
    it->second.contract_broken = broken;
    publishLookup();
  }
}

void EventPlane::clearRank(Source& src, size_t rank) {
  kv::ApplyStats scratch;  // counted once, here (apply.clears counts AllBlocksCleared)
  index_.clear(src.slots[rank], scratch);
  if (src.contracts[rank]) src.contracts[rank]->clear();
  ++src.st.clears;
}

// A live batch, through the rank's sequence rules.
void EventPlane::processLive(Source& src, size_t rank, uint64_t seq, std::string_view payload) {
  // A batch that does not decode is not applied and not counted as seen: the next shows a gap.
  if (!engines::decodeVllmBatch(payload, src.batch, src.error)) {
    noteDecodeError(src);
    return;
  }
  Replay& rp = src.replay[rank];
  const auto now = std::chrono::steady_clock::now();
  const bool can_replay =
      rp.dealer != nullptr && replays_running_ < opts_.max_replays && now >= rp.cooldown_until;
  SequenceTracker::Decision d = src.seq[rank].onBatch(seq, can_replay);
  if (!d.apply) {
    ++src.st.duplicate_batches;
    return;
  }
  src.st.lost_batches += d.lost;
  if (d.restart) ++src.st.restarts;
  if (rp.dealer && !can_replay && (d.lost > 0 || (d.restart && seq > 0))) ++src.st.replays_busy;
  if (d.clear) clearRank(src, rank);
  if (d.replay) {
    // Ask for [from, ...]; this batch waits with the live ones that follow.
    std::string start(8, '\0');
    for (int i = 7, v = 0; i >= 0; --i, ++v)
      start[static_cast<size_t>(i)] = static_cast<char>(d.replay_from >> (8 * v));
    // A multipart message is taken whole or not at all: the first frame decides.
    if (!rp.dealer->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      // The DEALER's queue is full: the no-replay rule, and no replay tried again for a while.
      ++src.st.replays_unsent;
      rp.cooldown_until = now + std::chrono::milliseconds(opts_.replay_cooldown_ms);
      if (!d.restart && d.lost > SequenceTracker::kMaxKeptGap) clearRank(src, rank);
      applyBatch(src, rank);
      return;
    }
    rp.dealer->send(zmq::buffer(start), zmq::send_flags::dontwait);
    rp.active = true;
    rp.from = rp.next = d.replay_from;
    rp.to = d.replay_to;
    rp.lost = false;
    rp.deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.replay_timeout_ms);
    rp.held.emplace_back(seq, std::string(payload));
    rp.held_bytes = payload.size();
    ++replays_running_;
    return;
  }
  applyBatch(src, rank);
}

// One replay message: ["", topic?, seq, payload], or the end marker (last frame empty).
bool EventPlane::onReplayMessage(Source& src, size_t rank) {
  Replay& rp = src.replay[rank];
  std::vector<zmq::message_t> frames;
  bool more = true;
  while (more) {
    zmq::message_t m;
    if (!rp.dealer->recv(m, zmq::recv_flags::dontwait)) {
      if (frames.empty()) return false;
      break;
    }
    more = m.more();
    if (frames.size() < 5) frames.push_back(std::move(m));  // extra frames dropped
  }
  if (!rp.active) {  // nobody asked: a late or stray answer, discarded
    ++src.st.malformed;
    return true;
  }
  size_t first = !frames.empty() && frames.front().size() == 0 ? 1 : 0;  // the delimiter
  const size_t n = frames.size() - first;
  if (n >= 1 && frames.back().size() == 0) {
    finishReplay(src, rank, "end");
    return true;
  }
  if (n < 2 || n > 3 || frames[frames.size() - 2].size() != 8) {
    ++src.st.malformed;
    return true;
  }
  uint64_t seq = 0;
  const auto* b = static_cast<const unsigned char*>(frames[frames.size() - 2].data());
  for (int i = 0; i < 8; ++i) seq = (seq << 8) | b[i];
  if (seq < rp.next || seq > rp.to) return true;  // before the gap (or seen), or held live
  if (seq > rp.next && !rp.lost) {
    // The engine no longer has the first missing batch(es): history is lost.
    clearRank(src, rank);
    rp.lost = true;
  }
  std::string_view payload(static_cast<const char*>(frames.back().data()), frames.back().size());
  if (applyPayload(src, rank, payload)) ++src.st.replayed_batches;
  rp.next = seq + 1;
  return true;
}

// Ends the rank's replay ("end", "timeout" or "overflow") and processes the held live batches.
void EventPlane::finishReplay(Source& src, size_t rank, const char* outcome) {
  Replay& rp = src.replay[rank];
  if (!rp.active) return;
  rp.active = false;
  --replays_running_;
  const std::string_view why(outcome);
  const bool covered = rp.next > rp.to;
  if (!covered && !rp.lost) {  // the gap was not (fully) replayed: what is left may be stale
    clearRank(src, rank);
    rp.lost = true;
  }
  if (rp.lost)
    rp.cooldown_until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.replay_cooldown_ms);
  if (why == "timeout") {
    ++src.st.replays_timeout;
    openDealer(src, rank);  // a late answer must not be taken for the next replay's
  } else if (why == "overflow") {
    ++src.st.replays_overflow;
    openDealer(src, rank);
  } else if (rp.lost) {
    ++src.st.replays_partial;
  } else {
    ++src.st.replays_ok;
  }
  if (why != "end" || rp.lost)
    log::info("events", "KV-event replay of " + src.spec.key() + " rank " + std::to_string(rank) +
                            " batches " + std::to_string(rp.from) + ".." + std::to_string(rp.to) +
                            ": " + std::string(why) +
                            (rp.lost ? " (history lost: inventory cleared)" : ""));
  src.seq[rank].resumeAfter(rp.to);
  std::deque<std::pair<uint64_t, std::string>> held;
  held.swap(rp.held);
  rp.held_bytes = 0;
  while (!held.empty()) {
    auto [seq, payload] = std::move(held.front());
    held.pop_front();
    if (rp.active) {  // a held batch started another replay: the rest waits for that one
      rp.held_bytes += payload.size();
      rp.held.emplace_back(seq, std::move(payload));
      continue;
    }
    processLive(src, rank, seq, payload);
  }
}

// A socket-monitor event of a rank's SUB: [event id u16 + value u32, endpoint address].
bool EventPlane::onMonitorEvent(Source& src, size_t rank) {
  zmq::message_t ev, addr;
  if (!src.monitors[rank]->recv(ev, zmq::recv_flags::dontwait)) return false;
  if (ev.more()) (void)src.monitors[rank]->recv(addr, zmq::recv_flags::dontwait);
  if (ev.size() < 6) return true;
  uint16_t id = 0;
  std::memcpy(&id, ev.data(), sizeof id);
  const bool was_connected = src.st.connected;
  if (id == ZMQ_EVENT_CONNECTED) {
    if (src.connects[rank]++ > 0) ++src.st.reconnects;
    src.up[rank] = 1;
  } else if (id == ZMQ_EVENT_DISCONNECTED) {
    src.up[rank] = 0;
  }
  bool all = true;
  for (uint8_t u : src.up) all = all && u;
  src.st.connected = all;
  if (all != was_connected) {
    log::info("events", "KV events of " + src.spec.key() +
                            (all ? ": subscriber connected" : ": subscriber disconnected"));
    std::lock_guard<std::mutex> g(mu_);
    auto it = slots_.find(src.spec.key());
    if (it != slots_.end()) {
      it->second.connected_ns = all ? clock_.nowNs() : -1;
      publishLookup();
    }
  }
  publishStats(src);
  return true;
}

void EventPlane::checkReplayTimeouts() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [key, src] : sources_)
    for (size_t r = 0; r < src->replay.size(); ++r)
      if (src->replay[r].active && now >= src->replay[r].deadline) {
        finishReplay(*src, r, "timeout");
        publishStats(*src);
      }
}

Result<EventPlane::Inventory> EventPlane::inventory(const std::string& key, int rank, size_t offset,
                                                    size_t limit, std::chrono::milliseconds wait) {
  auto req = std::make_shared<InventoryRequest>();
  req->key = key;
  req->rank = rank;
  req->offset = offset;
  req->limit = limit;
  auto fut = req->answer.get_future();
  {
    std::lock_guard<std::mutex> g(mu_);
    if (inventory_requests_.size() >= 16)
      return fail(503, "kv_inventory", "too many inventory requests waiting; retry");
    inventory_requests_.push_back(req);
  }
  if (fut.wait_for(wait) != std::future_status::ready)
    return fail(503, "kv_inventory", "the KV event thread did not answer in time; retry");
  return fut.get();
}

// Event thread: answers the waiting inventory requests from the index (its only writer).
void EventPlane::serveInventoryRequests() {
  std::deque<std::shared_ptr<InventoryRequest>> reqs;
  {
    std::lock_guard<std::mutex> g(mu_);
    reqs.swap(inventory_requests_);
  }
  for (auto& r : reqs) {
    auto it = sources_.find(r->key);
    if (it == sources_.end() || r->rank < 0 ||
        static_cast<size_t>(r->rank) >= it->second->slots.size()) {
      r->answer.set_value(fail(
          404, "kv_inventory",
          "KV events of " + r->key + " rank " + std::to_string(r->rank) + " are not followed"));
      continue;
    }
    Inventory inv;
    inv.total = index_.engineHashes(it->second->slots[static_cast<size_t>(r->rank)], r->offset,
                                    r->limit, inv.hashes);
    r->answer.set_value(std::move(inv));
  }
}

// The drain thread: POST /kv_cache_events on every HTTP-drain source (TensorRT-LLM) each
// drain_poll_ms, decoded here (off the event thread), handed over through drain_results_.
void EventPlane::drainLoop() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // One coroutine per source on this thread's own event loop, each polling at its own pace (a
  // silent engine slows only itself); at most kMaxDrainsInFlight exchanges at once (each may hold
  // a 16 MiB answer); each exchange is bounded (drain_timeout_ms), so stop() waits at most that.
  asio::io_context io(1);
  std::set<std::string> running;  // keys with a polling coroutine (this thread only)
  std::set<std::string> warned_no_context;  // (this thread only)
  int in_flight = 0;
  auto poll = [this, &running, &in_flight,
               &warned_no_context](std::string key) -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    auto sleepMs = [&timer](int ms) -> asio::awaitable<void> {
      timer.expires_after(std::chrono::milliseconds(ms));
      error_code ec;
      co_await timer.async_wait(useEc(ec));
    };
    while (!stop_.load()) {
      SourceSpec spec;
      {
        std::lock_guard<std::mutex> g(mu_);
        auto it = drain_specs_.find(key);
        if (it == drain_specs_.end()) break;  // no longer followed
        spec = it->second;
      }
      while (in_flight >= kMaxDrainsInFlight && !stop_.load()) co_await sleepMs(10);
      ++in_flight;
      DrainResult res;
      res.key = key;
      // Until proven otherwise (an exception included): unreachable, and events lost.
      res.reachable = false;
      res.lost = true;
      // A TLS source without its context (its rule is saved but not served: a CA file missing
      // at restart) is not polled in plain text; nothing was sent, so nothing was lost. Said
      // once per source in the log (loxilb_kv_subscriber_connected stays 0).
      if (spec.tls && !spec.tls_files) {
        res.lost = false;
        res.error = "no TLS client context (the rule naming it is not served)";
        if (warned_no_context.insert(key).second)
          log::warn("events", "not draining " + key + " over TLS: " + res.error);
      } else {
        warned_no_context.erase(key);
        try {
          http::FetchResult r = co_await http::fetchAsync(
              spec.host, spec.port, "POST", "/kv_cache_events",
              std::chrono::milliseconds(opts_.drain_timeout_ms), engines::kMaxTrtllmAnswer,
              spec.tls_files.get(), spec.tls_name);
          res.reachable = r.ok && r.status == 200;
          // Sent but not answered in full: the engine may have dropped what it was answering. A
          // complete non-200 answer delivered (and dropped) nothing.
          res.lost = r.sent && !r.ok;
          if (res.reachable && !engines::decodeTrtllmEvents(r.body, res.events, res.error))
            res.decoded = false;
          if (!r.ok) res.error = r.error;
        } catch (const std::exception& e) {
          res.events.clear();
          res.decoded = false;
          res.error = e.what();
        }
      }
      --in_flight;
      size_t bytes = 0;
      for (const auto& ev : res.events)
        bytes += ev.event.token_ids.size() * 4 + ev.event.block_hashes.size() * 8 + sizeof(ev);
      {
        std::lock_guard<std::mutex> g(mu_);
        if (drain_results_.size() >= kMaxDrainResults ||
            drain_queued_bytes_ + bytes > kMaxDrainQueuedBytes) {
          // The event thread is far behind: if this answer took events (the drain already
          // dropped them at the engine), the source's inventory can no longer be trusted.
          if (res.lost || !res.events.empty() || !res.decoded) drain_lost_.insert(key);
        } else {
          res.bytes = bytes;
          drain_queued_bytes_ += bytes;
          drain_results_.push_back(std::move(res));
        }
      }
      co_await sleepMs(opts_.drain_poll_ms);
    }
    running.erase(key);
  };
  // The supervisor: starts a poller for each new drain source, until stop.
  asio::co_spawn(
      io,
      [this, &running, &poll]() -> asio::awaitable<void> {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        while (!stop_.load()) {
          std::vector<std::string> keys;
          {
            std::lock_guard<std::mutex> g(mu_);
            for (auto& [k, s] : drain_specs_) keys.push_back(k);
          }
          for (auto& k : keys)
            if (running.insert(k).second)
              asio::co_spawn(co_await asio::this_coro::executor, poll(k), asio::detached);
          timer.expires_after(std::chrono::milliseconds(50));
          error_code ec;
          co_await timer.async_wait(useEc(ec));
        }
      },
      asio::detached);
  io.run();
}

// Event thread: applies what the drain thread fetched, through each rank's sequence rules (by
// event_id; a drain has no replay).
void EventPlane::serveDrainResults() {
  std::deque<DrainResult> results;
  std::set<std::string> lost;
  {
    std::lock_guard<std::mutex> g(mu_);
    results.swap(drain_results_);
    lost.swap(drain_lost_);
    drain_queued_bytes_ = 0;
  }
  for (auto& res : results) {
    auto it = sources_.find(res.key);
    if (it == sources_.end()) continue;  // closed meanwhile
    Source& src = *it->second;
    const bool was = src.st.connected;
    src.st.connected = res.reachable;
    if (res.reachable && src.connects[0]++ > 0 && !was) ++src.st.reconnects;
    if (was != src.st.connected) {
      std::lock_guard<std::mutex> g(mu_);
      auto s = slots_.find(res.key);
      if (s != slots_.end()) {
        s->second.connected_ns = src.st.connected ? clock_.nowNs() : -1;
        publishLookup();
      }
    }
    if (!res.decoded) {
      src.error = res.error;
      noteDecodeError(src);
    }
    // The drain is destructive: an answer lost after the request was sent, or rejected, took
    // events the index will never see. Start over from an empty inventory and a new baseline.
    if (res.lost || !res.decoded) {
      for (size_t r = 0; r < src.slots.size(); ++r) {
        clearRank(src, r);
        src.seq[r].reset();
      }
    }
    for (auto& ev : res.events) {
      if (ev.rank < 0 || static_cast<size_t>(ev.rank) >= src.slots.size()) {
        ++src.st.malformed;
        continue;
      }
      const size_t rank = static_cast<size_t>(ev.rank);
      SequenceTracker::Decision d = src.seq[rank].onBatch(ev.event_id, /*can_replay=*/false);
      if (!d.apply) {
        ++src.st.duplicate_batches;
        continue;
      }
      src.st.lost_batches += d.lost;
      if (d.restart) ++src.st.restarts;
      if (d.clear) clearRank(src, rank);
      if (!ev.relevant) continue;
      src.batch.clear();
      src.batch.events.push_back(std::move(ev.event));
      applyBatch(src, rank);
    }
    publishStats(src);
  }
  // Answers dropped because this thread fell behind (queued after every answer above, which are
  // older): what they held is gone, so the source starts over. Connection state is untouched.
  for (const auto& key : lost) {
    auto it = sources_.find(key);
    if (it == sources_.end()) continue;
    Source& src = *it->second;
    for (size_t r = 0; r < src.slots.size(); ++r) {
      clearRank(src, r);
      src.seq[r].reset();
    }
    publishStats(src);
  }
}

void EventPlane::publishStats(const Source& src) {
  std::lock_guard<std::mutex> g(mu_);
  stats_[src.spec.key()] = src.st;
}

}  // namespace kvgate::events
