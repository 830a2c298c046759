// The live dashboard's page (/ui): src/admin/ui/index.html, built into the binary
// (ui_page.cc.in, filled by CMake), so it needs nothing from the network at run time.
#pragma once
#include <string_view>

namespace kvgate::admin {

std::string_view uiPage();

}  // namespace kvgate::admin
