// Factories of the selector stages (the upstream gateway's `sel` values), registered by name in
// routing/stage_registry.cc. Each stage's file opens with its algorithm and knobs.
#pragma once
#include <memory>
#include <vector>

#include "routing/stage.h"

namespace kvgate::routing {

std::unique_ptr<Stage> makeRoundRobin(const StageServices& s);          // rr, sel 0: rr.cc
std::unique_ptr<Stage> makeSourceHash(const StageServices& s);          // hash, sel 1: hash.cc
std::unique_ptr<Stage> makeWeightedRoundRobin(const StageServices& s);  // wrr, sel 2: wrr.cc
std::unique_ptr<Stage> makePersist(const StageServices& s);             // persist, sel 3
std::unique_ptr<Stage> makeLeastConnections(const StageServices& s);    // lc, sel 4: lc.cc
std::unique_ptr<Stage> makeChwbl(const StageServices& s);               // chwbl, sel 8: chwbl.cc
std::unique_ptr<Stage> makeGpuAware(const StageServices& s);            // gpuaware, sel 9
std::unique_ptr<Stage> makeWrrHash(const StageServices& s);             // wrr_hash, sel 10
std::unique_ptr<Stage> makeRandom(const StageServices& s);  // random (selector field): random.cc
// lc below a mean in-flight threshold, rr above it (selector field): lc_light.cc
std::unique_ptr<Stage> makeLcLight(const StageServices& s);
// SGLang model gateway's cache_aware, re-implemented (selector field): sglang_cache_aware.cc
std::unique_ptr<Stage> makeSglang(const StageServices& s);     // sglang: library defaults
std::unique_ptr<Stage> makeSglangCli(const StageServices& s);  // sglang-cli: command-line ones
std::unique_ptr<Stage> makeSmg(const StageServices& s);  // smg: SMG's current cache_aware

// Smooth weighted round-robin order for the given weights (length = sum of effective weights).
std::vector<int> smoothWrrSchedule(const std::vector<int>& weights);

}  // namespace kvgate::routing
