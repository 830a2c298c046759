// The quota filter: the request's buckets reserve its tokens before it is routed, and the
// reservation is settled with the engine's usage when the request ends (the law, the estimate
// and the settlement rules: quota.cc's header). Applies where a quota may: the listener checks
// credentials, or shared-VIP limits exist (FilterEnv::metered). Knobs: serve --quota-max-tokens
// (the max_tokens a request that names none reserves), --models-dir (prompt estimate by the
// model's tokenizer), --redis (buckets shared by replicas).
#pragma once
#include <cstdint>

#include "proxy/filters/request_filter.h"

namespace kvgate::proxy {

bool quotaApplies(const FilterEnv& env);
// Admits (rq.quota holds the reservation; rq.quota_body the body with include_usage added when
// rq.quota.inject) or names the 429/503 to answer.
asio::awaitable<Verdict> quotaFilter(FilterEnv& env);
// Returns the reservation and charges the usage the relay saw, or an estimate (once; a no-op
// without a reservation). `client_gone`: the client left before the answer ended.
void settleQuota(RequestCtx& rq, const governance::Services& gov, bool client_gone,
                 int64_t now_ns);

}  // namespace kvgate::proxy
