#include "config/fields.h"

#include <limits>

#include "config/stage_catalog.h"

namespace kvgate::config {
namespace {
constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kStr = 1024;  // default max string length

// `selector`: empty (sel decides) or a stage the catalog lets the field name.
std::vector<std::string_view> selectorValues() {
  std::vector<std::string_view> v{""};
  for (const auto& s : kStageCatalog)
    if (s.selector_field) v.push_back(s.name);
  return v;
}
}  // namespace

const std::vector<FieldSpec>& serviceFields() {
  using T = FieldType;
  static const std::vector<FieldSpec> k = {
      // Core.
      {"id", T::kString, 0, 128},
      {"adminStateUp", T::kBool},
      {"projectId", T::kString, 0, 128},
      {"annotations", T::kStringMap},
      {"connectionLimit", T::kInt, 0, kMaxI32},
      {"externalIP", T::kIp},
      {"privateIP", T::kIp},
      {"port", T::kInt, 1, 65535},
      {"portMax", T::kInt, 0, 65535},
      {"protocol", T::kEnum, 0, 0, {"tcp", "udp", "sctp", "icmp"}},
      {"sel", T::kInt, 0, 10},
      {"mode", T::kInt, 0, 5},
      {"security", T::kInt, 0, 2},
      {"bgp", T::kBool},
      {"monitor", T::kBool},
      {"managed", T::kBool},
      {"snat", T::kBool},
      {"egress", T::kBool},
      {"proxyprotocolv2", T::kBool},
      {"name", T::kString, 0, 256},
      {"oper", T::kInt, 0, 2},
      {"block", T::kInt, 0, kMaxI32},
      {"host", T::kString, 0, 253},
      {"path_prefix", T::kString, 0, 2048},
      {"path_match_mode", T::kEnum, 0, 0, {"disabled", "prefix", "exact"}},
      {"trace_type", T::kString, 0, 64},
      {"backend_protocol", T::kEnum, 0, 0, {"http1", "http2", "both"}},
      // Health and timeouts.
      {"probetype", T::kEnum, 0, 0, {"tcp", "udp", "sctp", "http", "https", "ping", "none", ""}},
      {"probeport", T::kInt, 0, 65535},
      {"probereq", T::kString, 0, kStr},
      {"proberesp", T::kString, 0, kStr},
      {"probeTimeout", T::kInt, 0, 3600},
      {"probeRetries", T::kInt, 0, 100},
      {"inactiveTimeOut", T::kInt, 0, 86400 * 7},
      {"timeoutMemberConnect", T::kInt, 0, 600000},
      {"timeoutMemberData", T::kInt, 0, 86400000},
      {"timeoutTcpInspect", T::kInt, 0, 600000},
      // AI fields.
      {"model_name", T::kString, 0, 256},
      {"sse_mode", T::kBool},
      {"max_stream_duration_sec", T::kInt, 0, 86400 * 7},
      {"backend_keepalive_interval_sec", T::kInt, 0, 86400},
      {"cb_enable", T::kBool},
      {"pd_disagg_mode", T::kBool},
      {"pd_cache_aware_mode", T::kBool},
      {"pd_session_ttl_sec", T::kInt, 0, 86400 * 30},
      {"pd_cache_threshold", T::kInt, 0, 100},
      {"pd_balance_abs_threshold", T::kInt, 0, 1000000},
      // Extension: a P/D rule's prefill stages, in order (routing/stages/pd_ladder.h).
      {"pdLadder", T::kStringArray},
      {"session_header_name", T::kString, 0, 256},
      // CHWBL.
      {"chwbl_prefix_hash_level", T::kInt, 1, 3},
      {"chwbl_prefix_hash_flags", T::kInt, 0, 255},
      {"chwbl_mean_load_factor", T::kInt, 100, 300},
      {"chwbl_replication", T::kInt, 1, 1024},
      {"chwbl_enable_cache_salt", T::kBool},
      // Extension: a selector stage without a sel number, used instead of `sel` (lc_light, and the
      // fleet benchmark's baselines; config/stage_catalog.h says which stages).
      {"selector", T::kEnum, 0, 0, selectorValues()},
      // KV-exact.
      {"kvExactMode", T::kInt, 0, 3},
      {"kvBlockSize", T::kInt, 1, 4096},
      {"kvHashAlgo",
       T::kEnum,
       0,
       0,
       {"sha256_cbor", "xxhash_cbor", "sha256_sglang", "blockhash_trtllm", "xxh3_fingerprint"}},
      {"kvZmqPort", T::kInt, 1, 65535},
      {"kvReplayPort", T::kInt, 0, 65535},
      {"kvWarmupSec", T::kInt, 0, 86400},
      // Extension: Tier 1.5 state from a `kvgate index` (LookupRoute) instead of own subscriptions.
      {"kvIndexAddr", T::kString, 0, 256},
      {"kvIndexTimeoutMs", T::kInt, 1, 1000},
      {"kvIndexTenant", T::kString, 0, 256},
      {"kvEngineType", T::kEnum, 0, 0, {"vllm", "sglang", "trtllm", "llamacpp"}},
      {"kvDpRankCount", T::kInt, 1, 8},
      {"pdBootstrapPort", T::kInt, 0, 65535},
      {"kvExactApiMode", T::kEnum, 0, 0, {"completions", "chat", "both"}},
      // Extension: how pooling requests (embeddings, rerank, score, classify) are placed.
      {"kvPoolingLb", T::kEnum, 0, 0, {"auto", "least_loaded", "rule"}},
      // Extension: /tokenize and /detokenize answered by the gateway (proxy/tokenize_local.h).
      {"kvTokenizeLocal", T::kEnum, 0, 0, {"verified", "off"}},
      {"kvTokenizeVerifyEvery", T::kInt, 0, 1000000},
      {"kvLbMode",
       T::kEnum,
       0,
       0,
       {"off", "hard", "soft", "adaptive", "adaptive-soft", "taper", "ttft", "predict", "predict-q",
        "lmetric", "dynamo", "dynamo-v1", "llm-d", "llm-d-sticky"}},
      // Extension: a scoring profile instead of a law (config/scoring_profile.h).
      {"kvScoringProfile", T::kJson},
      {"kvModelProfile", T::kString, 0, 256},
      // TLS.
      {"mtls_frontend", T::kObject},
      {"mtls_backend", T::kObject},
      {"alpn_protocols", T::kStringArray},
      {"tls_ciphers", T::kString, 0, 4096},
      {"tls_versions", T::kStringArray},
      {"hsts_enable", T::kBool},
      {"hsts_max_age", T::kInt, 0, kMaxI32},
      {"hsts_include_subdomains", T::kBool},
      {"hsts_preload", T::kBool},
      {"backend_ca_cert_id", T::kString, 0, 256},
      {"backend_client_cert_id", T::kString, 0, 256},
      {"vip_qos_policy_id", T::kString, 0, 256},
      // Governance.
      {"api_key_auth", T::kEnum, 0, 0, {"", "disabled", "required", "jwt", "apikey-or-jwt"}},
      {"jwt_auth_profile", T::kString, 0, 256},
      {"sockMapMode", T::kEnum, 0, 0, {"off", "request", "response", "both"}},
      {"fc_mode", T::kEnum, 0, 0, {"off", "observe", "enforce", "inherit"}},
      {"fc_max_outstanding", T::kInt, 0, kMaxI32},
      {"fc_ep_max_inflight", T::kInt, 0, kMaxI32},
      {"fc_prefill_max_inflight", T::kInt, 0, kMaxI32},
      {"fc_decode_max_inflight", T::kInt, 0, kMaxI32},
      {"fc_max_queue_depth", T::kInt, 0, 65536},
      {"fc_max_queue_wait_ms", T::kInt, 0, 3600000},
      {"fc_adaptive", T::kBool},
      {"fc_ttft_target_ms", T::kInt, 0, 3600000},
      {"fc_telemetry_stale_ms", T::kInt, 0, 3600000},
      {"fc_warmup_ms", T::kInt, 0, 3600000},
      {"fc_tenant_max_share_pct", T::kInt, 0, 100},
      {"fc_expose_headers", T::kBool},
  };
  return k;
}

const std::vector<FieldSpec>& endpointFields() {
  using T = FieldType;
  static const std::vector<FieldSpec> k = {
      {"endpointIP", T::kIp},
      {"targetPort", T::kInt, 1, 65535},
      {"weight", T::kInt, 0, 255},
      {"ep_role", T::kInt, 0, 2},
      {"nixl_port", T::kInt, 0, 65535},
      {"backup", T::kBool},
      {"subnetId", T::kString, 0, 256},
      {"monitorAddress", T::kString, 0, 256},
      {"httpMethod", T::kEnum, 0, 0, {"", "GET", "HEAD", "POST"}},
      {"urlPath", T::kString, 0, 2048},
      {"expectedCodes", T::kString, 0, 256},
      {"httpVersion", T::kString, 0, 16},
      {"domainName", T::kString, 0, 253},
      // Extension: the engine's KV capacity in blocks for the Tier 1.5 selection law (overrides
      // what /metrics reports; 0 = use /metrics).
      {"kvCapacityBlocks", T::kInt, 0, 1'000'000'000'000},
      // Read-only fields: accepted on input (a GET body posted back) and ignored.
      {"state", T::kString, 0, 64},
      {"counter", T::kString, 0, 128},
  };
  return k;
}

const FieldSpec* findField(const std::vector<FieldSpec>& table, std::string_view name) {
  for (auto& f : table)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace kvgate::config
