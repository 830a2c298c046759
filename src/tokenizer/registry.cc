// Models-directory lookup with a per-model load-once cache; see registry.h.
#include "tokenizer/registry.h"

namespace kvgate::tok {

std::string invalidModelName(std::string_view model) {
  if (model.empty()) return "empty model name";
  if (model.size() > 512) return "model name longer than 512 bytes";
  if (model.front() == '/') return "model name must be relative";
  for (char c : model)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == 0x7F)
      return "model name contains a control character or backslash";
  size_t start = 0;
  while (start <= model.size()) {
    size_t slash = model.find('/', start);
    if (slash == std::string_view::npos) slash = model.size();
    std::string_view part = model.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..")
      return "model name has an empty, '.' or '..' path component";
    start = slash + 1;
  }
  return "";
}

Result<std::shared_ptr<const Tokenizer>> TokenizerRegistry::load(std::string_view model) const {
  std::filesystem::path dir = dir_ / std::filesystem::path(std::string(model));
  std::error_code ec;
  Result<std::shared_ptr<const Tokenizer>> r =
      std::filesystem::is_directory(dir, ec)
          ? Tokenizer::load(dir)
          : fail(404, "tokenize",
                 "no tokenizer files for model " + std::string(model) + " (no folder " +
                     dir.string() + ")");
  if (!r && r.error().code == 404 && r.error().source != "tokenize") {
    Error e = r.error();
    e.what = "no tokenizer files for model " + std::string(model) + ": " + e.what;
    e.source = "tokenize";
    r = tl::unexpected(e);
  }
  return r;
}

Result<std::shared_ptr<const Tokenizer>> TokenizerRegistry::get(std::string_view model) {
  if (std::string bad = invalidModelName(model); !bad.empty())
    return fail(400, "model", bad + ": '" + std::string(model.substr(0, 100)) + "'");
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(model);
    if (it == cache_.end())
      it = cache_.emplace(std::string(model), std::make_shared<Entry>()).first;
    e = it->second;
  }
  std::call_once(e->once, [&] { e->result = load(model); });
  // Loaded tokenizers and broken files are remembered; "no files" is not (a stat per call), so
  // files added later are found and unknown names cannot grow the cache.
  if (!e->result && e->result.error().code == 404) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(model);
    if (it != cache_.end() && it->second == e) cache_.erase(it);
  }
  return e->result;
}

}  // namespace kvgate::tok
