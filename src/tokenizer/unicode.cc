// Expands the generated run-length table into a two-stage lookup (256-code-point blocks,
// identical blocks shared) once, at first use.
#include "tokenizer/unicode.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace kvgate::tok {
namespace {

struct Run {
  uint32_t first, last;
  uint16_t flags;
};

const Run kRuns[] = {
#include "tokenizer/unicode_classes.inc"
};

constexpr uint32_t kBlockBits = 8;
constexpr uint32_t kBlocks = 0x110000 >> kBlockBits;

struct Tables {
  uint16_t stage1[kBlocks];
  std::vector<uint16_t> stage2;  // blocks of 256 flags
  Tables() {
    std::vector<uint16_t> flat(0x110000, 0);
    for (const Run& r : kRuns)
      for (uint32_t c = r.first; c <= r.last && c < 0x110000; ++c) flat[c] = r.flags;
    std::map<std::vector<uint16_t>, uint16_t> seen;
    for (uint32_t b = 0; b < kBlocks; ++b) {
      std::vector<uint16_t> block(flat.begin() + (b << kBlockBits),
                                  flat.begin() + ((b + 1) << kBlockBits));
      auto [it, fresh] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
      if (fresh) stage2.insert(stage2.end(), block.begin(), block.end());
      stage1[b] = it->second;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint16_t cpFlags(uint32_t c) {
  if (c >= 0x110000) return 0;
  const Tables& t = tables();
  return t.stage2[(static_cast<uint32_t>(t.stage1[c >> kBlockBits]) << kBlockBits) |
                  (c & ((1u << kBlockBits) - 1))];
}

}  // namespace kvgate::tok
