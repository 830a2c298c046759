// Tokenizers for the engine simulator.
//
// `Tokenizer` is the interface the simulator uses to turn prompts into token ids (for prompt
// token counts and prefix-cache block identity) and to render chat messages into a prompt.
//
// `SimpleTokenizer` is a deterministic STAND-IN, not a real model tokenizer. It is used only for
// models explicitly mapped to it (today: every model, via makeTokenizer). The real
// HuggingFace-parity tokenizer plugs in later through `--models-dir`. Its rules:
//   * pieces are maximal runs of ASCII letters/digits together with their preceding single
//     space (" hello"), or else one single other byte ("," "\n" " " when not before a word);
//   * pieces longer than 8 bytes are split every 8 bytes;
//   * id = XXH3_64bits(piece bytes) % 50000 + 256 (ids 0..255 are never produced).
// renderChat emits, for each message, "<|role|>\n" + content text + "\n", then
// "<|assistant|>\n" when add_generation_prompt is true. Content may be a string, null, or an
// array of {"type":"text","text":...} parts (text parts are concatenated, others ignored).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::sim {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  virtual std::string renderChat(const nlohmann::json& messages,
                                 bool add_generation_prompt) const = 0;
};

class SimpleTokenizer : public Tokenizer {
 public:
  static constexpr size_t kMaxPieceBytes = 8;
  static constexpr uint32_t kVocab = 50000;
  static constexpr uint32_t kFirstId = 256;

  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string renderChat(const nlohmann::json& messages, bool add_generation_prompt) const override;
  static uint32_t pieceId(std::string_view piece);
};

// The text of one message's `content` (string, null, or array of text parts).
std::string contentText(const nlohmann::json& content);

// The tokenizer for a served model name. Returns SimpleTokenizer for now.
std::unique_ptr<Tokenizer> makeTokenizer(const std::string& model);

}  // namespace kvgate::sim
