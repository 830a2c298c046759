#include "kv/fingerprint.h"

#include <xxhash.h>

#include <cstring>
#include <string>

namespace kvgate::kv {

namespace {
void putLe64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
}  // namespace

uint64_t contentHash(const uint32_t* tokens, size_t n) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token ids are hashed as LE u32");
  return XXH3_64bits_withSeed(tokens, n * sizeof(uint32_t), kFingerprintSeed);
}

uint64_t chainHash(uint64_t parent, uint64_t content) {
  unsigned char b[16];
  putLe64(b, parent);
  putLe64(b + 8, content);
  return XXH3_64bits_withSeed(b, sizeof b, kFingerprintSeed);
}

std::optional<uint64_t> partitionRoot(std::string_view lora, std::string_view cache_salt) {
  if (lora.empty() && cache_salt.empty()) return std::nullopt;
  // Length-prefixed fields: ("a\0b", "") and ("a", "b\0") must differ.
  std::string m = "kvgate-partition";
  for (std::string_view f : {lora, cache_salt}) {
    const uint64_t n = f.size();
    m.append(reinterpret_cast<const char*>(&n), sizeof n);
    m.append(f);
  }
  return XXH3_64bits_withSeed(m.data(), m.size(), kFingerprintSeed);
}

size_t prefixChain(const uint32_t* tokens, size_t n, uint32_t block_size,
                   std::optional<uint64_t> parent, uint64_t* out, size_t max_out) {
  if (block_size == 0) return 0;
  size_t blocks = n / block_size;
  if (blocks > max_out) blocks = max_out;
  for (size_t i = 0; i < blocks; ++i) {
    uint64_t c = contentHash(tokens + i * block_size, block_size);
    uint64_t p = (i == 0 && !parent) ? c : chainHash(i == 0 ? *parent : out[i - 1], c);
    out[i] = p;
  }
  return blocks;
}

}  // namespace kvgate::kv
