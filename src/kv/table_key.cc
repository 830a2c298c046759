#include "kv/table_key.h"

#include <sys/random.h>

#include <chrono>

#include "common/splitmix.h"

namespace kvgate::kv {

namespace {
TableKey draw() {
  TableKey k;
  uint64_t buf[2] = {0, 0};
  ssize_t got = ::getrandom(buf, sizeof buf, 0);
  if (got != static_cast<ssize_t>(sizeof buf)) {
    common::SplitMix64 r{
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        reinterpret_cast<uintptr_t>(&k)};
    buf[0] = r.next();
    buf[1] = r.next();
  }
  k.a = buf[0];
  k.b = buf[1];
  return k;
}
}  // namespace

const TableKey& tableKey() {
  static const TableKey k = draw();
  return k;
}

}  // namespace kvgate::kv
