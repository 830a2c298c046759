// The request filter chain of a rule (request_filter.h): one line per filter, in the order they
// run. A new gate is its file under src/proxy/filters/ and its line here.
#include "proxy/filters/credentials.h"
#include "proxy/filters/quota.h"

namespace kvgate::proxy {

std::vector<RequestFilter> requestFilters(const config::RuleSpec& rule) {
  std::vector<RequestFilter> chain;
  if (checksCredentials(rule)) chain.push_back({"credentials", &credentialsFilter});
  // (every rule: shared-VIP limits can appear without a rule commit; applies() decides)
  chain.push_back({"quota", nullptr, &quotaApplies, &quotaFilter});
  return chain;
}

}  // namespace kvgate::proxy
