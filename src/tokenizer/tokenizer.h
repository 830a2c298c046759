// A model's tokenizer, loaded from a HuggingFace tokenizer folder (tokenizer.json plus
// tokenizer_config.json, optionally chat_template.jinja), producing exactly the ids HF
// `tokenizers` + transformers produce. Pipeline per encode():
//   UTF-8 repair (WHATWG U+FFFD) -> added-token split (raw, then normalized) -> normalizer per
//   text segment -> pre-tokenizer -> BPE per piece -> post-processor (add_special_tokens only).
// Post-processor: tokenizer.json's TemplateProcessing (single) -- except for the tokenizer
// classes that transformers 4.x rebuilds from tokenizer_config.json (Llama, CodeLlama, Gemma):
// there BOS is added iff add_bos_token (default true) and EOS iff add_eos_token (default false).
// That is the DeepSeek-V3 gotcha: its file has no BOS but transformers (and vLLM) add BOS 0.
// Immutable after load: encode() is const and thread-safe; per-thread caches, no locks.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"

namespace kvgate::tok {

class Tokenizer {
 public:
  // Loads <dir>/tokenizer.json and <dir>/tokenizer_config.json (the latter optional). Errors
  // name the file: code 404 when tokenizer.json is absent, 422 when a file is unreadable or
  // malformed or uses an unsupported feature.
  static Result<std::shared_ptr<const Tokenizer>> load(const std::filesystem::path& dir);
  // The same from in-memory file contents (tests); `name` is used in error messages.
  static Result<std::shared_ptr<const Tokenizer>> fromStrings(std::string_view tokenizer_json,
                                                              std::string_view config_json,
                                                              std::string_view name);

  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens) const;
  // The number of ids encode() would return, without allocating a result per call.
  size_t count(std::string_view text, bool add_special_tokens) const;
  void encodeInto(std::string_view text, bool add_special_tokens, std::vector<uint32_t>& out) const;

  // Chat template, compiled at load (nullptr when the model ships none).
  const jinja::Template* chatTemplate() const {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const std::string& chatTemplateSource() const { return chat_template_source_; }
  // vLLM's content format for this template: true = "openai" (list of parts), false = "string".
  bool templateWantsContentParts() const { return content_parts_; }
  // The special-token variables transformers passes to chat templates (bos_token, eos_token,
  // unk_token, pad_token, ... as strings), from tokenizer_config.json.
  const nlohmann::ordered_json& specialTokensMap() const { return special_map_; }
  // Id of an added token or vocabulary entry given by its content, if any.
  std::optional<uint32_t> tokenId(std::string_view content) const;
  size_t vocabSize() const { return model_->vocabSize(); }
  // Ids back to text as the engines' /detokenize (decoder.h), and token strings by id.
  const Decoder& decoder() const { return *decoder_; }

  // For incremental encoding (incremental.h): ids of valid UTF-8 `s` without post-processing,
  // where `s` starts at byte `offset` of the full text; records, after each raw added token, the
  // byte offset where it ends and the number of ids so far (text after it encodes independently).
  struct Boundary {
    uint32_t byte, ids;
  };
  void encodeSegments(std::string_view s, size_t offset, std::vector<uint32_t>& out,
                      std::vector<Boundary>* bounds) const;
  size_t maxAddedTokenBytes() const { return max_added_bytes_; }
  const std::vector<uint32_t>& prefixIds() const { return prefix_ids_; }
  const std::vector<uint32_t>& suffixIds() const { return suffix_ids_; }

 private:
  Tokenizer() = default;
  Result<void> init(const nlohmann::json& tj, const nlohmann::json& cfg,
                    const std::string& template_override);
  Result<void> initImpl(const nlohmann::json& tj, const nlohmann::json& cfg,
                        const std::string& template_override);
  void encodeText(std::string_view text, bool first, std::vector<uint32_t>& out) const;
  const char* phase_ = "tokenizer.json";  // which file init() is reading (error attribution)

  std::optional<Normalizer> normalizer_;
  std::optional<PreTokenizer> pretok_;
  std::optional<BpeModel> model_;
  std::optional<Decoder> decoder_;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::vector<AddedToken> added_;
  std::vector<uint32_t> prefix_ids_, suffix_ids_;  // post-processor, add_special_tokens=true
  size_t max_added_bytes_ = 0;                     // longest raw (normalized=false) added token
  std::optional<jinja::Template> chat_template_;
  std::string chat_template_source_;
  bool content_parts_ = false;
  nlohmann::ordered_json special_map_ = nlohmann::ordered_json::object();
};

}  // namespace kvgate::tok
