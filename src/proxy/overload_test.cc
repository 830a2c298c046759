#include "proxy/overload.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kvgate::proxy {
namespace {

namespace fs = std::filesystem;

TEST(Overload, LevelsWithHysteresisByHand) {
  OverloadLimits l;
  l.limit = 1000;  // thresholds: shed 900, pause 980; down below 850 and 930
  using O = Overload;
  EXPECT_EQ(nextOverload(O::kNormal, 899, l), O::kNormal);
  EXPECT_EQ(nextOverload(O::kNormal, 900, l), O::kShed);
  EXPECT_EQ(nextOverload(O::kNormal, 980, l), O::kPause);
  EXPECT_EQ(nextOverload(O::kShed, 860, l), O::kShed);     // within the hysteresis band
  EXPECT_EQ(nextOverload(O::kShed, 849, l), O::kNormal);
  EXPECT_EQ(nextOverload(O::kPause, 940, l), O::kPause);   // 940 >= 930: stays
  EXPECT_EQ(nextOverload(O::kPause, 929, l), O::kShed);    // under 930, over 850: one level
  EXPECT_EQ(nextOverload(O::kPause, 100, l), O::kNormal);
  l.limit = 0;  // off
  EXPECT_EQ(nextOverload(O::kPause, ~0ULL, l), O::kNormal);
}

TEST(Overload, MonitorTicksMoveTheSharedLevel) {
  uint64_t used = 0;
  OverloadMonitor::Out out;
  OverloadLimits l;
  l.limit = 100 << 20;
  OverloadMonitor::Probes probes;
  probes.sample = [&] { return used; };
  OverloadMonitor m(l, out, std::chrono::milliseconds(250), probes);
  EXPECT_EQ(out.limit.load(), 100u << 20);
  used = 50 << 20;
  m.tick();
  EXPECT_EQ(out.level.load(), 0);
  EXPECT_EQ(out.heap.load(), 50u << 20);
  used = 95 << 20;
  m.tick();
  EXPECT_EQ(out.level.load(), 1);
  used = 99 << 20;
  m.tick();
  EXPECT_EQ(out.level.load(), 2);
  used = 10 << 20;
  m.tick();
  EXPECT_EQ(out.level.load(), 0);
}

TEST(Overload, DefaultBoundLeavesRoomByHand) {
  // 64 MiB cgroup, 24 MiB resident at startup: 70 % of the 40 MiB left = 28 MiB.
  EXPECT_EQ(defaultHeapBound(64ULL << 20, 24ULL << 20), (40ULL << 20) / 10 * 7);
  // 8 GiB, 30 MiB resident: about 5.71 GiB.
  EXPECT_EQ(defaultHeapBound(8ULL << 30, 30ULL << 20), ((8ULL << 30) - (30ULL << 20)) / 10 * 7);
  // Nothing left, or less than the floor: 16 MiB.
  EXPECT_EQ(defaultHeapBound(20ULL << 20, 24ULL << 20), 16ULL << 20);
  EXPECT_EQ(defaultHeapBound(30ULL << 20, 24ULL << 20), 16ULL << 20);
}

TEST(Overload, TheKvIndexIsLeftOutOfTheBoundButNotOfTheBudget) {
  uint64_t heap = 0, index = 0;
  bool idle = false;
  OverloadMonitor::Out out;
  OverloadLimits l;
  l.limit = 100 << 20;  // L: the requests' heap
  OverloadMonitor::Probes probes;
  probes.sample = [&] { return heap; };
  probes.exempt = [&] { return index; };
  probes.idle = [&] { return idle; };
  {
    OverloadMonitor m(l, out, std::chrono::milliseconds(250), probes);
    heap = 150 << 20;  // 150 MiB, of which the index holds 80: 70 MiB counted, under 90
    index = 80 << 20;
    m.tick();
    EXPECT_EQ(out.heap.load(), 70u << 20);
    EXPECT_EQ(out.level.load(), 0);
    index = 0;  // the index emptied, the heap did not: 150 MiB counted
    m.tick();
    EXPECT_EQ(out.level.load(), 2);
    idle = true;  // nothing to shed: shedding stays (requests would only add to it), no pause
    for (int i = 0; i < 10; ++i) m.tick();
    EXPECT_EQ(out.level.load(), 1);
  }
  // With a budget C (the cgroup default), a big index counts against it: 120 MiB of heap, 100
  // of it index, is 20 % of L but 120 / 130 = 92 % of C: shed.
  out.level = 0;
  idle = false;
  l.budget = 130 << 20;
  OverloadMonitor m(l, out, std::chrono::milliseconds(250), probes);
  heap = 120 << 20;
  index = 100 << 20;
  m.tick();
  EXPECT_EQ(out.heap.load(), 20u << 20);
  EXPECT_EQ(out.total.load(), 120u << 20);
  EXPECT_EQ(out.level.load(), 1);
  heap = 128 << 20;  // 128 / 130 = 98.5 % of C: pause
  m.tick();
  EXPECT_EQ(out.level.load(), 2);
  idle = true;  // no connection: the memory is not the requests'; after 8 samples, shed at most
  for (int i = 0; i < 7; ++i) m.tick();
  EXPECT_EQ(out.level.load(), 2);
  m.tick();
  EXPECT_EQ(out.level.load(), 1);
  m.tick();
  EXPECT_EQ(out.level.load(), 1);  // (stays shedding: requests would only add to it)
  idle = false;  // connections again: the pause applies again
  m.tick();
  EXPECT_EQ(out.level.load(), 2);
}

TEST(Overload, PressureIsTheLargerOfTheTwoByHand) {
  OverloadLimits l;
  l.limit = 1000;
  EXPECT_DOUBLE_EQ(overloadPressure(900, 300, l), 0.6);  // no budget: (900 - 300) / 1000
  l.budget = 1200;
  EXPECT_DOUBLE_EQ(overloadPressure(900, 300, l), 0.75);  // 900 / 1200 > 0.6
  EXPECT_DOUBLE_EQ(overloadPressure(900, 0, l), 0.9);     // 900 / 1000 > 0.75
  EXPECT_DOUBLE_EQ(overloadPressure(100, 300, l), 100.0 / 1200);  // (index > heap: 0 requests)
}

TEST(Overload, DefaultBudgetByHand) {
  // 64 MiB cgroup, 24 MiB resident: 85 % of 40 MiB = 34 MiB; the bound is 28 MiB.
  EXPECT_EQ(defaultHeapBudget(64ULL << 20, 24ULL << 20), (40ULL << 20) / 20 * 17);
  EXPECT_GE(defaultHeapBudget(20ULL << 20, 24ULL << 20), defaultHeapBound(20ULL << 20, 24ULL << 20));
}

// A fake root with /proc/self/cgroup and the controller files.
struct FakeRoot {
  fs::path dir = fs::temp_directory_path() / ("kvgate-cg-" + std::to_string(::getpid()));
  FakeRoot() { fs::create_directories(dir / "proc/self"); }
  ~FakeRoot() { fs::remove_all(dir); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((dir / rel).parent_path());
    std::ofstream(dir / rel) << text;
  }
};

TEST(Overload, CgroupV2Limit) {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/svc/kvgate.service\n");
  r.write("sys/fs/cgroup/svc/kvgate.service/memory.max", "536870912\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), 536870912u);
  r.write("sys/fs/cgroup/svc/kvgate.service/memory.max", "max\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), std::nullopt);
}

TEST(Overload, CgroupV1LimitAndUnlimited) {
  FakeRoot r;
  r.write("proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/pod/a\n0::/\n");
  r.write("sys/fs/cgroup/memory/pod/a/memory.limit_in_bytes", "268435456\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), 268435456u);
  // v1's "no limit" is a huge number: not below the machine's memory, so none.
  r.write("sys/fs/cgroup/memory/pod/a/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), std::nullopt);
  // Garbage and a path that climbs out are ignored.
  r.write("sys/fs/cgroup/memory/pod/a/memory.limit_in_bytes", "12abc\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), std::nullopt);
  r.write("proc/self/cgroup", "4:memory:/../../etc\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), std::nullopt);
}

TEST(Overload, CgroupLimitOfAParentOrOfTheMountRootBinds) {
  FakeRoot r;
  // v2: the service has no limit of its own, its slice has 1 GiB.
  r.write("proc/self/cgroup", "0::/system.slice/kvgate.service\n");
  r.write("sys/fs/cgroup/system.slice/memory.max", "1073741824\n");
  r.write("sys/fs/cgroup/system.slice/kvgate.service/memory.max", "max\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), 1073741824u);
  // ...and a smaller limit below it wins.
  r.write("sys/fs/cgroup/system.slice/kvgate.service/memory.max", "536870912\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), 536870912u);
}

TEST(Overload, CgroupV1ContainerWithoutNamespaceReadsTheMountRoot) {
  FakeRoot r;
  // /proc/self/cgroup names the host's path, which is not mounted in the container; the
  // container's own cgroup is the root of /sys/fs/cgroup/memory.
  r.write("proc/self/cgroup", "9:memory:/kubepods/burstable/pod1/abc\n");
  r.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n");
  EXPECT_EQ(cgroupMemoryLimit(r.dir.string(), 24ULL << 30), 268435456u);
}

}  // namespace
}  // namespace kvgate::proxy
