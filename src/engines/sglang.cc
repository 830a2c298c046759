// SGLang page hashes and event batches: see sglang.h.
#include "engines/sglang.h"

#include <openssl/sha.h>

#include "engines/msgpack_writer.h"

namespace kvgate::engines {

std::vector<SglangPageHash> sglangPageHashes(std::string_view parent,
                                             const std::vector<uint32_t>& tokens,
                                             uint32_t page_size) {
  std::vector<SglangPageHash> out;
  if (page_size == 0) return out;
  std::string prev(parent);
  const size_t pages = tokens.size() / page_size;
  std::string buf;
  for (size_t p = 0; p < pages; ++p) {
    buf.assign(prev);
    for (size_t i = p * page_size; i < (p + 1) * page_size; ++i) {
      const uint32_t t = tokens[i];
      for (int b = 0; b < 4; ++b) buf.push_back(static_cast<char>((t >> (8 * b)) & 0xff));
    }
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(buf.data()), buf.size(), d);
    SglangPageHash h;
    h.digest.assign(reinterpret_cast<const char*>(d), sizeof d);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
    h.event_hash = static_cast<int64_t>(v);
    prev = h.digest;
    out.push_back(std::move(h));
  }
  return out;
}

std::string encodeSglangBatch(double ts, const std::vector<VllmEventOut>& events,
                              int64_t attn_dp_rank) {
  auto sint = [](uint64_t h) { return static_cast<int64_t>(h); };
  MsgpackWriter w;
  w.array(3);
  w.f64(ts);
  w.array(static_cast<uint32_t>(events.size()));
  for (const auto& e : events) {
    switch (e.kind) {
      case VllmEventOut::Kind::kStored:
        w.array(7);
        w.str("BlockStored");
        w.array(static_cast<uint32_t>(e.block_hashes.size()));
        for (uint64_t h : e.block_hashes) w.sint(sint(h));
        if (e.parent)
          w.sint(sint(*e.parent));
        else
          w.nil();
        w.array(static_cast<uint32_t>(e.token_ids.size()));
        for (uint32_t t : e.token_ids) w.uint(t);
        w.uint(e.block_size);
        w.nil();  // lora_id
        w.str(e.medium);
        break;
      case VllmEventOut::Kind::kRemoved:
        w.array(3);
        w.str("BlockRemoved");
        w.array(static_cast<uint32_t>(e.block_hashes.size()));
        for (uint64_t h : e.block_hashes) w.sint(sint(h));
        w.str(e.medium);
        break;
      case VllmEventOut::Kind::kCleared:
        w.array(1);
        w.str("AllBlocksCleared");
        break;
    }
  }
  w.sint(attn_dp_rank);
  return std::move(w.out());
}

}  // namespace kvgate::engines
