// The management REST API (/netlox/v1/config/loadbalancer...), compatible with the upstream
// gateway: responses {"result":"Success"}, errors {"code","message","result"} with the same HTTP
// status. See docs/rest-api.md.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "admin/rule_store.h"
#include "http/server.h"
#include "tokenizer/registry.h"

namespace kvgate::admin {

class Api {
 public:
  using MetricsFn = std::function<std::string()>;
  // `tokenizers` may be null (serve without --models-dir): /kvgate/v1/tokenize then answers 503.
  Api(RuleStore& store, MetricsFn metrics, tok::TokenizerRegistry* tokenizers = nullptr)
      : store_(store), metrics_(std::move(metrics)), tokenizers_(tokenizers) {}
  asio::awaitable<void> handle(http::Request& req, http::ResponseWriter& w);

 private:
  // POST /kvgate/v1/tokenize: the ids kvgate computes for a prompt or chat request.
  asio::awaitable<void> tokenize(http::Request& req, http::ResponseWriter& w);
  std::string tokenizerMetrics() const;

  RuleStore& store_;
  MetricsFn metrics_;
  tok::TokenizerRegistry* tokenizers_;
  std::map<std::string, std::string> tokenizer_state_;  // model -> loaded | missing | error
  std::map<std::string, uint64_t> tokenize_outcomes_;   // control thread only
};

// {"code":N,"message":<class message>,"result":<detail>} for an error status.
std::string apiErrorBody(int status, const std::string& detail);

}  // namespace kvgate::admin
