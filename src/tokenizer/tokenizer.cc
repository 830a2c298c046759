// Tokenizer loading (tokenizer.json, tokenizer_config.json, chat template) and the encode
// pipeline; see tokenizer.h.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "common/json_depth.h"
#include "tokenizer/chat.h"
#include "common/utf8.h"

namespace kvgate::tok {
namespace {

Result<std::string> readFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return fail(422, p.string(), "cannot read " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return fail(422, p.string(), "error reading " + p.string());
  return ss.str();
}

// A special token in tokenizer_config.json: a string, or an AddedToken object with "content".
std::optional<std::string> tokenContent(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

bool rebuildsPostProcessor(std::string cls) {
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  return cls == "LlamaTokenizer" || cls == "CodeLlamaTokenizer" || cls == "GemmaTokenizer" ||
         cls == "CohereTokenizer";
}

bool hasByteLevel(const nlohmann::json& pre) {
  if (!pre.is_object()) return false;
  if (pre.value("type", std::string()) == "ByteLevel") return true;
  if (pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
    for (const auto& p : pre["pretokenizers"])
      if (hasByteLevel(p)) return true;
  return false;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::filesystem::path& dir) {
  auto tj_path = dir / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(tj_path, ec)) {
    // An empty folder is a model without tokenizer files (callers fall back); a folder with
    // other files but no tokenizer.json is a broken installation.
    bool empty = std::filesystem::is_empty(dir, ec);
    if (ec)
      return fail(422, dir.string(),
                  "cannot read the folder " + dir.string() + ": " + ec.message());
    return fail(empty ? 404 : 422, tj_path.string(),
                (empty ? "no tokenizer files: " : "missing tokenizer file: ") + tj_path.string() +
                    " does not exist");
  }
  auto tj = readFile(tj_path);
  if (!tj) return tl::unexpected(tj.error());
  std::string cfg_text = "{}";
  auto cfg_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path, ec)) {
    auto c = readFile(cfg_path);
    if (!c) return tl::unexpected(c.error());
    cfg_text = std::move(*c);
  }
  std::string tmpl;
  auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path, ec)) {
    auto t = readFile(jinja_path);
    if (!t) return tl::unexpected(t.error());
    tmpl = std::move(*t);
  }
  nlohmann::json j, cfg;
  if (!jsonDepthWithin(*tj))
    return fail(422, tj_path.string(), tj_path.string() + " is nested too deeply");
  if (!jsonDepthWithin(cfg_text))
    return fail(422, cfg_path.string(), cfg_path.string() + " is nested too deeply");
  try {
    j = nlohmann::json::parse(*tj);
  } catch (const std::exception& e) {
    return fail(422, tj_path.string(), tj_path.string() + " is not valid JSON: " + e.what());
  }
  try {
    cfg = nlohmann::json::parse(cfg_text);
  } catch (const std::exception& e) {
    return fail(422, cfg_path.string(), cfg_path.string() + " is not valid JSON: " + e.what());
  }
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  auto r = t->init(j, cfg, tmpl);
  if (!r) {
    Error e = r.error();
    if (e.source == "tokenizer_config.json")
      e.source = cfg_path.string();
    else if (e.source == "chat_template.jinja")
      e.source = jinja_path.string();
    else
      e.source = tj_path.string();
    e.what = e.source + ": " + e.what;
    e.code = 422;
    return tl::unexpected(e);
  }
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::fromStrings(std::string_view tokenizer_json,
                                                                std::string_view config_json,
                                                                std::string_view name) {
  nlohmann::json j, cfg;
  if (!jsonDepthWithin(tokenizer_json) || !jsonDepthWithin(config_json))
    return fail(422, std::string(name), std::string(name) + " is nested too deeply");
  try {
    j = nlohmann::json::parse(tokenizer_json);
    cfg = config_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(config_json);
  } catch (const std::exception& e) {
    return fail(422, std::string(name), std::string(name) + " is not valid JSON: " + e.what());
  }
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  auto r = t->init(j, cfg, "");
  if (!r) {
    Error e = r.error();
    e.what = std::string(name) + ": " + e.what;
    e.code = 422;
    return tl::unexpected(e);
  }
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

Result<void> Tokenizer::init(const nlohmann::json& tj, const nlohmann::json& cfg,
                             const std::string& template_override) {
  // Any value of an unexpected JSON type (e.g. "add_bos_token": "yes") is a load error naming
  // the file being read at the time, never an exception escaping to the caller.
  try {
    return initImpl(tj, cfg, template_override);
  } catch (const std::exception& e) {
    return fail(422, phase_, std::string("unexpected value: ") + e.what());
  }
}

Result<void> Tokenizer::initImpl(const nlohmann::json& tj, const nlohmann::json& cfg,
                                 const std::string& template_override) {
  phase_ = "tokenizer.json";
  if (!tj.is_object()) return fail(422, "tokenizer.json", "top level is not an object");
  if (!cfg.is_object()) return fail(422, "tokenizer_config.json", "top level is not an object");
  auto nz = Normalizer::fromJson(tj.value("normalizer", nlohmann::json()));
  if (!nz) return tl::unexpected(nz.error());
  normalizer_ = std::move(*nz);
  const nlohmann::json pre = tj.value("pre_tokenizer", nlohmann::json());
  auto pt = PreTokenizer::fromJson(pre);
  if (!pt) return tl::unexpected(pt.error());
  pretok_ = std::move(*pt);
  if (!tj.contains("model")) return fail(422, "tokenizer.json", "no model");
  auto m = BpeModel::fromJson(tj["model"], hasByteLevel(pre));
  if (!m) return tl::unexpected(m.error());
  model_ = std::move(*m);
  decoder_ = Decoder::fromJson(tj, cfg);

  if (tj.contains("added_tokens")) {
    if (!tj["added_tokens"].is_array())
      return fail(422, "added_tokens", "added_tokens is not an array");
    for (const auto& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() ||
          !a.contains("content") || !a["content"].is_string())
        return fail(422, "added_tokens", "an added token lacks an integer id or a string content");
      AddedToken t;
      if (a["id"].get<uint64_t>() >= (1ull << 31))
        return fail(422, "added_tokens", "added token id " + a["id"].dump() + " is out of range");
      t.id = a["id"].get<uint32_t>();
      t.content = a["content"];
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", !t.special);
      // HF matches a normalized token by its normalized content (e.g. "▁<x>" after Prepend).
      if (t.normalized && !normalizer_->identity()) {
        std::string norm;
        normalizer_->apply(t.content, norm);
        t.content = std::move(norm);
      }
      added_.push_back(t);
      if (!t.normalized) max_added_bytes_ = std::max(max_added_bytes_, t.content.size());
      (t.normalized ? normalized_added_ : raw_added_).add(t);
    }
  }

  // Post-processor.
  std::function<Result<void>(const nlohmann::json&)> post =
      [&](const nlohmann::json& p) -> Result<void> {
    if (p.is_null()) return {};
    std::string type = p.value("type", std::string());
    if (type == "Sequence") {
      for (const auto& sub : p.value("processors", nlohmann::json::array())) {
        auto r = post(sub);
        if (!r) return r;
      }
      return {};
    }
    if (type == "ByteLevel") return {};
    if (type == "TemplateProcessing") {
      bool seen_a = false;
      for (const auto& piece : p.value("single", nlohmann::json::array())) {
        if (piece.contains("Sequence")) {
          seen_a = true;
          continue;
        }
        if (!piece.contains("SpecialToken"))
          return fail(422, "post_processor", "bad template piece");
        std::string name = piece["SpecialToken"].value("id", std::string());
        const auto& st = p.value("special_tokens", nlohmann::json::object());
        if (!st.contains(name) || !st[name].contains("ids") || !st[name]["ids"].is_array())
          return fail(422, "post_processor", "special token '" + name + "' has no ids");
        for (const auto& id : st[name]["ids"])
          (seen_a ? suffix_ids_ : prefix_ids_).push_back(id.get<uint32_t>());
      }
      return {};
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
      for (const char* k : {"cls", "sep"})
        if (!p.contains(k) || !p[k].is_array() || p[k].size() != 2 || !p[k][1].is_number_unsigned())
          return fail(422, "post_processor", type + "." + k + " must be [token, id]");
      prefix_ids_.push_back(p["cls"][1].get<uint32_t>());
      suffix_ids_.push_back(p["sep"][1].get<uint32_t>());
      return {};
    }
    return fail(422, "post_processor", "unsupported post-processor type '" + type + "'");
  };
  try {
    auto r = post(tj.value("post_processor", nlohmann::json()));
    if (!r) return r;
  } catch (const std::exception& e) {
    return fail(422, "post_processor", std::string("malformed post_processor: ") + e.what());
  }

  phase_ = "tokenizer_config.json";
  // Special tokens as transformers 4.x exposes them to chat templates (special_tokens_map):
  // the config's values (an AddedToken contributes its content; null removes a default), the
  // tokenizer class's defaults for keys the config omits, additional_special_tokens when
  // non-empty, and every extra_special_tokens entry.
  std::string cls = cfg.value("tokenizer_class", std::string());
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  std::map<std::string, std::string> defaults;
  if (cls == "LlamaTokenizer" || cls == "CodeLlamaTokenizer")
    defaults = {{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  else if (cls == "GemmaTokenizer")
    defaults = {{"unk_token", "<unk>"},
                {"bos_token", "<bos>"},
                {"eos_token", "<eos>"},
                {"pad_token", "<pad>"}};
  else if (cls == "Qwen2Tokenizer")
    defaults = {{"unk_token", "<|endoftext|>"},
                {"eos_token", "<|endoftext|>"},
                {"pad_token", "<|endoftext|>"}};
  for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                        "cls_token", "mask_token"}) {
    if (auto v = tokenContent(cfg, k))
      special_map_[k] = *v;
    else if (!cfg.contains(k) && defaults.count(k))
      special_map_[k] = defaults[k];
  }
  if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::array();
    for (const auto& a : cfg["additional_special_tokens"]) {
      if (a.is_string())
        extra.push_back(a.get<std::string>());
      else if (a.is_object() && a.contains("content") && a["content"].is_string())
        extra.push_back(a["content"].get<std::string>());
    }
    if (!extra.empty()) special_map_["additional_special_tokens"] = extra;
  }
  if (cfg.contains("extra_special_tokens") && cfg["extra_special_tokens"].is_object())
    for (auto it = cfg["extra_special_tokens"].begin(); it != cfg["extra_special_tokens"].end();
         ++it) {
      if (it.value().is_string())
        special_map_[it.key()] = it.value().get<std::string>();
      else if (it.value().is_object() && it.value().contains("content") &&
               it.value()["content"].is_string())
        special_map_[it.key()] = it.value()["content"].get<std::string>();
    }

  // transformers rebuilds the post-processor of some classes from add_bos_token/add_eos_token.
  if (rebuildsPostProcessor(cfg.value("tokenizer_class", std::string()))) {
    prefix_ids_.clear();
    suffix_ids_.clear();
    auto idOf = [&](const char* key) -> Result<uint32_t> {
      // special_map_ holds the config's value or the class default (e.g. "<s>").
      std::optional<std::string> c;
      if (special_map_.contains(key) && special_map_[key].is_string())
        c = special_map_[key].get<std::string>();
      auto id = c ? tokenId(*c) : std::nullopt;
      if (!id)
        return fail(422, "tokenizer_config.json",
                    std::string(key) + " '" + c.value_or("") + "' is not a known token");
      return *id;
    };
    if (cfg.value("add_bos_token", true)) {
      auto id = idOf("bos_token");
      if (!id) return tl::unexpected(id.error());
      prefix_ids_.push_back(*id);
    }
    if (cfg.value("add_eos_token", false)) {
      auto id = idOf("eos_token");
      if (!id) return tl::unexpected(id.error());
      suffix_ids_.push_back(*id);
    }
  }

  // Chat template: chat_template.jinja wins over tokenizer_config.json's chat_template.
  std::string tmpl = template_override;
  if (tmpl.empty() && cfg.contains("chat_template")) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      tmpl = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& e : ct)
        if (e.is_object() && e.value("name", std::string()) == "default" && e.contains("template"))
          tmpl = e["template"].get<std::string>();
    }
  }
  if (!tmpl.empty()) {
    auto t = jinja::Template::compile(tmpl);
    if (!t)
      return fail(422, template_override.empty() ? "tokenizer_config.json" : "chat_template.jinja",
                  "chat_template: " + t.error().what);
    chat_template_ = std::move(*t);
    chat_template_source_ = tmpl;
    content_parts_ = detectContentFormat(tmpl) == ContentFormat::kOpenAI;
  }
  return {};
}

std::optional<uint32_t> Tokenizer::tokenId(std::string_view content) const {
  for (const auto& a : added_)
    if (a.content == content) return a.id;
  uint32_t id = model_->vocabId(content);
  if (id != FlatStrMap::kNone) return id;
  return std::nullopt;
}

void Tokenizer::encodeText(std::string_view text, bool first, std::vector<uint32_t>& out) const {
  thread_local std::string norm;
  thread_local PreTokScratch scratch;
  thread_local std::vector<std::string_view> pieces;
  thread_local std::vector<Segment> segs;
  std::string_view s = text;
  if (!normalizer_->identity()) {
    normalizer_->apply(text, norm);
    s = norm;
  }
  segs.clear();
  if (normalized_added_.empty())
    segs.push_back({0, s.size(), Segment::kText});
  else
    normalized_added_.split(s, segs);
  for (const Segment& seg : segs) {
    if (seg.id != Segment::kText) {
      out.push_back(seg.id);
      continue;
    }
    scratch.owned.clear();
    pieces.clear();
    pretok_->split(s.substr(seg.begin, seg.end - seg.begin), first && seg.begin == 0, scratch,
                   pieces);
    for (std::string_view p : pieces) model_->encodePiece(p, out);
  }
  // Per-thread scratch keeps its peak size; give back what a huge prompt made it grow to.
  constexpr size_t kKeep = 1 << 20;
  if (norm.capacity() > kKeep) std::string().swap(norm);
  if (scratch.cps.cp.capacity() > kKeep / 4) scratch.cps = CpText();
  if (pieces.capacity() > kKeep / 16) std::vector<std::string_view>().swap(pieces);
}

void Tokenizer::encodeSegments(std::string_view s, size_t offset, std::vector<uint32_t>& out,
                               std::vector<Boundary>* bounds) const {
  thread_local std::vector<Segment> raw_segs;  // no allocation per call once warm
  raw_segs.clear();
  raw_added_.split(s, raw_segs);
  for (const Segment& seg : raw_segs) {
    if (seg.id != Segment::kText) {
      out.push_back(seg.id);
      if (bounds)
        bounds->push_back(
            {static_cast<uint32_t>(offset + seg.end), static_cast<uint32_t>(out.size())});
    } else {
      encodeText(s.substr(seg.begin, seg.end - seg.begin), offset + seg.begin == 0, out);
    }
  }
}

void Tokenizer::encodeInto(std::string_view text, bool add_special_tokens,
                           std::vector<uint32_t>& out) const {
  std::string fixed;
  std::string_view s = text;
  if (!repairUtf8(text, &fixed)) s = fixed;
  if (add_special_tokens) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  encodeSegments(s, 0, out, nullptr);
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
}

size_t Tokenizer::count(std::string_view text, bool add_special_tokens) const {
  thread_local std::vector<uint32_t> ids;
  ids.clear();
  encodeInto(text, add_special_tokens, ids);
  size_t n = ids.size();
  if (ids.capacity() > (1u << 20)) std::vector<uint32_t>().swap(ids);
  return n;
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 4);
  encodeInto(text, add_special_tokens, out);
  return out;
}

}  // namespace kvgate::tok
