// kv_exact (Tier 1.5, seed 000): route to the endpoint whose real KV cache best overlaps the
// prompt, bounded by load through the unified selection law (stages/selection_law.h).
//
// Algorithm, per request: the prompt's token ids (a token-id prompt as given; a text prompt or
// a chat request through StageServices::prompt_tokens, i.e. the model's tokenizer and chat
// template) -> the fingerprint chain of its full blocks (kv/fingerprint.h, block size
// kvBlockSize, the cache salt's partition) -> for each endpoint, the index workers of its
// publisher (endpointIP:kvZmqPort, every DP rank) and its overlap = the longest leading run any
// of them holds (the seed's overlap count) -> the law over the endpoints not excluded (load =
// this gateway's in-flight requests; capacity = KV blocks from the engine's /metrics or the
// endpoint's kvCapacityBlocks, proxy/load_scraper.h) -> the pick. An excluded endpoint is never
// picked: the law sees only the others, so an excluded winner falls to the next-best overlap.
//
// Guard ladder (a miss falls through to the rule's selector stage, counted by reason), in
// upstream's order (upstream-gateway.md §2.2: mode_off, warmup, text_empty, model_empty,
// tokenize, hashes, no_worker, excluded, with shallow) after ours (all_excluded, api_mode):
// `all_excluded` (no candidate left), `api_mode` (kvExactApiMode: completions | chat | both,
// default both), `warmup` (kvWarmupSec, default 0 = off: no followed candidate's subscriber has
// been connected that long; those still warming are scored with the others once one is warm),
// `text_empty` (no prompt), `model_empty` (a text prompt without "model"), `tokenize` (no
// --models-dir for a text prompt; the tokenizer loading or missing; the chat request cannot be
// rendered), `hashes` (token ids outside 0..2^32-1), `no_worker` (no candidate's events are
// followed; `hash_contract` instead when the only followed ones break the declared hash
// contract), `shallow` (shorter than one block), `no_worker` (nobody holds a leading block),
// `excluded` (only excluded endpoints hold some), `shallow` (best overlap under
// LLB_KV_MIN_MATCH_TOKENS, default 16, 0 disables). Upstream's `mode_off` needs no guard here
// (mode 0 rules have no kv_exact stage). Publishers whose events break the declared hash
// contract (events/hash_contract.h) are not scored.
//
// A retry of the same request (the pipeline runs again after an endpoint failed) reuses the chain
// its first attempt stored in the request's cycle state (routing/cycle_state.h): no second tokenize
// or hash; ids the quota gate already computed for the request are taken from there too (one
// tokenize a request). Knobs: kvBlockSize, kvZmqPort, kvExactApiMode, kvLbMode (rule) >
// LOXILB_KV_LB_MODE (env) > predict-q on kvExactMode 3 rules, predict on P/D rules;
// LOXILB_KV_MEAN_LOAD_FACTOR, LOXILB_KV_SPILL_RELIEF, LLB_KV_MIN_MATCH_TOKENS; the text bound
// LOXILB_KV_TOKENIZE_MAX_BYTES (tokenizer/request_tokenizer.h). Bounds: at most 8192 leading blocks
// are hashed and scored. Endpoints sharing one address (one publisher key) are not scored.
// Cold-start seeding (after the law, the seed's flowchart order): while a followed, connected,
// non-excluded endpoint holds fewer than LOXILB_KV_COLDSTART_MIN_BLOCKS blocks (default 16; the sum
// over its DP ranks), every LOXILB_KV_COLDSTART_SEED_Nth hit (default 16, 0 disables) goes to the
// lowest-index such endpoint instead (counted as a cold seed when that moves the pick). Speculative
// insert (StageServices::kv_overlay, LOXILB_KV_SPECULATIVE_TTL_MS, default 2000, 0 disables): once
// the pipeline has chosen an endpoint (by this stage or a later one), the prompt's chain is
// credited to that endpoint's publisher for the TTL (kv/speculative.h), and scoring extends each
// endpoint's run over its credited blocks, so a burst of requests sharing a new prefix follows the
// first one instead of racing its BlockStored. LoRA: a request is scored in its adapter's partition
// when it names one (SGLang's lora_path, or a "model" that the publishers' BlockStored events carry
// as lora_name: vLLM routes adapters by model name), so adapter and base-model blocks never match
// each other.

#pragma once
#include <memory>

#include "kv/kv_index.h"
#include "kv/worker_lookup.h"
#include "routing/scoring/profile.h"
#include "routing/stage.h"
#include "routing/stages/selection_law.h"

namespace kvgate::routing {

// kvExactApiMode: which requests Tier 1.5 keys (chat = a "messages" body, completions = a
// "prompt" body); the others fall through with reason api_mode.
enum class ApiMode : uint8_t { kBoth, kCompletions, kChat };

struct KvExactOptions {
  ApiMode api_mode = ApiMode::kBoth;
  uint32_t block_size = 16;
  uint16_t zmq_port = 5557;
  bool serving_port_key = false;  // TensorRT-LLM: the publisher is the endpoint's serving port
  uint32_t min_match_tokens = 16;
  uint32_t warmup_sec = 0;             // kvWarmupSec
  uint32_t speculative_ttl_ms = 2000;  // speculative insert's credit lifetime (0 = off)
  // Cold-start seeding: every seed_nth-th hit (0 = off) goes to the lowest-index followed,
  // non-excluded endpoint holding fewer than min_blocks blocks, if any.
  uint32_t coldstart_min_blocks = 16;
  uint32_t coldstart_seed_nth = 16;
  // kvIndexAddr: the overlaps come from a `kvgate index` LookupRoute answer (replica ids are the
  // endpoints' "ip:port") instead of this gateway's own subscriptions.
  bool remote = false;
  LawParams law;
  // kvScoringProfile (routing/scoring/profile.h): replaces the law when set; onMiss score makes it
  // decide prompts nobody holds too, as the peer laws do.
  std::shared_ptr<const scoring::ScoringProfile> profile;
};

// The reasons kv_exact falls through with, in upstream's guard order (metrics: Tier 1.5 misses).
inline constexpr FallReason kKvExactReasons[] = {
    FallReason::kAllExcluded, FallReason::kEmptyPool,  FallReason::kApiMode,
    FallReason::kWarmup,      FallReason::kTextEmpty,  FallReason::kModelEmpty,
    FallReason::kTokenize,    FallReason::kHashes,     FallReason::kHashContract,
    FallReason::kNoWorker,    FallReason::kExcluded,   FallReason::kShallow,
    FallReason::kRemoteTimeout, FallReason::kRemoteError, FallReason::kRemoteUnknown};

std::unique_ptr<Stage> makeKvExact(const StageServices& s, const kv::KvIndex& index,
                                   const kv::WorkerLookup& lookup, KvExactOptions opts);
// The registry's factory ("kv_exact"): options from the rule (kvBlockSize, kvZmqPort,
// kvExactApiMode, kvLbMode) and the environment (LOXILB_KV_LB_MODE when the rule has no kvLbMode:
// a law's name, parseLawMode; default predict-q on kvExactMode 3 rules and predict on P/D
// (kvExactMode 1) rules, garbage warns and means that default;
// LOXILB_KV_MEAN_LOAD_FACTOR: 100-300, default 175; LLB_KV_MIN_MATCH_TOKENS: 0-4096, default 16;
// LOXILB_KV_SPILL_RELIEF: on|off, default on for single-pool rules). Without KV services every
// request falls through (no_worker).
std::unique_ptr<Stage> makeKvExactFromServices(const StageServices& s);
// The options makeKvExactFromServices uses for a rule: its fields over the environment's
// defaults (routing_env.h), read once at start (exposed for tests and the effective block).
KvExactOptions kvExactOptions(const config::RuleSpec& rule, const RoutingEnv& env);

}  // namespace kvgate::routing
