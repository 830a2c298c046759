// Facts the data plane reads from a request body before routing: for now the model name.
//
// Bodies are untrusted: parsing is bounded (simdjson on-demand over the received bytes, depth
// limit 64) and a malformed body is reported, not guessed at. Only the top-level "model" string
// is read; everything else is left to the engine.
#pragma once
#include <string>
#include <string_view>

namespace kvgate::proxy {

enum class BodyParse { kOk, kNotJson, kNoModel };

// Reads the top-level "model" string of a JSON object body into `model`.
BodyParse extractModel(std::string_view body, std::string& model);

}  // namespace kvgate::proxy
