// kv_exact (Tier 1.5, seed 000): route to the endpoint whose real KV cache best overlaps the
// prompt, bounded by load through the unified selection law (stages/selection_law.h).
//
// Algorithm, per request: the prompt's token ids (token-id prompts; text prompts are not tokenized
// yet) -> the fingerprint chain of its full blocks (kv/fingerprint.h, block size kvBlockSize,
// the cache salt's partition) -> for each endpoint, the index workers of its publisher
// (endpointIP:kvZmqPort, every DP rank) and its overlap = the longest leading run any of them holds
// -> the law over the endpoints not excluded (load = in-flight requests, capacity unknown for now)
// -> the pick. Guards (a miss falls through to the rule's selector stage, counted by reason):
// `all_excluded` (no candidate left), `tokenize` (no token ids), `no_worker` (no candidate's events
// are followed), `shallow` (no overlap at all, or fewer than min_match_tokens tokens;
// LLB_KV_MIN_MATCH_TOKENS, default 16, 0 keeps only the no-overlap miss). Knobs: kvBlockSize,
// kvZmqPort, the law's mode and factors. Bounds: at most 8192 leading blocks are hashed and scored;
// no hashing before a candidate's publisher is known. Endpoints sharing one address (one publisher
// key) are not scored. Not yet: text and chat prompts through the tokenizer; LoRA adapters
// (requests are scored in the base model's partition, so an adapter's own cached blocks are not
// seen); capacity from worker metrics; cold-start seeding; speculative insert; warm-up;
// kvExactApiMode.
#pragma once
#include <memory>

#include "kv/kv_index.h"
#include "kv/worker_lookup.h"
#include "routing/stage.h"
#include "routing/stages/selection_law.h"

namespace kvgate::routing {

struct KvExactOptions {
  uint32_t block_size = 16;
  uint16_t zmq_port = 5557;
  uint32_t min_match_tokens = 16;
  LawParams law;
};

std::unique_ptr<Stage> makeKvExact(const StageServices& s, const kv::KvIndex& index,
                                   const kv::WorkerLookup& lookup, KvExactOptions opts);
// The registry's factory ("kv_exact"): options from the rule (kvBlockSize, kvZmqPort) and the
// environment (LOXILB_KV_LB_MODE: off|hard|soft|adaptive|adaptive-soft, default hard, garbage
// warns and means hard; LOXILB_KV_MEAN_LOAD_FACTOR: 100-300, default 175;
// LLB_KV_MIN_MATCH_TOKENS: 0-4096, default 16; LOXILB_KV_SPILL_RELIEF: on|off, default on for
// single-pool rules). Without KV services every request falls through (no_worker).
std::unique_ptr<Stage> makeKvExactFromServices(const StageServices& s);
// The options makeKvExactFromServices uses for a rule (exposed for tests and docs).
KvExactOptions kvExactOptions(const config::RuleSpec& rule);

}  // namespace kvgate::routing
