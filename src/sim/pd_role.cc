// The P/D roles of a simulated worker (--role prefill|decode), in the dialect of --engine
// (shared/reference/engines.md §3.3, §4, §5.3), so a wrong orchestration fails instead of
// passing silently:
//   vllm    prefill: needs kv_transfer_params.do_remote_decode true; answers kv_transfer_params
//                    {do_remote_prefill, remote_engine_id "sim-<host>:<port>", remote_request_id
//                    (its request id), remote_block_ids, remote_host, remote_port, tp_size}
//                    and holds the prompt's blocks under engine/request id.
//           decode:  needs those params (do_remote_prefill true); pulls the hold, whose prompt
//                    must be this request's.
//   vllm with --pd-connector p2p (P2P NCCL, a push connector): both legs need an X-Request-Id
//           ___prefill_addr_<p>___decode_addr_<d>_<id>, where the prefill must be <p> and the
//           decode <d> (each worker's address is its host:port); the prefill pushes its blocks
//           to <d> under the whole id and answers no kv_transfer_params; the decode pulls what
//           was pushed to it under its id. A decode whose id names another worker is refused:
//           the KV went there.
//   sglang  both legs need bootstrap_host, bootstrap_port and bootstrap_room; prefill checks
//           host and port are its own and holds the blocks under the room; decode waits (at
//           most --pd-wait-ms) for the room's prefill, then pulls it.
//   trtllm  prefill: needs disaggregated_params.request_type context_only; answers
//           choices[0].disaggregated_params {request_type context_only, first_gen_tokens,
//           ctx_request_id, encoded_opaque_state, draft_tokens, disagg_request_id};
//           decode: needs request_type generation_only with that ctx_request_id and state.
// A prefill generates one token. A decode's pulled blocks arrive after the transfer time
// (--pd-transfer-us-per-block each) and enter its cache, so its prefill is (almost) all hits.
// Holds expire after --pd-hold-ms; a refused leg is a 400 (a room that never came: 504).
#include <algorithm>

#include "common/log.h"
#include "sim/request_ctx.h"
#include "sim/worker.h"

namespace kvgate::sim {
namespace {

using json = nlohmann::json;

std::string stripBrackets(std::string h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

auto refuse(const std::string& what, const char* field = "") { return fail(400, field, what); }

}  // namespace

asio::awaitable<Result<void>> Worker::pdBegin(RequestCtx& c, const Inference& in,
                                              const std::string& request_id, PdPlan& plan) {
  PdExchange* ex = cfg_.pd_exchange;
  if (!ex) co_return fail(500, "", "the simulator has no P/D exchange");
  const bool prefill = role_ == Role::kPrefill;
  const std::string who = std::string("this simulated ") + cfg_.engine + " worker is a " +
                          (prefill ? "prefill" : "decode") + " worker (--role)";
  const size_t blocks = in.prompt.size() / cfg_.block_size;
  const std::string me = "sim-" + host_ + ":" + std::to_string(port_);
  if (cfg_.engine == "vllm" && cfg_.pd_push) {
    const std::string self = (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) +
                             ":" + std::to_string(port_);  // (IPv6 bracketed, as the id has it)
    constexpr std::string_view kP = "___prefill_addr_", kD = "___decode_addr_";
    const std::string_view id = request_id;
    const size_t d_at = id.find(kD);
    const size_t d_end =
        d_at == std::string_view::npos ? d_at : id.find('_', d_at + kD.size());
    if (!id.starts_with(kP) || d_end == std::string_view::npos || d_end + 1 >= id.size())
      co_return refuse(who + " (P2P): X-Request-Id must be ___prefill_addr_<p>___decode_addr_<d>_<id>");
    const std::string_view p_addr = id.substr(kP.size(), d_at - kP.size());
    const std::string_view d_addr = id.substr(d_at + kD.size(), d_end - d_at - kD.size());
    if ((prefill ? p_addr : d_addr) != self)
      co_return refuse(who + " (P2P): X-Request-Id names " + std::string(prefill ? p_addr : d_addr) +
                       " as the " + (prefill ? "prefill" : "decode") + ", not this worker " + self);
    const std::string key = "p2p/" + std::string(d_addr) + "/" + request_id;
    if (prefill) {
      plan.hold_key = key;  // (pushed to the decode; the answer carries no kv_transfer_params)
      co_return Result<void>{};
    }
    switch (ex->pull(key, in.prompt)) {
      case PdExchange::Pull::kOk:
        plan.transfer_blocks = std::max<size_t>(blocks, 1);
        co_return Result<void>{};
      case PdExchange::Pull::kMissing:
        co_return refuse(who + " (P2P): nothing was pushed here for " + request_id);
      case PdExchange::Pull::kWrongPrompt:
        co_return refuse(who + " (P2P): the blocks pushed for " + request_id +
                         " are another prompt's");
    }
  }
  if (cfg_.engine == "vllm") {
    const json& p = in.kv_transfer_params;
    if (!p.is_object())
      co_return refuse(who + ": the request needs kv_transfer_params", "kv_transfer_params");
    if (prefill) {
      if (p.value("do_remote_decode", false) != true)
        co_return refuse(who + ": kv_transfer_params.do_remote_decode must be true",
                         "kv_transfer_params");
      plan.hold_key = me + "/" + request_id;
      json ids = json::array();
      for (size_t i = 0; i < blocks; ++i) ids.push_back(i);
      plan.answer_params = {{"do_remote_prefill", true},
                            {"do_remote_decode", false},
                            {"remote_block_ids", ids},
                            {"remote_engine_id", me},
                            {"remote_request_id", request_id},
                            {"remote_host", host_},
                            {"remote_port", port_},
                            {"tp_size", 1}};
      co_return Result<void>{};
    }
    if (p.value("do_remote_prefill", false) != true || !p.contains("remote_engine_id") ||
        !p["remote_engine_id"].is_string() || !p.contains("remote_request_id") ||
        !p["remote_request_id"].is_string())
      co_return refuse(who +
                           ": kv_transfer_params must come from a prefill worker "
                           "(do_remote_prefill, remote_engine_id, remote_request_id)",
                       "kv_transfer_params");
    const std::string key =
        p["remote_engine_id"].get<std::string>() + "/" + p["remote_request_id"].get<std::string>();
    switch (ex->pull(key, in.prompt)) {
      case PdExchange::Pull::kOk:
        plan.transfer_blocks = std::max<size_t>(blocks, 1);
        co_return Result<void>{};
      case PdExchange::Pull::kMissing:
        co_return refuse(who + ": no prefilled blocks for " + key + " (unknown or expired)",
                         "kv_transfer_params");
      case PdExchange::Pull::kWrongPrompt:
        co_return refuse(who + ": the blocks of " + key + " are another prompt's",
                         "kv_transfer_params");
    }
  }
  if (cfg_.engine == "sglang") {
    if (!in.bootstrap_host.is_string() || !in.bootstrap_room.is_number_unsigned())
      co_return refuse(who +
                           ": the request needs bootstrap_host, bootstrap_port and "
                           "bootstrap_room",
                       "bootstrap_room");
    const std::string host = stripBrackets(in.bootstrap_host.get<std::string>());
    const uint16_t port = in.bootstrap_port.is_number_unsigned()
                              ? static_cast<uint16_t>(in.bootstrap_port.get<uint64_t>())
                              : static_cast<uint16_t>(8998);  // null: the server's default
    const std::string key = "room/" + std::to_string(in.bootstrap_room.get<uint64_t>());
    if (prefill) {
      if (host != host_ || port != cfg_.pd_bootstrap_port)
        co_return refuse(who + ": bootstrap_host/bootstrap_port " + host + ":" +
                             std::to_string(port) + " are not this worker's " + host_ + ":" +
                             std::to_string(cfg_.pd_bootstrap_port),
                         "bootstrap_host");
      plan.hold_key = key;
      co_return Result<void>{};
    }
    // Decode: the prefill of the room may still run (both legs are sent at once).
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::microseconds(static_cast<int64_t>(cfg_.pd_wait_ms * 1000 / cfg_.speedup));
    while (!ex->has(key)) {
      if (std::chrono::steady_clock::now() >= deadline)
        co_return fail(504, "bootstrap_room",
                       who + ": the prefill of bootstrap room " + key.substr(5) +
                           " did not arrive within --pd-wait-ms");
      if (!co_await sleepFor(c, cfg_.speedup))  // 1 ms of real time
        co_return fail(499, "", "client gone");
    }
    PdExchange::Hold h;
    auto r = ex->pull(key, in.prompt, &h);
    if (r == PdExchange::Pull::kWrongPrompt)
      co_return refuse(who + ": bootstrap room " + key.substr(5) + " prefilled another prompt",
                       "bootstrap_room");
    if (r != PdExchange::Pull::kOk)
      co_return refuse(who + ": bootstrap room " + key.substr(5) + " is gone", "bootstrap_room");
    if (h.host != host || h.bootstrap_port != port)
      co_return refuse(who + ": bootstrap room " + key.substr(5) + " was prefilled on " + h.host +
                           ":" + std::to_string(h.bootstrap_port) + ", not " + host + ":" +
                           std::to_string(port),
                       "bootstrap_host");
    plan.transfer_blocks = std::max<size_t>(blocks, 1);
    co_return Result<void>{};
  }
  // trtllm
  const json& d = in.disaggregated_params;
  const std::string want = prefill ? "context_only" : "generation_only";
  if (!d.is_object() || d.value("request_type", std::string()) != want)
    co_return refuse(who + ": disaggregated_params.request_type must be " + want,
                     "disaggregated_params");
  if (prefill) {
    const uint64_t id = ex->nextContextId();
    plan.hold_key = "ctx/" + std::to_string(id);
    plan.token = "sim-state-" + me + "-" + std::to_string(id);
    plan.answer_params = {{"request_type", "context_only"},
                          {"first_gen_tokens", json::array({0})},
                          {"ctx_request_id", id},
                          {"encoded_opaque_state", plan.token},
                          {"draft_tokens", nullptr},
                          {"disagg_request_id", d.value("disagg_request_id", json(nullptr))}};
    co_return Result<void>{};
  }
  if (!d.contains("ctx_request_id") || !d["ctx_request_id"].is_number_unsigned() ||
      !d.contains("encoded_opaque_state") || !d["encoded_opaque_state"].is_string())
    co_return refuse(who +
                         ": disaggregated_params must come from a context worker "
                         "(ctx_request_id, encoded_opaque_state)",
                     "disaggregated_params");
  const std::string key = "ctx/" + std::to_string(d["ctx_request_id"].get<uint64_t>());
  PdExchange::Hold h;
  if (!ex->has(key))
    co_return refuse(who + ": no context for ctx_request_id " + key.substr(4),
                     "disaggregated_params");
  auto r = ex->pull(key, in.prompt, &h);
  if (r != PdExchange::Pull::kOk || h.token != d["encoded_opaque_state"].get<std::string>())
    co_return refuse(
        who + ": the context of ctx_request_id " + key.substr(4) + " does not match this request",
        "disaggregated_params");
  plan.transfer_blocks = std::max<size_t>(blocks, 1);
  co_return Result<void>{};
}

void Worker::pdHold(RequestCtx& c, const Inference& in, const PdPlan& plan) {
  PdExchange* ex = cfg_.pd_exchange;
  if (!ex || c.aborted()) return;
  Rank& rank = *ranks_[c.rank];
  PrefixCache::Allocation alloc = rank.cache.acquire(in.prompt);
  PdExchange::Hold h;
  h.worker = index_;
  h.prompt = in.prompt;
  h.host = host_;
  h.bootstrap_port = cfg_.pd_bootstrap_port;
  h.token = plan.token;
  const size_t r = c.rank;
  h.release = [this, r, alloc] { ranks_[r]->cache.release(alloc); };
  h.expires =
      PdExchange::Clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(cfg_.pd_hold_ms * 1000 / cfg_.speedup));
  ex->hold(plan.hold_key, std::move(h));
}

asio::awaitable<bool> Worker::pdInstall(RequestCtx& c, const Inference& in, const PdPlan& plan) {
  if (!co_await sleepFor(
          c, static_cast<double>(plan.transfer_blocks) * cfg_.pd_transfer_us_per_block / 1000.0))
    co_return false;
  Rank& rank = *ranks_[c.rank];
  rank.cache.release(rank.cache.acquire(in.prompt));  // the pulled blocks, now cached here
  ++pd_pulled_;
  co_return true;
}

}  // namespace kvgate::sim
