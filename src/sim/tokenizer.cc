#include "sim/tokenizer.h"

#include <xxhash.h>

#include <map>
#include <mutex>

#include "common/json_depth.h"
#include "tokenizer/chat.h"
#include "tokenizer/registry.h"

namespace kvgate::sim {
namespace {
bool isWordByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
}  // namespace

uint32_t SimpleTokenizer::pieceId(std::string_view piece) {
  return static_cast<uint32_t>(XXH3_64bits(piece.data(), piece.size()) % kVocab) + kFirstId;
}

std::vector<uint32_t> SimpleTokenizer::encode(std::string_view text,
                                              bool /*add_special_tokens*/) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    size_t start = i;
    auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ' && i + 1 < n && isWordByte(static_cast<unsigned char>(text[i + 1]))) ++i;
    if (isWordByte(static_cast<unsigned char>(text[i]))) {
      while (i < n && isWordByte(static_cast<unsigned char>(text[i]))) ++i;
    } else {
      ++i;  // one other byte
    }
    std::string_view piece = text.substr(start, i - start);
    for (size_t off = 0; off < piece.size(); off += kMaxPieceBytes)
      ids.push_back(pieceId(piece.substr(off, kMaxPieceBytes)));
  }
  return ids;
}

std::string contentText(const nlohmann::json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const auto& part : content) {
    if (!part.is_object()) continue;
    auto type = part.find("type");
    auto text = part.find("text");
    if (type != part.end() && type->is_string() &&
        (*type == "text" || *type == "input_text" || *type == "output_text") &&
        text != part.end() && text->is_string())
      out += text->get_ref<const std::string&>();
  }
  return out;
}

std::string SimpleTokenizer::renderChat(const nlohmann::json& messages,
                                        bool add_generation_prompt) const {
  std::string out;
  if (messages.is_array()) {
    for (const auto& m : messages) {
      if (!m.is_object()) continue;
      std::string role = "user";
      auto r = m.find("role");
      if (r != m.end() && r->is_string()) role = r->get<std::string>();
      out += "<|" + role + "|>\n";
      auto c = m.find("content");
      if (c != m.end()) out += contentText(*c);
      out += '\n';
    }
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

Result<std::vector<uint32_t>> SimpleTokenizer::encodeChat(std::string_view /*raw*/,
                                                          const nlohmann::json& body) const {
  bool add_gen = true;
  if (auto a = body.find("add_generation_prompt"); a != body.end() && a->is_boolean())
    add_gen = a->get<bool>();
  return encode(renderChat(body.value("messages", nlohmann::json::array()), add_gen));
}

namespace {

class HfTokenizer : public Tokenizer {
 public:
  explicit HfTokenizer(std::shared_ptr<const tok::Tokenizer> t) : t_(std::move(t)) {}
  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens) const override {
    return t_->encode(text, add_special_tokens);
  }
  Result<std::vector<uint32_t>> encodeChat(std::string_view raw,
                                           const nlohmann::json&) const override {
    if (!jsonDepthWithin(raw)) return fail(400, "", "Request body is nested too deeply.");
    auto body = nlohmann::ordered_json::parse(raw, nullptr, false);
    if (body.is_discarded()) return fail(400, "", "Request body is not valid JSON.");
    return tok::encodeChat(*t_, body);
  }
  const char* kind() const override { return "hf"; }
  Result<std::string> decode(const std::vector<uint32_t>& ids, bool skip_special,
                             std::optional<bool> clean_up) const override {
    return t_->decoder().decode(ids, skip_special, clean_up);
  }
  std::optional<std::string> tokenString(uint32_t id) const override {
    auto s = t_->decoder().token(id);
    return s ? std::optional<std::string>(std::string(*s)) : std::nullopt;
  }

 private:
  std::shared_ptr<const tok::Tokenizer> t_;
};

// One registry per models directory for the whole process, so workers share loaded files.
tok::TokenizerRegistry& registryFor(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<tok::TokenizerRegistry>> regs;
  std::lock_guard<std::mutex> lock(mu);
  auto& r = regs[dir];
  if (!r) r = std::make_unique<tok::TokenizerRegistry>(dir);
  return *r;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> makeTokenizer(const std::string& model,
                                                       const std::string& models_dir) {
  if (models_dir.empty()) return std::make_shared<SimpleTokenizer>();
  auto t = registryFor(models_dir).get(model);
  if (t) return std::make_shared<HfTokenizer>(*t);
  if (t.error().code == 404) return std::make_shared<SimpleTokenizer>();
  return tl::unexpected(t.error());
}

}  // namespace kvgate::sim
