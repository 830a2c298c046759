// JWT checks against tokens signed here with OpenSSL's own signing calls (not the verifier under
// test): RS256 and ES256 accepted with their claims; expired, not yet valid, wrong issuer or
// audience, alg none, HS256 signed with the public key as its secret (algorithm confusion),
// oversized, unknown kid, no exp, tampered and foreign-key tokens refused; a stale keyset fails
// closed. JWKS and profile parsing refuse what they must.
#include "governance/jwt_auth.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace kvgate::governance {
namespace {

using json = nlohmann::json;

std::string b64u(const std::string& in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string s;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    s += a[v >> 18], s += a[(v >> 12) & 63], s += a[(v >> 6) & 63], s += a[v & 63];
  }
  if (in.size() - i == 1) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    s += a[v >> 18], s += a[(v >> 12) & 63];
  } else if (in.size() - i == 2) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8;
    s += a[v >> 18], s += a[(v >> 12) & 63], s += a[(v >> 6) & 63];
  }
  return s;
}

std::string bnBytes(EVP_PKEY* k, const char* name, size_t pad = 0) {
  BIGNUM* bn = nullptr;
  EVP_PKEY_get_bn_param(k, name, &bn);
  std::string out(std::max<size_t>(pad, size_t(BN_num_bytes(bn))), '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), int(out.size()));
  BN_free(bn);
  return out;
}

int64_t now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Keys {
  EVP_PKEY* rsa = EVP_RSA_gen(2048);
  EVP_PKEY* rsa2 = EVP_RSA_gen(2048);
  EVP_PKEY* ec = EVP_EC_gen("P-256");
  ~Keys() {
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(rsa2);
    EVP_PKEY_free(ec);
  }
  std::string jwks() const {
    json rk = {{"kty", "RSA"}, {"kid", "r1"}, {"alg", "RS256"},
               {"n", b64u(bnBytes(rsa, OSSL_PKEY_PARAM_RSA_N))},
               {"e", b64u(bnBytes(rsa, OSSL_PKEY_PARAM_RSA_E))}};
    json ek = {{"kty", "EC"}, {"kid", "e1"}, {"crv", "P-256"},
               {"x", b64u(bnBytes(ec, OSSL_PKEY_PARAM_EC_PUB_X, 32))},
               {"y", b64u(bnBytes(ec, OSSL_PKEY_PARAM_EC_PUB_Y, 32))}};
    json oct = {{"kty", "oct"}, {"kid", "h1"}, {"k", b64u("secret")}};
    return json{{"keys", {rk, ek, oct}}}.dump();
  }
};

std::string sign(EVP_PKEY* k, const std::string& input, bool ec) {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  size_t n = 0;
  EVP_DigestSignInit(c, nullptr, EVP_sha256(), nullptr, k);
  EVP_DigestSign(c, nullptr, &n, reinterpret_cast<const unsigned char*>(input.data()), input.size());
  std::string sig(n, '\0');
  EVP_DigestSign(c, reinterpret_cast<unsigned char*>(sig.data()), &n,
                 reinterpret_cast<const unsigned char*>(input.data()), input.size());
  sig.resize(n);
  EVP_MD_CTX_free(c);
  if (!ec) return sig;
  // JWS ES256 wants r || s (32 bytes each), not DER.
  const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
  ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, long(sig.size()));
  std::string raw(64, '\0');
  BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
  BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
  ECDSA_SIG_free(es);
  return raw;
}

std::string token(EVP_PKEY* k, const json& header, const json& claims, bool ec = false) {
  const std::string input = b64u(header.dump()) + "." + b64u(claims.dump());
  return input + "." + b64u(sign(k, input, ec));
}

std::string pemOf(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PUBKEY(b, k);
  char* p = nullptr;
  long n = BIO_get_mem_data(b, &p);
  std::string s(p, size_t(n));
  BIO_free(b);
  return s;
}

struct JwtTest : ::testing::Test {
  Keys keys;
  JwtProfile prof;
  JwtKeyset ks;
  json claims;
  void SetUp() override {
    prof.name = "p";
    prof.issuer = "https://idp.example";
    prof.audiences = {"kvgate"};
    prof.jwks_file = "unused";
    auto k = parseJwks(keys.jwks());
    ASSERT_TRUE(k) << k.error().what;
    ks.keys = *k;
    ks.loaded_at_s = now();
    claims = {{"iss", "https://idp.example"}, {"aud", "kvgate"}, {"sub", "alice"},
              {"tenant", "acme"}, {"exp", now() + 3600}};
  }
  JwtCheck check(const std::string& t) { return verifyJwt(prof, ks, t, now()); }
};

TEST_F(JwtTest, JwksKeepsRsaAndP256AndSkipsHmacKeys) {
  ASSERT_EQ(ks.keys.size(), 2u);
  EXPECT_EQ(ks.keys[0].alg, "RS256");
  EXPECT_EQ(ks.keys[0].pem, pemOf(keys.rsa));  // the same public key OpenSSL writes
  EXPECT_EQ(ks.keys[1].alg, "ES256");
  EXPECT_EQ(ks.keys[1].pem, pemOf(keys.ec));
  // Well-formed sets with nothing trusted are empty (authoritative: an emptied file revokes).
  EXPECT_TRUE(parseJwks(R"({"keys":[{"kty":"oct","k":"c2VjcmV0"}]})")->empty());
  EXPECT_TRUE(parseJwks(R"({"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]})")->empty());  // tiny n
  // The same RSA modulus with e = 3, and padded with zero bytes to look like 2048 bits: refused.
  json rk = json::parse(keys.jwks())["keys"][0];
  rk["e"] = b64u(std::string(1, '\x03'));
  EXPECT_TRUE(parseJwks(json{{"keys", {rk}}}.dump())->empty());
  EXPECT_FALSE(parseJwks("{"));
  EXPECT_FALSE(parseJwks(R"({"keys":{}})"));
}

TEST_F(JwtTest, ValidRs256AndEs256TokensCarryTheirClaims) {
  auto c = check(token(keys.rsa, {{"alg", "RS256"}, {"kid", "r1"}, {"typ", "JWT"}}, claims));
  EXPECT_EQ(c.verdict, JwtVerdict::kOk) << c.why;
  EXPECT_EQ(c.tenant, "acme");
  EXPECT_EQ(c.user, "alice");
  c = check(token(keys.ec, {{"alg", "ES256"}, {"kid", "e1"}}, claims, true));
  EXPECT_EQ(c.verdict, JwtVerdict::kOk) << c.why;
  // aud as an array naming us; no kid with one key of the algorithm.
  claims["aud"] = {"other", "kvgate"};
  c = check(token(keys.ec, {{"alg", "ES256"}}, claims, true));
  EXPECT_EQ(c.verdict, JwtVerdict::kOk) << c.why;
}

TEST_F(JwtTest, EachBadVariantIsRefused) {
  const json h = {{"alg", "RS256"}, {"kid", "r1"}};
  json c = claims;
  c["exp"] = now() - 3600;
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kExpired);
  c = claims;
  c["nbf"] = now() + 3600;
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kInvalid);
  c = claims;
  c["aud"] = "someone-else";
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kInvalid);
  c = claims;
  c["iss"] = "https://evil.example";
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kInvalid);
  c = claims;
  c.erase("exp");
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kInvalid);
  // alg none, unsigned.
  const std::string none = b64u(json{{"alg", "none"}}.dump()) + "." + b64u(claims.dump()) + ".";
  EXPECT_EQ(check(none).verdict, JwtVerdict::kInvalid);
  // HS256 whose HMAC secret is the RSA public key's PEM: the algorithm-confusion attack.
  const std::string in = b64u(json{{"alg", "HS256"}, {"kid", "r1"}}.dump()) + "." + b64u(claims.dump());
  const std::string pem = pemOf(keys.rsa);
  unsigned char mac[32];
  unsigned int ml = 0;
  HMAC(EVP_sha256(), pem.data(), int(pem.size()), reinterpret_cast<const unsigned char*>(in.data()),
       in.size(), mac, &ml);
  EXPECT_EQ(check(in + "." + b64u(std::string(reinterpret_cast<char*>(mac), ml))).verdict,
            JwtVerdict::kInvalid);
  // Signed by a key the set does not hold; a kid the set does not hold; tampered claims.
  EXPECT_EQ(check(token(keys.rsa2, h, claims)).verdict, JwtVerdict::kInvalid);
  EXPECT_EQ(check(token(keys.rsa, {{"alg", "RS256"}, {"kid", "zz"}}, claims)).verdict,
            JwtVerdict::kInvalid);
  std::string t = token(keys.rsa, h, claims);
  const size_t d1 = t.find('.'), d2 = t.find('.', d1 + 1);
  json forged = claims;
  forged["tenant"] = "other-tenant";
  EXPECT_EQ(check(t.substr(0, d1 + 1) + b64u(forged.dump()) + t.substr(d2)).verdict,
            JwtVerdict::kInvalid);
  // Oversized (4,089 bytes), missing, garbage.
  json big = claims;
  big["pad"] = std::string(4000, 'x');
  const std::string long_token = token(keys.rsa, h, big);
  ASSERT_GT(long_token.size(), kMaxJwtBytes);
  EXPECT_EQ(check(long_token).verdict, JwtVerdict::kInvalid);
  EXPECT_EQ(check("").verdict, JwtVerdict::kMissing);
  EXPECT_EQ(check("a.b").verdict, JwtVerdict::kInvalid);
  EXPECT_EQ(check("a.b.c.d").verdict, JwtVerdict::kInvalid);
  EXPECT_EQ(check("!!!.???.***").verdict, JwtVerdict::kInvalid);
  // Claims cpp-jwt would misread before checking the signature: a name with a NUL that strcmp
  // takes for "exp", a float exp, a string exp, an nbf before the skew.
  json nul = claims;
  nul.erase("exp");
  nul[std::string("exp\0x", 5)] = 1;
  const std::string nul_in = b64u(h.dump()) + "." + b64u(nul.dump());
  EXPECT_EQ(check(nul_in + ".AAAA").verdict, JwtVerdict::kInvalid);
  for (const json& bad_exp : {json(1e300), json("9999999999"), json(-1)}) {
    json c2 = claims;
    c2["exp"] = bad_exp;
    EXPECT_EQ(check(token(keys.rsa, h, c2)).verdict, JwtVerdict::kInvalid) << bad_exp.dump();
  }
  c = claims;
  c["nbf"] = 5;
  EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kInvalid);
  // A profile limited to ES256 refuses an otherwise good RS256 token.
  prof.algorithms = {"ES256"};
  EXPECT_EQ(check(token(keys.rsa, h, claims)).verdict, JwtVerdict::kInvalid);
}

// Issue 28 §1.8: a token without the tenant (or user) claim escaped every tenant (user) limit.
// By default it is refused; a profile that says missing_claims "allow" admits it without that
// identity.
TEST_F(JwtTest, MissingIdentityClaimsAreRefusedUnlessAllowed) {
  const json h = {{"alg", "RS256"}, {"kid", "r1"}};
  for (const char* drop : {"tenant", "sub"}) {
    json c = claims;
    c.erase(drop);
    auto r = check(token(keys.rsa, h, c));
    EXPECT_EQ(r.verdict, JwtVerdict::kMissingClaim) << drop;
    EXPECT_NE(r.why.find(drop), std::string::npos) << r.why;
    EXPECT_TRUE(r.tenant.empty() && r.user.empty());
    c[drop] = json::array({"x"});  // not a string or an integer: no identity either
    EXPECT_EQ(check(token(keys.rsa, h, c)).verdict, JwtVerdict::kMissingClaim) << drop;
  }
  json c = claims;
  c["tenant"] = 42;  // an integer names the tenant "42"
  auto r = check(token(keys.rsa, h, c));
  EXPECT_EQ(r.verdict, JwtVerdict::kOk) << r.why;
  EXPECT_EQ(r.tenant, "42");
  prof.reject_missing_claims = false;
  c.erase("tenant");
  r = check(token(keys.rsa, h, c));
  EXPECT_EQ(r.verdict, JwtVerdict::kOk) << r.why;
  EXPECT_EQ(r.tenant, "");
  EXPECT_EQ(r.user, "alice");
  // The profile field: parsed, stored, and refused when it is anything else.
  auto p = parseProfile(R"({"name":"p","issuer":"i","jwks_file":"f","missing_claims":"allow"})");
  ASSERT_TRUE(p) << p.error().what;
  EXPECT_FALSE(p->reject_missing_claims);
  EXPECT_NE(profileJson(*p).find(R"("missing_claims":"allow")"), std::string::npos);
  p = parseProfile(R"({"name":"p","issuer":"i","jwks_file":"f"})");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->reject_missing_claims);  // the default
  for (const char* bad : {R"("ignore")", "true", "null", R"("")"}) {
    auto e = parseProfile(std::string(R"({"name":"p","issuer":"i","jwks_file":"f","missing_claims":)") +
                          bad + "}");
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().source, "missing_claims");
  }
}

TEST_F(JwtTest, AStaleKeysetFailsClosed) {
  const std::string t = token(keys.rsa, {{"alg", "RS256"}, {"kid", "r1"}}, claims);
  ks.loaded_at_s = now() - kMaxKeysetAgeS - 10;
  EXPECT_EQ(check(t).verdict, JwtVerdict::kStale);
  ks.loaded_at_s = 0;
  EXPECT_EQ(check(t).verdict, JwtVerdict::kStale);
}

TEST(JwtProfileParse, RefusesWhatItMust) {
  auto p = parseProfile(R"({"name":"corp","jwks_file":"/etc/jwks.json","audience":["a","b"],
                            "issuer":"i","algorithms":["ES256"],"clock_skew_sec":30})");
  ASSERT_TRUE(p) << p.error().what;
  EXPECT_EQ(p->audiences.size(), 2u);
  EXPECT_EQ(p->algorithms, std::vector<std::string>{"ES256"});
  EXPECT_EQ(p->clock_skew_sec, 30u);
  EXPECT_EQ(p->tenant_claim, "tenant");
  for (const char* bad : {R"({"jwks_file":"f","issuer":"i"})", R"({"name":"x","issuer":"i"})",
                          R"({"name":"x","jwks_file":"f"})",  // neither issuer nor audience
                          R"({"name":"x","jwks_file":"f","audience":""})",
                          R"({"name":"x","jwks_file":"f","audience":[]})",
                          R"({"name":"x","jwks_file":"f","issuer":"i","algorithms":["HS256"]})",
                          R"({"name":"x","jwks_file":"f","issuer":"i","algorithms":["none"]})",
                          R"({"name":"x","jwks_file":"f","issuer":"i","clock_skew_sec":-1})",
                          R"({"name":"x y","jwks_file":"f","issuer":"i"})",
                          R"({"name":"x","jwks_file":"f","issuer":"i","z":1})",
                          "[]", "{"}) {
    auto r = parseProfile(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_FALSE(r.error().what.empty());
    }
  }
}

}  // namespace
}  // namespace kvgate::governance
