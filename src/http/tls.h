// TLS for kvgate's servers (OpenSSL through Asio): a server certificate and key loaded from PEM
// files and reloaded when the files change, and the byte stream a connection reads and writes
// (plain TCP, or TLS over it).
//
// TlsFiles: current() returns the SSL context new connections use (any thread: an atomic load).
// refresh() (serve's control thread, every second) looks at the files' modification times
// (certificate, key, and a listener's client CA bundle and CRL); a change builds a new context, so
// a renewed certificate or CRL applies to new connections without a restart while open ones keep
// theirs. Files that do not load (unreadable, mismatched key, half-written) keep the previous
// context and are logged once per change. No event loop ever reads the files. TLS 1.2 and 1.3
// only; ALPN offers http/1.1. Client certificates as http/tls_options.h says; what became of them
// is counted in ClientCertStats (shared by every listener of the data plane).
#pragma once
#include <boost/asio/ssl.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "http/asio.h"
#include "http/tls_options.h"

namespace kvgate::http {

// Client-certificate outcomes of TLS handshakes (kvgate_tls_client_certs_total{result}).
struct ClientCertStats {
  std::atomic<uint64_t> verified{0};     // a certificate was presented and verified
  std::atomic<uint64_t> absent{0};       // optional mode, none presented
  std::atomic<uint64_t> missing{0};      // required mode, none presented: refused
  std::atomic<uint64_t> untrusted{0};    // chain did not verify (issuer, expiry, signature): refused
  std::atomic<uint64_t> revoked{0};      // the leaf is on the CRL: refused
  std::atomic<uint64_t> cn_mismatch{0};  // require_client_cn and no name matched: refused
};

// A server context (load: a listener's certificate and TLS fields) or a client one (loadBackend:
// TLS from the gateway to a rule's engines, security 2 with its mtls_backend), and the files it
// was built from, reloaded when they change.
class TlsFiles {
 public:
  static Result<std::shared_ptr<TlsFiles>> load(std::string cert_file, std::string key_file,
                                                ServerTlsOptions opts = {},
                                                std::shared_ptr<ClientCertStats> stats = nullptr);
  static Result<std::shared_ptr<TlsFiles>> loadBackend(ClientTlsOptions opts);
  std::shared_ptr<asio::ssl::context> current() const {
    return ctx_.load(std::memory_order_acquire);
  }
  void refresh();  // one thread only (the control thread)
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }
  const ServerTlsOptions& options() const { return opts_; }
  const ClientTlsOptions& backendOptions() const { return backend_; }
  bool verifiesPeer() const { return backend_mode_ && backend_.verify_server_cert; }
  // Before a client handshake to `name` (a host name or an IP address): SNI for a host name, and
  // the name the peer's certificate must carry when this context verifies it. False (do not
  // connect): this context verifies and `name` is not a usable host name or address.
  bool prepareClient(SSL* ssl, const std::string& name) const;
  const std::string& certFile() const { return cert_; }
  const std::string& keyFile() const { return key_; }
  // After a server handshake on a context of this object (the connection's thread): counts what
  // became of the client certificate; `ec` is the handshake's result.
  void noteHandshake(SSL* ssl, const error_code& ec) const;

 private:
  TlsFiles(std::string cert, std::string key, ServerTlsOptions opts,
           std::shared_ptr<ClientCertStats> stats)
      : cert_(std::move(cert)), key_(std::move(key)), opts_(std::move(opts)),
        stats_(std::move(stats)) {}
  Result<std::shared_ptr<asio::ssl::context>> build() const;
  Result<std::shared_ptr<asio::ssl::context>> buildBackend() const;
  // What identifies the files' contents: modification time, size and inode of each.
  struct FileStamp {
    int64_t mtime = -1, size = -1;
    uint64_t ino = 0;
    bool operator==(const FileStamp&) const = default;
  };
  struct Stamp {
    std::vector<FileStamp> files;  // one per watched path, in order
    bool ok = false;               // every named file exists
    bool operator==(const Stamp&) const = default;
  };
  Stamp stamp() const;
  std::vector<std::string> watched() const;  // the files the context is built from
  std::string cert_, key_;
  ServerTlsOptions opts_;
  bool backend_mode_ = false;
  ClientTlsOptions backend_;
  std::shared_ptr<ClientCertStats> stats_;
  std::atomic<std::shared_ptr<asio::ssl::context>> ctx_;
  Stamp stamp_, refused_stamp_;
  std::atomic<uint64_t> reloads_{0};
};

using BackendTls = TlsFiles;  // (a client context: loadBackend)

// A connection's byte stream: plain TCP, or TLS over it (after handshake()).
class Stream {
 public:
  explicit Stream(tcp::socket s) : plain_(std::move(s)) {}
  void useTls(const std::shared_ptr<asio::ssl::context>& ctx) {
    ctx_ = ctx;
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket>>(std::move(plain_), *ctx_);
  }
  bool tls() const { return tls_ != nullptr; }
  tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }
  asio::awaitable<void> handshake(error_code& ec) {
    co_await tls_->async_handshake(asio::ssl::stream_base::server, useEc(ec));
  }
  asio::awaitable<size_t> readSome(char* p, size_t n, error_code& ec) {
    if (tls_) co_return co_await tls_->async_read_some(asio::buffer(p, n), useEc(ec));
    co_return co_await plain_.async_read_some(asio::buffer(p, n), useEc(ec));
  }
  asio::awaitable<void> write(std::string_view d, error_code& ec) {
    if (tls_) co_await asio::async_write(*tls_, asio::buffer(d.data(), d.size()), useEc(ec));
    else co_await asio::async_write(plain_, asio::buffer(d.data(), d.size()), useEc(ec));
  }

 private:
  tcp::socket plain_;
  std::shared_ptr<asio::ssl::context> ctx_;  // (outlives tls_: declared before it)
  std::unique_ptr<asio::ssl::stream<tcp::socket>> tls_;
};

}  // namespace kvgate::http
