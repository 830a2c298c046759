#include "engines/vllm_event_encoder.h"

#include "engines/msgpack_writer.h"

namespace kvgate::engines {

namespace {

void optStr(MsgpackWriter& w, const std::optional<std::string>& s) {
  if (s)
    w.str(*s);
  else
    w.nil();
}

void stored(MsgpackWriter& w, const VllmEventOut& e, VllmEventEncoding enc) {
  const bool map = enc == VllmEventEncoding::kMap;
  // Map: type + 7 fields always written (no default) + the defaulted ones that are set.
  // extra_keys is written as one nil per block (vLLM's text-only requests), so it is never
  // omitted; sliding_window (None) always is.
  uint32_t fields = 1 + 8 + (e.group_idx ? 1 : 0) + (e.spec_kind ? 1 : 0);
  if (map) {
    w.map(fields);
    w.str("type");
  } else {
    w.array(12);
  }
  w.str("BlockStored");
  if (map) w.str("block_hashes");
  w.array(static_cast<uint32_t>(e.block_hashes.size()));
  for (uint64_t h : e.block_hashes) w.uint(h);
  if (map) w.str("parent_block_hash");
  if (e.parent)
    w.uint(*e.parent);
  else
    w.nil();
  if (map) w.str("token_ids");
  w.array(static_cast<uint32_t>(e.token_ids.size()));
  for (uint32_t t : e.token_ids) w.uint(t);
  if (map) w.str("block_size");
  w.uint(e.block_size);
  if (map) w.str("lora_id");
  w.nil();
  if (map) w.str("medium");
  w.str(e.medium);
  if (map) w.str("lora_name");
  optStr(w, e.lora_name);
  if (map) w.str("extra_keys");
  w.array(static_cast<uint32_t>(e.block_hashes.size()));
  for (size_t i = 0; i < e.block_hashes.size(); ++i) w.nil();
  if (map) {
    if (e.group_idx) {
      w.str("group_idx");
      w.sint(*e.group_idx);
    }
    if (e.spec_kind) {
      w.str("kv_cache_spec_kind");
      w.str(*e.spec_kind);
    }
  } else {
    if (e.group_idx)
      w.sint(*e.group_idx);
    else
      w.nil();
    optStr(w, e.spec_kind);
    w.nil();  // kv_cache_spec_sliding_window
  }
}

void removed(MsgpackWriter& w, const VllmEventOut& e, VllmEventEncoding enc) {
  if (enc == VllmEventEncoding::kMap) {
    w.map(3 + (e.group_idx ? 1 : 0));
    w.str("type");
    w.str("BlockRemoved");
    w.str("block_hashes");
  } else {
    w.array(4);
    w.str("BlockRemoved");
  }
  w.array(static_cast<uint32_t>(e.block_hashes.size()));
  for (uint64_t h : e.block_hashes) w.uint(h);
  if (enc == VllmEventEncoding::kMap) w.str("medium");
  w.str(e.medium);
  if (enc == VllmEventEncoding::kMap) {
    if (e.group_idx) {
      w.str("group_idx");
      w.sint(*e.group_idx);
    }
  } else if (e.group_idx) {
    w.sint(*e.group_idx);
  } else {
    w.nil();
  }
}

}  // namespace

std::string encodeVllmBatch(double ts, const std::vector<VllmEventOut>& events, int64_t dp_rank,
                            VllmEventEncoding enc) {
  MsgpackWriter w;
  w.array(3);
  w.f64(ts);
  w.array(static_cast<uint32_t>(events.size()));
  for (const auto& e : events) {
    switch (e.kind) {
      case VllmEventOut::Kind::kStored:
        stored(w, e, enc);
        break;
      case VllmEventOut::Kind::kRemoved:
        removed(w, e, enc);
        break;
      case VllmEventOut::Kind::kCleared:
        if (enc == VllmEventEncoding::kMap) {
          w.map(1);
          w.str("type");
        } else {
          w.array(1);
        }
        w.str("AllBlocksCleared");
        break;
    }
  }
  w.sint(dp_rank);
  return std::move(w.out());
}

}  // namespace kvgate::engines
