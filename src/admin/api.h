// The management REST API (/netlox/v1/config/loadbalancer...), compatible with the upstream
// gateway: responses {"result":"Success"}, errors {"code","message","result"} with the same HTTP
// status. See docs/rest-api.md.
#pragma once
#include <functional>
#include <string>

#include "admin/rule_store.h"
#include "http/server.h"

namespace kvgate::admin {

class Api {
 public:
  using MetricsFn = std::function<std::string()>;
  Api(RuleStore& store, MetricsFn metrics) : store_(store), metrics_(std::move(metrics)) {}
  asio::awaitable<void> handle(http::Request& req, http::ResponseWriter& w);

 private:
  RuleStore& store_;
  MetricsFn metrics_;
};

// {"code":N,"message":<class message>,"result":<detail>} for an error status.
std::string apiErrorBody(int status, const std::string& detail);

}  // namespace kvgate::admin
