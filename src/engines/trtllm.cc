// TensorRT-LLM drain events and block keys: see trtllm.h.
#include "engines/trtllm.h"

#include <simdjson.h>

#include <nlohmann/json.hpp>

namespace kvgate::engines {

uint64_t trtllmBlockKey(const uint32_t* tokens, size_t n, uint64_t parent) {
  uint64_t seed = static_cast<uint64_t>(n) ^ (parent * 0xBF58476D1CE4E5B9ULL);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = tokens[i];
    v = ((v >> 16) ^ v) * 0x45D9F3Bu;
    v = ((v >> 16) ^ v) * 0x45D9F3Bu;
    v = (v >> 16) ^ v;
    v += 0x9E3779B9u;
    seed ^= static_cast<uint64_t>(v) + (seed << 6) + (seed >> 2);
  }
  return seed;
}

namespace {
using J = nlohmann::json;  // (the simulator's encoder below)
namespace dom = simdjson::dom;

// An unsigned 64-bit integer, exactly (simdjson reads integers as integers: a float, a negative
// value or one past 2^64-1 is not accepted).
bool u64(dom::element e, uint64_t& out) {
  if (e.type() == dom::element_type::UINT64) return e.get_uint64().get(out) == simdjson::SUCCESS;
  int64_t v = 0;
  if (e.type() == dom::element_type::INT64 && e.get_int64().get(v) == simdjson::SUCCESS && v >= 0) {
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

dom::parser& threadParser() {
  thread_local dom::parser p(kMaxTrtllmAnswer);
  return p;
}

bool decodeInto(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err);
}  // namespace

bool decodeTrtllmEvents(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err) {
  out.clear();
  if (decodeInto(json, out, err)) return true;
  out.clear();  // rejected whole
  return false;
}

namespace {
// simdjson's DOM (a compact tape, validated, depth-limited) rather than a node per value: a 16 MiB
// answer costs tens of MiB, not hundreds.
bool decodeInto(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err) {
  if (json.size() > kMaxTrtllmAnswer) {
    err = "answer larger than 16 MiB";
    return false;
  }
  dom::parser& parser = threadParser();
  struct Shrink {  // the drain thread gives back what a large answer made it allocate
    dom::parser& p;
    ~Shrink() {
      if (p.capacity() > (1u << 20)) {
        auto e = p.allocate(1u << 20, p.max_depth());
        (void)e;
      }
    }
  } shrink{parser};
  dom::element doc;
  simdjson::padded_string copy(json.data(), json.size());
  if (parser.parse(copy).get(doc) != simdjson::SUCCESS || !doc.is_array()) {
    err = "not a JSON array";
    return false;
  }
  for (dom::element item : dom::array(doc)) {
    TrtllmEvent ev;
    dom::object o;
    dom::element id, data;
    if (item.get_object().get(o) || o["event_id"].get(id) || !u64(id, ev.event_id) ||
        o["data"].get(data) || !data.is_object()) {
      err = "an event without a non-negative integer event_id and a data object";
      return false;
    }
    dom::element rank;
    if (!o["attention_dp_rank"].get(rank) && !rank.is_null()) {
      uint64_t r = 0;
      if (!u64(rank, r) || r > 1024) {
        err = "attention_dp_rank must be an integer 0..1024";
        return false;
      }
      ev.rank = static_cast<int64_t>(r);
    }
    dom::object d = data.get_object().value_unsafe();
    std::string_view type;
    if (d["type"].get(type)) type = {};
    if (type == "stored") {
      ev.relevant = true;
      KvEvent& e = ev.event;
      e.kind = KvEvent::Kind::kStored;
      dom::element p;
      if (!d["parent_hash"].get(p) && !p.is_null()) {
        if (!u64(p, e.parent)) {
          err = "parent_hash must be an unsigned 64-bit integer or null";
          return false;
        }
        e.has_parent = true;
      }
      dom::array blocks;
      if (d["blocks"].get(blocks)) {
        err = "a stored event without a blocks array";
        return false;
      }
      for (dom::element b : blocks) {
        uint64_t h = 0;
        dom::object bo;
        dom::element bh;
        dom::array toks;
        if (b.get_object().get(bo) || bo["block_hash"].get(bh) || !u64(bh, h) ||
            bo["tokens"].get(toks)) {
          err = "a stored block without block_hash and tokens";
          return false;
        }
        const size_t n = toks.size();
        if (e.block_hashes.empty()) e.block_size = static_cast<uint32_t>(n);
        if (n != e.block_size || n == 0 || n > 1'000'000) {
          err = "stored blocks of different or zero sizes";
          return false;
        }
        uint64_t extra_mix = 0;  // token_extra_id (multimodal): content the token ids do not show
        for (dom::element t : toks) {
          dom::object to;
          dom::element tid;
          uint64_t tv = 0;
          if (t.get_object().get(to) || to["token_id"].get(tid) || !u64(tid, tv) ||
              tv > UINT32_MAX) {
            err = "a token without a token_id in 0..2^32-1";
            return false;
          }
          e.token_ids.push_back(static_cast<uint32_t>(tv));
          dom::element x;
          uint64_t extra = 0;
          if (!to["token_extra_id"].get(x) && !x.is_null() && !u64(x, extra)) {
            err = "token_extra_id must be a non-negative integer";
            return false;
          }
          if (extra != 0) extra_mix = extra_mix * 0x9E3779B97F4A7C15ULL + extra + 1;
        }
        // A block with extra token ids never equals a text block (nor verifies as text).
        e.extras.push_back(BlockExtra{extra_mix});
        e.block_hashes.push_back(h);
      }
    } else if (type == "removed") {
      ev.relevant = true;
      KvEvent& e = ev.event;
      e.kind = KvEvent::Kind::kRemoved;
      dom::array hs;
      if (d["block_hashes"].get(hs)) {
        err = "a removed event without block_hashes";
        return false;
      }
      for (dom::element h : hs) {
        uint64_t v = 0;
        if (!u64(h, v)) {
          err = "block_hashes must be unsigned 64-bit integers";
          return false;
        }
        e.block_hashes.push_back(v);
      }
    }
    out.push_back(std::move(ev));
  }
  return true;
}
}  // namespace

std::string trtllmStoredJson(uint64_t event_id, uint64_t parent, const std::vector<uint64_t>& keys,
                             const std::vector<uint32_t>& tokens, uint32_t tokens_per_block) {
  J blocks = J::array();
  for (size_t i = 0; i < keys.size(); ++i) {
    J toks = J::array();
    for (size_t k = i * tokens_per_block; k < (i + 1) * tokens_per_block && k < tokens.size(); ++k)
      toks.push_back({{"type", "unique_token"}, {"token_id", tokens[k]}, {"token_extra_id", 0}});
    blocks.push_back({{"type", "stored_block"},
                      {"block_hash", keys[i]},
                      {"tokens", std::move(toks)},
                      {"cache_level", 0},
                      {"priority", 35}});
  }
  J data = {
      {"type", "stored"}, {"parent_hash", parent ? J(parent) : J(nullptr)}, {"blocks", blocks}};
  return J{{"event_id", event_id}, {"data", data}, {"window_size", 32768}}.dump();
}

std::string trtllmRemovedJson(uint64_t event_id, const std::vector<uint64_t>& keys) {
  return J{{"event_id", event_id},
           {"data", {{"type", "removed"}, {"block_hashes", keys}}},
           {"window_size", 32768}}
      .dump();
}

}  // namespace kvgate::engines
