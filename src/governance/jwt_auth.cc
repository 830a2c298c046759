#include "governance/jwt_auth.h"

#include <boost/asio/ip/address.hpp>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <algorithm>
#include <jwt/jwt.hpp>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace kvgate::governance {

namespace {
using json = nlohmann::json;

// cpp-jwt's base64 decoder indexes a table with each byte unchecked (an assert in debug
// builds, an out-of-bounds read in release ones: found by the jwt fuzz target): nothing reaches
// it that is not base64url.
bool isB64url(std::string_view s) {
  for (char c : s)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return false;
  return true;
}

std::string b64url(std::string_view s) {
  if (!isB64url(s)) return {};
  try {
    return jwt::base64_uri_decode(s.data(), s.size());
  } catch (...) {
    return {};
  }
}

std::string pemOf(EVP_PKEY* k) {
  BIO* bio = BIO_new(BIO_s_mem());
  std::string out;
  if (bio && PEM_write_bio_PUBKEY(bio, k) == 1) {
    char* p = nullptr;
    long n = BIO_get_mem_data(bio, &p);
    if (n > 0) out.assign(p, size_t(n));
  }
  BIO_free(bio);
  return out;
}

// A public key of `type` ("RSA", "EC") from the parameters in `bld` (freed here), as PEM when
// OpenSSL's public-key check passes (a point on the curve, a sane modulus); "" otherwise.
std::string pemFromParams(const char* type, OSSL_PARAM_BLD* bld) {
  std::string out;
  OSSL_PARAM* params = bld ? OSSL_PARAM_BLD_to_param(bld) : nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr);
  EVP_PKEY* key = nullptr;
  if (params && ctx && EVP_PKEY_fromdata_init(ctx) == 1 &&
      EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1) {
    EVP_PKEY_CTX* check = EVP_PKEY_CTX_new_from_pkey(nullptr, key, nullptr);
    if (check && EVP_PKEY_public_check(check) == 1) out = pemOf(key);
    EVP_PKEY_CTX_free(check);
  }
  EVP_PKEY_free(key);
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  return out;
}

// RSA public key from the JWK's n and e (big-endian unsigned, base64url-decoded).
std::string rsaPem(const std::string& n, const std::string& e) {
  BIGNUM* bn = BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()), int(n.size()), nullptr);
  BIGNUM* be = BN_bin2bn(reinterpret_cast<const unsigned char*>(e.data()), int(e.size()), nullptr);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  const bool ok = bn && be && bld && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) == 1 &&
                  OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be) == 1;
  std::string out = ok ? pemFromParams("RSA", bld) : std::string();
  if (!ok) OSSL_PARAM_BLD_free(bld);
  BN_free(bn);  // (after the key is built: the builder refers to them)
  BN_free(be);
  return out;
}

// EC P-256 public key from the JWK's x and y (32 bytes each).
std::string ecPem(const std::string& x, const std::string& y) {
  if (x.size() != 32 || y.size() != 32) return {};
  const std::string point = std::string(1, '\x04') + x + y;
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  const bool ok =
      bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) == 1 &&
      OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size()) == 1;
  if (!ok) {
    OSSL_PARAM_BLD_free(bld);
    return {};
  }
  return pemFromParams("EC", bld);
}

// RSA keys kvgate trusts: a modulus of 2048-4096 real bits (leading zero bytes do not count;
// 4096 bounds the verify cost an unauthenticated request can cause) and an odd public exponent
// in 65537..2^32-1 (e = 1 or 3 invite forgeries and broken keys).
bool rsaAcceptable(const std::string& n, const std::string& e) {
  if (n.empty() || e.empty() || e.size() > 4) return false;
  BIGNUM* bn = BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()), int(n.size()), nullptr);
  const int bits = bn ? BN_num_bits(bn) : 0;
  BN_free(bn);
  uint64_t ev = 0;
  for (unsigned char c : e) ev = ev << 8 | c;
  return bits >= 2048 && bits <= 4096 && (ev & 1) && ev >= 65537;
}

// Every top-level member name printable (cpp-jwt compares claim names with strcmp, so a name
// with a NUL would pass for "exp" and then be looked up as a missing key).
bool cleanNames(const json& o) {
  for (auto it = o.begin(); it != o.end(); ++it)
    if (it.key().find('\0') != std::string::npos) return false;
  return true;
}

// A NumericDate kvgate accepts: an integer in 0..2^53 (no floats, no huge values).
bool numericDate(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= (uint64_t(1) << 53);
  if (v.is_number_integer()) return v.get<int64_t>() >= 0 && v.get<int64_t>() <= (int64_t(1) << 53);
  return false;
}

const json* member(const json& o, const char* k) {
  auto it = o.find(k);
  return it == o.end() ? nullptr : &*it;
}

}  // namespace

Result<std::vector<JwtKey>> parseJwks(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(400, "jwks", "JWKS is not a JSON object");
  const json* keys = member(j, "keys");
  if (!keys || !keys->is_array()) return fail(400, "jwks", "JWKS has no \"keys\" array");
  if (keys->size() > 64) return fail(400, "jwks", "JWKS has more than 64 keys");
  std::vector<JwtKey> out;
  for (const json& k : *keys) {
    if (!k.is_object()) continue;
    auto str = [&](const char* f) -> std::string {
      const json* v = member(k, f);
      return v && v->is_string() ? v->get<std::string>() : std::string();
    };
    if (str("use") == "enc") continue;
    const std::string kty = str("kty"), alg = str("alg"), kid = str("kid");
    if (kid.size() > 256) continue;
    JwtKey key;
    key.kid = kid;
    if (kty == "RSA" && (alg.empty() || alg == "RS256")) {
      const std::string n = b64url(str("n")), e = b64url(str("e"));
      if (!rsaAcceptable(n, e)) continue;
      key.alg = "RS256";
      key.pem = rsaPem(n, e);
    } else if (kty == "EC" && str("crv") == "P-256" && (alg.empty() || alg == "ES256")) {
      key.alg = "ES256";
      key.pem = ecPem(b64url(str("x")), b64url(str("y")));
    } else {
      continue;  // oct (HMAC), other curves and algorithms: never trusted
    }
    if (!key.pem.empty()) out.push_back(std::move(key));
  }
  return out;  // (possibly empty: a valid set with nothing kvgate trusts)
}

Result<JwtProfile> parseProfile(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(400, "body", "body must be a JSON object");
  JwtProfile p;

  for (auto& [k, v] : j.items()) {
    Result<std::string> s;
    if (k == "name" || k == "issuer" || k == "jwks_file" || k == "jwks_url" ||
        k == "jwks_ca_file" || k == "tenant_claim" || k == "user_claim") {
      const bool path_like = k == "jwks_file" || k == "jwks_url" || k == "jwks_ca_file";
      s = jsonString(v, k.c_str(), k == "issuer" ? 0 : 1, path_like ? 4096 : 256);
      if (!s) return tl::unexpected(s.error());
      (k == "name"           ? p.name
       : k == "issuer"       ? p.issuer
       : k == "jwks_file"    ? p.jwks_file
       : k == "jwks_url"     ? p.jwks_url
       : k == "jwks_ca_file" ? p.jwks_ca_file
       : k == "tenant_claim" ? p.tenant_claim
                             : p.user_claim) = *s;
    } else if (k == "audience" || k == "audiences") {
      p.audiences.clear();
      if (v.is_string()) {
        auto one = jsonString(v, "audience", 1, 256);
        if (!one) return tl::unexpected(one.error());
        p.audiences.push_back(*one);
      } else if (v.is_array() && !v.empty() && v.size() <= 64) {
        for (auto& a : v) {
          auto one = jsonString(a, "audience", 1, 256);
          if (!one) return tl::unexpected(one.error());
          p.audiences.push_back(*one);
        }
      } else {
        return fail(400, "audience", "audience must be a string or an array of 1-64 strings");
      }
    } else if (k == "algorithms") {
      if (!v.is_array() || v.empty() || v.size() > 2)
        return fail(400, "algorithms", "algorithms must list RS256 and/or ES256");
      p.algorithms.clear();
      for (auto& a : v) {
        if (!a.is_string() || (a != "RS256" && a != "ES256"))
          return fail(400, "algorithms", "only RS256 and ES256 are accepted (none and HMAC never)");
        p.algorithms.push_back(a.get<std::string>());
      }
    } else if (k == "missing_claims") {
      if (!v.is_string() || (v != "reject" && v != "allow"))
        return fail(400, "missing_claims", "missing_claims must be \"reject\" or \"allow\"");
      p.reject_missing_claims = v == "reject";
    } else if (k == "clock_skew_sec") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 600)
        return fail(400, "clock_skew_sec", "clock_skew_sec must be an integer in 0..600");
      p.clock_skew_sec = static_cast<uint32_t>(v.get<int64_t>());
    } else {
      return fail(400, k, k + ": unknown field");
    }
  }
  if (p.name.empty()) return fail(400, "name", "name is required");
  if (p.jwks_file.empty() == p.jwks_url.empty())
    return fail(400, "jwks_file", "exactly one of jwks_file and jwks_url is required");
  if (!p.jwks_url.empty() && !p.jwks_url.starts_with("https://")) {
    // Plain http only to a loopback address literal (a name could resolve anywhere).
    std::string_view rest = std::string_view(p.jwks_url);
    bool loopback = false;
    if (rest.starts_with("http://")) {
      rest.remove_prefix(7);
      std::string_view host = rest.substr(0, rest.find_first_of("/?#"));
      if (host.starts_with('[')) host = host.substr(1, host.find(']') - 1);
      else host = host.substr(0, host.rfind(':') == std::string_view::npos ? host.size()
                                                                            : host.rfind(':'));
      boost::system::error_code ec;
      const auto a = boost::asio::ip::make_address(std::string(host), ec);
      loopback = !ec && a.is_loopback();
    }
    if (!loopback)
      return fail(400, "jwks_url",
                  "jwks_url must be https:// (plain http:// only to a loopback address such as "
                  "127.0.0.1 or [::1]: keys fetched in the clear could be replaced on the way)");
  }
  if (!p.jwks_ca_file.empty() && p.jwks_url.empty())
    return fail(400, "jwks_ca_file", "jwks_ca_file goes with jwks_url");
  for (const std::string* s : {&p.jwks_url, &p.jwks_file, &p.jwks_ca_file})
    for (unsigned char c : *s)
      if (c < 0x20 || c == 0x7f)
        return fail(400, s == &p.jwks_url ? "jwks_url" : s == &p.jwks_file ? "jwks_file"
                                                                           : "jwks_ca_file",
                    "control bytes are not allowed");
  if (p.issuer.empty() && p.audiences.empty())
    return fail(400, "audience",
                "an issuer or an audience is required (a signature alone accepts every token the "
                "keys' owner ever issued, for any application)");
  for (char c : p.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return fail(400, "name", "name may hold letters, digits, '-', '_' and '.' only");
  return p;
}

std::string profileJson(const JwtProfile& p) {
  json j = {{"name", p.name},       {"issuer", p.issuer},
            {"audience", p.audiences}, {"algorithms", p.algorithms},
            {"tenant_claim", p.tenant_claim}, {"user_claim", p.user_claim},
            {"clock_skew_sec", p.clock_skew_sec},
            {"missing_claims", p.reject_missing_claims ? "reject" : "allow"}};
  if (!p.jwks_file.empty()) j["jwks_file"] = p.jwks_file;
  if (!p.jwks_url.empty()) j["jwks_url"] = p.jwks_url;
  if (!p.jwks_ca_file.empty()) j["jwks_ca_file"] = p.jwks_ca_file;
  return j.dump();
}

const char* jwtVerdictName(JwtVerdict v) {
  switch (v) {
    case JwtVerdict::kOk: return "ok";
    case JwtVerdict::kMissing: return "missing";
    case JwtVerdict::kInvalid: return "invalid";
    case JwtVerdict::kExpired: return "expired";
    case JwtVerdict::kStale: return "stale";
    case JwtVerdict::kNoProfile: return "no_profile";
    case JwtVerdict::kMissingClaim: return "missing_claim";
  }
  return "invalid";
}

JwtCheck verifyJwt(const JwtProfile& p, const JwtKeyset& ks, std::string_view token,
                   int64_t now_s) {
  JwtCheck c;
  auto bad = [&](std::string why) {
    c.verdict = JwtVerdict::kInvalid;
    c.why = std::move(why);
    return c;
  };
  if (token.empty()) {
    c.verdict = JwtVerdict::kMissing;
    c.why = "no bearer token";
    return c;
  }
  if (token.size() > kMaxJwtBytes) return bad("token longer than 4088 bytes");
  if (ks.loaded_at_s == 0 || now_s - ks.loaded_at_s > kMaxKeysetAgeS) {
    c.verdict = JwtVerdict::kStale;
    c.why = "the profile's keyset is not current";
    return c;
  }
  const size_t d1 = token.find('.');
  const size_t d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos)
    return bad("not a compact JWS");
  if (!isB64url(token.substr(0, d1)) || !isB64url(token.substr(d1 + 1, d2 - d1 - 1)) ||
      !isB64url(token.substr(d2 + 1)))
    return bad("not base64url");
  // The header alone first: the algorithm and key are chosen from the profile, not the token.
  json h = json::parse(b64url(token.substr(0, d1)), nullptr, false);
  if (h.is_discarded() || !h.is_object() || !cleanNames(h)) return bad("unreadable header");
  // The claims too, before cpp-jwt sees them: an object with clean names, exp (required) and nbf
  // integers (cpp-jwt reads them as unsigned before it checks the signature).
  {
    json pl = json::parse(b64url(token.substr(d1 + 1, d2 - d1 - 1)), nullptr, false);
    if (pl.is_discarded() || !pl.is_object() || !cleanNames(pl)) return bad("unreadable claims");
    const json* exp = member(pl, "exp");
    if (!exp || !numericDate(*exp)) return bad("no exp claim, or not an integer date");
    const json* nbf = member(pl, "nbf");
    if (nbf && !numericDate(*nbf)) return bad("nbf is not an integer date");
    if (nbf && nbf->get<int64_t>() < int64_t(p.clock_skew_sec))
      return bad("nbf before the epoch plus the clock skew");
  }
  const json* alg = member(h, "alg");
  if (!alg || !alg->is_string()) return bad("no alg");
  const std::string a = alg->get<std::string>();
  if (std::find(p.algorithms.begin(), p.algorithms.end(), a) == p.algorithms.end())
    return bad("algorithm " + a.substr(0, 16) + " not accepted");
  const json* kid = member(h, "kid");
  const bool has_kid = kid && kid->is_string();
  std::vector<const JwtKey*> cands;
  for (const auto& k : ks.keys)
    if (k.alg == a && (!has_kid || k.kid == kid->get_ref<const std::string&>())) cands.push_back(&k);
  if (cands.empty()) return bad("no key for this token");
  if (cands.size() > 1 && !has_kid) return bad("no kid and several keys");
  const JwtKey* key = cands.front();
  json claims;
  try {
    std::error_code ec;
    auto obj = jwt::decode(jwt::string_view(token.data(), token.size()), jwt::params::algorithms({a}),
                           ec, jwt::params::secret(key->pem), jwt::params::verify(true),
                           jwt::params::leeway(p.clock_skew_sec));
    if (ec) {
      if (ec == jwt::VerificationErrc::TokenExpired) {
        c.verdict = JwtVerdict::kExpired;
        c.why = "the token has expired";
        return c;
      }
      return bad(ec == jwt::VerificationErrc::ImmatureSignature ? "the token is not valid yet"
                                                                 : "signature or format refused");
    }
    claims = obj.payload().create_json_obj();
  } catch (const std::exception&) {
    return bad("signature or format refused");
  }
  if (!claims.is_object()) return bad("claims are not an object");
  const json* exp = member(claims, "exp");
  if (!exp || !exp->is_number()) return bad("no exp claim");  // a token must end
  if (!p.issuer.empty()) {
    const json* iss = member(claims, "iss");
    if (!iss || !iss->is_string() || iss->get<std::string>() != p.issuer) return bad("wrong issuer");
  }
  if (!p.audiences.empty()) {
    const json* aud = member(claims, "aud");
    bool ok = false;
    auto named = [&](const json& v) {
      return v.is_string() &&
             std::find(p.audiences.begin(), p.audiences.end(), v.get<std::string>()) != p.audiences.end();
    };
    if (aud && aud->is_string()) ok = named(*aud);
    else if (aud && aud->is_array())
      for (const auto& x : *aud) ok = ok || named(x);
    if (!ok) return bad("wrong audience");
  }
  auto claimStr = [&](const std::string& name) -> std::string {
    const json* v = member(claims, name.c_str());
    if (!v) return {};
    if (v->is_string()) return v->get<std::string>().substr(0, 256);
    if (v->is_number_integer()) return std::to_string(v->get<int64_t>());
    return {};
  };
  c.tenant = claimStr(p.tenant_claim);
  c.user = claimStr(p.user_claim);
  if (p.reject_missing_claims && (c.tenant.empty() || c.user.empty())) {
    c.verdict = JwtVerdict::kMissingClaim;
    c.why = "the token has no '" + (c.tenant.empty() ? p.tenant_claim : p.user_claim) +
            "' claim (a string or an integer), which the profile's limits need "
            "(missing_claims: reject)";
    c.tenant.clear();
    c.user.clear();
    return c;
  }
  c.verdict = JwtVerdict::kOk;
  return c;
}

namespace {
std::atomic<uint64_t> g_jwt[kJwtVerdicts] = {};
}  // namespace

void countJwt(JwtVerdict v) {
  g_jwt[static_cast<size_t>(v) % kJwtVerdicts].fetch_add(1, std::memory_order_relaxed);
}

std::string renderJwtMetrics() {
  std::string s =
      "# HELP kvgate_jwt_checks_total JWT checks of rules with api_key_auth jwt or apikey-or-jwt, "
      "by outcome.\n# TYPE kvgate_jwt_checks_total counter\n";
  for (int i = 0; i < kJwtVerdicts; ++i)
    s += std::string("kvgate_jwt_checks_total{outcome=\"") + jwtVerdictName(JwtVerdict(i)) +
         "\"} " + std::to_string(g_jwt[i].load(std::memory_order_relaxed)) + "\n";
  return s;
}

JwtRegistry& jwtRegistry() {
  static JwtRegistry* r = new JwtRegistry;  // (never destroyed: workers may read at exit)
  return *r;
}

}  // namespace kvgate::governance
