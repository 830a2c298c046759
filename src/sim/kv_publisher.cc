#include "sim/kv_publisher.h"

#include <chrono>
#include <random>
#include <zmq.hpp>

#include "engines/sglang.h"
#include "engines/trtllm.h"

namespace kvgate::sim {

std::string randomHashSeed() {
  std::random_device rd;
  static const char* d = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) s.push_back(d[rd() & 15]);
  return s;
}

KvPublisher::KvPublisher(const KvEventsConfig& cfg, size_t block_size, std::string seed,
                         int dp_rank)
    : cfg_(cfg),
      block_size_(block_size),
      none_hash_(engines::vllmNoneHash(cfg.algo, seed)),
      ctx_(std::make_unique<zmq::context_t>(1)),
      dp_rank_(dp_rank) {}

KvPublisher::~KvPublisher() {
  stop_.store(true);
  if (replay_thread_.joinable()) replay_thread_.join();
  router_.reset();
  pub_.reset();
  ctx_.reset();
}

namespace {
std::string tcpAddress(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" +
         (port == 0 ? std::string("*") : std::to_string(port));
}
std::string seqBytes(uint64_t v) {
  std::string b(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) b[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return b;
}
}  // namespace

Result<uint16_t> KvPublisher::bindReplay(const std::string& host, uint16_t port) {
  try {
    auto s = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::router);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::ipv6, 1);
    s->set(zmq::sockopt::sndhwm, static_cast<int>(cfg_.replay_buffer) + 16);
    s->bind(tcpAddress(host, port));
    std::string ep = s->get(zmq::sockopt::last_endpoint);
    replay_port_ = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
    router_ = std::move(s);
  } catch (const zmq::error_t& e) {
    return fail(503, "kv-events",
                "cannot bind the KV-event replay socket on " + host + ":" + std::to_string(port) +
                    ": " + e.what());
  }
  replay_thread_ = std::thread([this] { serveReplay(); });
  return replay_port_;
}

// The ROUTER's thread: each request [id, "", start_seq] gets the buffered batches from start_seq
// on, then the end marker. Malformed requests are ignored.
void KvPublisher::serveReplay() {
  while (!stop_.load()) {
    zmq::pollitem_t item{router_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> frames;
      bool more = true;
      while (more) {
        zmq::message_t m;
        if (!router_->recv(m, zmq::recv_flags::dontwait)) break;
        more = m.more();
        if (frames.size() < 4) frames.push_back(std::move(m));
      }
      if (frames.size() < 2 || frames.back().size() != 8) continue;
      uint64_t start = 0;
      const auto* b = static_cast<const unsigned char*>(frames.back().data());
      for (int i = 0; i < 8; ++i) start = (start << 8) | b[i];
      std::vector<std::pair<uint64_t, std::string>> out;
      {
        std::lock_guard<std::mutex> g(buf_mu_);
        for (auto& [seq, payload] : buffer_)
          if (seq >= start) out.emplace_back(seq, payload);
      }
      const std::string id(static_cast<const char*>(frames[0].data()), frames[0].size());
      auto send = [&](const std::string& seq, const std::string& payload) {
        router_->send(zmq::buffer(id), zmq::send_flags::sndmore);
        router_->send(zmq::message_t(), zmq::send_flags::sndmore);
        router_->send(zmq::buffer(cfg_.topic), zmq::send_flags::sndmore);
        router_->send(zmq::buffer(seq), zmq::send_flags::sndmore);
        router_->send(zmq::buffer(payload), zmq::send_flags::none);
      };
      for (auto& [seq, payload] : out) send(seqBytes(seq), payload);
      send(std::string(8, '\xff'), std::string());
    } catch (const zmq::error_t&) {
      // a peer gone mid-answer: nothing to do
    }
  }
}

void KvPublisher::dropNext(uint64_t n) { drop_next_ += n; }

void KvPublisher::restart() {
  std::lock_guard<std::mutex> g(buf_mu_);
  seq_ = 0;
  drain_.clear();
  buffer_.clear();
  engine_hash_.clear();
  pending_.clear();
}

Result<uint16_t> KvPublisher::bind(const std::string& host, uint16_t port) {
  try {
    auto s = std::make_unique<zmq::socket_t>(*ctx_, zmq::socket_type::pub);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::ipv6, 1);
    s->set(zmq::sockopt::sndhwm, 100000);  // vLLM's default hwm
    s->bind(tcpAddress(host, port));
    std::string ep = s->get(zmq::sockopt::last_endpoint);
    port_ = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
    pub_ = std::move(s);
    return port_;
  } catch (const zmq::error_t& e) {
    return fail(503, "kv-events",
                "cannot bind the KV-event publisher on " + host + ":" + std::to_string(port) +
                    ": " + e.what());
  }
}

void KvPublisher::stored(const std::vector<uint32_t>& prompt, const std::vector<uint64_t>& keys,
                         size_t first, size_t count) {
  if (count == 0) return;
  std::vector<uint32_t> head(prompt.begin(),
                             prompt.begin() + static_cast<long>((first + count) * block_size_));
  if (cfg_.trtllm) {  // one stored event for the new blocks, keys chained from the root
    std::vector<uint64_t> all;
    uint64_t parent = 0;
    for (size_t i = 0; i < first + count; ++i) {
      parent = engines::trtllmBlockKey(head.data() + i * block_size_, block_size_, parent);
      all.push_back(parent);
    }
    std::vector<uint64_t> mine(all.begin() + static_cast<long>(first), all.end());
    for (size_t i = first; i < first + count; ++i) engine_hash_[keys[i]] = all[i];
    std::vector<uint32_t> toks(head.begin() + static_cast<long>(first * block_size_), head.end());
    queueDrain(engines::trtllmStoredJson(seq_++, first > 0 ? all[first - 1] : 0, mine, toks,
                                         static_cast<uint32_t>(block_size_)));
    return;
  }
  if (cfg_.sglang) {  // one event per page, SGLang's page chain from the first page
    auto pages = engines::sglangPageHashes("", head, static_cast<uint32_t>(block_size_));
    for (size_t i = first; i < first + count && i < pages.size(); ++i) {
      engines::VllmEventOut e;
      e.kind = engines::VllmEventOut::Kind::kStored;
      e.block_size = static_cast<uint32_t>(block_size_);
      if (i > 0) e.parent = static_cast<uint64_t>(pages[i - 1].event_hash);
      e.block_hashes = {static_cast<uint64_t>(pages[i].event_hash)};
      e.token_ids.assign(head.begin() + static_cast<long>(i * block_size_),
                         head.begin() + static_cast<long>((i + 1) * block_size_));
      engine_hash_[keys[i]] = static_cast<uint64_t>(pages[i].event_hash);
      pending_.push_back(std::move(e));
    }
    return;
  }
  // vLLM's hashes of the prompt's blocks up to the last stored one (a chain from block 0).
  auto hashes =
      engines::vllmBlockHashes(cfg_.algo, none_hash_, head, static_cast<uint32_t>(block_size_), {});
  engines::VllmEventOut e;
  e.kind = engines::VllmEventOut::Kind::kStored;
  e.block_size = static_cast<uint32_t>(block_size_);
  if (first > 0) e.parent = hashes[first - 1].event_hash;
  for (size_t i = first; i < first + count && i < hashes.size(); ++i) {
    e.block_hashes.push_back(hashes[i].event_hash);
    engine_hash_[keys[i]] = hashes[i].event_hash;
  }
  e.token_ids.assign(head.begin() + static_cast<long>(first * block_size_), head.end());
  pending_.push_back(std::move(e));
}

void KvPublisher::evicted(uint64_t key) {
  auto it = engine_hash_.find(key);
  if (it == engine_hash_.end()) return;
  if (cfg_.trtllm) {
    queueDrain(engines::trtllmRemovedJson(seq_++, {it->second}));
    engine_hash_.erase(it);
    return;
  }
  // Consecutive evictions go into one BlockRemoved.
  if (pending_.empty() || pending_.back().kind != engines::VllmEventOut::Kind::kRemoved) {
    engines::VllmEventOut e;
    e.kind = engines::VllmEventOut::Kind::kRemoved;
    pending_.push_back(std::move(e));
  }
  pending_.back().block_hashes.push_back(it->second);
  engine_hash_.erase(it);
}

void KvPublisher::cleared() {
  if (cfg_.trtllm) {  // TensorRT-LLM has no clear event: the blocks are removed
    std::vector<uint64_t> all;
    for (auto& [k, h] : engine_hash_) all.push_back(h);
    engine_hash_.clear();
    if (!all.empty()) queueDrain(engines::trtllmRemovedJson(seq_++, all));
    return;
  }
  engine_hash_.clear();
  pending_.clear();  // removals collected for the emptied cache say nothing more
  engines::VllmEventOut e;
  e.kind = engines::VllmEventOut::Kind::kCleared;
  pending_.push_back(std::move(e));
}

void KvPublisher::queueDrain(std::string event) {
  drain_.push_back(std::move(event));
  while (drain_.size() > cfg_.replay_buffer) drain_.pop_front();
}

std::string KvPublisher::drain() {
  std::string out = "[";
  for (size_t i = 0; i < drain_.size(); ++i) {
    if (i) out.push_back(',');
    out += drain_[i];
  }
  out.push_back(']');
  drain_.clear();
  return out;
}

void KvPublisher::flush() {
  if (pending_.empty() || !pub_) return;
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload;
  if (cfg_.sglang) {
    payload = engines::encodeSglangBatch(ts, pending_, dp_rank_);
  } else {
    payload = engines::encodeVllmBatch(ts, pending_, dp_rank_, cfg_.encoding);
  }
  pending_.clear();
  const std::string seq = seqBytes(seq_);
  if (router_) {
    std::lock_guard<std::mutex> g(buf_mu_);
    buffer_.emplace_back(seq_, payload);
    while (buffer_.size() > cfg_.replay_buffer) buffer_.pop_front();
  }
  ++seq_;
  if (drop_next_ > 0) {  // fault: lost on the live stream (still replayable)
    --drop_next_;
    return;
  }
  // Non-blocking: beyond the high-water mark ZMQ drops the message (a gap for the subscriber).
  pub_->send(zmq::buffer(cfg_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub_->send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub_->send(zmq::buffer(payload), zmq::send_flags::dontwait);
}

}  // namespace kvgate::sim
