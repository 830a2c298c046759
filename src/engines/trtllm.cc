// TensorRT-LLM drain events and block keys: see trtllm.h.
#include "engines/trtllm.h"

#include <nlohmann/json.hpp>

#include "common/json_depth.h"

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
using J = nlohmann::json;

bool u64(const J& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;  // negative, a float, or not a number
}
}  // namespace

namespace {
bool decodeInto(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err);
}  // namespace

bool decodeTrtllmEvents(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err) {
  out.clear();
  if (decodeInto(json, out, err)) return true;
  out.clear();  // rejected whole
  return false;
}

namespace {
bool decodeInto(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err) {
  if (json.size() > kMaxTrtllmAnswer) {
    err = "answer larger than 16 MiB";
    return false;
  }
  if (!jsonDepthWithin(json)) {
    err = "JSON nested too deeply";
    return false;
  }
  J doc = J::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) {
    err = "not a JSON array";
    return false;
  }
  out.reserve(doc.size());
  for (const J& item : doc) {
    TrtllmEvent ev;
    if (!item.is_object() || !item.contains("event_id") || !u64(item["event_id"], ev.event_id) ||
        !item.contains("data") || !item["data"].is_object()) {
      err = "an event without a non-negative integer event_id and a data object";
      return false;
    }
    if (auto r = item.find("attention_dp_rank"); r != item.end() && !r->is_null()) {
      uint64_t rank = 0;
      if (!u64(*r, rank) || rank > 1024) {
        err = "attention_dp_rank must be an integer 0..1024";
        return false;
      }
      ev.rank = static_cast<int64_t>(rank);
    }
    const J& d = item["data"];
    const std::string type = d.contains("type") && d["type"].is_string() ? d["type"].get<std::string>() : "";
    if (type == "stored") {
      ev.relevant = true;
      KvEvent& e = ev.event;
      e.kind = KvEvent::Kind::kStored;
      if (auto p = d.find("parent_hash"); p != d.end() && !p->is_null()) {
        if (!u64(*p, e.parent)) {
          err = "parent_hash must be an unsigned 64-bit integer or null";
          return false;
        }
        e.has_parent = true;
      }
      auto blocks = d.find("blocks");
      if (blocks == d.end() || !blocks->is_array()) {
        err = "a stored event without a blocks array";
        return false;
      }
      uint64_t extra_mix = 0;  // token_extra_id (multimodal): content the token ids do not show
      for (const J& b : *blocks) {
        uint64_t h = 0;
        if (!b.is_object() || !b.contains("block_hash") || !u64(b["block_hash"], h) ||
            !b.contains("tokens") || !b["tokens"].is_array()) {
          err = "a stored block without block_hash and tokens";
          return false;
        }
        const size_t n = b["tokens"].size();
        if (e.block_hashes.empty()) e.block_size = static_cast<uint32_t>(n);
        if (n != e.block_size || n == 0 || n > 1'000'000) {
          err = "stored blocks of different or zero sizes";
          return false;
        }
        for (const J& t : b["tokens"]) {
          uint64_t id = 0;
          if (!t.is_object() || !t.contains("token_id") || !u64(t["token_id"], id) ||
              id > UINT32_MAX) {
            err = "a token without a token_id in 0..2^32-1";
            return false;
          }
          e.token_ids.push_back(static_cast<uint32_t>(id));
          uint64_t extra = 0;
          if (auto x = t.find("token_extra_id"); x != t.end() && !x->is_null()) {
            if (!u64(*x, extra)) {
              err = "token_extra_id must be a non-negative integer";
              return false;
            }
          }
          if (extra != 0) extra_mix = extra_mix * 0x9E3779B97F4A7C15ULL + extra + 1;
        }
        // A block with extra token ids never equals a text block (nor verifies as text).
        e.extras.push_back(BlockExtra{extra_mix});
        extra_mix = 0;
        e.block_hashes.push_back(h);
      }
    } else if (type == "removed") {
      ev.relevant = true;
      KvEvent& e = ev.event;
      e.kind = KvEvent::Kind::kRemoved;
      auto hs = d.find("block_hashes");
      if (hs == d.end() || !hs->is_array()) {
        err = "a removed event without block_hashes";
        return false;
      }
      for (const J& h : *hs) {
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
  J data = {{"type", "stored"}, {"parent_hash", parent ? J(parent) : J(nullptr)}, {"blocks", blocks}};
  return J{{"event_id", event_id}, {"data", data}, {"window_size", 32768}}.dump();
}

std::string trtllmRemovedJson(uint64_t event_id, const std::vector<uint64_t>& keys) {
  return J{{"event_id", event_id},
           {"data", {{"type", "removed"}, {"block_hashes", keys}}},
           {"window_size", 32768}}
      .dump();
}

}  // namespace kvgate::engines
