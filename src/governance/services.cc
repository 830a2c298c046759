// The process-wide governance services (services.h).
#include "governance/services.h"

#include "governance/api_keys.h"
#include "governance/jwt_auth.h"
#include "governance/limits.h"
#include "governance/quota.h"
#include "governance/redis_counters.h"

namespace kvgate::governance {

Services Services::processWide() {
  Services s;
  s.keys = &keyRegistry();
  s.jwt = &jwtRegistry();
  s.limits = &limitRegistry();
  s.ledger = &quotaLedger();
  s.quota_metrics = &quotaMetrics();
  s.shared = redisCounters();
  return s;
}

}  // namespace kvgate::governance
