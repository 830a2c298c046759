// A tiny HF tokenizer folder for unit tests: one token per character, no merges. Ids by hand:
// the 64 characters of kTinyAlphabet are ids 0..63 in order, ' ' is 64, '\n' is 65. The chat
// template concatenates the messages' contents, so a chat request whose one message is text T
// tokenizes like the completions prompt T (no special tokens either way).
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace kvgate::testing {

inline constexpr const char* kTinyAlphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/";

// Writes <dir>/<model>/tokenizer.json and tokenizer_config.json; returns the folder.
inline std::filesystem::path writeTinyTokenizer(const std::filesystem::path& dir,
                                                const std::string& model) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 64; ++i) vocab[std::string(1, kTinyAlphabet[i])] = i;
  vocab[" "] = 64;
  vocab["\n"] = 65;
  nlohmann::json tj = {{"model",
                        {{"type", "BPE"},
                         {"vocab", vocab},
                         {"merges", nlohmann::json::array()},
                         {"unk_token", nullptr},
                         {"byte_fallback", false},
                         {"fuse_unk", false}}}};
  nlohmann::json cfg = {
      {"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"}};
  auto folder = dir / model;
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << tj.dump();
  std::ofstream(folder / "tokenizer_config.json") << cfg.dump();
  return folder;
}

// The text whose tiny-tokenizer ids are `ids` (each 0..65).
template <typename Ids>
std::string tinyText(const Ids& ids) {
  std::string s;
  for (auto id : ids) s.push_back(id == 64 ? ' ' : id == 65 ? '\n' : kTinyAlphabet[id]);
  return s;
}

}  // namespace kvgate::testing
