// Fuzz target: TensorRT-LLM's KV-event drain answers (src/engines/trtllm.cc), hostile JSON from a
// worker. Properties: no crash; deterministic; an answer is accepted whole or rejected whole (no
// events on failure, an error message); every accepted stored event fits block_hashes x
// block_size tokens (what the KV index requires).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engines/trtllm.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::engines;
  std::string_view json(reinterpret_cast<const char*>(data), size);
  std::vector<TrtllmEvent> a, b;
  std::string ea, eb;
  const bool ok = decodeTrtllmEvents(json, a, ea);
  check(ok == decodeTrtllmEvents(json, b, eb) && a.size() == b.size() && ea == eb);
  if (!ok) {
    check(a.empty() && !ea.empty());
    return 0;
  }
  for (const auto& e : a) {
    check(e.rank >= 0 && e.rank <= 1024);
    if (e.relevant && e.event.kind == KvEvent::Kind::kStored)
      check(e.event.block_size > 0 &&
            e.event.token_ids.size() == e.event.block_hashes.size() * e.event.block_size);
  }
  return 0;
}
