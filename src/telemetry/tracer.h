// Tracer: OpenTelemetry spans out of the gateway (serve --otlp-endpoint; docs/operations.md
// "Tracing"). Off by default: without --otlp-endpoint no Tracer exists and the data plane does no
// tracing work at all.
//
// Workers hand finished spans to offer(): a bounded queue (queue_spans) under a mutex held for
// the push alone, never across I/O; spans that do not fit are dropped and counted, so a slow or
// dead collector costs the data plane nothing but the count. One export thread sends batches
// (at most batch_spans, every interval or as soon as a batch is full) as OTLP/HTTP JSON POSTs to
// the endpoint (its path, or /v1/traces when it names none), each bounded by timeout; a failed
// batch is dropped and counted (no retry: the queue keeps the newest spans). stop() sends what
// is queued once more, for at most one timeout in all and not past a failed batch (the rest are
// counted as dropped_at_stop), then joins.
// Knobs: --otlp-endpoint URL, --otlp-sample-ratio R (0..1, default 1: the ratio of new traces
// sampled; a client's traceparent decides for its own trace), --otlp-queue-spans N (default
// 8192), --otlp-batch-spans N (512), --otlp-interval-ms N (1000), --otlp-timeout-ms N (5000).
// Metrics: kvgate_otlp_spans_total{outcome=exported|dropped_queue_full|export_failed|
// dropped_at_stop},
// kvgate_otlp_exports_total{result=ok|error}, kvgate_otlp_queue_spans.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "telemetry/span.h"

namespace kvgate::telemetry {

struct TracerOptions {
  std::string endpoint;  // http:// or https:// URL of the collector's OTLP/HTTP receiver
  double sample_ratio = 1.0;
  size_t queue_spans = 8192;
  size_t batch_spans = 512;
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{5000};
  std::string service = "kvgate";
  std::string version;
};

class Tracer {
 public:
  // Checks the options (the URL's scheme and host, the bounds); starts nothing.
  static Result<std::unique_ptr<Tracer>> create(TracerOptions o);
  ~Tracer();
  void start();
  void stop();

  double sampleRatio() const { return o_.sample_ratio; }
  // Never blocks on I/O: queued, or dropped and counted when the queue is full.
  void offer(std::vector<SpanRecord>&& spans);
  std::string metricsText() const;

  uint64_t exported() const { return exported_.load(); }
  uint64_t dropped() const { return dropped_full_.load(); }
  uint64_t failed() const { return export_failed_.load(); }
  uint64_t droppedAtStop() const { return dropped_stop_.load(); }

 private:
  explicit Tracer(TracerOptions o) : o_(std::move(o)) {}
  void run();
  // Sends `batch` (bounded by `timeout`); true when the collector took it.
  bool exportBatch(std::vector<SpanRecord>& batch, std::chrono::milliseconds timeout);

  TracerOptions o_;
  std::string base_, target_;  // fetch()'s URL and target
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SpanRecord> queue_;
  bool stopping_ = false;
  std::thread thread_;
  std::atomic<uint64_t> exported_{0}, dropped_full_{0}, export_failed_{0}, dropped_stop_{0};
  std::atomic<uint64_t> exports_ok_{0}, exports_error_{0};
};

}  // namespace kvgate::telemetry
