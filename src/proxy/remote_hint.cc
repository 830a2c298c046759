#include "proxy/remote_hint.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "inferencecache/v1alpha1/inferencecache.grpc.pb.h"

namespace kvgate::proxy {

namespace pb = inferencecache::v1alpha1;

namespace {

pb::InferenceCache::Stub& stubFor(const std::string& addr) {
  static std::mutex mu;
  // (few: one per index address. Never destroyed: a gRPC callback may still be running on
  // gRPC's threads while statics are torn down at exit.)
  static auto& stubs = *new std::map<std::string, std::unique_ptr<pb::InferenceCache::Stub>>;
  std::lock_guard g(mu);
  auto& s = stubs[addr];
  if (!s) s = pb::InferenceCache::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  return *s;
}

std::atomic<size_t> g_in_flight{0};

struct Call {
  explicit Call(asio::io_context& io) : timer(io), work(asio::make_work_guard(io)) {}
  grpc::ClientContext ctx;
  pb::LookupRouteRequest req;
  pb::LookupRouteResponse resp;
  grpc::Status status;
  std::atomic<bool> done{false};
  asio::steady_timer timer;
  // Keeps the worker's loop running until gRPC's callback has posted back (a drain at
  // shutdown waits for it rather than tearing the loop down under it).
  asio::executor_work_guard<asio::io_context::executor_type> work;
};

}  // namespace

size_t remoteCallsInFlight() { return g_in_flight.load(std::memory_order_acquire); }

asio::awaitable<void> askRemoteIndex(asio::io_context& io, const RemoteIndexCall& c,
                                     const std::vector<uint64_t>& chain,
                                     routing::RemoteHint& out) {
  auto call = std::make_shared<Call>(io);
  call->ctx.set_deadline(std::chrono::system_clock::now() + c.timeout);
  pb::LookupRouteRequest& q = call->req;
  q.set_model_id(c.model);
  q.set_tenant_id(c.tenant);
  q.set_hash_scheme("vllm");  // the XXH3 seed-1337 fingerprint chain
  for (uint64_t h : chain) {
    char b[8];
    for (int i = 7; i >= 0; --i, h >>= 8) b[i] = static_cast<char>(h & 0xff);
    q.add_block_hashes(b, 8);
    q.add_block_token_counts(static_cast<int32_t>(c.block_size));
  }
  call->timer.expires_after(c.timeout + std::chrono::milliseconds(100));  // a backstop
  g_in_flight.fetch_add(1, std::memory_order_acq_rel);
  stubFor(c.addr).async()->LookupRoute(&call->ctx, &call->req, &call->resp,
                                       [call](grpc::Status st) {
                                         call->status = std::move(st);
                                         call->done.store(true, std::memory_order_release);
                                         asio::post(call->timer.get_executor(), [call] {
                                           call->timer.cancel();
                                           call->work.reset();
                                         });
                                         g_in_flight.fetch_sub(1, std::memory_order_acq_rel);
                                       });
  error_code ec;
  co_await call->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  out.replicas.clear();
  if (!call->done.load(std::memory_order_acquire)) {
    call->ctx.TryCancel();  // (the callback still runs; `call` lives until then)
    out.state = routing::RemoteHint::State::kFailed;
    out.timed_out = true;
    co_return;
  }
  if (!call->status.ok()) {
    out.state = routing::RemoteHint::State::kFailed;
    out.timed_out = call->status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    co_return;
  }
  out.state = routing::RemoteHint::State::kAnswered;
  out.reason_code = call->resp.reason_code().substr(0, 64);
  if (out.reason_code == "TIMEOUT") {  // the index's own budget ran out
    out.state = routing::RemoteHint::State::kFailed;
    out.timed_out = true;
    co_return;
  }
  // Only PREFIX_MATCH carries matched tokens; other codes leave every overlap at 0.
  for (const auto& s : call->resp.replica_scores())
    if (s.matched_tokens() > 0 && out.replicas.size() < 1024)
      out.replicas.emplace_back(s.replica_id().substr(0, 256), s.matched_tokens());
}

}  // namespace kvgate::proxy
