#include "http/tls.h"

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <cstring>

#include "common/log.h"

namespace kvgate::http {

namespace {


// ALPN: the server speaks HTTP/1.1 only; a client offering it (or nothing) proceeds, one offering
// only other protocols gets no ALPN answer (and falls back as the protocol says).
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void*) {
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int n = in[i];
    if (i + 1 + n > inlen) break;
    if (n == 8 && std::memcmp(in + i + 1, "http/1.1", 8) == 0) {
      *out = in + i + 1;
      *outlen = 8;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + n;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

TlsFiles::Stamp TlsFiles::stamp() const {
  Stamp s;
  struct stat c {}, k {};
  if (::stat(cert_.c_str(), &c) != 0 || ::stat(key_.c_str(), &k) != 0) return s;
  s.cert_mtime = int64_t(c.st_mtim.tv_sec) * 1'000'000'000 + c.st_mtim.tv_nsec;
  s.key_mtime = int64_t(k.st_mtim.tv_sec) * 1'000'000'000 + k.st_mtim.tv_nsec;
  s.cert_size = int64_t(c.st_size);
  s.key_size = int64_t(k.st_size);
  s.cert_ino = uint64_t(c.st_ino);
  s.key_ino = uint64_t(k.st_ino);
  return s;
}

Result<std::shared_ptr<asio::ssl::context>> TlsFiles::build(const std::string& cert,
                                                            const std::string& key) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  error_code ec;
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                   ec);
  if (!ec) ctx->use_certificate_chain_file(cert, ec);
  if (ec) return fail(400, "tls_cert", "certificate " + cert + ": " + ec.message());
  ctx->use_private_key_file(key, asio::ssl::context::pem, ec);
  if (ec) return fail(400, "tls_key", "private key " + key + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return fail(400, "tls_key", "private key " + key + " does not match certificate " + cert);
  SSL_CTX_set_alpn_select_cb(ctx->native_handle(), selectAlpn, nullptr);
  return ctx;
}

Result<std::shared_ptr<TlsFiles>> TlsFiles::load(std::string cert_file, std::string key_file) {
  auto ctx = build(cert_file, key_file);
  if (!ctx) return tl::unexpected(ctx.error());
  std::shared_ptr<TlsFiles> t(new TlsFiles(std::move(cert_file), std::move(key_file)));
  t->ctx_.store(std::move(*ctx));
  t->stamp_ = t->stamp();
  return t;
}

void TlsFiles::refresh() {
  const Stamp st = stamp();
  if (st == stamp_ || !st.ok() || st == refused_stamp_) return;
  auto next = build(cert_, key_);
  if (!next) {
    refused_stamp_ = st;  // (logged once per change; a half-written pair loads on the next change)
    log::warn("http", "TLS certificate reload refused, keeping the previous one: " +
                          next.error().what);
    return;
  }
  ctx_.store(std::move(*next), std::memory_order_release);
  stamp_ = st;
  reloads_.fetch_add(1, std::memory_order_relaxed);
  log::info("http", "TLS certificate reloaded from " + cert_);
}

}  // namespace kvgate::http
