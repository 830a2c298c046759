#include "http/tls.h"

#include <fnmatch.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace kvgate::http {

namespace {

// ALPN: h2 when the listener offers it (`arg` non-null: ServerTlsOptions::h2) and the client
// does (the server's preference), else http/1.1 when the client offers it; a client offering only
// other protocols gets no ALPN answer (and falls back as the protocol says).
int selectAlpn(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
               unsigned int inlen, void* arg) {
  const unsigned char* h1 = nullptr;
  // h2 needs TLS 1.3, or 1.2 with an AEAD cipher and ephemeral key exchange (RFC 9113 §9.2):
  // a rule whose tls_ciphers leave only others is served HTTP/1.1, not h2's INADEQUATE_SECURITY.
  if (arg) {
    const SSL_CIPHER* c = SSL_get_pending_cipher(ssl);
    const int kx = c ? SSL_CIPHER_get_kx_nid(c) : NID_undef;
    if (!c || !SSL_CIPHER_is_aead(c) ||
        (kx != NID_kx_any && kx != NID_kx_ecdhe && kx != NID_kx_dhe))
      arg = nullptr;
  }
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int n = in[i];
    if (i + 1 + n > inlen) break;
    if (arg && n == 2 && std::memcmp(in + i + 1, "h2", 2) == 0) {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
    if (n == 8 && std::memcmp(in + i + 1, "http/1.1", 8) == 0) h1 = in + i + 1;
    i += 1 + n;
  }
  if (!h1) return SSL_TLSEXT_ERR_NOACK;
  *out = h1;
  *outlen = 8;
  return SSL_TLSEXT_ERR_OK;
}
const int kOfferH2 = 1;  // (selectAlpn's argument when h2 is offered)

bool statFile(const std::string& path, int64_t& mtime, int64_t& size, uint64_t& ino) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  mtime = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  size = int64_t(st.st_size);
  ino = uint64_t(st.st_ino);
  return true;
}

// A listener's SSL context and what its client-certificate check needs (the context's ex data
// slot below points here; the aliasing shared_ptr keeps both alive while a connection uses the
// context). Not the app data: Asio keeps its own verify callback there.
struct ServerContext {
  asio::ssl::context ctx{asio::ssl::context::tls_server};
  bool require_cn = false;
  std::string cn_pattern;
  std::shared_ptr<ClientCertStats> stats;
};

bool nameMatches(const std::string& pattern, const unsigned char* data, int len) {
  if (!data || len <= 0 || len > 255 || std::memchr(data, 0, size_t(len)) != nullptr) return false;
  const std::string name(reinterpret_cast<const char*>(data), size_t(len));
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_CASEFOLD) == 0;
}

// RFC 6125: the DNS subjectAltNames when there are any, else the subject's (last) CN.
bool identityMatches(X509* cert, const std::string& pattern) {
  bool have_dns = false, match = false;
  int found = 0;  // -1 no subjectAltName; -2 several; else a NULL result is a decoding error
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, &found, nullptr));
  if (!names && found != -1) return false;  // (never fall back to the CN on a broken SAN)
  if (names) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names) && !match; ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (!n || n->type != GEN_DNS) continue;
      have_dns = true;
      match = nameMatches(pattern, ASN1_STRING_get0_data(n->d.dNSName),
                          ASN1_STRING_length(n->d.dNSName));
    }
    GENERAL_NAMES_free(names);
  }
  if (match || have_dns) return match;
  X509_NAME* subject = X509_get_subject_name(cert);
  int last = -1;
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) last = i;
  if (last < 0) return false;
  const ASN1_STRING* cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, last));
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, cn);
  match = len > 0 && nameMatches(pattern, utf8, len);
  OPENSSL_free(utf8);
  return match;
}

int serverContextSlot() {
  static const int slot = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return slot;
}

int verifyClient(int preverify_ok, X509_STORE_CTX* x) {
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const auto* sc =
      ssl ? static_cast<const ServerContext*>(
                SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), serverContextSlot()))
          : nullptr;
  if (!sc) return 0;
  if (!preverify_ok) {
    if (sc->stats)
      (X509_STORE_CTX_get_error(x) == X509_V_ERR_CERT_REVOKED ? sc->stats->revoked
                                                              : sc->stats->untrusted)
          .fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  if (X509_STORE_CTX_get_error_depth(x) == 0 && sc->require_cn &&
      !identityMatches(X509_STORE_CTX_get_current_cert(x), sc->cn_pattern)) {
    X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
    if (sc->stats) sc->stats->cn_mismatch.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  return 1;
}

std::string sslError(const char* what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "unknown error";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  return std::string(what) + ": " + buf;
}

// The client CAs (from the file or the inline PEM) into the verify store and the list the server
// names in its CertificateRequest; then the CRL.
Result<void> loadClientTrust(SSL_CTX* ctx, const ServerTlsOptions& o) {
  ERR_clear_error();
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int loaded = 0;
  if (!o.client_ca_path.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.client_ca_path.c_str(), nullptr) != 1)
      return fail(400, "mtls_frontend",
                  sslError(("client CA bundle " + o.client_ca_path).c_str()));
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.client_ca_path.c_str())) {
      loaded += sk_X509_NAME_num(names);
      SSL_CTX_set_client_CA_list(ctx, names);
    }
    ERR_clear_error();
  }
  if (!o.client_ca_pem.empty()) {
    BIO* bio = BIO_new_mem_buf(o.client_ca_pem.data(), int(o.client_ca_pem.size()));
    while (X509* cert = bio ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr) {
      const bool ok = X509_STORE_add_cert(store, cert) == 1 && SSL_CTX_add_client_CA(ctx, cert) == 1;
      X509_free(cert);
      if (!ok) {
        BIO_free(bio);
        return fail(400, "mtls_frontend", sslError("client_ca_cert_data"));
      }
      ++loaded;
    }
    BIO_free(bio);
    ERR_clear_error();  // (the end of the PEM text)
  }
  if (loaded == 0)
    return fail(400, "mtls_frontend", "no CA certificate in client_ca_path / client_ca_cert_data");
  if (!o.client_crl_path.empty()) {
    X509_LOOKUP* lookup = X509_STORE_add_lookup(store, X509_LOOKUP_file());
    if (!lookup || X509_load_crl_file(lookup, o.client_crl_path.c_str(), X509_FILETYPE_PEM) <= 0)
      return fail(400, "mtls_frontend", sslError(("CRL " + o.client_crl_path).c_str()));
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);  // the leaf only
  }
  return {};
}

// tls_ciphers: TLS_* names are TLS 1.3 suites, the rest an OpenSSL TLS 1.2 cipher list.
Result<void> setCiphers(SSL_CTX* ctx, const std::string& spec) {
  std::string v12, v13;
  for (const std::string& name : cipherNames(spec)) (isTls13Suite(name) ? v13 : v12) += name + ":";
  if (!v12.empty() && SSL_CTX_set_cipher_list(ctx, v12.substr(0, v12.size() - 1).c_str()) != 1)
    return fail(400, "tls_ciphers", sslError("tls_ciphers"));
  if (!v13.empty() && SSL_CTX_set_ciphersuites(ctx, v13.substr(0, v13.size() - 1).c_str()) != 1)
    return fail(400, "tls_ciphers", sslError("tls_ciphers (TLS 1.3 suites)"));
  return {};
}

}  // namespace

std::vector<std::string> TlsFiles::watched() const {
  std::vector<std::string> all;
  // Only the files the context is built from (a stored but unused path must not hold renewals
  // back when it does not exist).
  if (backend_mode_)
    all = {backend_.verify_server_cert ? backend_.ca_path : std::string(), backend_.cert_path,
           backend_.key_path};
  else if (opts_.verifiesClients())
    all = {cert_, key_, opts_.client_ca_path, opts_.client_crl_path};
  else
    all = {cert_, key_};
  std::vector<std::string> paths;
  for (auto& p : all)
    if (!p.empty()) paths.push_back(std::move(p));
  return paths;
}

TlsFiles::Stamp TlsFiles::stamp() const {
  Stamp s;
  s.ok = true;
  for (const std::string& path : watched()) {
    FileStamp f;
    s.ok &= statFile(path, f.mtime, f.size, f.ino);
    s.files.push_back(f);
  }
  return s;
}

Result<std::shared_ptr<asio::ssl::context>> TlsFiles::buildBackend() const {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(native, kAlpn, sizeof kAlpn - 1);
  error_code ec;
  const ClientTlsOptions& o = backend_;
  ERR_clear_error();
  if (o.verify_server_cert) {
    // The CAs are read now, on the control thread: the system bundle as a file, never OpenSSL's
    // certificate directory (looked up on disk during each verification, on an event loop).
    const char* env = std::getenv(X509_get_default_cert_file_env());
    const std::string file = !o.ca_path.empty() ? o.ca_path
                             : env && *env      ? std::string(env)
                                                : std::string(X509_get_default_cert_file());
    ctx->load_verify_file(file, ec);
    if (ec)
      return fail(400, "mtls_backend",
                  "backend CA " + file + (o.ca_path.empty() ? " (the system bundle)" : "") + ": " +
                      ec.message());
    ctx->set_verify_mode(asio::ssl::verify_peer, ec);
  } else {
    ctx->set_verify_mode(asio::ssl::verify_none, ec);
  }
  if (!o.cert_path.empty()) ctx->use_certificate_chain_file(o.cert_path, ec);
  else if (!o.cert_pem.empty()) ctx->use_certificate_chain(asio::buffer(o.cert_pem), ec);
  if (ec) return fail(400, "mtls_backend", "client certificate: " + ec.message());
  if (!o.key_path.empty()) ctx->use_private_key_file(o.key_path, asio::ssl::context::pem, ec);
  else if (!o.key_pem.empty())
    ctx->use_private_key(asio::buffer(o.key_pem), asio::ssl::context::pem, ec);
  if (ec) return fail(400, "mtls_backend", "client key: " + ec.message());
  if ((!o.cert_path.empty() || !o.cert_pem.empty()) && SSL_CTX_check_private_key(native) != 1)
    return fail(400, "mtls_backend", "the client key does not match the client certificate");
  return ctx;
}

bool TlsFiles::prepareClient(SSL* ssl, const std::string& name) const {
  error_code ec;
  asio::ip::make_address(name, ec);
  const bool is_ip = !name.empty() && !ec;
  bool is_host = !name.empty() && name.size() <= 253 && !is_ip;
  for (char c : name)
    is_host &= std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  if (is_host && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) is_host = false;
  if (!verifiesPeer()) return true;
  if (is_ip) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
  return is_host && SSL_set1_host(ssl, name.c_str()) == 1;
}

Result<std::shared_ptr<TlsFiles>> TlsFiles::loadBackend(ClientTlsOptions opts) {
  std::shared_ptr<TlsFiles> t(new TlsFiles({}, {}, {}, nullptr));
  t->backend_mode_ = true;
  t->backend_ = std::move(opts);
  auto ctx = t->buildBackend();
  if (!ctx) return tl::unexpected(ctx.error());
  t->ctx_.store(std::move(*ctx));
  t->stamp_ = t->stamp();
  return t;
}

Result<std::shared_ptr<asio::ssl::context>> TlsFiles::build() const {
  auto sc = std::make_shared<ServerContext>();
  asio::ssl::context& ctx = sc->ctx;
  SSL_CTX* native = ctx.native_handle();
  error_code ec;
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                  ec);
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);  // (idle connections drop record buffers)
  // No renegotiation (RFC 9113 §9.2.1 forbids it under h2; an HTTP/2 writer could otherwise wait
  // on a read its own reader must do).
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(native, opts_.tls12 ? TLS1_2_VERSION : TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(native, opts_.tls13 ? TLS1_3_VERSION : TLS1_2_VERSION);
  if (!ec) ctx.use_certificate_chain_file(cert_, ec);
  if (ec) return fail(400, "tls_cert", "certificate " + cert_ + ": " + ec.message());
  ctx.use_private_key_file(key_, asio::ssl::context::pem, ec);
  if (ec) return fail(400, "tls_key", "private key " + key_ + ": " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1)
    return fail(400, "tls_key", "private key " + key_ + " does not match certificate " + cert_);
  if (!opts_.ciphers.empty())
    if (auto c = setCiphers(native, opts_.ciphers); !c) return tl::unexpected(c.error());
  SSL_CTX_set_alpn_select_cb(native, selectAlpn, opts_.h2 ? const_cast<int*>(&kOfferH2) : nullptr);
  if (opts_.verifiesClients()) {
    if (auto t = loadClientTrust(native, opts_); !t) return tl::unexpected(t.error());
    const int mode = opts_.client_cert == ServerTlsOptions::ClientCert::kRequired
                         ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                         : SSL_VERIFY_PEER;
    SSL_CTX_set_verify(native, mode, verifyClient);
    SSL_CTX_set_verify_depth(native, 10);
    static const unsigned char kSid[] = "kvgate-mtls";  // (resumption within this context)
    SSL_CTX_set_session_id_context(native, kSid, sizeof kSid - 1);
    sc->require_cn = opts_.require_client_cn;
    sc->cn_pattern = opts_.client_cn_pattern;
    sc->stats = stats_;
    if (serverContextSlot() < 0 || SSL_CTX_set_ex_data(native, serverContextSlot(), sc.get()) != 1)
      return fail(500, "tls", "no OpenSSL ex data slot for the client-certificate check");
  }
  return std::shared_ptr<asio::ssl::context>(sc, &sc->ctx);
}

Result<std::shared_ptr<TlsFiles>> TlsFiles::load(std::string cert_file, std::string key_file,
                                                 ServerTlsOptions opts,
                                                 std::shared_ptr<ClientCertStats> stats) {
  std::shared_ptr<TlsFiles> t(
      new TlsFiles(std::move(cert_file), std::move(key_file), std::move(opts), std::move(stats)));
  auto ctx = t->build();
  if (!ctx) return tl::unexpected(ctx.error());
  t->ctx_.store(std::move(*ctx));
  t->stamp_ = t->stamp();
  return t;
}

void TlsFiles::noteHandshake(SSL* ssl, const error_code& ec) const {
  if (!stats_ || !opts_.verifiesClients() || !ssl) return;
  if (ec) {  // (refusals by the verify callback are counted there)
    if (ec.category() == asio::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
            SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
      stats_->missing.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  (SSL_get0_peer_certificate(ssl) ? stats_->verified : stats_->absent)
      .fetch_add(1, std::memory_order_relaxed);
}

void TlsFiles::refresh() {
  const Stamp st = stamp();
  if (st == stamp_ || !st.ok || st == refused_stamp_) return;
  auto next = backend_mode_ ? buildBackend() : build();
  if (!next) {
    refused_stamp_ = st;  // (logged once per change; a half-written pair loads on the next change)
    log::warn("http", "TLS certificate reload refused, keeping the previous one: " +
                          next.error().what);
    return;
  }
  ctx_.store(std::move(*next), std::memory_order_release);
  stamp_ = st;
  reloads_.fetch_add(1, std::memory_order_relaxed);
  log::info("http", "TLS files reloaded: " + (watched().empty() ? std::string("-") : watched()[0]));
}

}  // namespace kvgate::http
