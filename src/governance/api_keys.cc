#include "governance/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <stdexcept>

namespace kvgate::governance {

namespace {

std::string randomBytes(size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(n)) != 1)
    throw std::runtime_error("RAND_bytes failed");
  return s;
}

std::string hex(std::string_view b) {
  static constexpr char kD[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += kD[c >> 4], s += kD[c & 15];
  return s;
}

std::string base64url(std::string_view b) {
  static constexpr char kA[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string s;
  size_t i = 0;
  for (; i + 3 <= b.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(b[i])) << 16 | uint32_t(uint8_t(b[i + 1])) << 8 | uint8_t(b[i + 2]);
    s += kA[v >> 18], s += kA[(v >> 12) & 63], s += kA[(v >> 6) & 63], s += kA[v & 63];
  }
  if (b.size() - i == 1) {
    uint32_t v = uint32_t(uint8_t(b[i])) << 16;
    s += kA[v >> 18], s += kA[(v >> 12) & 63];
  } else if (b.size() - i == 2) {
    uint32_t v = uint32_t(uint8_t(b[i])) << 16 | uint32_t(uint8_t(b[i + 1])) << 8;
    s += kA[v >> 18], s += kA[(v >> 12) & 63], s += kA[(v >> 6) & 63];
  }
  return s;
}

bool isHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

bool ApiKey::allows(std::string_view model) const {
  if (deny_all) return false;
  if (allowed_models.empty()) return true;
  return std::find(allowed_models.begin(), allowed_models.end(), model) != allowed_models.end();
}

const char* verdictName(KeyVerdict v) {
  switch (v) {
    case KeyVerdict::kOk: return "ok";
    case KeyVerdict::kMissing: return "missing";
    case KeyVerdict::kMalformed: return "malformed";
    case KeyVerdict::kUnknown: return "unknown";
    case KeyVerdict::kBadSecret: return "bad_secret";
    case KeyVerdict::kDisabled: return "disabled";
    case KeyVerdict::kExpired: return "expired";
  }
  return "unknown";
}

std::string hashSecret(std::string_view salt, std::string_view secret) {
  std::string in;
  in.reserve(salt.size() + secret.size());
  in.append(salt).append(secret);
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  unsigned int n = 0;
  if (EVP_Digest(in.data(), in.size(), reinterpret_cast<unsigned char*>(out.data()), &n,
                 EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest failed");
  return out;
}

std::string mintKey(ApiKey& k) {
  k.key_id = hex(randomBytes(8));
  k.salt = randomBytes(16);
  const std::string secret = base64url(randomBytes(32));
  k.hash = hashSecret(k.salt, secret);
  return "kvg-" + k.key_id + "-" + secret;
}

std::string_view requestKey(std::string_view x_api_key, std::string_view authorization) {
  if (!x_api_key.empty()) return x_api_key;
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() > kBearer.size()) {
    bool match = true;
    for (size_t i = 0; i < kBearer.size(); ++i)
      match = match && (authorization[i] | 0x20) == kBearer[i];
    if (match) {
      std::string_view v = authorization.substr(kBearer.size());
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      return v;
    }
  }
  return {};
}

bool carriesKey(std::string_view x_api_key, std::string_view authorization) {
  return !x_api_key.empty() || requestKey({}, authorization).starts_with("kvg-");
}

KeyCheck checkKey(const KeyTable& table, std::string_view raw, int64_t now_s) {
  if (raw.empty()) return {KeyVerdict::kMissing, nullptr};
  // kvg-<16 hex>-<43 base64url>
  if (raw.size() != 4 + 16 + 1 + 43 || raw.substr(0, 4) != "kvg-" || raw[20] != '-' ||
      !isHex(raw.substr(4, 16)))
    return {KeyVerdict::kMalformed, nullptr};
  auto it = table.by_id.find(std::string(raw.substr(4, 16)));
  if (it == table.by_id.end()) return {KeyVerdict::kUnknown, nullptr};
  const ApiKey& k = *it->second;
  const std::string h = hashSecret(k.salt, raw.substr(21));
  if (h.size() != k.hash.size() || CRYPTO_memcmp(h.data(), k.hash.data(), h.size()) != 0)
    return {KeyVerdict::kBadSecret, nullptr};
  if (!k.enabled) return {KeyVerdict::kDisabled, &k};
  if (k.expires_at > 0 && now_s >= k.expires_at) return {KeyVerdict::kExpired, &k};
  return {KeyVerdict::kOk, &k};
}

namespace {
std::array<std::atomic<uint64_t>, kCheckOutcomeCount> g_checks{};
}  // namespace

void countCheck(size_t outcome) {
  if (outcome < kCheckOutcomeCount) g_checks[outcome].fetch_add(1, std::memory_order_relaxed);
}

std::string renderKeyMetrics() {
  std::string s =
      "# HELP kvgate_api_key_checks_total API key checks of rules with api_key_auth required, by "
      "outcome.\n# TYPE kvgate_api_key_checks_total counter\n";
  for (size_t i = 0; i < kCheckOutcomeCount; ++i)
    s += std::string("kvgate_api_key_checks_total{outcome=\"") + kCheckOutcomes[i] + "\"} " +
         std::to_string(g_checks[i].load(std::memory_order_relaxed)) + "\n";
  return s;
}

KeyRegistry& keyRegistry() {
  static KeyRegistry* r = new KeyRegistry;  // (never destroyed: workers may read at exit)
  return *r;
}

}  // namespace kvgate::governance
