// The models directory: `<models-dir>/<model name as in requests>/` holds tokenizer.json and
// tokenizer_config.json (a name with `/`, e.g. "Qwen/Qwen3-8B", maps to nested folders).
// Tokenizers load on first use and are kept; broken files are remembered too (restart after
// fixing them), a model without files is looked up again on each call. get() takes the registry
// mutex only to find or insert the entry; loading runs outside it (callers of that same model wait
// for the one load, others do not). Hot paths resolve a model once and keep the returned
// shared_ptr (Tokenizer itself is immutable and lock-free).
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/result.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tok {

class TokenizerRegistry {
 public:
  explicit TokenizerRegistry(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // Errors: 400 invalid model name (empty, absolute, "..", backslash, control characters);
  // 404 "no tokenizer files for model X" (callers fall back, e.g. the KV-exact guard
  // "tokenize"); 422 files present but unreadable, malformed or unsupported (message names the
  // file).
  Result<std::shared_ptr<const Tokenizer>> get(std::string_view model);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  struct Entry {
    std::once_flag once;
    Result<std::shared_ptr<const Tokenizer>> result;
  };
  Result<std::shared_ptr<const Tokenizer>> load(std::string_view model) const;
  std::mutex mu_;  // guards cache_ (the map), never held while loading
  std::map<std::string, std::shared_ptr<Entry>, std::less<>> cache_;
};

// Checks a model name for use as a relative path; returns the error message or "".
std::string invalidModelName(std::string_view model);

}  // namespace kvgate::tok
