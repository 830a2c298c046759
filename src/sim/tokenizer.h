// Tokenizers for the engine simulator.
//
// `Tokenizer` is the interface the simulator uses to turn prompts into token ids (prompt token
// counts and prefix-cache block identity). makeTokenizer(model, models_dir) picks:
//   * `HfTokenizer` when <models-dir>/<model>/tokenizer.json exists: the real tokenizer
//     (src/tokenizer/, HuggingFace parity) with the model's chat template, exactly as vLLM
//     would tokenize (completions: add_special_tokens=true; chat: template, then encode without
//     special tokens unless the request says otherwise). Gateway and workers then agree, as in
//     a real fleet.
//   * otherwise `SimpleTokenizer`, a deterministic STAND-IN (not a real model tokenizer):
//     pieces are maximal runs of ASCII letters/digits together with their preceding single
//     space (" hello"), or else one single other byte; pieces longer than 8 bytes are split
//     every 8 bytes; id = XXH3_64bits(piece) % 50000 + 256. Its chat rendering emits, for each
//     message, "<|role|>\n" + content text + "\n", then "<|assistant|>\n" when
//     add_generation_prompt is true (content: string, null, or text parts concatenated).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::sim {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // A completion prompt (vLLM: add_special_tokens defaults to true; the stand-in has none).
  virtual std::vector<uint32_t> encode(std::string_view text,
                                       bool add_special_tokens = true) const = 0;
  // A chat request: `raw` is the request body as received (key order matters to templates),
  // `body` the same parsed. Errors are 400 (bad messages, template errors).
  virtual Result<std::vector<uint32_t>> encodeChat(std::string_view raw,
                                                   const nlohmann::json& body) const = 0;
  virtual const char* kind() const = 0;  // "hf" or "stand-in"
  // /detokenize and /tokenize's token strings: the real tokenizer's decode (tokenizer/decoder.h;
  // `clean_up` nullopt: the model's config); the stand-in cannot (its ids are hashes): 501.
  virtual Result<std::string> decode(const std::vector<uint32_t>& /*ids*/, bool /*skip_special*/,
                                     std::optional<bool> /*clean_up*/) const {
    return fail(501, "tokens", "the stand-in tokenizer cannot decode (give --models-dir)");
  }
  virtual std::optional<std::string> tokenString(uint32_t /*id*/) const { return std::nullopt; }
};

class SimpleTokenizer : public Tokenizer {
 public:
  static constexpr size_t kMaxPieceBytes = 8;
  static constexpr uint32_t kVocab = 50000;
  static constexpr uint32_t kFirstId = 256;

  std::vector<uint32_t> encode(std::string_view text,
                               bool add_special_tokens = true) const override;
  Result<std::vector<uint32_t>> encodeChat(std::string_view raw,
                                           const nlohmann::json& body) const override;
  const char* kind() const override { return "stand-in"; }
  std::string renderChat(const nlohmann::json& messages, bool add_generation_prompt) const;
  static uint32_t pieceId(std::string_view piece);
};

// The text of one message's `content` (string, null, or array of text parts).
std::string contentText(const nlohmann::json& content);

// The tokenizer for a served model name: HfTokenizer when `models_dir` has the model's files,
// SimpleTokenizer when it has none (or models_dir is empty). Broken files are an error (422)
// naming the file, so a misconfigured fleet fails at start instead of silently disagreeing.
Result<std::shared_ptr<const Tokenizer>> makeTokenizer(const std::string& model,
                                                       const std::string& models_dir);

}  // namespace kvgate::sim
