// Fuzz target: the RequestFacts parser (src/proxy/facts_parser.cc), the one parser of request
// bodies on the data plane.
// Properties: it never answers kInvalidJson for a document the validating parser (simdjson DOM)
// accepts (valid JSON is never a 400 invalid_json); the rendered prefix respects its budget K;
// a prefix exists only for a parsed object; the bytes are read in place (padding reserved, as the
// data plane does) with the same outcome as a copy.
#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/json_depth.h"
#include "proxy/facts_parser.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate;
  constexpr uint32_t kAll = routing::kNeedModel | routing::kNeedPromptPrefix | routing::kNeedUser |
                            routing::kNeedRequestShape;
  constexpr size_t kK = 64;
  std::string body(reinterpret_cast<const char*>(data), size);
  std::string padded = body;
  padded.reserve(body.size() + proxy::kFactsPadding);
  routing::RequestFacts f, g;
  auto st = proxy::parseFacts(padded.data(), padded.size(), padded.capacity(), kAll, kK, f);
  check(f.prompt_prefix.size() <= kK);
  check(!f.has_prompt || f.parsed);
  if (st == proxy::FactsStatus::kInvalidJson) {
    simdjson::dom::parser dom;
    simdjson::padded_string copy(body);
    simdjson::dom::element e;
    auto err = dom.parse(copy).get(e);
    check(err != simdjson::SUCCESS);  // valid JSON must never be called invalid
  }
  auto st2 = proxy::parseFacts(body.data(), body.size(), 0, kAll, kK, g);  // copying path
  check(st == st2 && f.has_prompt == g.has_prompt && f.prompt_prefix == g.prompt_prefix &&
        f.model == g.model);
  // A needs mask without the prompt extracts no prompt.
  routing::RequestFacts h;
  proxy::parseFacts(body.data(), body.size(), 0, routing::kNeedModel, kK, h);
  check(!h.has_prompt && h.prompt_prefix.empty());
  // Tier 1.5's needs: never calls valid JSON invalid (skipped values are not validated, so other
  // needs may see an invalid body as kOk: the engine answers it); the chat-template input
  // converted from a valid body equals nlohmann's parse of those members.
  constexpr uint32_t kTier15 = routing::kNeedModel | routing::kNeedPromptText |
                               routing::kNeedMessages | routing::kNeedChatInput |
                               routing::kNeedPromptTokenIds;
  routing::RequestFacts t;
  auto st3 = proxy::parseFacts(body.data(), body.size(), 0, kTier15, kK, t);
  if (st3 == proxy::FactsStatus::kInvalidJson) {
    simdjson::dom::parser dom;
    simdjson::padded_string copy(body);
    simdjson::dom::element e;
    check(dom.parse(copy).get(e) != simdjson::SUCCESS);
  }
  // The chat input of a valid body is what nlohmann's own parser reads for those members.
  if (st3 == proxy::FactsStatus::kOk && t.chat && jsonDepthWithin(body)) {
    const auto all = nlohmann::ordered_json::parse(body, nullptr, false);
    if (!all.is_discarded() && all.is_object())
      for (const auto& [k, v] : t.chat->items())
        check(all.contains(k) && all[k].dump() == v.dump());
  }
  return 0;
}
