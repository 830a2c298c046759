// JWT bearer tokens (issue 14; upstream-gateway.md §2.4): profiles that say whom to trust, the
// keys from a JWKS file, and the check the data plane runs per request.
//
// Library: cpp-jwt (Debian libcpp-jwt-dev), chosen over libjwt 1.10 because its decode takes an
// explicit algorithm allowlist (a token cannot pick HS256 and have an RSA public key used as its
// HMAC secret), it is C++ over the nlohmann JSON we already use, and it verifies RS256/ES256
// through OpenSSL (including ES256's raw r||s signatures). It checks the signature, the
// algorithm, exp and nbf (with the profile's clock skew); kvgate checks iss and aud (aud may be a
// string or an array, which cpp-jwt does not take) and reads the tenant and user claims. JWKS
// keys (RSA n/e, EC P-256 x/y) become public keys with OpenSSL 3.
//
// Refused before any signature work: tokens over 4,088 bytes, alg none, HMAC (HS*) and any
// algorithm outside the profile's list (RS256, ES256), a kid not in the keyset. A keyset not
// refreshed for 24 h fails closed.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::governance {

inline constexpr size_t kMaxJwtBytes = 4088;
inline constexpr int64_t kMaxKeysetAgeS = 24 * 3600;

struct JwtKey {
  std::string kid;
  std::string alg;  // "RS256" or "ES256": the only algorithm this key verifies
  std::string pem;  // SubjectPublicKeyInfo PEM
};

// A JWKS document ({"keys":[...]}): RSA keys (kty RSA, n, e; alg RS256 or absent) and EC P-256
// keys (kty EC, crv P-256, x, y; alg ES256 or absent). Other keys (symmetric "oct", other
// curves, "use":"enc") are skipped; none usable is an error. At most 64 keys.
Result<std::vector<JwtKey>> parseJwks(std::string_view json);

struct JwtProfile {
  std::string name;
  std::string issuer;                   // "" = any
  std::vector<std::string> audiences;   // empty = any; else the token's aud must name one
  std::string jwks_file;     // the keyset: a JWKS file, or
  std::string jwks_url;      // fetched (https://, or http:// to loopback) every 5 minutes
  std::string jwks_ca_file;  // PEM CAs to verify jwks_url's server (default: the system's)
  std::vector<std::string> algorithms{"RS256", "ES256"};
  std::string tenant_claim = "tenant";  // copied to the request's tenant
  std::string user_claim = "sub";
  uint32_t clock_skew_sec = 60;
  // A token without the tenant or the user claim would escape that kind's limits: "reject"
  // (default) refuses it (401 invalid_token, outcome missing_claim); "allow" admits it without
  // that identity (then only its other buckets apply).
  bool reject_missing_claims = true;
};
// From the management API's JSON (unknown fields refused; the error names the field).
Result<JwtProfile> parseProfile(std::string_view json);
std::string profileJson(const JwtProfile& p);

struct JwtKeyset {
  std::vector<JwtKey> keys;
  int64_t loaded_at_s = 0;  // last successful load (0: never)
  std::string error;        // the last load's error, if it failed
};

enum class JwtVerdict { kOk, kMissing, kInvalid, kExpired, kStale, kNoProfile, kMissingClaim };
constexpr int kJwtVerdicts = 7;
// ok, missing, invalid, expired, stale, no_profile, missing_claim
const char* jwtVerdictName(JwtVerdict v);

struct JwtCheck {
  JwtVerdict verdict = JwtVerdict::kMissing;
  std::string why;  // for the error message (never the token)
  std::string tenant, user;
};
// `now_s`: unix seconds for the keyset's age, iss/aud are clock-free; exp/nbf are checked by
// cpp-jwt against the system clock with the profile's skew.
JwtCheck verifyJwt(const JwtProfile& p, const JwtKeyset& ks, std::string_view token, int64_t now_s);

// Profiles and their keysets as the data plane sees them: replaced whole on every change.
struct JwtTable {
  bool loaded = false;
  struct Entry {
    JwtProfile profile;
    std::shared_ptr<const JwtKeyset> keyset;
  };
  std::map<std::string, Entry, std::less<>> by_name;
};

class JwtRegistry {
 public:
  std::shared_ptr<const JwtTable> current() const { return t_.load(std::memory_order_acquire); }
  void publish(std::shared_ptr<const JwtTable> t) { t_.store(std::move(t), std::memory_order_release); }

 private:
  std::atomic<std::shared_ptr<const JwtTable>> t_{std::make_shared<const JwtTable>()};
};
JwtRegistry& jwtRegistry();

// kvgate_jwt_checks_total{outcome}: a verdict's name per check on jwt / apikey-or-jwt rules.
void countJwt(JwtVerdict v);
std::string renderJwtMetrics();

}  // namespace kvgate::governance
