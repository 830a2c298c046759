// A small coroutine HTTP/1.1 server for the management API and the engine simulator.
//
// Not the data plane (src/proxy has its own zero-copy path). It reads a bounded head and body
// (Content-Length or chunked), hands a decoded Request to a coroutine handler, and offers whole
// or streamed (chunked) responses. Keep-alive, header-read timeout (408), 413 for large bodies.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "http/asio.h"

namespace kvgate::http {

struct Request {
  std::string method;
  std::string target;  // as sent
  std::string path;    // target without the query
  std::string query;   // raw query (after '?')
  int version_minor = 1;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_ip;

  std::string header(std::string_view name) const;  // first match, case-insensitive
  std::optional<std::string> queryParam(std::string_view name) const;  // percent-decoded
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;
class Stream;    // http/tls.h: plain TCP or TLS
class TlsFiles;  // http/tls.h: the certificate of a TLS server

class ResponseWriter {
 public:
  ResponseWriter(Stream& s, bool keep_alive) : s_(s), keep_alive_(keep_alive) {}
  asio::awaitable<bool> send(int status, std::string_view content_type, std::string_view body,
                             HeaderList extra = {});
  asio::awaitable<bool> beginStream(int status, std::string_view content_type,
                                    HeaderList extra = {});
  asio::awaitable<bool> writeChunk(std::string_view data);
  asio::awaitable<bool> endStream();
  // Raw bytes straight to the socket (fault injection: truncated streams).
  asio::awaitable<bool> writeRaw(std::string_view data);
  void closeAfterResponse() { keep_alive_ = false; }
  bool keepAlive() const { return keep_alive_; }
  bool sent() const { return started_; }
  bool failed() const { return failed_; }
  tcp::socket& socket();  // the TCP socket under the stream

 private:
  asio::awaitable<bool> write(std::string_view data);
  Stream& s_;
  bool keep_alive_;
  bool started_ = false;
  bool failed_ = false;
};

using Handler = std::function<asio::awaitable<void>(Request&, ResponseWriter&)>;

struct ServerOptions {
  size_t max_head_bytes = 16 * 1024;
  size_t max_body_bytes = 8 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
};

const char* statusReason(int status);
std::string jsonError(int status, std::string_view message);  // {"error":{...}} body
std::string jsonEscape(std::string_view s);

class Server {
 public:
  Server(asio::io_context& io, Handler handler, ServerOptions opts = {});
  ~Server();
  // Binds and starts accepting; returns the bound port (useful with port 0).
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  // Closes the listening socket(s) (new connections are refused) / reopens them.
  void pauseAccepting();
  Result<void> resumeAccepting();
  void stop();  // closes listeners and every open connection
  uint16_t port() const { return port_; }
  // Serves HTTPS with this certificate (before listen()); connections that fail the handshake
  // within the header timeout are closed.
  void setTls(std::shared_ptr<TlsFiles> tls);

 private:
  struct State;
  asio::awaitable<void> acceptLoop(std::shared_ptr<tcp::acceptor> acc);
  asio::awaitable<void> serveConnection(tcp::socket sock);
  asio::io_context& io_;
  std::shared_ptr<State> state_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace kvgate::http
