// A RoutingEnv read from exactly the given variables (readRoutingEnv through a map, never the
// process environment), for routing unit tests.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "routing/routing_env.h"

namespace kvgate::testing {

inline routing::RoutingEnv envOf(const std::map<std::string, std::string>& vars,
                                 std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> ignored;
  return routing::readRoutingEnv(
      [&vars](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      warnings ? *warnings : ignored);
}

}  // namespace kvgate::testing
