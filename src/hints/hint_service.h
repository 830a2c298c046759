// The inferencecache.v1alpha1.InferenceCache gRPC service over a HintIndex (kvgate index).
//
// gRPC's callback API: each RPC runs on gRPC's own threads and finishes inline (a lookup is a
// few microseconds of work under a shared lock; ingest takes the index's exclusive lock for one
// update). ReportCacheState applies each message as it arrives and answers one Ack at the end:
// accepted=true with reason_code "" when every message was applied, else accepted=false with the
// first refusal's code (EMPTY_REPLICA_ID, EMPTY_MODEL_ID, EMPTY_HASH_SCHEME, KEY_TOO_LONG,
// TOO_MANY_REPLICAS); malformed prefix entries inside an applied message are dropped and counted
// (kvgate_index_ingest_total{kind="dropped"}), "PARTIAL" names that in the Ack.
#pragma once
#include <memory>

#include "hints/hint_index.h"
#include "hints/hint_metrics.h"
#include "hints/ingest_auth.h"
#include "hints/lookup.h"
#include "hints/pd_topology.h"

namespace grpc {
class Service;
}

namespace kvgate::hints {

struct ServiceDeps {
  HintIndex* index = nullptr;
  HintMetrics* metrics = nullptr;
  PromptTokenizer tokenize;  // empty: prompt_text fails open to NO_HINT
  // RenderTemplate: the model's chat template applied to messages; empty: TEMPLATE_NOT_FOUND.
  std::function<Result<std::string>(std::string_view model, std::string_view messages_json)>
      render;
  const PdTopology* pd = nullptr;  // LookupPDRoute's roles (nullptr: NO_HINT)
  IngestAuth ingest;               // who may call ReportCacheState and PublishEvent
};

std::unique_ptr<grpc::Service> makeHintService(ServiceDeps deps);

}  // namespace kvgate::hints
