// OpenAI chat request -> chat-template input -> prompt text -> token ids, as vLLM does it
// (rules and sources in docs/chat-templates.md). The rendered prompt is encoded with
// add_special_tokens=false unless the request sets "add_special_tokens": true (vLLM's chat
// default is false: BOS comes from the template).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::tok {

struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // normalized as vLLM's model_dump(); null when absent
  nlohmann::ordered_json documents;  // null when absent
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
};

// Content formats of vLLM: "string" (text parts joined) or "openai" (a list of parts), chosen
// by whether the template iterates over a message's content.
enum class ContentFormat { kString, kOpenAI };
ContentFormat detectContentFormat(std::string_view chat_template_source);

// Maps a request body (already parsed) to template input. Errors are 400 with the field named.
Result<ChatInput> chatInputFromRequest(const nlohmann::ordered_json& body, ContentFormat format);

// Renders the model's chat template. 400 on template errors and when the model has no template.
Result<std::string> renderChat(const Tokenizer& tok, const ChatInput& in,
                               const jinja::RenderOptions& opts = {});

// The full path: body -> ids (and the rendered text in *rendered when non-null).
Result<std::vector<uint32_t>> encodeChat(const Tokenizer& tok, const nlohmann::ordered_json& body,
                                         std::string* rendered = nullptr,
                                         const jinja::RenderOptions& opts = {});

}  // namespace kvgate::tok
