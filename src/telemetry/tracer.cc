#include "telemetry/tracer.h"

#include "common/log.h"
#include "http/client.h"
#include "metrics/families.h"
#include "metrics/text.h"
#include "telemetry/otlp_json.h"

namespace kvgate::telemetry {

Result<std::unique_ptr<Tracer>> Tracer::create(TracerOptions o) {
  auto bad = [](std::string why) -> Result<std::unique_ptr<Tracer>> {
    return fail(400, "otlp", std::move(why));
  };
  std::string_view u = o.endpoint;
  const bool https = u.starts_with("https://");
  if (!https && !u.starts_with("http://"))
    return bad("--otlp-endpoint must be an http:// or https:// URL: " + o.endpoint);
  u.remove_prefix(https ? 8 : 7);
  const size_t slash = u.find('/');
  if (u.substr(0, slash).empty()) return bad("--otlp-endpoint names no host: " + o.endpoint);
  if (!(o.sample_ratio >= 0 && o.sample_ratio <= 1))
    return bad("--otlp-sample-ratio must be between 0 and 1");
  if (o.queue_spans < 1 || o.queue_spans > 1'000'000)
    return bad("--otlp-queue-spans must be 1..1000000");
  if (o.batch_spans < 1 || o.batch_spans > o.queue_spans)
    return bad("--otlp-batch-spans must be 1..--otlp-queue-spans");
  if (o.interval < std::chrono::milliseconds(10) || o.interval > std::chrono::minutes(10))
    return bad("--otlp-interval-ms must be 10..600000");
  if (o.timeout < std::chrono::milliseconds(100) || o.timeout > std::chrono::minutes(1))
    return bad("--otlp-timeout-ms must be 100..60000");
  std::unique_ptr<Tracer> t(new Tracer(std::move(o)));
  // A URL with a path is the receiver itself; a bare host:port gets OTLP's default path.
  const std::string_view rest = slash == std::string_view::npos ? "" : u.substr(slash);
  t->base_ = t->o_.endpoint;
  t->target_ = rest.empty() || rest == "/" ? "/v1/traces" : "";
  if (rest == "/") t->base_.pop_back();
  return t;
}

Tracer::~Tracer() { stop(); }

void Tracer::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Tracer::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Tracer::offer(std::vector<SpanRecord>&& spans) {
  if (spans.empty()) return;
  bool full_batch = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || queue_.size() + spans.size() > o_.queue_spans) {
      dropped_full_.fetch_add(spans.size(), std::memory_order_relaxed);
      return;
    }
    for (auto& s : spans) queue_.push_back(std::move(s));
    full_batch = queue_.size() >= o_.batch_spans;
  }
  if (full_batch) cv_.notify_one();
}

void Tracer::run() {
  std::vector<SpanRecord> batch;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait_for(l, o_.interval,
                 [this] { return stopping_ || queue_.size() >= o_.batch_spans; });
    if (stopping_) break;
    // What is queued now, a batch at a time (the lock is held only to move spans out).
    while (!queue_.empty()) {
      const size_t n = std::min(queue_.size(), o_.batch_spans);
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.begin() + static_cast<ptrdiff_t>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
      l.unlock();  // (no lock across the export)
      exportBatch(batch, o_.timeout);
      l.lock();
      if (stopping_ || queue_.size() < o_.batch_spans) break;
    }
  }
  // The last flush: one timeout in all, and not past a failed batch (a dead collector must not
  // hold a shutdown for queue/batch timeouts).
  const auto deadline = std::chrono::steady_clock::now() + o_.timeout;
  while (!queue_.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left < std::chrono::milliseconds(10)) break;
    const size_t n = std::min(queue_.size(), o_.batch_spans);
    batch.assign(std::make_move_iterator(queue_.begin()),
                 std::make_move_iterator(queue_.begin() + static_cast<ptrdiff_t>(n)));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
    l.unlock();
    const bool ok = exportBatch(batch, left);
    l.lock();
    if (!ok) break;
  }
  dropped_stop_.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
}

bool Tracer::exportBatch(std::vector<SpanRecord>& batch, std::chrono::milliseconds timeout) {
  const std::string body = encodeOtlpJson(batch, o_.service, o_.version);
  http::FetchOptions fo;
  fo.send_token = false;  // (the management API's token is not the collector's)
  fo.max_body_bytes = 1 << 20;
  auto res = http::fetch(base_, "POST", target_, body, "application/json", timeout, fo);
  const bool ok = res && res->status >= 200 && res->status < 300;
  if (ok) {
    exported_.fetch_add(batch.size(), std::memory_order_relaxed);
    exports_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    export_failed_.fetch_add(batch.size(), std::memory_order_relaxed);
    if (exports_error_.fetch_add(1, std::memory_order_relaxed) % 100 == 0)
      log::warn("otlp", "span export to " + o_.endpoint + " failed (" +
                            (res ? "status " + std::to_string(res->status) : res.error().what) +
                            "); " + std::to_string(batch.size()) + " spans dropped");
  }
  batch.clear();
  return ok;
}

std::string Tracer::metricsText() const {
  metrics::TextWriter m;
  m.header(metrics::kOtlpSpans);
  m.sample(metrics::kOtlpSpans, {{"outcome", "exported"}}, static_cast<double>(exported_.load()));
  m.sample(metrics::kOtlpSpans, {{"outcome", "dropped_queue_full"}},
           static_cast<double>(dropped_full_.load()));
  m.sample(metrics::kOtlpSpans, {{"outcome", "export_failed"}},
           static_cast<double>(export_failed_.load()));
  m.sample(metrics::kOtlpSpans, {{"outcome", "dropped_at_stop"}},
           static_cast<double>(dropped_stop_.load()));
  m.header(metrics::kOtlpExports);
  m.sample(metrics::kOtlpExports, {{"result", "ok"}}, static_cast<double>(exports_ok_.load()));
  m.sample(metrics::kOtlpExports, {{"result", "error"}},
           static_cast<double>(exports_error_.load()));
  size_t q = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    q = queue_.size();
  }
  m.header(metrics::kOtlpQueue);
  m.sample(metrics::kOtlpQueue, {}, static_cast<double>(q));
  return m.str();
}

}  // namespace kvgate::telemetry
