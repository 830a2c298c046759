#include "engines/vllm_events.h"

#include <xxhash.h>

#include <algorithm>

#include "engines/msgpack.h"

namespace kvgate::engines {

uint64_t foldHashBytes(std::string_view bytes) {
  const size_t n = bytes.size() < 8 ? bytes.size() : 8;
  uint64_t v = 0;
  for (size_t i = bytes.size() - n; i < bytes.size(); ++i)
    v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  return v;
}

namespace {

enum class Field : uint8_t {
  kHashes,
  kParent,
  kTokens,
  kBlockSize,
  kLoraId,
  kMedium,
  kLoraName,
  kExtraKeys,
  kGroupIdx,
  kSpecKind,
  kUnknown,
};

// Positional field order after the tag (engines.md §1.5; fields are only ever appended).
constexpr Field kStoredOrder[] = {
    Field::kHashes, Field::kParent,   Field::kTokens,    Field::kBlockSize, Field::kLoraId,
    Field::kMedium, Field::kLoraName, Field::kExtraKeys, Field::kGroupIdx,  Field::kSpecKind};
constexpr Field kRemovedOrder[] = {Field::kHashes, Field::kMedium, Field::kGroupIdx};

Field fieldByName(std::string_view k) {
  if (k == "block_hashes") return Field::kHashes;
  if (k == "parent_block_hash") return Field::kParent;
  if (k == "token_ids") return Field::kTokens;
  if (k == "block_size") return Field::kBlockSize;
  if (k == "lora_id") return Field::kLoraId;
  if (k == "medium") return Field::kMedium;
  if (k == "lora_name") return Field::kLoraName;
  if (k == "extra_keys") return Field::kExtraKeys;
  if (k == "group_idx") return Field::kGroupIdx;
  if (k == "kv_cache_spec_kind") return Field::kSpecKind;
  return Field::kUnknown;
}

enum class Tag : uint8_t { kStored, kRemoved, kCleared, kUnknown };

Tag tagByName(std::string_view t) {
  if (t == "BlockStored") return Tag::kStored;
  if (t == "BlockRemoved") return Tag::kRemoved;
  if (t == "AllBlocksCleared") return Tag::kCleared;
  return Tag::kUnknown;
}

class Decoder {
 public:
  Decoder(std::string_view payload, KvEventBatch& out, std::string& error)
      : r_(payload.data(), payload.size()), out_(out), error_(error) {}

  bool run() {
    out_.clear();
    if (!(r_.peek() == MsgpackReader::Type::kArray ? envelopeArray() : envelopeMap())) return false;
    if (!r_.atEnd()) return bad("bytes after the batch");
    return true;
  }

 private:
  bool bad(const std::string& what) {
    if (error_.empty()) error_ = what;
    return r_.fail();
  }

  bool envelopeArray() {
    uint32_t n;
    if (!r_.readArrayHeader(n)) return bad("batch is not an array or map");
    if (n < 2) return bad("batch array has fewer than 2 elements");
    if (!r_.readFloat(out_.ts)) return bad("batch ts is not a number");
    if (!events()) return false;
    if (n >= 3 && !optInt(out_.dp_rank, -1)) return bad("data_parallel_rank is not an integer");
    for (uint32_t i = 3; i < n; ++i)
      if (!r_.skip()) return bad("truncated batch");
    return true;
  }

  bool envelopeMap() {
    uint32_t n;
    if (!r_.readMapHeader(n)) return bad("batch is not an array or map");
    bool got_events = false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view k;
      if (!r_.readStr(k)) return bad("batch map key is not a string");
      if (k == "ts") {
        if (!r_.readFloat(out_.ts)) return bad("batch ts is not a number");
      } else if (k == "events") {
        if (got_events) return bad("batch map has two \"events\"");
        if (!events()) return false;
        got_events = true;
      } else if (k == "data_parallel_rank") {
        if (!optInt(out_.dp_rank, -1)) return bad("data_parallel_rank is not an integer");
      } else if (!r_.skip()) {
        return bad("truncated batch");
      }
    }
    return got_events || bad("batch map has no events");
  }

  bool events() {
    uint32_t n;
    if (!r_.readArrayHeader(n)) return bad("events is not an array");
    // No reserve from the declared count: an element may take one byte on the wire and a
    // KvEvent hundreds in memory. Events grow as they decode, at most kMaxBatchEvents of them
    // (one engine step's batch holds a few per scheduled request): a hostile batch of minimal
    // events cannot cost hundreds of times its wire size.
    if (n > kMaxBatchEvents) return bad("more than 65536 events in one batch");
    for (uint32_t i = 0; i < n; ++i)
      if (!event()) return false;
    return true;
  }

  bool event() {
    KvEvent e;
    Tag tag;
    extra_keys_ = {};
    lora_id_set_ = false;
    seen_hashes_ = false;
    if (r_.peek() == MsgpackReader::Type::kArray) {
      uint32_t m;
      std::string_view t;
      if (!r_.readArrayHeader(m) || m == 0 || !r_.readStr(t))
        return bad("event array does not start with a tag");
      tag = tagByName(t);
      const Field* order = tag == Tag::kStored    ? kStoredOrder
                           : tag == Tag::kRemoved ? kRemovedOrder
                                                  : nullptr;
      const size_t order_n = tag == Tag::kStored    ? std::size(kStoredOrder)
                             : tag == Tag::kRemoved ? std::size(kRemovedOrder)
                                                    : 0;
      for (uint32_t i = 1; i < m; ++i) {
        Field f = i - 1 < order_n ? order[i - 1] : Field::kUnknown;
        if (!field(f, e)) return false;
      }
    } else if (r_.peek() == MsgpackReader::Type::kMap) {
      uint32_t m;
      if (!r_.readMapHeader(m)) return bad("truncated event map");
      bool has_tag = false;
      tag = Tag::kUnknown;
      for (uint32_t i = 0; i < m; ++i) {
        std::string_view k;
        if (!r_.readStr(k)) return bad("event map key is not a string");
        if (k == "type") {
          std::string_view t;
          if (!r_.readStr(t)) return bad("event type is not a string");
          tag = tagByName(t);
          has_tag = true;
        } else if (has_tag && tag == Tag::kUnknown) {
          // An event type we do not know (msgspec writes "type" first): its fields may reuse our
          // names with other types, so they are skipped, not decoded.
          if (!r_.skip()) return bad("truncated event field");
        } else if (!field(fieldByName(k), e)) {
          return false;
        }
      }
      if (!has_tag) return bad("event map has no \"type\"");
    } else {
      return bad("event is not an array or map");
    }
    switch (tag) {
      case Tag::kUnknown:
        ++out_.unknown_events;
        return true;
      case Tag::kCleared:
        e.kind = KvEvent::Kind::kCleared;
        break;
      case Tag::kRemoved:
        e.kind = KvEvent::Kind::kRemoved;
        if (!seen_hashes_) return bad("BlockRemoved without block_hashes");
        break;
      case Tag::kStored:
        e.kind = KvEvent::Kind::kStored;
        if (!seen_hashes_) return bad("BlockStored without block_hashes");
        if (!extras(e)) return false;
        loraFromId(e);
        break;
    }
    out_.events.push_back(std::move(e));
    return true;
  }

  // One field value; unknown fields are skipped whatever their type.
  bool field(Field f, KvEvent& e) {
    switch (f) {
      case Field::kHashes:
        seen_hashes_ = true;
        return hashList(e.block_hashes);
      case Field::kParent:
        if (r_.readNil()) return true;
        e.has_parent = true;
        return hash(e.parent);
      case Field::kTokens:
        return tokens(e.token_ids);
      case Field::kBlockSize: {
        uint64_t v;
        if (!r_.readUint(v) || v == 0 || v > (1u << 20)) return bad("block_size is not 1..2^20");
        e.block_size = static_cast<uint32_t>(v);
        return true;
      }
      case Field::kLoraId:
        if (r_.readNil()) return true;
        lora_id_set_ = true;
        return r_.readInt(lora_id_) || bad("lora_id is not an integer");
      case Field::kMedium:
        return optStr(e.medium, "medium");
      case Field::kLoraName:
        return optStr(e.lora_name, "lora_name");
      case Field::kExtraKeys: {
        const uint8_t* start = r_.position();
        if (!r_.skip()) return bad("truncated extra_keys");
        extra_keys_ = std::string_view(reinterpret_cast<const char*>(start),
                                       static_cast<size_t>(r_.position() - start));
        return true;
      }
      case Field::kGroupIdx:
        return optInt(e.group_idx, 0) || bad("group_idx is not an integer");
      case Field::kSpecKind:
        return optStr(e.spec_kind, "kv_cache_spec_kind");
      case Field::kUnknown:
        return r_.skip() || bad("truncated event field");
    }
    return false;
  }

  // An engine hash: an integer (unsigned, or signed as SGLang publishes) or the digest bytes.
  bool hash(uint64_t& h) {
    const MsgpackReader::Type t = r_.peek();
    if (t == MsgpackReader::Type::kBin) {
      std::string_view b;
      if (!r_.readBin(b)) return bad("truncated hash bytes");
      h = foldHashBytes(b);
      return true;
    }
    if (t != MsgpackReader::Type::kInt) return bad("block hash is not an integer or bytes");
    const uint8_t tag = *r_.position();
    if (tag >= 0xe0 || (tag >= 0xd0 && tag <= 0xd3)) {
      int64_t s;
      if (!r_.readInt(s)) return bad("truncated block hash");
      h = static_cast<uint64_t>(s);
      return true;
    }
    return r_.readUint(h) || bad("truncated block hash");
  }

  bool hashList(std::vector<uint64_t>& out) {
    uint32_t n;
    if (!r_.readArrayHeader(n)) return bad("block_hashes is not an array");
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i)
      if (!hash(out[i])) return false;
    return true;
  }

  bool tokens(std::vector<uint32_t>& out) {
    if (r_.readNil()) return true;
    uint32_t n;
    if (!r_.readArrayHeader(n)) return bad("token_ids is not an array");
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t v;
      if (!r_.readUint(v) || v > UINT32_MAX)
        return bad("token id is not a 32-bit unsigned integer");
      out[i] = static_cast<uint32_t>(v);
    }
    return true;
  }

  bool optStr(std::string& out, const char* what) {
    if (r_.readNil()) return true;
    std::string_view s;
    if (!r_.readStr(s)) return bad(std::string(what) + " is not a string");
    out.assign(s);
    return true;
  }

  bool optInt(int64_t& out, int64_t dflt) {
    if (r_.readNil()) {
      out = dflt;
      return true;
    }
    return r_.readInt(out);
  }

  // extra_keys: per block nil or a tuple of LoRA name, multimodal items (pairs, or bare ids in old
  // releases), cache salt (block 0 of a request only) and a prompt-embeds hash (bytes). The LoRA
  // name and block 0's salt go into the event's partition; anything else is content the token
  // ids do not show, mixed into that block's content_mix so it never matches a text block.
  bool extras(KvEvent& e) {
    if (extra_keys_.empty()) return true;
    MsgpackReader x(extra_keys_.data(), extra_keys_.size());
    if (x.readNil()) return true;
    uint32_t nb;
    if (!x.readArrayHeader(nb)) return bad("extra_keys is not an array");
    e.extras.resize(std::min<size_t>(nb, e.block_hashes.size()));
    for (uint32_t b = 0; b < nb; ++b) {
      if (x.readNil()) continue;
      uint32_t m;
      if (!x.readArrayHeader(m)) return bad("extra_keys entry is not an array");
      bool first_string = true;
      uint64_t mix = 0;
      for (uint32_t i = 0; i < m; ++i) {
        const uint8_t* start = x.position();
        if (x.peek() == MsgpackReader::Type::kStr) {
          std::string_view s;
          x.readStr(s);
          const bool is_lora =
              e.lora_name.empty() ? (lora_id_set_ && first_string) : s == e.lora_name;
          first_string = false;
          if (is_lora) {
            if (e.lora_name.empty()) e.lora_name.assign(s);
            continue;
          }
          if (b == 0 && !e.has_parent) {  // a request's block 0: the cache salt
            e.cache_salt.assign(s);
            continue;
          }
        } else if (!x.skip()) {
          return bad("truncated extra_keys");
        }
        mix = XXH3_64bits_withSeed(start, static_cast<size_t>(x.position() - start), mix ^ 1337);
      }
      if (b < e.extras.size()) e.extras[b].content_mix = mix == 0 ? 0 : (mix | 1);
    }
    return x.atEnd() || bad("bytes after extra_keys");
  }

  // A LoRA adapter known only by its integer id (SGLang; vLLM before lora_name): a partition of
  // its own, so its blocks never match base-model prompts (nor, for now, any request).
  void loraFromId(KvEvent& e) {
    if (lora_id_set_ && e.lora_name.empty()) e.lora_name = "#lora_id:" + std::to_string(lora_id_);
  }

  MsgpackReader r_;
  KvEventBatch& out_;
  std::string& error_;
  std::string_view extra_keys_;  // raw bytes of the current event's extra_keys
  bool lora_id_set_ = false;
  int64_t lora_id_ = 0;
  bool seen_hashes_ = false;
};

}  // namespace

bool decodeVllmBatch(std::string_view payload, KvEventBatch& out, std::string& error) {
  error.clear();
  return Decoder(payload, out, error).run();
}

}  // namespace kvgate::engines
