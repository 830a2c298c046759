// `kvgate ctl`: manage a running gateway over its REST API (list, apply, delete).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "http/client.h"

namespace kvgate::ctl {
namespace {

const char* kHelp =
    "usage: kvgate ctl [--api URL] [--json] <command>\n\n"
    "  --api URL     management API (default http://127.0.0.1:11111; https:// verifies the\n"
    "                server's certificate against the system CAs or --cacert)\n"
    "  --cacert FILE  PEM CA certificate(s) to verify an https:// API with\n"
    "  --token-file FILE  bearer token for an API started with --api-token-file (its first\n"
    "                token line); else $KVGATE_API_TOKEN when set\n"
    "  --json        print raw JSON instead of tables\n\n"
    "commands:\n"
    "  get                                  list rules\n"
    "  apply -f FILE|-                      create or update a rule from a JSON file\n"
    "  create --vip IP --port P --endpoint IP:PORT[:WEIGHT] [--endpoint ...]\n"
    "         [--sel N] [--model NAME] [--name NAME] [--sse]   create a rule from flags\n"
    "  delete --vip IP --port P [--proto tcp] [--model NAME]\n"
    "  delete --name NAME\n"
    "  delete --all\n\n"
    "Errors from the API are printed as the API returned them; the exit status is 1.\n";

int report(const Result<http::ClientResponse>& r, bool json_out) {
  if (!r) {
    std::fprintf(stderr, "kvgate ctl: %s\n", r.error().what.c_str());
    return 1;
  }
  if (r->status >= 400) {
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (!json_out && !j.is_discarded() && j.contains("result"))
      std::fprintf(stderr, "error %d: %s\n", r->status, j["result"].dump().c_str());
    else
      std::fprintf(stderr, "error %d: %s\n", r->status, r->body.c_str());
    return 1;
  }
  if (json_out)
    std::printf("%s\n", r->body.c_str());
  else
    std::printf("ok\n");
  return 0;
}

void printTable(const nlohmann::json& j) {
  std::printf("%-22s %-6s %-4s %-16s %-10s %s\n", "VIP", "PORT", "SEL", "MODEL", "NAME",
              "ENDPOINTS");
  for (auto& e : j.value("lbAttr", nlohmann::json::array())) {
    auto& sa = e["serviceArguments"];
    std::string eps;
    for (auto& ep : e.value("endpoints", nlohmann::json::array())) {
      if (!eps.empty()) eps += ",";
      eps += ep.value("endpointIP", "") + ":" + std::to_string(ep.value("targetPort", 0)) + "/w" +
             std::to_string(ep.value("weight", 0));
    }
    std::printf("%-22s %-6d %-4d %-16s %-10s %s\n", sa.value("externalIP", "").c_str(),
                sa.value("port", 0), sa.value("sel", 0),
                sa.value("model_name", "").empty() ? "*" : sa.value("model_name", "").c_str(),
                sa.value("name", "").c_str(), eps.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string api = "http://127.0.0.1:11111";
  bool json_out = false;
  if (const char* env = std::getenv("KVGATE_API_TOKEN"); env && *env) http::setBearerToken(env);
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--api" && i + 1 < argc)
      api = argv[++i];
    else if (a == "--cacert" && i + 1 < argc)
      http::setCaFile(argv[++i]);
    else if (a == "--token-file" && i + 1 < argc) {
      std::ifstream f(argv[++i]);
      std::string line;
      bool found = false;
      while (!found && std::getline(f, line)) {
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos || line[b] == '#') continue;
        size_t e = line.find_last_not_of(" \t\r");
        http::setBearerToken(line.substr(b, e - b + 1));
        found = true;
      }
      if (!found) {
        std::fprintf(stderr, "kvgate ctl: no token in --token-file %s\n", argv[i]);
        return 2;
      }
    }
    else if (a == "--json")
      json_out = true;
    else if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    } else
      break;
  }
  if (i >= argc) {
    std::fputs(kHelp, stderr);
    return 2;
  }

  std::string cmd = argv[i++];
  const std::string base = "/netlox/v1/config/loadbalancer";
  if (cmd == "get") {
    auto r = http::fetch(api, "GET", base + "/all");
    if (!r || r->status >= 400 || json_out) return report(r, true);
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded()) return report(r, true);
    printTable(j);
    return 0;
  }
  if (cmd == "apply") {
    std::string file;
    for (; i < argc; ++i) {
      std::string a = argv[i];
      if ((a == "-f" || a == "--file") && i + 1 < argc) file = argv[++i];
    }
    if (file.empty()) {
      std::fprintf(stderr, "kvgate ctl apply: -f FILE is required\n");
      return 2;
    }
    std::stringstream ss;
    if (file == "-") {
      ss << std::cin.rdbuf();
    } else {
      std::ifstream in(file);
      if (!in) {
        std::fprintf(stderr, "kvgate ctl apply: cannot read %s\n", file.c_str());
        return 1;
      }
      ss << in.rdbuf();
    }
    return report(http::fetch(api, "POST", base, ss.str()), json_out);
  }
  if (cmd == "create") {
    nlohmann::json sa = {{"protocol", "tcp"}, {"mode", 4}};
    nlohmann::json eps = nlohmann::json::array();
    for (; i < argc; ++i) {
      std::string a = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "kvgate ctl create: %s needs a value\n", a.c_str());
          std::exit(2);
        }
        return argv[++i];
      };
      auto num = [&](const std::string& v) -> long {
        char* end = nullptr;
        long x = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end) {
          std::fprintf(stderr, "kvgate ctl create: %s: '%s' is not a number\n", a.c_str(),
                       v.c_str());
          std::exit(2);
        }
        return x;
      };
      if (a == "--vip")
        sa["externalIP"] = val();
      else if (a == "--port")
        sa["port"] = num(val());
      else if (a == "--sel")
        sa["sel"] = num(val());
      else if (a == "--model")
        sa["model_name"] = val();
      else if (a == "--name")
        sa["name"] = val();
      else if (a == "--sse")
        sa["sse_mode"] = true;
      else if (a == "--endpoint") {
        std::string e = val();  // IP:PORT[:WEIGHT]
        size_t c1 = e.find(':'), c2 = e.find(':', c1 == std::string::npos ? c1 : c1 + 1);
        if (c1 == std::string::npos) {
          std::fprintf(stderr, "kvgate ctl create: --endpoint takes IP:PORT[:WEIGHT]\n");
          return 2;
        }
        nlohmann::json ep = {
            {"endpointIP", e.substr(0, c1)},
            {"targetPort",
             num(e.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1))},
            {"weight", c2 == std::string::npos ? 1 : num(e.substr(c2 + 1))}};
        eps.push_back(ep);
      } else {
        std::fprintf(stderr, "kvgate ctl create: unknown flag %s\n", a.c_str());
        return 2;
      }
    }
    nlohmann::json body = {{"serviceArguments", sa}, {"endpoints", eps}};
    return report(http::fetch(api, "POST", base, body.dump()), json_out);
  }
  if (cmd == "delete") {
    std::string vip, port, proto = "tcp", model, name;
    bool all = false, has_model = false;
    for (; i < argc; ++i) {
      std::string a = argv[i];
      auto val = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
      if (a == "--vip")
        vip = val();
      else if (a == "--port")
        port = val();
      else if (a == "--proto")
        proto = val();
      else if (a == "--model") {
        model = val();
        has_model = true;
      } else if (a == "--name")
        name = val();
      else if (a == "--all")
        all = true;
      else {
        std::fprintf(stderr, "kvgate ctl delete: unknown flag %s\n", a.c_str());
        return 2;
      }
    }
    std::string target;
    if (all)
      target = base + "/all";
    else if (!name.empty())
      target = base + "/name/" + name;
    else if (!vip.empty() && !port.empty()) {
      target = base + "/externalipaddress/" + vip + "/port/" + port + "/protocol/" + proto;
      if (has_model) target += "?model_name=" + model;
    } else {
      std::fprintf(stderr, "kvgate ctl delete: give --all, --name NAME or --vip IP --port P\n");
      return 2;
    }
    return report(http::fetch(api, "DELETE", target), json_out);
  }
  std::fprintf(stderr, "kvgate ctl: unknown command '%s'\n", cmd.c_str());
  return 2;
}

}  // namespace kvgate::ctl
