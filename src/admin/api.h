// The management REST API (/netlox/v1/config/loadbalancer...), compatible with the upstream
// gateway: responses {"result":"Success"}, errors {"code","message","result"} with the same HTTP
// status. See docs/rest-api.md.
#pragma once
#include "admin/rule_store.h"
#include "http/server.h"

namespace kvgate::admin {

class Api {
 public:
  explicit Api(RuleStore& store) : store_(store) {}
  asio::awaitable<void> handle(http::Request& req, http::ResponseWriter& w);

 private:
  RuleStore& store_;
};

// {"code":N,"message":<class message>,"result":<detail>} for an error status.
std::string apiErrorBody(int status, const std::string& detail);

}  // namespace kvgate::admin
