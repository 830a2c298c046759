// Fuzz target: the JWT check (governance/jwt_auth.cc) and its JWKS and profile parsers. The first
// byte picks: 0-1 a bearer token against a fixed profile whose keyset holds an RSA and an EC key
// (built once at start-up), 2 a JWKS document, 3 a profile body, 4 the claims JSON of a token
// with a valid header for the RSA key (so the bytes reach cpp-jwt's claim checks, which run
// before its signature check).
// Properties: nothing crashes; no input verifies (the fuzzer holds no private key: an accepted
// token would be a forgery such as alg none or algorithm confusion); a token over 4,088 bytes is
// refused; parsed JWKS keys are RS256/ES256 with a PEM; parsed profiles accept RS256/ES256 only.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "governance/jwt_auth.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

std::string b64u(const std::string& in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string s;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint8_t(in[i + 2]);
    s += a[v >> 18], s += a[(v >> 12) & 63];
    if (i + 1 < in.size()) s += a[(v >> 6) & 63];
    if (i + 2 < in.size()) s += a[v & 63];
  }
  return s;
}

std::string bn(EVP_PKEY* k, const char* name, size_t pad) {
  BIGNUM* b = nullptr;
  EVP_PKEY_get_bn_param(k, name, &b);
  std::string out(std::max<size_t>(pad, size_t(BN_num_bytes(b))), '\0');
  BN_bn2binpad(b, reinterpret_cast<unsigned char*>(out.data()), int(out.size()));
  BN_free(b);
  return out;
}

struct Fixed {
  kvgate::governance::JwtProfile profile;
  kvgate::governance::JwtKeyset keyset;
  Fixed() {
    EVP_PKEY* rsa = EVP_RSA_gen(2048);
    EVP_PKEY* ec = EVP_EC_gen("P-256");
    const std::string jwks =
        R"({"keys":[{"kty":"RSA","kid":"r1","n":")" + b64u(bn(rsa, OSSL_PKEY_PARAM_RSA_N, 0)) +
        R"(","e":")" + b64u(bn(rsa, OSSL_PKEY_PARAM_RSA_E, 0)) +
        R"("},{"kty":"EC","kid":"e1","crv":"P-256","x":")" +
        b64u(bn(ec, OSSL_PKEY_PARAM_EC_PUB_X, 32)) + R"(","y":")" +
        b64u(bn(ec, OSSL_PKEY_PARAM_EC_PUB_Y, 32)) + R"("}]})";
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);
    auto keys = kvgate::governance::parseJwks(jwks);
    check(keys.has_value() && keys->size() == 2);
    keyset.keys = *keys;
    profile.name = "f";
    profile.jwks_file = "-";
    profile.audiences = {"kvgate"};
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::governance;
  static Fixed fx;
  if (size < 1) return 0;
  const std::string in(reinterpret_cast<const char*>(data + 1), size - 1);
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  switch (data[0] % 5) {
    case 0:
    case 1: {
      fx.keyset.loaded_at_s = now;
      JwtCheck c = verifyJwt(fx.profile, fx.keyset, in, now);
      check(c.verdict != JwtVerdict::kOk);
      if (in.size() > kMaxJwtBytes) check(c.verdict == JwtVerdict::kInvalid);
      break;
    }
    case 4: {
      fx.keyset.loaded_at_s = now;
      const std::string t = b64u(R"({"alg":"RS256","kid":"r1"})") + "." + b64u(in) + ".AAAA";
      check(verifyJwt(fx.profile, fx.keyset, t, now).verdict != JwtVerdict::kOk);
      break;
    }
    case 2: {
      auto keys = parseJwks(in);
      if (keys)
        for (const auto& k : *keys) check((k.alg == "RS256" || k.alg == "ES256") && !k.pem.empty());
      else
        check(!keys.error().what.empty());
      break;
    }
    default: {
      auto p = parseProfile(in);
      if (p) {
        check(!p->name.empty() && !p->jwks_file.empty() && !p->algorithms.empty());
        for (const auto& a : p->algorithms) check(a == "RS256" || a == "ES256");
      }
    }
  }
  return 0;
}
