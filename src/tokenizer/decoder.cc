// Ids to text (HF tokenizers' decode + transformers' clean-up). See decoder.h.
#include "tokenizer/decoder.h"

#include <unordered_map>

#include "common/utf8.h"
#include "tokenizer/byte_level.h"

namespace kvgate::tok {
namespace {

constexpr size_t kMaxIdSpace = size_t{1} << 24;  // 16M ids: past any real vocabulary

// Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid subpart, as WHATWG).
std::string lossy(std::string bytes) {
  std::string fixed;
  return repairUtf8(bytes, &fixed) ? bytes : fixed;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xXX>" token (u8::from_str_radix of its two characters), else -1.
int fallbackByte(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  if (t[3] == '+') return hexDigit(t[4]);
  const int hi = hexDigit(t[3]), lo = hexDigit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void replaceAll(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out.append(to);
  }
  if (at == 0) return;
  out.append(s, at);
  s = std::move(out);
}

}  // namespace

std::string cleanUpTokenization(std::string_view in) {
  // Every pattern is a space then one of . ? ! , ' or "n't": a text without one is unchanged
  // (one scan instead of ten).
  bool any = false;
  for (size_t i = in.find(' '); i != std::string_view::npos && i + 1 < in.size() && !any;
       i = in.find(' ', i + 1)) {
    const char c = in[i + 1];
    any = c == '.' || c == '?' || c == '!' || c == ',' || c == '\'' ||
          (c == 'n' && in.substr(i + 2, 2) == "'t");
  }
  if (!any) return std::string(in);
  std::string s(in);
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replaceAll(s, from, to);
  return s;
}

Decoder Decoder::fromJson(const nlohmann::json& tj, const nlohmann::json& cfg) {
  Decoder d;
  try {
    d.load(tj, cfg);
  } catch (const std::exception& e) {  // (a member of an unexpected type)
    d.unsupported_ = std::string("unexpected value in the decoder's files: ") + e.what();
  }
  return d;
}

void Decoder::load(const nlohmann::json& tj, const nlohmann::json& cfg) {
  Decoder& d = *this;
  if (cfg.is_object()) {
    auto c = cfg.find("clean_up_tokenization_spaces");
    d.clean_up_ = c != cfg.end() && c->is_boolean() && c->get<bool>();
  }
  // Token strings by id: the model's vocabulary, then the added tokens over it.
  auto place = [&](uint64_t id, const std::string& s, uint8_t kind) {
    if (id >= kMaxIdSpace) return;
    if (id >= d.tokens_.size()) {
      d.tokens_.resize(id + 1);
      d.kind_.resize(id + 1, 0);
      d.version_dep_.resize(id + 1, 0);
    }
    d.tokens_[id] = s;
    d.kind_[id] = kind;
  };
  if (tj.is_object() && tj.contains("model") && tj["model"].is_object()) {
    const auto& vocab = tj["model"].value("vocab", nlohmann::json());
    if (vocab.is_object())
      for (const auto& [tok, id] : vocab.items())
        if (id.is_number_integer() && id.get<int64_t>() >= 0) place(id.get<uint64_t>(), tok, 1);
  }
  // A normalizer that changes text (anything but none or an empty sequence).
  const nlohmann::json norm = tj.is_object() ? tj.value("normalizer", nlohmann::json()) : nullptr;
  const bool normalizes =
      !norm.is_null() && !(norm.is_object() && norm.value("type", std::string()) == "Sequence" &&
                           norm.value("normalizers", nlohmann::json::array()).empty());
  if (tj.is_object() && tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (const auto& a : tj["added_tokens"])
      if (a.is_object() && a.contains("id") && a["id"].is_number_integer() && a["id"] >= 0 &&
          a.contains("content") && a["content"].is_string()) {
        const bool special = a.contains("special") && a["special"].is_boolean() && a["special"];
        const auto id = a["id"].get<uint64_t>();
        place(id, a["content"].get<std::string>(), special ? 3 : 2);
        const auto n = a.find("normalized");
        const bool normalized = n != a.end() && n->is_boolean() ? n->get<bool>() : !special;
        if (normalizes && normalized && id < d.version_dep_.size()) d.version_dep_[id] = 1;
      }
  // transformers marks the tokens tokenizer_config.json's added_tokens_decoder calls special.
  if (cfg.is_object() && cfg.contains("added_tokens_decoder") &&
      cfg["added_tokens_decoder"].is_object())
    for (const auto& [k, v] : cfg["added_tokens_decoder"].items()) {
      if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos)
        continue;
      const size_t id = std::stoul(k);
      if (id < d.kind_.size() && d.kind_[id] >= 2 && v.is_object() && v.contains("special") &&
          v["special"].is_boolean() && v["special"].get<bool>())
        d.kind_[id] = 3;
    }
  // And the tokens its special-token attributes name (bos_token, eos_token, ...,
  // additional_special_tokens): transformers adds them as special tokens at load, so
  // skip_special_tokens drops them even when tokenizer.json lists them as plain vocabulary.
  if (cfg.is_object()) {
    std::vector<std::string> names;
    auto name = [&](const nlohmann::json& v) {
      if (v.is_string())
        names.push_back(v.get<std::string>());
      else if (v.is_object() && v.contains("content") && v["content"].is_string())
        names.push_back(v["content"].get<std::string>());
    };
    for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                          "cls_token", "mask_token"})
      if (cfg.contains(k)) name(cfg[k]);
    if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array())
      for (const auto& v : cfg["additional_special_tokens"]) name(v);
    if (!names.empty()) {
      std::unordered_map<std::string_view, uint32_t> by_string;
      by_string.reserve(d.tokens_.size());
      for (uint32_t id = 0; id < d.tokens_.size(); ++id)
        if (d.kind_[id]) by_string.emplace(d.tokens_[id], id);  // (first id of a string)
      for (const auto& n : names)
        if (auto it = by_string.find(n); it != by_string.end()) d.kind_[it->second] = 3;
    }
  }

  const nlohmann::json dec = tj.is_object() ? tj.value("decoder", nlohmann::json()) : nullptr;
  auto step = [&](const nlohmann::json& s) -> bool {
    const std::string type = s.is_object() ? s.value("type", std::string()) : std::string();
    if (type == "ByteLevel") {
      d.byte_level_ = true;  // (joins everything: a step after it sees one token)
    } else if (type == "Replace") {
      const auto& p = s.value("pattern", nlohmann::json());
      if (!p.is_object() || !p.contains("String") || !p["String"].is_string() ||
          !s.contains("content") || !s["content"].is_string()) {
        d.unsupported_ = "decoder Replace with a non-literal pattern";
        return false;
      }
      d.steps_.push_back({Step::kReplace, p["String"], s["content"], 0, 0, 0});
    } else if (type == "ByteFallback") {
      d.steps_.push_back({Step::kByteFallback, {}, {}, 0, 0, 0});
    } else if (type == "Fuse") {
      d.steps_.push_back({Step::kFuse, {}, {}, 0, 0, 0});
    } else if (type == "Strip") {
      const std::string c = s.value("content", std::string());
      size_t i = 0;
      const uint32_t cp = c.empty() ? 0 : nextCodePoint(c, i);
      auto count = [&](const char* k) {
        const auto& v = s.value(k, nlohmann::json());
        return v.is_number_integer() && v.get<int64_t>() >= 0;
      };
      if (c.empty() || i != c.size() || !count("start") || !count("stop")) {
        d.unsupported_ = "decoder Strip without one character and two counts";
        return false;
      }
      d.steps_.push_back(
          {Step::kStrip, {}, {}, cp, s["start"].get<size_t>(), s["stop"].get<size_t>()});
    } else {
      d.unsupported_ = "decoder type '" + type + "' is not supported";
      return false;
    }
    if (d.byte_level_ && !d.steps_.empty()) {
      d.unsupported_ = "decoder ByteLevel inside a Sequence with other steps";
      return false;
    }
    return true;
  };
  d.has_decoder_ = !dec.is_null();
  if (dec.is_null()) {
    // (no decoder: tokens joined with spaces)
  } else if (dec.is_object() && dec.value("type", std::string()) == "Sequence" &&
             dec.contains("decoders") && dec["decoders"].is_array()) {
    for (const auto& s : dec["decoders"])
      if (!step(s)) break;
  } else {
    step(dec);
  }
  if (d.tokens_.empty() && d.unsupported_.empty()) d.unsupported_ = "no vocabulary";
}

std::optional<std::string_view> Decoder::token(uint32_t id) const {
  if (id >= kind_.size() || kind_[id] == 0) return std::nullopt;
  return std::string_view(tokens_[id]);
}

Result<std::string> Decoder::decode(std::span<const uint32_t> ids, bool skip_special,
                                    std::optional<bool> clean_up) const {
  if (!unsupported_.empty()) return fail(422, "tokenizer.json", unsupported_);
  std::vector<std::string_view> toks;
  toks.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id >= kind_.size() || kind_[id] == 0) continue;  // names no token: dropped
    if (skip_special && kind_[id] == 3) continue;
    toks.emplace_back(tokens_[id]);
  }
  std::string text;
  if (byte_level_) {
    std::string bytes;
    for (std::string_view t : toks) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size();) {
        const int b = byteLevelByte(nextCodePoint(t, i));
        if (b < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    text = lossy(std::move(bytes));
  } else if (!has_decoder_) {
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i) text += ' ';
      text.append(toks[i]);
    }
  } else {
    std::vector<std::string> cur(toks.begin(), toks.end());
    for (const Step& s : steps_) {
      std::vector<std::string> next;
      next.reserve(cur.size());
      switch (s.kind) {
        case Step::kReplace:
          for (auto& t : cur) replaceAll(t, s.from, s.to);
          continue;
        case Step::kFuse: {
          std::string all;
          for (const auto& t : cur) all += t;
          next.push_back(std::move(all));
          break;
        }
        case Step::kByteFallback: {
          std::string run;
          size_t run_len = 0;
          auto flush = [&] {
            if (!run_len) return;
            if (isValidUtf8(run)) {
              next.push_back(run);
            } else {
              for (size_t i = 0; i < run_len; ++i) next.emplace_back("\xEF\xBF\xBD");
            }
            run.clear();
            run_len = 0;
          };
          for (auto& t : cur) {
            if (const int b = fallbackByte(t); b >= 0) {
              run.push_back(static_cast<char>(b));
              ++run_len;
            } else {
              flush();
              next.push_back(std::move(t));
            }
          }
          flush();
          break;
        }
        case Step::kStrip:
          for (auto& t : cur) {
            std::vector<size_t> at;  // byte offset of each character
            for (size_t i = 0; i < t.size(); nextCodePoint(t, i)) at.push_back(i);
            at.push_back(t.size());
            const size_t n = at.size() - 1;
            size_t a = 0, z = n;
            for (size_t i = 0; i < s.start && i < n; ++i) {
              size_t k = at[i];
              if (nextCodePoint(t, k) != s.strip_cp) break;
              a = i + 1;
            }
            for (size_t i = 0; i < s.stop && i < n; ++i) {
              size_t k = at[n - 1 - i];
              if (nextCodePoint(t, k) != s.strip_cp) break;
              z = n - 1 - i;
            }
            next.push_back(a < z ? t.substr(at[a], at[z] - at[a]) : std::string());
          }
          break;
      }
      cur = std::move(next);
    }
    for (const auto& t : cur) text += t;
  }
  if (clean_up.value_or(clean_up_)) text = cleanUpTokenization(text);
  return text;
}

}  // namespace kvgate::tok
