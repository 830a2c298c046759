// vLLM wire helpers; see wire.h.
#include "sim/wire.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace kvgate::sim {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string dumpJson(const ojson& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string errorType(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 500:
      return "InternalServerError";
    default:
      break;
  }
  std::string t;
  for (const char* p = http::statusReason(status); *p; ++p)
    if (*p != ' ' && *p != '-') t.push_back(*p);
  return t + "Error";
}

// vLLM's error body: {"object":"error","message":...,"type":...,"param":...,"code":status}.
std::string vllmError(int status, std::string_view message, const char* param) {
  ojson j = {{"object", "error"}, {"message", message}, {"type", errorType(status)}};
  j["param"] = param ? ojson(param) : ojson(nullptr);
  j["code"] = status;
  return dumpJson(j);
}

int64_t unixNow() { return static_cast<int64_t>(std::time(nullptr)); }

bool getInt(const json& v, int64_t lo, int64_t hi, int64_t& out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    out = static_cast<int64_t>(u);
    return out >= lo;
  }
  if (!v.is_number_integer()) return false;
  out = v.get<int64_t>();
  return out >= lo && out <= hi;
}

// A list of token ids; false when any element is not an integer in [0, 2^32).
bool tokenList(const json& v, std::vector<uint32_t>& out) {
  out.clear();
  for (const auto& t : v) {
    int64_t id = 0;
    if (!getInt(t, 0, 0xFFFFFFFFLL, id)) return false;
    out.push_back(static_cast<uint32_t>(id));
  }
  return true;
}

std::string base64(const unsigned char* p, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = static_cast<uint32_t>(p[i]) << 16;
    if (i + 1 < n) v |= static_cast<uint32_t>(p[i + 1]) << 8;
    if (i + 2 < n) v |= p[i + 2];
    out.push_back(k[(v >> 18) & 63]);
    out.push_back(k[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? k[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? k[v & 63] : '=');
  }
  return out;
}

std::string fmtNum(double v) {
  char b[40];
  if (std::floor(v) == v && std::fabs(v) < 1e15)
    std::snprintf(b, sizeof b, "%.1f", v);
  else
    std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

void addMetric(std::string& out, std::string_view name, std::string_view type,
               std::string_view help, std::string_view labels, double value) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
  out.append(name).append(" ").append(type).append("\n");
  out.append(name).append("{").append(labels).append("} ").append(fmtNum(value)).append("\n");
}

// Closes the connection without (the rest of) a response.
void hangUp(http::ResponseWriter& w) {
  w.closeAfterResponse();
  error_code ec;
  w.socket().close(ec);
}

}  // namespace kvgate::sim
