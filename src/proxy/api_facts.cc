// Request APIs other than OpenAI's (api_facts.h).
#include "proxy/api_facts.h"

#include "engines/anthropic_messages.h"
#include "engines/openai_responses.h"
#include "proxy/facts_parser.h"

namespace kvgate::proxy {

Api apiOf(std::string_view path) {
  switch (engines::anthropic::pathOf(path)) {
    case engines::anthropic::Path::kMessages:
      return Api::kMessages;
    case engines::anthropic::Path::kCountTokens:
      return Api::kCountTokens;
    case engines::anthropic::Path::kNone:
      break;
  }
  if (engines::responses::isResponsesPath(path)) return Api::kResponses;
  const std::string_view p = path.substr(0, path.find('?'));
  if (p.ends_with("/detokenize")) return Api::kDetokenize;
  if (p.ends_with("/tokenize")) return Api::kTokenize;
  for (std::string_view pooling : {"/embeddings", "/rerank", "/score", "/classify", "/pooling"})
    if (p.ends_with(pooling)) return Api::kPooling;
  return Api::kOpenAi;
}

namespace {
void clearPrompt(routing::RequestFacts& f) {
  f.has_prompt = false;
  f.prompt_prefix.clear();
  f.prefix_key_len = SIZE_MAX;
  f.prompt_render_total = f.prompt_id_count = 0;
  f.prompt_text.clear();
  f.prompt_token_ids.clear();
  f.chat.reset();
  f.chat_too_large = false;
}
}  // namespace

void messagesShape(Api api, routing::RequestFacts& f) {
  f.n.reset();
  if (api == Api::kCountTokens) {
    f.max_tokens = 0;
    f.counts_unreadable = false;
    return;
  }
  f.max_tokens = f.count_fields[0];
  // (an unreadable count of a member the engine ignores does not make this one unreadable; an
  // unreadable max_tokens, which left no value, still does)
  if (f.count_fields[0]) f.counts_unreadable = false;
}

void poolingShape(routing::RequestFacts& f) {
  f.n.reset();
  f.max_tokens = 0;
  f.counts_unreadable = false;
}

void responsesShape(routing::RequestFacts& f) {
  f.n.reset();
  f.max_tokens = f.count_fields[2];
  if (f.count_fields[2]) f.counts_unreadable = false;  // (as messagesShape)
}

Conversion apiPromptFacts(std::string_view body, uint32_t needs, size_t prefix_bytes,
                          size_t chat_max_bytes, RequestCtx& rq) {
  routing::RequestFacts& facts = rq.facts;
  clearPrompt(facts);
  const uint32_t want = needs & kPromptNeeds;
  if (body.size() > kMaxConvertBytes) return Conversion::kTooLarge;
  const engines::anthropic::ChatForm form = rq.api == Api::kResponses
                                                ? engines::responses::toChat(body)
                                                : engines::anthropic::toChat(body, false);
  if (!form.ok) return Conversion::kUnconvertible;
  rq.api_body = form.chat.dump();
  const size_t len = rq.api_body.size();
  rq.api_body.reserve(len + kFactsPadding);  // the facts parser reads in place
  if (!rq.api_facts) rq.api_facts = std::make_unique<routing::RequestFacts>();
  routing::RequestFacts& chat = *rq.api_facts;
  chat.clear();
  if (parseFacts(rq.api_body.data(), len, rq.api_body.capacity(), want, prefix_bytes, chat,
                 chat_max_bytes) != FactsStatus::kOk)
    return Conversion::kUnconvertible;
  facts.has_prompt = chat.has_prompt;
  facts.prompt_prefix.swap(chat.prompt_prefix);
  facts.prefix_key_len = chat.prefix_key_len;
  facts.prompt_render_total = chat.prompt_render_total;
  facts.chat.swap(chat.chat);
  facts.chat_too_large = chat.chat_too_large;
  return Conversion::kConverted;
}

}  // namespace kvgate::proxy
