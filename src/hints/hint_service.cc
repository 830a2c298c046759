#include "hints/hint_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <set>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "hints/rpc_convert.h"
#include "inferencecache/v1alpha1/inferencecache.grpc.pb.h"

namespace kvgate::hints {

namespace pb = inferencecache::v1alpha1;

namespace {

int64_t wallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}



// ReportCacheState: applies each update as it arrives; one Ack when the client closes.
class ReportReactor final : public grpc::ServerReadReactor<pb::CacheStateUpdate> {
 public:
  ReportReactor(const ServiceDeps& deps, pb::Ack* ack) : deps_(deps), ack_(ack) {
    StartRead(&msg_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call broke): answer
      ack_->set_accepted(first_refusal_.empty());
      ack_->set_reason_code(first_refusal_.empty() ? (dropped_ ? "PARTIAL" : "")
                                                   : first_refusal_);
      Finish(grpc::Status::OK);
      return;
    }
    if (msg_.tenant_id() != kProbeTenant) {
      uint64_t too_many = 0;
      IngestResult r = deps_.index->report(toUpdate(msg_, wallUs(), too_many));
      r.dropped += too_many;
      if (r.accepted) {
        deps_.metrics->updates.fetch_add(1, std::memory_order_relaxed);
        deps_.metrics->update_entries.fetch_add(r.added, std::memory_order_relaxed);
        deps_.metrics->update_dropped.fetch_add(r.dropped, std::memory_order_relaxed);
        dropped_ |= r.dropped > 0;
      } else {
        deps_.metrics->updates_refused.fetch_add(1, std::memory_order_relaxed);
        if (first_refusal_.empty()) first_refusal_ = r.reason;
      }
    }
    // A big message's capacity is not kept for the life of an idle stream.
    if (msg_.prefixes_size() > 64) {
      pb::CacheStateUpdate fresh;
      msg_.Swap(&fresh);
    } else {
      msg_.Clear();
    }
    StartRead(&msg_);
  }
  void OnDone() override { delete this; }

 private:
  const ServiceDeps& deps_;
  pb::Ack* ack_;
  pb::CacheStateUpdate msg_;
  std::string first_refusal_;
  bool dropped_ = false;
};

// An ingest call refused before reading anything (hints/ingest_auth.h).
class RefusedRead final : public grpc::ServerReadReactor<pb::CacheStateUpdate> {
 public:
  explicit RefusedRead(grpc::Status s) { Finish(std::move(s)); }
  void OnDone() override { delete this; }
};

// The ingest policy's verdict for this call: OK, or the status to finish it with (counted).
grpc::Status ingestAllowed(const ServiceDeps& deps, grpc::CallbackServerContext* ctx) {
  std::string_view auth;
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("authorization"); it != md.end())
    auth = std::string_view(it->second.data(), it->second.size());
  const std::string peer = ctx->peer();
  switch (deps.ingest.check(auth, peer)) {
    case IngestAuth::Verdict::kOk:
      return grpc::Status::OK;
    case IngestAuth::Verdict::kUnauthenticated:
      deps.metrics->ingest_unauthenticated.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "ingest needs authorization: Bearer <token> (--ingest-token-file)");
    case IngestAuth::Verdict::kNotLoopback:
      break;
  }
  deps.metrics->ingest_not_loopback.fetch_add(1, std::memory_order_relaxed);
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "ingest from a non-loopback client needs --ingest-token-file or "
                      "--tls-client-ca on the index");
}

// LookupRoute's request and response on one protobuf arena with an inline first block: a
// 512-block chain's repeated bytes cost no malloc each.
class ArenaMessages final
    : public grpc::MessageHolder<pb::LookupRouteRequest, pb::LookupRouteResponse> {
 public:
  ArenaMessages() : arena_(options()) {
    set_request(google::protobuf::Arena::CreateMessage<pb::LookupRouteRequest>(&arena_));
    set_response(google::protobuf::Arena::CreateMessage<pb::LookupRouteResponse>(&arena_));
  }
  void Release() override { delete this; }

 private:
  google::protobuf::ArenaOptions options() {
    google::protobuf::ArenaOptions o;
    o.initial_block = block_;
    o.initial_block_size = sizeof block_;
    return o;
  }
  alignas(16) char block_[32 * 1024];
  google::protobuf::Arena arena_;
};

class LookupAllocator final
    : public grpc::MessageAllocator<pb::LookupRouteRequest, pb::LookupRouteResponse> {
 public:
  grpc::MessageHolder<pb::LookupRouteRequest, pb::LookupRouteResponse>* AllocateMessages()
      override {
    return new ArenaMessages;
  }
};

class Service final : public pb::InferenceCache::CallbackService {
 public:
  explicit Service(ServiceDeps deps) : deps_(std::move(deps)) {
    SetMessageAllocatorFor_LookupRoute(&allocator_);
    if (deps_.pd)
      for (const auto& r : deps_.pd->replicas) declared_models_.insert(r.model);
  }

  grpc::ServerUnaryReactor* LookupRoute(grpc::CallbackServerContext* ctx,
                                        const pb::LookupRouteRequest* req,
                                        pb::LookupRouteResponse* resp) override {
    const auto t0 = std::chrono::steady_clock::now();
    const common::Clock& clock = deps_.index->clock();
    // The deadline on the index's clock: the caller's, tightened by the policy's budget.
    int64_t deadline = 0;
    const auto caller = ctx->deadline();
    if (caller != std::chrono::system_clock::time_point::max()) {
      const auto left = caller - std::chrono::system_clock::now();
      deadline = clock.nowNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      if (deadline == 0) deadline = 1;
    }
    const int64_t budget_ms = deps_.index->policy().lookup_timeout_ms;
    if (budget_ms > 0) {
      const int64_t b = clock.nowNs() + budget_ms * 1'000'000;
      deadline = deadline == 0 ? b : std::min(deadline, b);
    }
    LookupRequest q;
    // (repeated bytes are separate strings, not an array: views of them, reused per thread; a
    // chain past the lookup's bound fails open without being copied)
    thread_local std::vector<std::string_view> blocks;
    if (!toLookup(*req, blocks, q)) {
      resp->set_reason_code(reasonName(Reason::kNoHint));
      deps_.metrics->lookup(label(req->model_id()), Reason::kNoHint, false, 0);
      auto* r = ctx->DefaultReactor();
      r->Finish(grpc::Status::OK);
      return r;
    }
    LookupOutcome o = lookupRoute(*deps_.index, q, deps_.tokenize, deadline);
    for (const ScoreOut& s : o.scores) {
      pb::ReplicaScore* r = resp->add_replica_scores();
      r->set_replica_id(s.replica);
      r->set_score(s.score);
      r->set_matched_tokens(s.matched_tokens);
      r->set_estimated_cache_hit_prob(s.prob);
      r->set_tier(static_cast<pb::CacheTier>(s.tier));
    }
    resp->set_reason_code(reasonName(o.reason));
    if (!o.echoed_tokens.empty()) *resp->mutable_token_ids() = {o.echoed_tokens.begin(), o.echoed_tokens.end()};
    if (o.echo_adapter) resp->set_adapter_id(req->adapter_id());
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    resp->set_lookup_latency_us(static_cast<int64_t>(secs * 1e6));
    // The answer goes first; the metric's label may take the index lock again, and a writer
    // waiting for it must not hold up an answer already computed. (The request is released
    // with the call: its model id is copied.)
    const std::string model = req->model_id().substr(0, 257);
    const bool used = !o.scores.empty();
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    deps_.metrics->lookup(label(model), o.reason, used, secs);
    return r;
  }

  grpc::ServerUnaryReactor* LookupPDRoute(grpc::CallbackServerContext* ctx,
                                          const pb::LookupPDRouteRequest* req,
                                          pb::LookupPDRouteResponse* resp) override {
    resp->set_reason_code("NO_HINT");
    const PdTopology* topo = deps_.pd;
    if (topo && !req->model_id().empty() && req->tenant_id() != kProbeTenant &&
        !req->prefix_hash().empty()) {
      std::vector<std::string> prefills, decodes;
      const ReplicaConfig* any_prefill = nullptr;
      for (const auto& r : topo->replicas) {
        if (r.model != req->model_id()) continue;
        if (r.prefill()) {
          prefills.push_back(r.id);
          any_prefill = &r;
        }
        if (r.decode()) decodes.push_back(r.id);
      }
      if (!prefills.empty() && !decodes.empty()) {
        const std::string& seed = req->prefix_hash();
        std::string prefill;
        // The prefill replica holding the prefix warm, best first.
        LookupRequest q;
        q.model = req->model_id();
        q.tenant = req->tenant_id();
        q.scheme = any_prefill->hash_scheme;
        q.prefix_hash = seed;
        q.prefix_token_count = req->prefix_token_count();
        LookupOutcome o = lookupRoute(*deps_.index, q, nullptr, 0);
        if (o.reason == Reason::kPrefixMatch)
          for (const ScoreOut& s : o.scores)
            if (std::find(prefills.begin(), prefills.end(), s.replica) != prefills.end()) {
              prefill = s.replica;
              break;
            }
        resp->set_reason_code(prefill.empty() ? "AFFINITY_HINT" : "PREFIX_MATCH");
        if (prefill.empty()) prefill = affinityPick(prefills, seed);
        std::string decode = affinityPick(decodes, seed);
        std::string transport = "NIXL";
        for (const auto& r : topo->replicas)
          if (r.id == prefill) transport = r.transport;
        resp->set_prefill_replica_id(prefill);
        resp->set_decode_replica_id(decode);
        resp->set_transport_hint(transport);
      }
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* GetCacheState(grpc::CallbackServerContext* ctx,
                                          const pb::GetCacheStateRequest* req,
                                          pb::GetCacheStateResponse* resp) override {
    if (req->tenant_id() != kProbeTenant) {
      for (const ReplicaView& v : deps_.index->replicas(req->model_id(), req->tenant_id())) {
        pb::ReplicaStats* s = resp->add_replicas();
        s->set_replica_id(v.id);
        if (v.has_stats) {
          s->set_cache_memory_bytes(v.stats.cache_memory_bytes);
          s->set_hit_rate(v.stats.hit_rate);
          s->set_pressure(v.stats.pressure);
          s->set_client_version(v.stats.client_version);
          s->set_t2_hit_tokens(v.stats.t2_hit_tokens);
          s->set_t2_query_tokens(v.stats.t2_query_tokens);
        }
      }
      HintIndex::Summary sum = deps_.index->summary(req->model_id(), req->tenant_id());
      resp->mutable_summary()->set_total_prefixes(sum.total_prefixes);
      resp->mutable_summary()->set_hot_prefixes(sum.hot_prefixes);
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerReadReactor<pb::CacheStateUpdate>* ReportCacheState(
      grpc::CallbackServerContext* ctx, pb::Ack* ack) override {
    if (grpc::Status s = ingestAllowed(deps_, ctx); !s.ok()) return new RefusedRead(std::move(s));
    return new ReportReactor(deps_, ack);
  }

  grpc::ServerUnaryReactor* PublishEvent(grpc::CallbackServerContext* ctx,
                                         const pb::CacheEvent* ev, pb::Ack* ack) override {
    if (grpc::Status s = ingestAllowed(deps_, ctx); !s.ok()) {
      auto* rx = ctx->DefaultReactor();
      rx->Finish(std::move(s));
      return rx;
    }
    IngestResult r = applyEvent(*deps_.index, *ev);
    (r.accepted ? deps_.metrics->events : deps_.metrics->events_refused)
        .fetch_add(1, std::memory_order_relaxed);
    ack->set_accepted(r.accepted);
    ack->set_reason_code(r.reason);
    auto* rx = ctx->DefaultReactor();
    rx->Finish(grpc::Status::OK);
    return rx;
  }

  grpc::ServerUnaryReactor* RenderTemplate(grpc::CallbackServerContext* ctx,
                                           const pb::RenderTemplateRequest* req,
                                           pb::RenderTemplateResponse* resp) override {
    // template_ref names a model of --models-dir; variables: "messages" (a JSON array of chat
    // messages) or "prompt" (one user message).
    std::string messages;
    const auto& vars = req->variables();
    if (auto it = vars.find("messages"); it != vars.end()) {
      messages = it->second;
    } else if (auto p = vars.find("prompt"); p != vars.end()) {
      messages = nlohmannUserMessage(p->second);
    }
    if (!deps_.render || req->template_ref().empty()) {
      resp->set_reason_code("TEMPLATE_NOT_FOUND");
    } else if (messages.empty()) {
      resp->set_reason_code("RENDER_ERROR");
    } else {
      auto out = deps_.render(req->template_ref(), messages);
      if (!out) {
        resp->set_reason_code(out.error().code == 404 ? "TEMPLATE_NOT_FOUND" : "RENDER_ERROR");
      } else {
        resp->set_rendered_prompt(*out);
        resp->set_reason_code("OK");
        resp->set_tenant_namespace(req->tenant_id());
      }
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  // Not provided (as upstream): an explicit UNIMPLEMENTED rather than an empty stream.
  grpc::ServerWriteReactor<pb::CacheEvent>* StreamCacheEvents(
      grpc::CallbackServerContext* ctx, const pb::StreamEventsRequest*) override {
    return unimplemented<pb::CacheEvent>();
  }
  grpc::ServerWriteReactor<pb::Metric>* StreamMetrics(grpc::CallbackServerContext* ctx,
                                                      const pb::StreamMetricsRequest*) override {
    return unimplemented<pb::Metric>();
  }

 private:
  template <typename T>
  static grpc::ServerWriteReactor<T>* unimplemented() {
    struct R final : grpc::ServerWriteReactor<T> {
      R() {
        this->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                  "kvgate index does not stream; scrape /metrics"));
      }
      void OnDone() override { delete this; }
    };
    return new R;
  }
  LookupAllocator allocator_;
  static std::string nlohmannUserMessage(const std::string& text) {
    nlohmann::json m = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
    return m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  // A client's model id is a metric label only when the index holds that model or the replicas
  // file declares it: junk ids (any length, any number) count under model="other".
  std::string_view label(const std::string& model) const {
    if (model.size() <= 256 && (declared_models_.count(model) || deps_.index->knowsModel(model)))
      return model;
    return "other";
  }
  ServiceDeps deps_;
  std::set<std::string, std::less<>> declared_models_;
};

}  // namespace

std::unique_ptr<grpc::Service> makeHintService(ServiceDeps deps) {
  return std::make_unique<Service>(std::move(deps));
}

}  // namespace kvgate::hints
