#include "engines/vllm_hash.h"

#include <openssl/sha.h>
#include <xxhash.h>

namespace kvgate::engines {

namespace {

// RFC 8949 shortest-form heads (canonical CBOR as cbor2 writes it).
void head(std::string& out, uint8_t major, uint64_t v) {
  const uint8_t m = static_cast<uint8_t>(major << 5);
  if (v < 24) {
    out.push_back(static_cast<char>(m | v));
    return;
  }
  int n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffULL ? 4 : 8;
  out.push_back(static_cast<char>(m | (n == 1 ? 24 : n == 2 ? 25 : n == 4 ? 26 : 27)));
  for (int i = n - 1; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void cborInt(std::string& out, int64_t v) {
  if (v >= 0)
    head(out, 0, static_cast<uint64_t>(v));
  else
    head(out, 1, static_cast<uint64_t>(-(v + 1)));
}
void cborText(std::string& out, std::string_view s) {
  head(out, 3, s.size());
  out.append(s);
}

}  // namespace

std::optional<VllmHashAlgo> parseVllmHashAlgo(std::string_view s) {
  if (s == "sha256_cbor") return VllmHashAlgo::kSha256Cbor;
  if (s == "xxhash_cbor") return VllmHashAlgo::kXxhashCbor;
  return std::nullopt;
}

std::string vllmDigest(VllmHashAlgo algo, std::string_view bytes) {
  if (algo == VllmHashAlgo::kSha256Cbor) {
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d);
    return std::string(reinterpret_cast<const char*>(d), sizeof d);
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(bytes.data(), bytes.size()));
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

std::string vllmNoneHash(VllmHashAlgo algo, std::string_view seed) {
  std::string cbor;
  cborText(cbor, seed);
  return vllmDigest(algo, cbor);
}

std::vector<VllmBlockHash> vllmBlockHashes(VllmHashAlgo algo, std::string_view parent,
                                           const std::vector<uint32_t>& tokens, uint32_t block_size,
                                           const VllmBlockRequest& req) {
  std::vector<VllmBlockHash> out;
  if (block_size == 0) return out;
  std::string prev(parent);
  const size_t blocks = tokens.size() / block_size;
  for (size_t b = 0; b < blocks; ++b) {
    const int64_t start = static_cast<int64_t>(b * block_size);
    const int64_t end = start + block_size;
    // Extra keys in vLLM's order: LoRA name, overlapping multimodal items, salt (block 0).
    std::string extras;
    size_t n_extra = 0;
    if (!req.lora_name.empty()) {
      cborText(extras, req.lora_name);
      ++n_extra;
    }
    for (const MmItem& m : req.mm) {
      if (m.offset < end && m.offset + m.length > start) {
        head(extras, 4, 2);
        cborText(extras, m.identifier);
        cborInt(extras, m.offset - start);
        ++n_extra;
      }
    }
    if (b == 0 && !req.cache_salt.empty()) {
      cborText(extras, req.cache_salt);
      ++n_extra;
    }
    VllmBlockHash h;
    std::string& p = h.payload;
    head(p, 4, 3);
    head(p, 2, prev.size());
    p.append(prev);
    head(p, 4, block_size);
    for (size_t i = 0; i < block_size; ++i) head(p, 0, tokens[b * block_size + i]);
    if (n_extra == 0) {
      p.push_back(static_cast<char>(0xf6));  // None
    } else {
      head(p, 4, n_extra);
      p.append(extras);
    }
    h.digest = vllmDigest(algo, p);
    for (size_t i = h.digest.size() - 8; i < h.digest.size(); ++i)
      h.event_hash = (h.event_hash << 8) | static_cast<uint8_t>(h.digest[i]);
    prev = h.digest;
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace kvgate::engines
