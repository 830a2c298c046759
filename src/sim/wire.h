// vLLM wire helpers shared by the simulator's handlers: error bodies, JSON output, number
// formatting for the metrics text, token-id lists, and hanging up on a client.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/splitmix.h"
#include "http/server.h"

namespace kvgate::sim {

std::string dumpJson(const nlohmann::ordered_json& j);
std::string errorType(int status);
// vLLM's error body: {"object":"error","message":...,"type":...,"param":...,"code":status}.
std::string vllmError(int status, std::string_view message, const char* param = nullptr);
int64_t unixNow();
bool getInt(const nlohmann::json& v, int64_t lo, int64_t hi, int64_t& out);
// A list of token ids; false when any element is not an integer in [0, 2^32).
bool tokenList(const nlohmann::json& v, std::vector<uint32_t>& out);
std::string base64(const unsigned char* p, size_t n);
std::string fmtNum(double v);
void addMetric(std::string& out, std::string_view name, std::string_view type,
               std::string_view help, std::string_view labels, double value);
// Closes the connection without (the rest of) a response.
void hangUp(http::ResponseWriter& w);

// The simulator's deterministic generator (output text, embeddings, step jitter).
using SplitMix64 = common::SplitMix64;

}  // namespace kvgate::sim
