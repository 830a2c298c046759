// TLS for kvgate's servers (OpenSSL through Asio): a server certificate and key loaded from PEM
// files and reloaded when the files change, and the byte stream a connection reads and writes
// (plain TCP, or TLS over it).
//
// TlsFiles: current() returns the SSL context new connections use (any thread: an atomic load).
// refresh() (serve's control thread, every second) looks at the files' modification times; a
// change builds a new context, so a renewed certificate applies to new connections without a
// restart while open ones keep theirs. A pair that does not load (unreadable, mismatched key,
// half-written) keeps the previous context and is logged once per change. No event loop ever
// reads the files. TLS 1.2 and 1.3 only; ALPN offers http/1.1.
#pragma once
#include <boost/asio/ssl.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "common/result.h"
#include "http/asio.h"

namespace kvgate::http {

class TlsFiles {
 public:
  static Result<std::shared_ptr<TlsFiles>> load(std::string cert_file, std::string key_file);
  std::shared_ptr<asio::ssl::context> current() const {
    return ctx_.load(std::memory_order_acquire);
  }
  void refresh();  // one thread only (the control thread)
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }

 private:
  TlsFiles(std::string cert, std::string key) : cert_(std::move(cert)), key_(std::move(key)) {}
  static Result<std::shared_ptr<asio::ssl::context>> build(const std::string& cert,
                                                           const std::string& key);
  // What identifies the two files' contents: modification time, size and inode of each.
  struct Stamp {
    int64_t cert_mtime = -1, key_mtime = -1, cert_size = -1, key_size = -1;
    uint64_t cert_ino = 0, key_ino = 0;
    bool ok() const { return cert_mtime >= 0 && key_mtime >= 0; }
    bool operator==(const Stamp&) const = default;
  };
  Stamp stamp() const;
  std::string cert_, key_;
  std::atomic<std::shared_ptr<asio::ssl::context>> ctx_;
  Stamp stamp_, refused_stamp_;
  std::atomic<uint64_t> reloads_{0};
};

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
