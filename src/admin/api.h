// The management REST API (/netlox/v1/config/loadbalancer...), compatible with the upstream
// gateway: responses {"result":"Success"}, errors {"code","message","result"} with the same HTTP
// status. See docs/rest-api.md.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "admin/api_tokens.h"
#include "admin/rule_store.h"
#include "http/server.h"
#include "proxy/decision_feed.h"
#include "tokenizer/registry.h"

namespace kvgate::governance {
class KeyStore;
class LimitStore;
class ProfileStore;
}

namespace kvgate::admin {

class Api {
 public:
  using MetricsFn = std::function<std::string()>;
  // The engine block hashes the KV index holds for one publisher rank (key "host:port"), in store
  // order, [offset, offset + limit) of the total; may block for a while (called off the control
  // thread). Null: serve has no event plane (the inventory route answers 503).
  struct KvInventory {
    std::vector<uint64_t> hashes;
    size_t total = 0;
  };
  using InventoryFn = std::function<Result<KvInventory>(const std::string& key, int rank,
                                                        size_t offset, size_t limit)>;
  // `tokenizers` may be null (serve without --models-dir): /kvgate/v1/tokenize then answers 503.
  Api(RuleStore& store, MetricsFn metrics, tok::TokenizerRegistry* tokenizers = nullptr)
      : store_(store), metrics_(std::move(metrics)), tokenizers_(tokenizers) {}
  ~Api() { stopTokenizer(); }
  // Abandons queued tokenize work and waits for the running call (shutdown).
  void stopTokenizer() {
    tokenize_pool_.stop();
    tokenize_pool_.join();
    inventory_pool_.stop();
    inventory_pool_.join();
  }
  asio::awaitable<void> handle(http::Request& req, http::ResponseWriter& w);
  void setInventory(InventoryFn fn) { inventory_ = std::move(fn); }
  // The read-only "effective" block of each rule's GET (routing/rule_profile.h); unset: none.
  using EffectiveFn = std::function<nlohmann::json(const config::RuleSpec&)>;
  void setEffective(EffectiveFn fn) { effective_ = std::move(fn); }
  // The API key store (/netlox/v1/config/ai/apikey); null: those routes answer 503.
  void setKeyStore(governance::KeyStore* keys) { keys_ = keys; }
  // Bearer tokens every route but /healthz needs (--api-token-file); none: no authentication.
  void setTokens(ApiTokens t) { tokens_ = std::move(t); }
  void setProfileStore(governance::ProfileStore* p) { profiles_ = p; }
  void setLimitStore(governance::LimitStore* l) { limits_ = l; }
  // The live dashboard (/ui, docs/operations.md): the data plane's feed of routing decisions
  // (null: the stream carries none).
  void setDecisionFeed(proxy::DecisionFeed* f) { feed_ = f; }
  static constexpr int kMaxUiViewers = 8;  // dashboards streaming at once; more get 503
  static constexpr std::chrono::seconds kUiWriteTimeout{5};  // a viewer slower than this: dropped
  static constexpr uint64_t kUiMinIntervalMs = 500;          // ?interval_ms= floor

  // Tokenize calls queued or running at once; more get 503 (retriable).
  static constexpr int kMaxTokenizeInFlight = 16;

 private:
  // The outcome of one tokenize call, computed off the control thread.
  struct TokenizeResult {
    int status = 200;
    std::string outcome;  // ok, bad_request, no_tokenizer, error
    std::string body;     // the answer (200) or the error detail
    std::string model;
    std::string state;  // the model's tokenizer state to record ("" = none)
  };
  // POST /kvgate/v1/tokenize: the ids kvgate computes for a prompt or chat request. Parsing,
  // loading and encoding run on a worker thread (tokenize_pool_), never on the control thread,
  // so a large prompt or a first load does not stall rule changes.
  asio::awaitable<void> tokenize(http::Request& req, http::ResponseWriter& w);
  TokenizeResult computeTokenize(const std::string& body) const;
  // /netlox/v1/config/ai/apikey[/{key_id}] (apikey_api.cc)
  asio::awaitable<void> apiKeys(http::Request& req, http::ResponseWriter& w);
  governance::KeyStore* keys_ = nullptr;
  ApiTokens tokens_;
  // /netlox/v1/config/ai/jwtauthprofile[/{name}] (jwt_profile_api.cc)
  asio::awaitable<void> jwtProfiles(http::Request& req, http::ResponseWriter& w);
  governance::ProfileStore* profiles_ = nullptr;
  // /netlox/v1/config/ai/{tenant,user}/ratelimit, /config/ai/ratelimit/defaults (limits_api.cc)
  asio::awaitable<void> limits(http::Request& req, http::ResponseWriter& w);
  governance::LimitStore* limits_ = nullptr;
  // GET /netlox/v1/config/ai/kv/inventory?service_id=&ep_idx=[&dp_rank=&offset=&limit=]
  asio::awaitable<void> kvInventory(http::Request& req, http::ResponseWriter& w);
  static asio::awaitable<Result<KvInventory>> askInventory(InventoryFn fn, std::string key,
                                                           int rank, size_t offset, size_t limit);
  std::string tokenizerMetrics() const;
  // /kvgate/v1/controller (controller_api.cc): the external controller's endpoint states.
  asio::awaitable<void> controller(http::Request& req, http::ResponseWriter& w);
  asio::awaitable<void> uiStream(http::Request& req, http::ResponseWriter& w);
  std::string uiMetrics() const;
  proxy::DecisionFeed* feed_ = nullptr;
  int ui_viewers_ = 0;         // control thread only
  uint64_t ui_dropped_ = 0;    // viewers dropped for reading too slowly
  uint64_t ui_snapshots_ = 0;  // snapshots sent
  // The part of a snapshot every viewer shares (the rules and the /metrics text), made at most
  // once per kUiShareFor however many viewers stream.
  std::string ui_shared_;
  std::chrono::steady_clock::time_point ui_shared_at_{};
  static constexpr std::chrono::milliseconds kUiShareFor{250};

  RuleStore& store_;
  MetricsFn metrics_;
  tok::TokenizerRegistry* tokenizers_;
  std::map<std::string, std::string> tokenizer_state_;  // model -> loaded | missing | error
  std::map<std::string, uint64_t> tokenize_outcomes_;   // control thread only
  int tokenize_in_flight_ = 0;                          // control thread only
  asio::thread_pool tokenize_pool_{1};
  InventoryFn inventory_;
  EffectiveFn effective_;
  nlohmann::json ruleJson(const config::RuleSpec& r) const {
    nlohmann::json j = r.toJson();
    if (effective_) j["effective"] = effective_(r);
    return j;
  }
  int inventory_in_flight_ = 0;          // control thread only
  asio::thread_pool inventory_pool_{1};  // waits for the KV event thread's answers
};

// {"code":N,"message":<class message>,"result":<detail>} for an error status.
std::string apiErrorBody(int status, const std::string& detail);
// An error answer naming the field or resource at fault: {"code","message","result": field},
// logged with the call.
asio::awaitable<void> sendFieldError(const http::Request& req, http::ResponseWriter& w,
                                     int status, const std::string& field,
                                     const std::string& detail);
// A management API JSON body: at most 64 KiB (413), nesting bounded, well-formed (400).
Result<nlohmann::json> parseApiJson(const std::string& body);

}  // namespace kvgate::admin
