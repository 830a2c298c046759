// /kvgate/v1/controller: the optional external controller of seed 000 ("Controller fold-in"),
// an extension route (the upstream gateway documents none). The controller tells the gateway,
// at least once per declared interval, each endpoint's state and weight
// (endpoints/controller.h):
//   PUT (or POST) {"interval_sec": 10, "endpoints": [{"endpointIP": "10.0.0.1",
//       "targetPort": 8100, "state": "ACTIVE" | "DISABLED" | "DRAINING", "weight": 1.5}]}
//     -> 200 {"result":"Success","unknown":["ip:port", ...]} (endpoints no rule has: ignored);
//   GET -> {"endpoints":[{endpointIP, targetPort, state, weight, interval_sec, age_ms,
//       effective_state, effective_weight, stale}]};
//   DELETE -> detach: every endpoint neutral (ACTIVE, weight 1).
// Validation: interval_sec 1..3600 (required), at most 4096 endpoints, state one of the three
// (default ACTIVE), weight a number in (0, 100] (default 1), no other fields; a bad body is a
// 400 naming the field and changes nothing. Soft state: not persisted (the controller sends it
// again each interval; after a restart endpoints are neutral until it does).
#include <nlohmann/json.hpp>

#include "admin/api.h"
#include "common/log.h"
#include "common/net.h"
#include "proxy/data_plane.h"

namespace kvgate::admin {

namespace {
using json = nlohmann::json;

Result<std::pair<std::vector<proxy::DataPlane::ControllerUpdate>, int64_t>> parseController(
    const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(400, "body", "body must be a JSON object");
  for (auto& [k, v] : j.items())
    if (k != "interval_sec" && k != "endpoints") return fail(400, k, k + ": unknown field");
  auto iv = j.find("interval_sec");
  if (iv == j.end() || !iv->is_number() || iv->get<double>() < 1 || iv->get<double>() > 3600)
    return fail(400, "interval_sec", "interval_sec must be a number of seconds in 1..3600");
  auto eps = j.find("endpoints");
  if (eps == j.end() || !eps->is_array() || eps->size() > 4096)
    return fail(400, "endpoints", "endpoints must be an array of at most 4096 objects");
  std::vector<proxy::DataPlane::ControllerUpdate> out;
  size_t i = 0;
  for (auto& e : *eps) {
    const std::string p = "endpoints[" + std::to_string(i++) + "]";
    if (!e.is_object()) return fail(400, p, p + " must be an object");
    proxy::DataPlane::ControllerUpdate u;
    for (auto& [k, v] : e.items()) {
      if (k == "endpointIP") {
        if (!v.is_string() || !net::isIpLiteral(v.get<std::string>()))
          return fail(400, p + ".endpointIP", p + ".endpointIP must be an IP address");
        u.ip = v.get<std::string>();
      } else if (k == "targetPort") {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65535)
          return fail(400, p + ".targetPort", p + ".targetPort must be 1..65535");
        u.port = static_cast<uint16_t>(v.get<int64_t>());
      } else if (k == "state") {
        const std::string s = v.is_string() ? v.get<std::string>() : "";
        if (s == "ACTIVE")
          u.state = endpoints::ControllerState::kActive;
        else if (s == "DISABLED")
          u.state = endpoints::ControllerState::kDisabled;
        else if (s == "DRAINING")
          u.state = endpoints::ControllerState::kDraining;
        else
          return fail(400, p + ".state", p + ".state must be ACTIVE, DISABLED or DRAINING");
      } else if (k == "weight") {
        if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 100)
          return fail(400, p + ".weight", p + ".weight must be a number in (0, 100]");
        u.weight = v.get<double>();
      } else {
        return fail(400, p + "." + k, p + "." + k + ": unknown field");
      }
    }
    if (u.ip.empty() || u.port == 0) return fail(400, p, p + " needs endpointIP and targetPort");
    out.push_back(std::move(u));
  }
  return std::pair{std::move(out), static_cast<int64_t>(iv->get<double>() * 1e9)};
}

}  // namespace

asio::awaitable<void> Api::controller(http::Request& req, http::ResponseWriter& w) {
  auto& dp = store_.dataPlane();
  if (req.method == "GET") {
    const std::string body = dp.controllerJson();
    co_await w.send(200, "application/json", body);
    co_return;
  }
  if (req.method == "DELETE") {
    dp.clearController();
    log::info("api", "DELETE /kvgate/v1/controller: the controller is detached");
    co_await w.send(200, "application/json", R"({"result":"Success"})");
    co_return;
  }
  if (req.method != "PUT" && req.method != "POST") {
    const std::string body = apiErrorBody(405, "use GET, PUT or DELETE on /kvgate/v1/controller");
    co_await w.send(405, "application/json", body);
    co_return;
  }
  if (req.body.size() > 4 * 1024 * 1024) {
    const std::string body = apiErrorBody(413, "body over 4 MiB");
    co_await w.send(413, "application/json", body);
    co_return;
  }
  auto parsed = parseController(req.body);
  if (!parsed) {
    const std::string body = apiErrorBody(400, parsed.error().what);
    log::info("api", "PUT /kvgate/v1/controller -> 400: " + parsed.error().what);
    co_await w.send(400, "application/json", body);
    co_return;
  }
  auto unknown = dp.setController(parsed->first, parsed->second);
  json answer = {{"result", "Success"}, {"unknown", unknown}};
  const std::string body = answer.dump();
  co_await w.send(200, "application/json", body);
}

}  // namespace kvgate::admin
