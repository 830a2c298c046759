// `kvgate index`: the standalone LookupRoute service (inference-cache role).
//
// gRPC (inferencecache.v1alpha1.InferenceCache) on --listen, Prometheus metrics on
// --metrics-listen, the CachePolicy from --policy (re-read when the file changes, checked every
// second; a bad file keeps the policy in force and is counted), replicas and their P/D roles from
// --replicas, prompt_text and RenderTemplate with the tokenizers of --models-dir. One
// background thread sweeps expired entries (4096 entries every 50 ms) and watches the
// policy file. SIGTERM/SIGINT stop the server (calls in flight finish within 2 s).
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "common/secret_file.h"
#include "hints/engine_feed.h"
#include "hints/hint_index.h"
#include "hints/hint_metrics.h"
#include "hints/hint_service.h"
#include "hints/pd_topology.h"
#include "http/asio.h"
#include "http/server.h"
#include "tokenizer/chat.h"
#include "tokenizer/registry.h"

namespace kvgate::hints {

namespace {

const char* kUsage =
    "usage: kvgate index [flags]\n\n"
    "The LookupRoute routing-hint service (inferencecache.v1alpha1.InferenceCache over gRPC).\n\n"
    "  --listen ADDR:PORT          gRPC, plaintext unless --tls-cert (default 127.0.0.1:9090;\n"
    "                              port 0 picks a free port, printed in the ready line)\n"
    "  --metrics-listen ADDR:PORT  Prometheus /metrics and /healthz (default 127.0.0.1:8080)\n"
    "  --policy FILE               CachePolicy JSON (docs/hints.md); re-read when it changes\n"
    "  --replicas FILE             replicas: ids, scopes, KV-event addresses, P/D roles\n"
    "  --models-dir DIR            tokenizers for prompt_text and RenderTemplate\n"
    "  --tls-cert FILE --tls-key FILE   serve gRPC over TLS\n"
    "  --tls-client-ca FILE        require client certificates signed by this CA (with TLS)\n"
    "  --ingest-token-file FILE    ingest RPCs need authorization: Bearer <a token of FILE>\n"
    "  --ingest-insecure           accept ingest from any client (default: loopback only\n"
    "                              unless a token file or client CA is given)\n"
    "  --log-level LEVEL           debug, info (default), warn, error\n\n"
    "Prints one JSON line {\"event\":\"ready\",\"grpc\":\"ADDR:PORT\",\"metrics\":URL} on stdout "
    "once serving.\n";

std::atomic<int> g_signal{0};
void onSignal(int sig) { g_signal.store(sig); }

Result<std::string> readFile(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(400, path, "cannot read " + path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max_bytes) return fail(400, path, path + " is too large");
  return s;
}

Result<CachePolicy> loadPolicy(const std::string& path) {
  auto text = readFile(path, 64 * 1024);
  if (!text) return tl::unexpected(text.error());
  return parsePolicy(*text);
}

int64_t mtimeNs(const std::string& path) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(path, ec);
  if (ec) return -1;
  return static_cast<int64_t>(t.time_since_epoch().count());
}

}  // namespace

int indexMain(int argc, char** argv) {
  std::string listen = "127.0.0.1:9090", metrics_listen = "127.0.0.1:8080", policy_path,
              replicas_path, models_dir, tls_cert, tls_key, log_level, tls_client_ca,
              ingest_token_file;
  bool ingest_insecure = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    bool ok = true;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--listen") ok = value(listen);
    else if (a == "--metrics-listen") ok = value(metrics_listen);
    else if (a == "--policy") ok = value(policy_path);
    else if (a == "--replicas") ok = value(replicas_path);
    else if (a == "--models-dir") ok = value(models_dir);
    else if (a == "--tls-cert") ok = value(tls_cert);
    else if (a == "--tls-key") ok = value(tls_key);
    else if (a == "--log-level") ok = value(log_level);
    else if (a == "--tls-client-ca") ok = value(tls_client_ca);
    else if (a == "--ingest-token-file") ok = value(ingest_token_file);
    else if (a == "--ingest-insecure") ingest_insecure = true;
    else {
      std::fprintf(stderr, "kvgate index: unknown flag '%s' (see --help)\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate index: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (!log_level.empty()) {
    if (log_level == "debug") log::setLevel(log::Level::kDebug);
    else if (log_level == "info") log::setLevel(log::Level::kInfo);
    else if (log_level == "warn") log::setLevel(log::Level::kWarn);
    else if (log_level == "error") log::setLevel(log::Level::kError);
    else {
      std::fprintf(stderr, "kvgate index: --log-level must be debug, info, warn or error\n");
      return 2;
    }
  }
  auto grpc_hp = net::parseHostPort(listen);
  auto metrics_hp = net::parseHostPort(metrics_listen);
  if (!grpc_hp || !metrics_hp) {
    std::fprintf(stderr, "kvgate index: --listen and --metrics-listen take ADDR:PORT\n");
    return 2;
  }
  if (tls_cert.empty() != tls_key.empty()) {
    std::fprintf(stderr, "kvgate index: --tls-cert and --tls-key go together\n");
    return 2;
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    std::fprintf(stderr, "kvgate index: --tls-client-ca needs --tls-cert and --tls-key\n");
    return 2;
  }
  IngestAuth ingest;
  if (!ingest_token_file.empty()) {
    auto lines = readSecretLines(ingest_token_file, "--ingest-token-file");
    if (!lines || lines->empty()) {
      std::fprintf(stderr, "kvgate index: %s\n",
                   lines ? "--ingest-token-file holds no token" : lines.error().what.c_str());
      return 2;
    }
    for (const auto& t : *lines)
      if (t.size() < IngestAuth::kMinTokenBytes) {
        std::fprintf(stderr, "kvgate index: --ingest-token-file: a token shorter than %zu bytes\n",
                     IngestAuth::kMinTokenBytes);
        return 2;
      }
    ingest = IngestAuth(std::move(*lines));
    if (tls_cert.empty())
      log::warn("index",
                "--ingest-token-file on a plaintext listener: the token crosses the network in "
                "clear (add --tls-cert/--tls-key beyond loopback)");
  }
  ingest.insecure = ingest_insecure;
  ingest.client_certs = !tls_client_ca.empty();
  CachePolicy policy;
  int64_t policy_mtime = -1;
  if (!policy_path.empty()) {
    auto p = loadPolicy(policy_path);
    if (!p) {
      std::fprintf(stderr, "kvgate index: --policy %s: %s\n", policy_path.c_str(),
                   p.error().what.c_str());
      return 2;
    }
    policy = *p;
    policy_mtime = mtimeNs(policy_path);
  }
  PdTopology topology;
  if (!replicas_path.empty()) {
    auto text = readFile(replicas_path, 4 << 20);
    auto t = text ? parseReplicas(*text) : Result<PdTopology>(tl::unexpected(text.error()));
    if (!t) {
      std::fprintf(stderr, "kvgate index: --replicas %s: %s\n", replicas_path.c_str(),
                   t.error().what.c_str());
      return 2;
    }
    topology = std::move(*t);
  }
  std::unique_ptr<tok::TokenizerRegistry> tokenizers;
  if (!models_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(models_dir, ec)) {
      std::fprintf(stderr, "kvgate index: --models-dir %s is not a directory\n",
                   models_dir.c_str());
      return 2;
    }
    tokenizers = std::make_unique<tok::TokenizerRegistry>(models_dir);
  }
  std::signal(SIGPIPE, SIG_IGN);

  const common::Clock& clock = common::SteadyClock::instance();
  HintIndex index(clock, policy);
  HintMetrics metrics;
  // protobuf logs each message it cannot decode (invalid UTF-8 in a string field) on stderr:
  // counted instead, so a client cannot flood the log.
  static std::atomic<HintMetrics*> g_metrics;
  g_metrics.store(&metrics);
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel level, const char*, int,
                                     const std::string& message) {
    if (level >= google::protobuf::LOGLEVEL_FATAL) {
      std::fprintf(stderr, "protobuf: %s\n", message.c_str());
      return;
    }
    if (HintMetrics* m = g_metrics.load()) m->proto_errors.fetch_add(1, std::memory_order_relaxed);
  });
  ServiceDeps deps;
  deps.index = &index;
  deps.metrics = &metrics;
  deps.pd = topology.replicas.empty() ? nullptr : &topology;
  deps.ingest = ingest;
  if (tokenizers) {
    tok::TokenizerRegistry* reg = tokenizers.get();
    deps.tokenize = [reg](std::string_view model,
                          std::string_view text) -> std::optional<std::vector<uint32_t>> {
      auto tk = reg->get(model);
      if (!tk) return std::nullopt;
      nlohmann::ordered_json body = {
          {"messages", nlohmann::ordered_json::array(
                           {{{"role", "user"}, {"content", std::string(text)}}})}};
      auto ids = tok::encodeChat(**tk, body);
      if (!ids) return std::nullopt;
      return std::move(*ids);
    };
    deps.render = [reg](std::string_view model,
                        std::string_view messages) -> Result<std::string> {
      auto tk = reg->get(model);
      if (!tk) return tl::unexpected(tk.error());
      nlohmann::ordered_json m = nlohmann::ordered_json::parse(messages, nullptr, false);
      if (m.is_discarded() || !m.is_array())
        return fail(400, "messages", "variables.messages must be a JSON array of messages");
      nlohmann::ordered_json body = {{"messages", std::move(m)}};
      auto in = tok::chatInputFromRequest(
          body, tok::detectContentFormat((*tk)->chatTemplateSource()));
      if (!in) return tl::unexpected(in.error());
      return tok::renderChat(**tk, *in);
    };
  }
  // Replicas with an events address: their engines' KV events, through the gateway's event plane.
  EngineFeed feed(index, topology);
  if (feed.any()) feed.start();
  auto service = makeHintService(std::move(deps));

  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!tls_cert.empty()) {
    auto cert = readFile(tls_cert, 1 << 20);
    auto key = readFile(tls_key, 1 << 20);
    if (!cert || !key) {
      std::fprintf(stderr, "kvgate index: cannot read --tls-cert/--tls-key\n");
      return 2;
    }
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!tls_client_ca.empty()) {
      auto ca = readFile(tls_client_ca, 1 << 20);
      if (!ca) {
        std::fprintf(stderr, "kvgate index: cannot read --tls-client-ca\n");
        return 2;
      }
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  }
  int grpc_port = 0;
  builder.AddListeningPort(grpc_hp->host + ":" + std::to_string(grpc_hp->port), creds, &grpc_port);
  builder.RegisterService(service.get());
  // A 1M-token prompt's ids (packed varints, at most 5 MB) fit; more is refused. Bounds on
  // what clients can hold: streams per connection, and the memory and threads gRPC may use.
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 256);
  grpc::ResourceQuota quota("kvgate-index");
  quota.Resize(size_t(1) << 30);
  quota.SetMaxThreads(64);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    std::fprintf(stderr, "kvgate index: cannot listen on %s\n", listen.c_str());
    return 1;
  }

  // Metrics on their own thread and io_context.
  asio::io_context io;
  http::Server metrics_server(
      io, [&](http::Request& req, http::ResponseWriter& w) -> asio::awaitable<void> {
        if (req.method == "GET" && req.path == "/metrics") {
          // (a local: GCC 12 mis-destroys temporaries of a conditional inside co_await)
          std::string text = metrics.render(index);
          if (feed.any()) text += feed.renderMetrics();
          co_await w.send(200, "text/plain; version=0.0.4", text);
        } else if (req.method == "GET" && req.path == "/healthz") {
          co_await w.send(200, "text/plain", "ok\n");
        } else {
          co_await w.send(404, "application/json", http::jsonError(404, "not found"));
        }
      });
  auto mport = metrics_server.listen(metrics_hp->host, metrics_hp->port);
  if (!mport) {
    std::fprintf(stderr, "kvgate index: --metrics-listen %s: %s\n", metrics_listen.c_str(),
                 mport.error().what.c_str());
    server->Shutdown();
    return 1;
  }
  std::thread metrics_thread([&io] { io.run(); });

  // Sweep and policy reload.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread housekeeping([&] {
    auto next_policy_check = std::chrono::steady_clock::now();
    std::unique_lock lk(mu);
    while (!stop) {
      lk.unlock();
      index.sweep(4096);  // short exclusive slices, often: lookups wait at most one slice
      if (!policy_path.empty() && std::chrono::steady_clock::now() >= next_policy_check) {
        next_policy_check = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        int64_t m = mtimeNs(policy_path);
        if (m != policy_mtime) {
          policy_mtime = m;
          auto p = loadPolicy(policy_path);
          if (p) {
            index.setPolicy(*p);
            metrics.policy_reloads.fetch_add(1);
            log::info("index", "policy reloaded from " + policy_path);
          } else {
            metrics.policy_errors.fetch_add(1);
            log::error("index", "policy " + policy_path + " refused (the previous one stays): " +
                                    p.error().what);
          }
        }
      }
      lk.lock();
      cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return stop; });
    }
  });

  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::printf("{\"event\":\"ready\",\"grpc\":\"%s:%d\",\"metrics\":\"http://%s:%u\"}\n",
              grpc_hp->host.c_str(), grpc_port, metrics_hp->host.c_str(), *mport);
  std::fflush(stdout);
  log::info("index", "serving LookupRoute on " + grpc_hp->host + ":" + std::to_string(grpc_port) +
                         (tls_cert.empty() ? " (plaintext)" : " (TLS)"));
  log::info("index", std::string("ingest: ") +
                         (ingest.needsToken()     ? "bearer token required"
                          : ingest.client_certs   ? "client certificates required"
                          : ingest.insecure       ? "accepted from anyone (--ingest-insecure)"
                                                  : "loopback clients only"));
  while (g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log::info("index", "signal " + std::to_string(g_signal.load()) + ": stopping");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  {
    std::lock_guard lk(mu);
    stop = true;
  }
  cv.notify_all();
  housekeeping.join();
  feed.stop();
  asio::post(io, [&] { metrics_server.stop(); });
  io.stop();
  metrics_thread.join();
  g_metrics.store(nullptr);
  log::flush();
  return 0;
}

}  // namespace kvgate::hints
