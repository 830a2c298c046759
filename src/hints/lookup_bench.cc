// `kvgate bench lookup`: load generator for `kvgate index` over real gRPC.
//
//   kvgate bench lookup --target ADDR:PORT [--replicas 16] [--blocks 1000000] [--chain 512]
//       [--concurrency 64] [--channels 4] [--duration-s 10] [--rate 0] [--no-preload] [--churn 0]
//
// Preload: `blocks` random block hashes cut into chains of `chain` blocks, each chain reported
// (ReportCacheState, one stream per replica, 4 threads) by one of `replicas` replicas: the
// ingest rate in blocks/s. With --churn B, one more stream reports fresh chains at B blocks/s
// during the lookups (an index at its maxEntries bound then evicts all along). Then LookupRoute
// calls for whole chains (a full walk each: the worst
// case), pre-serialized and sent through gRPC's generic callback stub so the client spends little
// CPU, `concurrency` in flight over `channels` connections, for `duration-s`; with --rate R the
// calls are paced at R/s (open loop; latency counts from the scheduled send). One JSON line:
// ingest blocks/s, calls/s, latency percentiles, reason codes of a sample of answers.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "inferencecache/v1alpha1/inferencecache.grpc.pb.h"

namespace kvgate::hints {

namespace pb = inferencecache::v1alpha1;
using Clock = std::chrono::steady_clock;

namespace {

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

struct Opts {
  std::string target;
  int replicas = 16;
  long blocks = 1'000'000;
  int chain = 512;
  int concurrency = 64;
  int channels = 4;
  double duration_s = 10;
  double rate = 0;
  bool preload = true;
  double churn = 0;  // blocks/s of fresh chains reported during the lookups (0: none)
};

}  // namespace

int lookupBench(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--target") o.target = next();
    else if (a == "--replicas") o.replicas = std::atoi(next());
    else if (a == "--blocks") o.blocks = std::atol(next());
    else if (a == "--chain") o.chain = std::atoi(next());
    else if (a == "--concurrency") o.concurrency = std::atoi(next());
    else if (a == "--channels") o.channels = std::atoi(next());
    else if (a == "--duration-s") o.duration_s = std::atof(next());
    else if (a == "--rate") o.rate = std::atof(next());
    else if (a == "--no-preload") o.preload = false;
    else if (a == "--churn") o.churn = std::atof(next());
    else {
      std::fprintf(stderr, "kvgate bench lookup: unknown flag '%s'\n", a.c_str());
      return 2;
    }
  }
  if (o.target.empty() || o.replicas < 1 || o.chain < 1 || o.blocks < o.chain ||
      o.concurrency < 1 || o.channels < 1 || o.duration_s <= 0) {
    std::fprintf(stderr,
                 "usage: kvgate bench lookup --target ADDR:PORT [--replicas N] [--blocks N] "
                 "[--chain N] [--concurrency N] [--channels N] [--duration-s S] [--rate R] "
                 "[--no-preload] [--churn BLOCKS_PER_S]\n");
    return 2;
  }
  const int n_chains = static_cast<int>(o.blocks / o.chain);
  std::mt19937_64 rng(42);
  std::vector<std::vector<std::string>> chains(static_cast<size_t>(n_chains));
  for (auto& c : chains) {
    c.reserve(static_cast<size_t>(o.chain));
    for (int b = 0; b < o.chain; ++b) c.push_back(be8(rng() | 1));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < o.channels; ++c) {
    args.SetInt("kvgate.channel", c);  // distinct arguments: distinct connections
    channels.push_back(grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
  }

  // Preload.
  double ingest_s = 0;
  if (o.preload) {
    const auto t0 = Clock::now();
    std::atomic<int> next_replica{0};
    std::atomic<long> failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        auto stub = pb::InferenceCache::NewStub(channels[size_t(t) % channels.size()]);
        for (int r; (r = next_replica.fetch_add(1)) < o.replicas;) {
          grpc::ClientContext ctx;
          pb::Ack ack;
          auto w = stub->ReportCacheState(&ctx, &ack);
          for (int c = r; c < n_chains; c += o.replicas) {
            pb::CacheStateUpdate u;
            u.set_replica_id("replica-" + std::to_string(r));
            u.set_model_id("m");
            u.set_tenant_id("t");
            u.set_hash_scheme("vllm");
            pb::PrefixEntry* p = u.add_prefixes();
            for (const auto& h : chains[size_t(c)]) {
              p->add_block_hashes(h);
              p->add_block_token_counts(16);
            }
            if (!w->Write(u)) break;
          }
          w->WritesDone();
          if (!w->Finish().ok() || !ack.accepted()) failed.fetch_add(1);
        }
      });
    for (auto& t : threads) t.join();
    ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (failed.load()) {
      std::fprintf(stderr, "kvgate bench lookup: %ld ingest streams failed\n", failed.load());
      return 1;
    }
  }

  // Pre-serialized lookups: 256 chains.
  std::vector<grpc::ByteBuffer> reqs;
  for (int i = 0; i < 256; ++i) {
    pb::LookupRouteRequest q;
    q.set_model_id("m");
    q.set_tenant_id("t");
    q.set_hash_scheme("vllm");
    for (const auto& h : chains[size_t(rng() % size_t(n_chains))]) {
      q.add_block_hashes(h);
      q.add_block_token_counts(16);
    }
    std::string bytes = q.SerializeAsString();
    grpc::Slice s(bytes);
    reqs.emplace_back(&s, 1);
  }
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (auto& ch : channels) stubs.push_back(std::make_unique<grpc::GenericStub>(ch));
  const std::string method = "/inferencecache.v1alpha1.InferenceCache/LookupRoute";

  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int64_t> lat_us;
    std::map<std::string, long> reasons;
    long errors = 0, done = 0;
    int inflight = 0;
  } sh;
  sh.lat_us.reserve(4'000'000);
  std::atomic<long> issued{0};
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o.duration_s));
  std::atomic<bool> stopping{false};
  // Churn: one stream reports fresh chains (new keys) at o.churn blocks/s while the lookups run;
  // with the index's maxEntries at the preloaded size, every one of them evicts.
  std::atomic<long> churned{0};
  std::thread churner;
  if (o.churn > 0)
    churner = std::thread([&] {
      auto stub = pb::InferenceCache::NewStub(channels[0]);
      grpc::ClientContext ctx;
      pb::Ack ack;
      auto w = stub->ReportCacheState(&ctx, &ack);
      std::mt19937_64 crng(7);
      const auto gap = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(double(o.chain) / o.churn));
      for (auto next = Clock::now(); next < end; next += gap) {
        std::this_thread::sleep_until(next);
        pb::CacheStateUpdate u;
        u.set_replica_id("replica-churn");
        u.set_model_id("m");
        u.set_tenant_id("t");
        u.set_hash_scheme("vllm");
        pb::PrefixEntry* p = u.add_prefixes();
        for (int b = 0; b < o.chain; ++b) {
          p->add_block_hashes(be8(crng() | 1));
          p->add_block_token_counts(16);
        }
        if (!w->Write(u)) break;
        churned.fetch_add(o.chain);
      }
      w->WritesDone();
      (void)w->Finish();
    });
  // One call; on completion, records and (closed loop) issues the next.
  std::function<void(Clock::time_point)> issue = [&](Clock::time_point scheduled) {
    long n = issued.fetch_add(1);
    struct Call {
      grpc::ClientContext ctx;
      grpc::ByteBuffer resp;
      Clock::time_point scheduled;
      bool sample;
    };
    auto* c = new Call;
    c->scheduled = scheduled;
    c->sample = n % 997 == 0;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    stubs[size_t(n) % stubs.size()]->UnaryCall(
        &c->ctx, method, grpc::StubOptions(), &reqs[size_t(n) % reqs.size()], &c->resp,
        [&, c](grpc::Status st) {
          const auto now = Clock::now();
          std::string reason;
          if (st.ok() && c->sample) {
            std::vector<grpc::Slice> slices;
            c->resp.Dump(&slices);
            std::string bytes;
            for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
            pb::LookupRouteResponse r;
            if (r.ParseFromString(bytes)) reason = r.reason_code();
          }
          bool again;
          {
            std::lock_guard g(sh.mu);
            if (st.ok()) {
              if (now < end)
                sh.lat_us.push_back(
                    std::chrono::duration_cast<std::chrono::microseconds>(now - c->scheduled).count());
              ++sh.done;
              if (!reason.empty()) ++sh.reasons[reason];
            } else {
              ++sh.errors;
            }
            again = o.rate <= 0 && now < end && !stopping.load();
            if (!again) --sh.inflight;
          }
          delete c;
          if (again) issue(Clock::now());
          else sh.cv.notify_all();
        });
  };
  if (o.rate <= 0) {
    {
      std::lock_guard g(sh.mu);
      sh.inflight = o.concurrency;
    }
    for (int i = 0; i < o.concurrency; ++i) issue(Clock::now());
  } else {
    // Open loop: a call every 1/rate s, unless `concurrency` are outstanding (then it is late).
    const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / o.rate));
    auto next = start;
    while (next < end) {
      std::unique_lock lk(sh.mu);
      sh.cv.wait(lk, [&] { return sh.inflight < o.concurrency; });
      ++sh.inflight;
      lk.unlock();
      std::this_thread::sleep_until(next);
      issue(next);
      next += gap;
    }
  }
  {
    std::unique_lock lk(sh.mu);
    // Every call has a 5 s deadline, so this ends; the callbacks use this frame's locals.
    sh.cv.wait(lk, [&] { return sh.inflight == 0; });
  }
  stopping.store(true);
  if (churner.joinable()) churner.join();
  const double secs = std::chrono::duration<double>(std::min(Clock::now(), end) - start).count();
  std::lock_guard g(sh.mu);
  auto& v = sh.lat_us;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size())))];
  };
  std::string reasons;
  for (const auto& [k, n] : sh.reasons)
    reasons += (reasons.empty() ? "" : ",") + std::string("\"") + k + "\":" + std::to_string(n);
  std::printf(
      "{\"replicas\":%d,\"blocks\":%ld,\"chain\":%d,\"ingest_s\":%.3f,\"ingest_blocks_per_s\":%.0f,"
      "\"concurrency\":%d,\"channels\":%d,\"rate_target\":%.0f,\"calls\":%zu,\"seconds\":%.3f,"
      "\"calls_per_s\":%.0f,\"p50_us\":%ld,\"p90_us\":%ld,\"p99_us\":%ld,\"p999_us\":%ld,"
      "\"errors\":%ld,\"churned_blocks\":%ld,\"sampled_reasons\":{%s}}\n",
      o.replicas, long(n_chains) * o.chain, o.chain, ingest_s,
      ingest_s > 0 ? double(n_chains) * o.chain / ingest_s : 0.0, o.concurrency, o.channels,
      o.rate, v.size(), secs, double(v.size()) / secs, long(pct(50)), long(pct(90)), long(pct(99)),
      long(pct(99.9)), sh.errors, churned.load(), reasons.c_str());
  return sh.errors ? 1 : 0;
}

}  // namespace kvgate::hints
