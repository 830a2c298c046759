// CycleState: what one request's routing computes once and shares, owned by the request's
// exchange (proxy/exchange.h) and reached through RequestContext::cycle. Plain data, no sockets.
//
// - The prompt's token ids: whoever needs them first tokenizes (the quota gate's count, or
//   kv_exact); the other reuses them, so a metered Tier 1.5 chat request is rendered and tokenized
//   once. Released (releaseTokens) as soon as routing has decided: they are not kept while the
//   response streams.
// - The prompt's block chain (kv_exact), which a retry (the pipeline runs again after an endpoint
//   failed) and the data plane (the dynamo laws' active set, the remote index's question) reuse.
// - The remote index's answer (kv_exact with kvIndexAddr).
// - One slot per stage for what the stage computes in evaluate() and needs again later in the
//   same request (observe(), a second run): a stage's data never travels through thread-local
//   state keyed by a run id. A stage names only its own slot type.
// The forwarders call beginRouting() before a request's routing and the exchange endRequest() after
// it, whichever path it took: nothing of one request is seen by the next, and a huge prompt's
// buffers do not stay pinned to an HTTP/1.1 connection's exchange.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvgate::routing {

// A remote LookupRoute answer for this request (kv_exact with kvIndexAddr): the stage sets
// kWanted with the chain in the cycle state; the proxy asks the index and fills the rest.
struct RemoteHint {
  enum class State : uint8_t { kNone, kWanted, kAnswered, kFailed };
  State state = State::kNone;
  bool timed_out = false;  // kFailed: the deadline passed (else an error)
  std::vector<std::pair<std::string, int32_t>> replicas;  // replica id ("ip:port"), matched tokens
  std::string reason_code;  // the index's reason code
};

class CycleState {
 public:
  // --- the prompt's token ids (PromptTokens::tokens()'s answer for this request's facts)
  std::vector<uint32_t> tokens;
  size_t tokens_cut = 0;      // ids the tokenizer's bound left out, estimated
  bool tokens_ready = false;  // the tokenizer was asked
  bool tokens_ok = false;     // and answered kOk
  // --- kv_exact's chain of the prompt's leading blocks
  std::vector<uint64_t> chain;
  bool chain_ready = false;
  uint32_t tail_blocks = 0;  // blocks beyond the chain (cut text, ids past the bound), estimated
  // --- the remote index's answer
  RemoteHint remote;
  bool lent = false;  // the pipeline's own, for a run without one: nobody asks a remote index

  // This request's slot of type T for `owner` (a stage), fresh on first use in the request: its
  // reset() when T has one (so a slot keeps its buffers' capacity from request to request, no
  // allocation once warm), else value-initialized. A slot of another type under the same owner is another slot. A reference stays
  // valid until the next slot() call of another owner or type.
  template <typename T>
  T& slot(const void* owner) {
    for (auto& s : slots_)
      if (s->owner == owner && s->tag == tagOf<T>()) {
        if (!s->fresh) {  // first use in this request
          T& v = static_cast<Slot<T>*>(s.get())->value;
          if constexpr (requires { v.reset(); })
            v.reset();
          else
            v = T{};
          s->fresh = true;
        }
        return static_cast<Slot<T>*>(s.get())->value;
      }
    if (slots_.size() >= kMaxSlots)  // (owners of rules since removed): the ones unused now go
      std::erase_if(slots_, [](const std::unique_ptr<SlotBase>& s) { return !s->fresh; });
    auto made = std::make_unique<Slot<T>>();
    made->owner = owner;
    made->tag = tagOf<T>();
    made->fresh = true;
    T& v = made->value;
    slots_.push_back(std::move(made));
    return v;
  }

  size_t slotCount() const { return slots_.size(); }  // (at most kMaxSlots)

  void releaseTokens() {
    if (tokens.capacity() > 0) std::vector<uint32_t>().swap(tokens);
    tokens_ready = tokens_ok = false;
    tokens_cut = 0;
  }
  // Before a request's routing (the forwarders): a new chain, remote answer and slots; the ids
  // stay (the quota gate may have tokenized the request already).
  void beginRouting() {
    chain_ready = false;
    tail_blocks = 0;
    remote = {};
    for (auto& s : slots_) s->fresh = false;
  }
  // After the request, whichever path it took: its ids go, and buffers a huge prompt grew.
  void endRequest() {
    releaseTokens();
    beginRouting();
    if (chain.capacity() > kKeepChain) std::vector<uint64_t>().swap(chain);
  }

 private:
  static constexpr size_t kMaxSlots = 16;
  static constexpr size_t kKeepChain = 512;  // chain entries kept between requests
  struct SlotBase {
    virtual ~SlotBase() = default;
    const void* owner = nullptr;
    const void* tag = nullptr;
    bool fresh = false;  // used in the current request
  };
  template <typename T>
  struct Slot : SlotBase {
    T value{};
  };
  template <typename T>
  static const void* tagOf() {
    static const char tag = 0;
    return &tag;
  }
  std::vector<std::unique_ptr<SlotBase>> slots_;
};

}  // namespace kvgate::routing
