// `kvgate tokenize`: the operator's tool for "why did this prompt miss the cache". Reads text
// (or, with --chat, an OpenAI chat request body) on stdin and prints the token ids exactly as
// the gateway computes them; --jsonl handles one JSON input per line.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "common/json_depth.h"
#include "tokenizer/chat.h"
#include "tokenizer/incremental.h"
#include "tokenizer/registry.h"

namespace kvgate::tok {
namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: kvgate tokenize --models-dir DIR --model NAME [--chat] [--jsonl]\n"
               "                       [--no-special-tokens] [--render] [--incremental]\n"
               "       kvgate tokenize --models-dir DIR --model NAME --decode [--jsonl]\n"
               "                       [--skip-special-tokens]\n\n"
               "  text mode    stdin is the raw text; prints the ids as one JSON array\n"
               "               (add_special_tokens=true, as /v1/completions, unless\n"
               "               --no-special-tokens)\n"
               "  --chat       stdin is an OpenAI chat request body; the chat template is applied\n"
               "               and the prompt encoded without special tokens (vLLM's default)\n"
               "  --render     with --chat: print the rendered prompt (a JSON string), not ids\n"
               "  --jsonl      one JSON input per line (a string, or a chat request with --chat);\n"
               "               one output line each: the ids, or {\"error\": \"...\"}\n"
               "  --incremental  with --jsonl: reuse the ids of earlier lines that the next one\n"
               "               extends (multi-turn chats); same ids, less work\n"
               "  --decode     stdin is a JSON array of token ids; prints the text as a JSON\n"
               "               string, as the engines' /detokenize (HF decode, then the\n"
               "               model's clean_up_tokenization_spaces); ids naming no token are\n"
               "               dropped; --skip-special-tokens drops special tokens too\n\n"
               "exit status: 0 ok, 1 bad input (text mode), 2 usage or broken tokenizer files,\n"
               "             3 no tokenizer files for the model\n");
}

std::string idsJson(const std::vector<uint32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

// --decode: a JSON array of ids -> the text as a JSON string. False on a per-input error.
bool handleDecode(const Tokenizer& tok, const std::string& input, bool skip_special,
                  std::string& out) {
  auto err = [&](const std::string& what) {
    out = nlohmann::json({{"error", what}}).dump();
    return false;
  };
  if (!jsonDepthWithin(input)) return err("input JSON nested deeper than 128 levels");
  auto j = nlohmann::json::parse(input, nullptr, false);
  if (j.is_discarded() || !j.is_array()) return err("input must be a JSON array of token ids");
  std::vector<uint32_t> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
      return err("token ids must be integers in [0, 2^32)");
    ids.push_back(v.get<uint32_t>());
  }
  auto text = tok.decoder().decode(ids, skip_special);
  if (!text) return err(text.error().what);
  out = nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  return true;
}

// One input -> one output line (JSON). Returns false on a per-input error.
bool handle(const Tokenizer& tok, const std::string& input, bool jsonl, bool chat, bool special,
            bool render, IncrementalEncoder* inc, std::string& out) {
  if ((jsonl || chat) && !jsonDepthWithin(input)) {
    out = nlohmann::json({{"error", "input JSON nested deeper than 128 levels"}}).dump();
    return false;
  }
  try {
    if (!chat) {
      std::string text = input;
      if (jsonl) {
        auto j = nlohmann::json::parse(input);
        if (!j.is_string()) {
          out = nlohmann::json({{"error", "each line must be a JSON string"}}).dump();
          return false;
        }
        text = j.get<std::string>();
      }
      out = idsJson(inc ? inc->encode(text, special) : tok.encode(text, special));
      return true;
    }
    auto body = nlohmann::ordered_json::parse(input);
    auto in = chatInputFromRequest(
        body, tok.templateWantsContentParts() ? ContentFormat::kOpenAI : ContentFormat::kString);
    Result<std::string> rendered =
        in ? renderChat(tok, *in) : Result<std::string>(tl::unexpected(in.error()));
    if (!rendered) {
      out = nlohmann::json({{"error", rendered.error().what}}).dump();
      return false;
    }
    if (render) {
      out = nlohmann::json(*rendered).dump();
      return true;
    }
    out = idsJson(inc ? inc->encode(*rendered, in->add_special_tokens)
                      : tok.encode(*rendered, in->add_special_tokens));
    return true;
  } catch (const std::exception& e) {
    out = nlohmann::json({{"error", std::string("invalid JSON: ") + e.what()}}).dump();
    return false;
  }
}

}  // namespace

int tokenizeMain(int argc, char** argv) {
  std::string dir, model;
  bool chat = false, jsonl = false, special = true, render = false, incremental = false;
  bool decode = false, skip_special = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& dst) {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    if (a == "--models-dir") {
      if (!value(dir)) return usage(stderr), 2;
    } else if (a == "--model") {
      if (!value(model)) return usage(stderr), 2;
    } else if (a == "--chat") {
      chat = true;
    } else if (a == "--jsonl") {
      jsonl = true;
    } else if (a == "--no-special-tokens") {
      special = false;
    } else if (a == "--render") {
      render = true;
    } else if (a == "--incremental") {
      incremental = true;
    } else if (a == "--decode") {
      decode = true;
    } else if (a == "--skip-special-tokens") {
      skip_special = true;
    } else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "kvgate tokenize: unknown flag '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (dir.empty() || model.empty() || (decode && (chat || render || incremental))) {
    usage(stderr);
    return 2;
  }
  TokenizerRegistry reg(dir);
  auto tok = reg.get(model);
  if (!tok) {
    std::fprintf(stderr, "kvgate tokenize: %s\n", tok.error().what.c_str());
    return tok.error().code == 404 ? 3 : 2;
  }
  std::ios::sync_with_stdio(false);
  std::string out;
  if (!jsonl) {
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    bool ok = decode ? handleDecode(**tok, input, skip_special, out)
                     : handle(**tok, input, false, chat, special, render, nullptr, out);
    std::fwrite(out.data(), 1, out.size(), ok ? stdout : stderr);
    std::fputc('\n', ok ? stdout : stderr);
    return ok ? 0 : 1;
  }
  std::string line;
  IncrementalEncoder inc(**tok);
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (decode)
      handleDecode(**tok, line, skip_special, out);
    else
      handle(**tok, line, true, chat, special, render, incremental ? &inc : nullptr, out);
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  if (incremental)
    std::fprintf(stderr, "kvgate tokenize: incremental: %llu bytes reused, %llu bytes encoded\n",
                 static_cast<unsigned long long>(inc.reusedBytes()),
                 static_cast<unsigned long long>(inc.encodedBytes()));
  return 0;
}

}  // namespace kvgate::tok
