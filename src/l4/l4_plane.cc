// The L4 data path's control plane (l4_plane.h says what is served).
#include "l4/l4_plane.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "common/log.h"
#include "l4/l4_lb.skel.h"
#include "l4/l4_maps.h"

namespace kvgate::l4 {

namespace {

// Where the maps are pinned unless serve --l4-pin-dir says otherwise.
const std::string kDefaultPinBase = "/sys/fs/bpf";

// The name of a slot adopted from pinned maps until a rule takes it (adoptPinned).
const std::string kPinnedPrefix = "pinned:";

// Full NAT's source ports toward the endpoints: 1024-65535 (the VIP is no local socket's).
constexpr uint32_t kFullNatPortLo = 1024;

Result<uint32_t> ipv4(const std::string& s, const std::string& field) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1)
    return fail(400, field, "'" + s + "' is not an IPv4 address (the L4 path serves IPv4)");
  return a.s_addr;
}

template <typename T>
std::vector<uint8_t> bytesOf(const T* p, size_t n = 1) {
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(p),
                              reinterpret_cast<const uint8_t*>(p) + n * sizeof(T));
}

// A slot's service keys (l4_svc_key, one after another): does `keys` hold `k`?
bool hasKey(const std::vector<uint8_t>& keys, const uint8_t* k) {
  for (size_t off = 0; off + sizeof(l4_svc_key) <= keys.size(); off += sizeof(l4_svc_key))
    if (std::memcmp(keys.data() + off, k, sizeof(l4_svc_key)) == 0) return true;
  return false;
}

// Writes `svc` under each of `keys`.
bool writeService(int svc_fd, const std::vector<uint8_t>& keys, const l4_svc& svc) {
  for (size_t off = 0; off + sizeof(l4_svc_key) <= keys.size(); off += sizeof(l4_svc_key))
    if (bpf_map_update_elem(svc_fd, keys.data() + off, &svc, BPF_ANY) != 0) return false;
  return true;
}

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

// The source address this node gives a packet to `ep` (network order): the kernel's choice for a
// datagram socket connected there (no packet is sent). Mode 1's SNAT address.
Result<uint32_t> sourceToward(uint32_t ep, const std::string& field) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(503, field, "cannot open a socket: " + errnoText(errno));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = ep;
  to.sin_port = htons(9);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    return fail(400, field,
                "no route from this node to the endpoint (" + errnoText(err) +
                    "): mode 1 gives it this node's address toward it as the source");
  return me.sin_addr.s_addr;
}

// An installed slot's endpoint rows, as planned.
struct L4Rows {
  std::vector<l4_ep> rows;
  explicit L4Rows(const std::vector<uint8_t>& bytes) : rows(bytes.size() / sizeof(l4_ep)) {
    std::memcpy(rows.data(), bytes.data(), rows.size() * sizeof(l4_ep));
  }
};

// What plan() reads of this node: its IPv4 interface addresses, the L4 interfaces, and one-arm's
// source port range.
struct NodeView {
  struct Addr {
    uint32_t ip, mask;  // network order
    std::string iface;
    bool loopback;
  };
  std::vector<Addr> addrs;
  std::set<std::string> l4_ifaces;
  uint16_t one_arm_lo = 1024, one_arm_n = 31744;
  unsigned ephemeral_lo = 32768, ephemeral_hi = 60999;  // net.ipv4.ip_local_port_range

  static NodeView read(const std::vector<std::string>& ifaces) {
    NodeView v;
    v.l4_ifaces.insert(ifaces.begin(), ifaces.end());
    ifaddrs* all = nullptr;
    if (getifaddrs(&all) == 0) {
      for (ifaddrs* a = all; a; a = a->ifa_next)
        if (a->ifa_addr && a->ifa_netmask && a->ifa_addr->sa_family == AF_INET)
          v.addrs.push_back({reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr,
                             reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr,
                             // (an address labelled "eth0:1" is eth0's)
                             std::string(a->ifa_name ? a->ifa_name : "")
                                 .substr(0, std::string(a->ifa_name ? a->ifa_name : "").find(':')),
                             (a->ifa_flags & IFF_LOOPBACK) != 0});
      freeifaddrs(all);
    }
    // One-arm's source address is this node's own: its ports stay out of the kernel's ephemeral
    // range (a local connection there never meets a flow's), in the larger part outside it.
    unsigned lo = 32768, hi = 60999;
    if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
      if (std::fscanf(f, "%u %u", &lo, &hi) != 2) lo = 32768, hi = 60999;
      std::fclose(f);
    }
    lo = std::clamp(lo, 1024u, 65535u);
    hi = std::clamp(hi, lo, 65535u);
    v.ephemeral_lo = lo;
    v.ephemeral_hi = hi;
    if (lo - 1024 >= 65535 - hi) {
      v.one_arm_lo = 1024;
      v.one_arm_n = static_cast<uint16_t>(lo - 1024);
    } else {
      v.one_arm_lo = static_cast<uint16_t>(hi + 1);
      v.one_arm_n = static_cast<uint16_t>(65535 - hi);
    }
    return v;
  }
  const Addr* local(uint32_t ip) const {
    for (const auto& a : addrs)
      if (a.ip == ip) return &a;
    return nullptr;
  }
  // On a network of one of the node's interfaces (a neighbour: DSR's frames go to it directly).
  bool onLink(uint32_t ip) const {
    for (const auto& a : addrs)
      if (a.mask != 0 && !a.loopback && (a.ip & a.mask) == (ip & a.mask)) return true;
    return false;
  }
  // Mode 5's VIPs: the node's IPv4 addresses outside loopback, each once, in order.
  std::vector<uint32_t> hostAddrs() const {
    std::set<uint32_t> out;
    for (const auto& a : addrs)
      if (!a.loopback && (ntohl(a.ip) >> 24) != 127) out.insert(a.ip);
    return {out.begin(), out.end()};
  }
};

// This network namespace's pin directory (<base>/kvgate/net-<inode>), made if needed; "" when
// <base> is no bpf filesystem (the default /sys/fs/bpf is mounted first, as systemd does, when
// it is not): the maps are then not pinned.
std::string pinDir(const std::string& base) {
  struct statfs fs {};
  if (statfs(base.c_str(), &fs) != 0 || fs.f_type != BPF_FS_MAGIC) {
    if (base != kDefaultPinBase || mount("bpf", base.c_str(), "bpf", 0, "mode=0700") != 0 ||
        statfs(base.c_str(), &fs) != 0 || fs.f_type != BPF_FS_MAGIC)
      return "";
  }
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns) != 0) return "";
  const std::string dir = base + "/kvgate";
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "";
  const std::string sub = dir + "/net-" + std::to_string(ns.st_ino);
  if (mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) return "";
  return sub;
}

// Removes the pinned maps of `dir` (the directory stays: its lock is held).
void removePins(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
}

// This network namespace's cookie (SO_NETNS_COOKIE, 5.14+; 0 when the kernel has none).
uint64_t netnsCookie() {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) cookie = 0;
    ::close(fd);
  }
  return cookie;
}

// Whether the maps pinned in `dir` (if any) can be adopted: made by this layout, in this network
// namespace (a namespace inode number is reused once its namespace is gone). "" yes, or why not.
std::string pinsForeign(const std::string& dir, uint64_t cookie) {
  bool any = false;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) any |= e->d_name[0] != '.';
    closedir(d);
  }
  if (!any) return "";
  const int fd = bpf_obj_get((dir + "/meta").c_str());
  if (fd < 0) return "no layout record (an older build's)";
  l4_meta m{};
  const uint32_t zero = 0;
  const bool read = bpf_map_lookup_elem(fd, &zero, &m) == 0;
  ::close(fd);
  if (!read) return "an unreadable layout record";
  if (m.layout != L4_MAPS_LAYOUT)
    return "layout " + std::to_string(m.layout) + ", this build's is " +
           std::to_string(L4_MAPS_LAYOUT);
  if (cookie != 0 && m.netns_cookie != 0 && m.netns_cookie != cookie)
    return "made in another network namespace that had the same inode number";
  return "";
}

// One-arm's source address toward `ep`: the kernel's choice, which must be an address of an L4
// interface (the endpoint's answers come back to it, and only there does the program see them).
Result<uint32_t> oneArmSource(uint32_t ep, const NodeView& node, const std::string& field) {
  auto src = sourceToward(ep, field);
  if (!src) return src;
  const NodeView::Addr* a = node.local(*src);
  if (!a || !node.l4_ifaces.count(a->iface))
    return fail(400, field,
                "this node reaches the endpoint from " + (a ? a->iface : std::string("?")) +
                    ", which is not one of --l4-ifaces: mode 1's answers would not be seen");
  return src;
}

// A mode 0-3 rule as map entries (id and generation filled in when a slot is given).
struct Planned {
  std::string key;
  std::string spec;            // specOf(the rule)
  std::vector<l4_svc_key> ks;  // one; mode 5: one per address of this node
  l4_svc svc{};
  std::vector<l4_ep> eps;
  std::vector<std::pair<std::string, uint16_t>> addrs;
};

// What a rule asks of the L4 path, as text: equal for a rule that did not change.
std::string specOf(const config::RuleSpec& r) {
  std::string out = r.key() + '\n' + r.service_args.dump();
  for (const auto& e : r.endpoints) out += '\n' + e.json.dump();
  return out;
}

// Checks that read the node's state (routes, addresses) may refuse a rule that was fine when it
// was installed: apply() keeps such a rule as installed when it did not change.
Result<Planned> plan(const config::RuleSpec& r, const NodeView& node) {
  Planned p;
  p.key = r.key();
  auto vip = ipv4(r.vip, "serviceArguments.externalIP");
  if (!vip) return tl::unexpected(vip.error());
  const uint32_t host = ntohl(*vip);
  const uint16_t port = htons(r.port);
  const uint8_t proto = r.protocol == "udp" ? IPPROTO_UDP : IPPROTO_TCP;
  if (r.mode == L4_MODE_HOSTONEARM) {
    // (upstream's rule: "hostarm needs unspec VIP")
    if (host != 0)
      return fail(400, "serviceArguments.externalIP",
                  "mode 5 (host one-arm) serves its port on every address of this node: its "
                  "externalIP must be 0.0.0.0, not '" +
                      r.vip + "'");
    // (its port would take the answers of this node's own connections, which leave from
    // ephemeral ports)
    if (r.port >= node.ephemeral_lo && r.port <= node.ephemeral_hi)
      return fail(400, "serviceArguments.port",
                  "mode 5 (host one-arm) takes its port on every address of this node: " +
                      std::to_string(r.port) + " is in net.ipv4.ip_local_port_range (" +
                      std::to_string(node.ephemeral_lo) + "-" + std::to_string(node.ephemeral_hi) +
                      "), where this node's own connections get their ports");
    for (uint32_t a : node.hostAddrs()) p.ks.push_back({a, port, proto, 0});
    if (p.ks.empty())
      return fail(400, "serviceArguments.mode",
                  "mode 5 (host one-arm): this node has no IPv4 address outside loopback");
  } else {
    if (host == 0 || host == 0xffffffffu || (host >> 28) == 0xe)
      return fail(400, "serviceArguments.externalIP",
                  "'" + r.vip + "' cannot be a VIP (unspecified, broadcast or multicast)");
    p.ks.push_back({*vip, port, proto, 0});
  }
  if (r.endpoints.size() > L4_MAX_ENDPOINTS)
    return fail(
        400, "endpoints",
        "the L4 path serves at most " + std::to_string(L4_MAX_ENDPOINTS) + " endpoints a rule");
  uint32_t cum = 0;
  for (size_t i = 0; i < r.endpoints.size(); ++i) {
    const auto& e = r.endpoints[i];
    auto ip = ipv4(e.ip, "endpoints[" + std::to_string(i) + "].endpointIP");
    if (!ip) return tl::unexpected(ip.error());
    cum += e.weight;
    l4_ep ep{};
    ep.ip = *ip;
    ep.port = htons(e.port);
    ep.up = 1;
    ep.cum_weight = cum;
    const std::string field = "endpoints[" + std::to_string(i) + "].endpointIP";
    if (r.mode != L4_MODE_DNAT && node.local(*ip))
      return fail(400, field,
                  "'" + e.ip + "' is an address of this node: mode " + std::to_string(r.mode) +
                      " forwards to other hosts");
    if (r.mode == L4_MODE_FULLNAT) {
      ep.snat_ip = *vip;
    } else if (r.mode == L4_MODE_DSR) {
      if (!node.onLink(*ip))
        return fail(400, field,
                    "'" + e.ip +
                        "' is not on a network of this node: mode 3 (DSR) sends each packet to "
                        "the endpoint's own MAC, so the endpoint must be a neighbour");
    } else if (r.mode == L4_MODE_ONEARM || r.mode == L4_MODE_HOSTONEARM) {
      auto src = oneArmSource(*ip, node, field);
      if (!src) return tl::unexpected(src.error());
      ep.snat_ip = *src;
    }
    p.eps.push_back(ep);
    p.addrs.emplace_back(e.ip, e.port);
  }
  p.svc.sel = static_cast<uint8_t>(r.sel);
  p.svc.mode = static_cast<uint8_t>(r.mode);
  p.svc.n_eps = static_cast<uint16_t>(p.eps.size());
  p.svc.total_weight = cum;
  // The flows' source ports toward the endpoints (NodeView says one-arm's).
  if (r.mode == L4_MODE_ONEARM || r.mode == L4_MODE_HOSTONEARM) {
    if (node.one_arm_n < 1024)
      return fail(400, "serviceArguments.mode",
                  "net.ipv4.ip_local_port_range leaves " + std::to_string(node.one_arm_n) +
                      " ports outside it; one-arm's flows take their source ports there and "
                      "need at least 1024");
    p.svc.port_lo = node.one_arm_lo;
    p.svc.port_n = node.one_arm_n;
  } else if (r.mode == L4_MODE_FULLNAT) {
    p.svc.port_lo = static_cast<uint16_t>(kFullNatPortLo);
    p.svc.port_n = static_cast<uint16_t>(65536 - kFullNatPortLo);
  }
  p.svc.timeout_s = r.inactive_timeout_sec > 0 ? static_cast<uint32_t>(r.inactive_timeout_sec)
                    : r.protocol == "udp"      ? 30
                                               : 900;
  return p;
}

}  // namespace

Result<std::unique_ptr<L4Plane>> L4Plane::start(const std::vector<std::string>& ifaces,
                                                bool keep_on_exit, const std::string& pin_base) {
  std::unique_ptr<L4Plane> p(new L4Plane());
  p->ifaces_ = ifaces;
  for (const auto& name : ifaces) {
    const unsigned idx = if_nametoindex(name.c_str());
    if (idx == 0) return fail(400, "--l4-ifaces", "no interface named '" + name + "'");
    // (the program reads an Ethernet header: tun, wireguard or ipip devices have none)
    std::FILE* t = std::fopen(("/sys/class/net/" + name + "/type").c_str(), "r");
    int type = -1;
    if (t) {
      if (std::fscanf(t, "%d", &type) != 1) type = -1;
      std::fclose(t);
    }
    if (type != 1)
      return fail(400, "--l4-ifaces",
                  "'" + name + "' is not an Ethernet interface (ARPHRD " + std::to_string(type) +
                      "): the L4 path needs one");
    p->ifindexes_.push_back(static_cast<int>(idx));
  }
  p->keep_on_exit_ = keep_on_exit;
  // One gateway per network namespace runs the L4 path (a second would replace the first's
  // program and take its services): an abstract socket name, which lives in the namespace, is
  // held for the life of the process.
  {
    p->ns_lock_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const char name[] = "kvgate-l4-data-path";  // (after the leading NUL: abstract)
    std::memcpy(a.sun_path + 1, name, sizeof name - 1);
    const socklen_t len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + sizeof name - 1);
    if (p->ns_lock_fd_ < 0 || ::bind(p->ns_lock_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0)
      return fail(503, "--l4-ifaces",
                  "another kvgate serve runs the L4 path of this network namespace (" +
                      errnoText(errno) + ")");
  }
  p->pin_dir_ = pinDir(pin_base);
  if (p->pin_dir_.empty()) {
    if (pin_base != kDefaultPinBase)
      return fail(400, "--l4-pin-dir",
                  "'" + pin_base + "' is no bpf filesystem (mount -t bpf bpf " + pin_base + ")");
    log::warn("l4", "cannot pin the L4 maps under " + pin_base + "/kvgate (" + errnoText(errno) +
                        "): they are not pinned, tracked flows end with this process");
  }
  // Loads the program, over the pinned maps when there are (libbpf reuses a pinned map whose
  // definition matches, and pins the others).
  auto load = [&]() -> bool {
    p->skel_ = l4_lb__open();
    if (!p->skel_) return false;
    if (!p->pin_dir_.empty()) {
      bpf_map* m = nullptr;
      bpf_object__for_each_map(m, p->skel_->obj) {
        const char* name = bpf_map__name(m);
        // (`scratch` holds nothing between packets: not pinned, so its struct is no part of the
        // pinned layout; an older build's pin of it is removed)
        if (std::string_view(name) == "scratch") {
          unlink((p->pin_dir_ + "/scratch").c_str());
          continue;
        }
        if (name[0] != '.') bpf_map__set_pin_path(m, (p->pin_dir_ + "/" + name).c_str());
      }
    }
    if (l4_lb__load(p->skel_) == 0) return true;
    const int err = errno;
    l4_lb__destroy(p->skel_);
    p->skel_ = nullptr;
    errno = err;
    return false;
  };
  p->cookie_ = netnsCookie();
  if (!p->pin_dir_.empty()) {
    // One gateway per network namespace owns the pinned maps (a second would take the first's
    // services away on its first commit).
    p->pin_lock_fd_ = ::open(p->pin_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->pin_lock_fd_ < 0 || flock(p->pin_lock_fd_, LOCK_EX | LOCK_NB) != 0)
      return fail(503, "--l4-ifaces",
                  "another kvgate serve runs the L4 path of this network namespace (" +
                      p->pin_dir_ + " is locked)");
    if (const std::string why = pinsForeign(p->pin_dir_, p->cookie_); !why.empty()) {
      log::warn("l4", "the pinned L4 maps in " + p->pin_dir_ + " are not adopted (" + why +
                          "): removed, tracked flows start over");
      removePins(p->pin_dir_);
    }
  }
  if (!load()) {
    const int err = errno;
    return fail(503, "--l4-ifaces",
                "the kernel refused the L4 program (" + errnoText(err) +
                    "): BPF needs root or CAP_BPF and CAP_NET_ADMIN, and a 5.12+ kernel with tc "
                    "BPF" +
                    (p->pin_dir_.empty() ? std::string()
                                         : "; or the maps pinned in " + p->pin_dir_ +
                                               " do not fit this build (remove them to start "
                                               "over)"));
  }
  {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(bpf_program__fd(p->skel_->progs.l4_ingress), &info, &len) == 0)
      p->prog_id_ = info.id;
  }
  for (uint32_t i = L4_MAX_SERVICES; i > 0; --i) p->now_.free.push_back(i - 1);
  std::vector<uint32_t> kept_on;  // interfaces the last process's program was attached to
  if (!p->pin_dir_.empty()) kept_on = p->adoptPinned();
  for (size_t i = 0; i < p->ifindexes_.size(); ++i) {
    bpf_tc_hook hook{};
    hook.sz = sizeof hook;
    hook.ifindex = p->ifindexes_[i];
    hook.attach_point = BPF_TC_INGRESS;
    int rc = bpf_tc_hook_create(&hook);  // (the clsact qdisc; EEXIST: already there)
    if (rc && rc != -EEXIST)
      return fail(503, "--l4-ifaces",
                  "cannot add the clsact qdisc on " + ifaces[i] + ": " + errnoText(rc));
    bpf_tc_opts opts{};
    opts.sz = sizeof opts;
    opts.handle = 0x4b56;  // "KV"
    opts.priority = 1;
    if (bpf_tc_query(&hook, &opts) == 0)  // the last process's (kept on exit, or a crash)
      log::info("l4", "replacing the L4 filter left on " + ifaces[i] + " (program id " +
                          std::to_string(opts.prog_id) + ")");
    opts = bpf_tc_opts{};
    opts.sz = sizeof opts;
    opts.handle = 0x4b56;
    opts.priority = 1;
    opts.prog_fd = bpf_program__fd(p->skel_->progs.l4_ingress);
    opts.flags = BPF_TC_F_REPLACE;
    rc = bpf_tc_attach(&hook, &opts);
    if (rc)
      return fail(503, "--l4-ifaces",
                  "cannot attach the L4 program on " + ifaces[i] + ": " + errnoText(rc));
    p->attached_.push_back(p->ifindexes_[i]);
  }
  // The last process's program on an interface this start does not name: detached (it would
  // go on rewriting with the maps this one now owns).
  for (uint32_t ifindex : kept_on) {
    if (std::find(p->ifindexes_.begin(), p->ifindexes_.end(), static_cast<int>(ifindex)) !=
        p->ifindexes_.end())
      continue;
    bpf_tc_hook hook{};
    hook.sz = sizeof hook;
    hook.ifindex = static_cast<int>(ifindex);
    hook.attach_point = BPF_TC_INGRESS;
    bpf_tc_opts opts{};
    opts.sz = sizeof opts;
    opts.handle = 0x4b56;
    opts.priority = 1;
    if (bpf_tc_query(&hook, &opts) == 0) {
      bpf_tc_opts del{};
      del.sz = sizeof del;
      del.handle = 0x4b56;
      del.priority = 1;
      bpf_tc_detach(&hook, &del);
      log::info("l4", "detached the last process's L4 program from interface " +
                          std::to_string(ifindex) + " (not in --l4-ifaces now)");
    }
  }
  p->writeMeta();
  p->started_ = true;
  return p;
}

void L4Plane::writeMeta() {
  if (pin_dir_.empty()) return;
  l4_meta m{};
  m.layout = L4_MAPS_LAYOUT;
  m.netns_cookie = cookie_;
  m.next_generation = now_.generation;
  for (int i : ifindexes_)
    if (m.n_ifaces < L4_META_MAX_IFACES) m.ifindex[m.n_ifaces++] = static_cast<uint32_t>(i);
  const uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.meta), &zero, &m, BPF_ANY) != 0)
    log::warn("l4", "cannot write the L4 maps' record: " + errnoText(errno));
}

void L4Plane::finishAdoption() {
  State next = now_;
  size_t removed = 0;
  for (auto it = next.slots.begin(); it != next.slots.end();) {
    if (it->first.rfind(kPinnedPrefix, 0) == 0) {
      next.free.push_back(it->second.id);
      it = next.slots.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  if (removed == 0) return;
  if (auto i = install(now_, next); !i) {
    log::warn("l4", "cannot remove the pinned services no rule took: " + i.error().what);
    return;
  }
  now_ = std::move(next);
  before_ = now_;
  log::info("l4",
            std::to_string(removed) + " service(s) of the pinned maps that no rule took removed");
}

L4Plane::~L4Plane() {
  // (kept: the program forwards with its pinned maps until the next start replaces it)
  if (keep_on_exit_ && !pin_dir_.empty()) {
    if (skel_) l4_lb__destroy(skel_);
    if (pin_lock_fd_ >= 0) ::close(pin_lock_fd_);
    if (ns_lock_fd_ >= 0) ::close(ns_lock_fd_);
    return;
  }
  // (only where this process attached its own program: a start that failed, or another
  // process's program, is not ours to remove)
  for (int ifindex : attached_) {
    bpf_tc_hook hook{};
    hook.sz = sizeof hook;
    hook.ifindex = ifindex;
    hook.attach_point = BPF_TC_INGRESS;
    bpf_tc_opts opts{};
    opts.sz = sizeof opts;
    opts.handle = 0x4b56;
    opts.priority = 1;
    if (prog_id_ == 0 || bpf_tc_query(&hook, &opts) != 0 || opts.prog_id != prog_id_) continue;
    bpf_tc_opts del{};
    del.sz = sizeof del;
    del.handle = 0x4b56;
    del.priority = 1;
    bpf_tc_detach(&hook, &del);
  }
  if (skel_) l4_lb__destroy(skel_);
  if (started_ && !pin_dir_.empty()) {  // (a start that failed leaves the pins as they were)
    removePins(pin_dir_);
    rmdir(pin_dir_.c_str());
  }
  if (pin_lock_fd_ >= 0) ::close(pin_lock_fd_);
  if (ns_lock_fd_ >= 0) ::close(ns_lock_fd_);
}

std::vector<uint32_t> L4Plane::adoptPinned() {
  const int fd = bpf_map__fd(skel_->maps.services);
  l4_svc_key key{}, next{};
  bool first = true;
  std::set<uint32_t> used;
  while (bpf_map_get_next_key(fd, first ? nullptr : &key, &next) == 0) {
    first = false;
    key = next;
    l4_svc v{};
    if (bpf_map_lookup_elem(fd, &key, &v) != 0 || v.id >= L4_MAX_SERVICES) continue;
    Slot& s = now_.slots[kPinnedPrefix + std::to_string(v.id)];
    s.id = v.id;
    s.generation = v.generation;
    const auto kb = bytesOf(&key);
    s.key.insert(s.key.end(), kb.begin(), kb.end());
    s.svc = bytesOf(&v);
    now_.generation = std::max(now_.generation, v.generation);
    used.insert(v.id);
  }
  std::erase_if(now_.free, [&](uint32_t id) { return used.count(id) > 0; });
  if (!used.empty())
    log::info("l4", std::to_string(used.size()) + " service(s) found in the pinned maps of " +
                        pin_dir_ + ": their tracked flows live on for the rules that keep them");
  // The generation counter goes on from the last process's (never reused: a deleted rule's
  // flows must not match a new rule's), and the interfaces its program was attached to.
  std::vector<uint32_t> ifaces;
  l4_meta m{};
  const uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.meta), &zero, &m) == 0 &&
      m.layout == L4_MAPS_LAYOUT) {
    now_.generation = std::max(now_.generation, m.next_generation);
    for (uint32_t i = 0; i < m.n_ifaces && i < L4_META_MAX_IFACES; ++i)
      ifaces.push_back(m.ifindex[i]);
  }
  return ifaces;
}

Result<void> L4Plane::apply(const std::vector<config::RuleSpec>& rules) {
  departed_.clear();  // (the last commit is final once another begins)
  const NodeView node = NodeView::read(ifaces_);
  std::vector<Planned> want;
  std::vector<std::string> kept;  // unchanged rules the node's state now refuses: as installed
  for (const auto& r : rules) {
    if (!config::isL4Mode(r.mode) || !r.admin_up) continue;  // (a rule set down: not installed)
    const std::string spec = specOf(r);
    auto p = plan(r, node);
    if (!p) {
      auto it = now_.slots.find(r.key());
      // (only what an endpoint's route or address refuses: a port range changed since is not
      // kept, its flows would take ports the kernel now gives its own connections)
      const bool node_state =
          p.error().source.rfind("endpoints[", 0) == 0 ||
          p.error().what.find("no IPv4 address outside loopback") != std::string::npos;
      if (it == now_.slots.end() || it->second.spec != spec || !node_state)
        return tl::unexpected(p.error());
      log::warn("l4", "rule " + r.key() + " (unchanged) kept as installed: " + p.error().what);
      kept.push_back(r.key());
      continue;
    }
    p->spec = spec;
    want.push_back(std::move(*p));
  }
  // (a mode 5 rule serves its port on the node's addresses: a rule of another mode on one of
  // them would share its service entry)
  std::map<std::vector<uint8_t>, std::string> owner;
  for (const auto& key : kept) {
    const auto& keys = now_.slots.at(key).key;
    for (size_t off = 0; off + sizeof(l4_svc_key) <= keys.size(); off += sizeof(l4_svc_key))
      owner.emplace(std::vector<uint8_t>(
                        keys.begin() + static_cast<std::ptrdiff_t>(off),
                        keys.begin() + static_cast<std::ptrdiff_t>(off + sizeof(l4_svc_key))),
                    key);
  }
  // A mode 5 rule yields an address another rule has as its VIP (same port and protocol).
  for (const auto& w : want)
    if (w.svc.mode != L4_MODE_HOSTONEARM)
      for (const auto& k : w.ks) owner.emplace(bytesOf(&k), w.key);
  size_t keys = 0;
  for (auto& w : want) {
    if (w.svc.mode == L4_MODE_HOSTONEARM)
      std::erase_if(w.ks, [&](const l4_svc_key& k) { return owner.count(bytesOf(&k)) > 0; });
    keys += w.ks.size();
  }
  for (const auto& key : kept) keys += now_.slots.at(key).key.size() / sizeof(l4_svc_key);
  if (keys > L4_MAX_SERVICES)
    return fail(400, "serviceArguments",
                "the L4 path serves at most " + std::to_string(L4_MAX_SERVICES) +
                    " addresses, ports and protocols (a mode 5 rule takes one per address of "
                    "this node): these rules need " +
                    std::to_string(keys));
  // The next state: kept slots keep their id and generation; new ones take a free slot (those
  // of removed services first freed, so a full table can still be replaced).
  State next;
  next.generation = now_.generation;
  next.free = now_.free;
  std::set<std::string> wanted(kept.begin(), kept.end());
  for (const auto& w : want) wanted.insert(w.key);
  for (const auto& key : kept) next.slots[key] = now_.slots.at(key);
  // A new rule whose service a pinned map still holds (the last process's) takes its slot and
  // generation again: the flows tracked for it live on.
  std::map<std::string, const Slot*> claims;  // rule key -> the pinned slot it takes
  for (const auto& w : want) {
    if (now_.slots.count(w.key)) continue;
    for (const auto& [key, slot] : now_.slots) {
      if (key.rfind(kPinnedPrefix, 0) != 0 || wanted.count(key)) continue;
      bool match = false;
      for (const auto& k : w.ks) match |= hasKey(slot.key, reinterpret_cast<const uint8_t*>(&k));
      if (!match) continue;
      claims[w.key] = &slot;
      wanted.insert(key);  // (its id is taken, not freed)
      break;
    }
  }
  // (pinned services no rule took yet stay until finishAdoption(): a restore applies its rules
  // one by one when the whole set fails)
  for (const auto& [key, slot] : now_.slots)
    if (key.rfind(kPinnedPrefix, 0) == 0 && !wanted.count(key)) {
      next.slots[key] = slot;
      wanted.insert(key);
    }
  for (const auto& [key, slot] : now_.slots)
    if (!wanted.count(key)) next.free.push_back(slot.id);
  for (auto& w : want) {
    auto it = now_.slots.find(w.key);
    Slot slot;
    if (it != now_.slots.end()) {
      slot.id = it->second.id;
      slot.generation = it->second.generation;
    } else if (auto c = claims.find(w.key); c != claims.end()) {
      slot.id = c->second->id;
      slot.generation = c->second->generation;
    } else {
      if (next.free.empty())
        return fail(400, "serviceArguments",
                    "the L4 path serves at most " + std::to_string(L4_MAX_SERVICES) + " rules");
      slot.id = next.free.back();
      next.free.pop_back();
      slot.generation = ++next.generation;
    }
    w.svc.id = slot.id;
    w.svc.generation = slot.generation;
    slot.key = bytesOf(w.ks.data(), w.ks.size());
    slot.svc = bytesOf(&w.svc);
    slot.eps = bytesOf(w.eps.data(), w.eps.size());
    slot.addrs = w.addrs;
    slot.spec = w.spec;
    slot.down.assign(w.addrs.size(), 0);
    if (it != now_.slots.end()) {  // an endpoint kept keeps its live flows and what its
                                   // connects were read at
      slot.live.assign(slot.addrs.size(), 0);
      for (size_t i = 0; i < slot.addrs.size(); ++i) {
        if (auto o = it->second.outcomes_seen.find(slot.addrs[i]);
            o != it->second.outcomes_seen.end())
          slot.outcomes_seen.insert(*o);
        for (size_t j = 0; j < it->second.addrs.size() && j < it->second.live.size(); ++j)
          if (it->second.addrs[j] == slot.addrs[i]) slot.live[i] = it->second.live[j];
      }
    }
    if (it != now_.slots.end())  // an endpoint kept keeps its health
      for (size_t i = 0; i < slot.addrs.size(); ++i)
        for (size_t j = 0; j < it->second.addrs.size(); ++j)
          if (it->second.addrs[j] == slot.addrs[i]) slot.down[i] = it->second.down[j];
    next.slots[w.key] = std::move(slot);
  }
  if (auto i = install(now_, next); !i) {
    (void)install(next, now_);  // (a kernel refusal midway: back to what was)
    // (generations written midway were live for a moment: never handed out again)
    now_.generation = std::max(now_.generation, next.generation);
    writeMeta();
    return i;
  }
  before_ = std::move(now_);
  now_ = std::move(next);
  writeMeta();
  return {};
}

void L4Plane::rollback() {
  before_.generation = std::max(before_.generation, now_.generation);  // (never reused)
  if (install(now_, before_)) now_ = before_;
}

// Makes the maps follow `to`: services gone are deleted (their flows end), new or changed ones
// written (endpoint rows before the service entry, so a packet never reads a count whose rows
// are not there), unchanged ones left alone. A reused slot's counters start at zero.
Result<void> L4Plane::install(const State& from, const State& to) {
  const int svc_fd = bpf_map__fd(skel_->maps.services);
  const int ep_fd = bpf_map__fd(skel_->maps.endpoints);
  const int cnt_fd = bpf_map__fd(skel_->maps.counters);
  // (a key that some slot of `to` has is written below, not deleted first: a pinned service a
  // rule takes again, a mode 5 address moving, never miss a packet)
  for (const auto& [key, slot] : from.slots)
    for (size_t off = 0; off + sizeof(l4_svc_key) <= slot.key.size(); off += sizeof(l4_svc_key)) {
      bool wanted = false;
      for (const auto& [tkey, tslot] : to.slots) wanted |= hasKey(tslot.key, slot.key.data() + off);
      if (!wanted) bpf_map_delete_elem(svc_fd, slot.key.data() + off);
    }
  for (const auto& [key, slot] : to.slots) {
    if (key.rfind(kPinnedPrefix, 0) == 0) continue;  // (as found in the pinned maps)
    auto it = from.slots.find(key);
    const bool same = it != from.slots.end() && it->second.generation == slot.generation &&
                      it->second.key == slot.key && it->second.svc == slot.svc &&
                      it->second.eps == slot.eps && it->second.down == slot.down;
    if (same) continue;
    if (it == from.slots.end() || it->second.generation != slot.generation) {
      const int ncpu = libbpf_num_possible_cpus();
      std::vector<l4_counters> zero(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
      bpf_map_update_elem(cnt_fd, &slot.id, zero.data(), BPF_ANY);
    }
    std::vector<l4_ep> rows;
    l4_svc svc;
    rowsOf(slot, rows, svc);
    moveEndpointState(slot);
    for (uint32_t i = 0; i < rows.size(); ++i) {
      const uint32_t row = slot.id * L4_MAX_ENDPOINTS + i;
      if (bpf_map_update_elem(ep_fd, &row, &rows[i], BPF_ANY))
        return fail(503, "l4", "cannot program the endpoint map: " + errnoText(errno));
    }
    if (!writeService(svc_fd, slot.key, svc))
      return fail(503, "l4", "cannot program the service map: " + errnoText(errno));
  }
  return {};
}

void L4Plane::moveEndpointState(const Slot& slot) {
  const int cnt_fd = bpf_map__fd(skel_->maps.ep_counters);
  const int flows_fd = bpf_map__fd(skel_->maps.ep_flows);
  const uint32_t base = slot.id * L4_MAX_ENDPOINTS;
  // What each row of the slot holds now, read before any is written.
  std::map<RowOwner, std::pair<l4_ep_counters, uint32_t>> held;
  for (uint32_t j = 0; j < L4_MAX_ENDPOINTS; ++j) {
    auto o = row_owner_.find(base + j);
    if (o == row_owner_.end()) continue;
    const uint32_t row = base + j;
    l4_ep_counters c{};
    uint32_t f = 0;
    if (bpf_map_lookup_elem(cnt_fd, &row, &c) != 0) c = {};
    if (bpf_map_lookup_elem(flows_fd, &row, &f) != 0) f = 0;
    held[o->second] = {c, f};
  }
  for (uint32_t i = 0; i < L4_MAX_ENDPOINTS; ++i) {
    const uint32_t row = base + i;
    auto o = row_owner_.find(row);
    if (i >= slot.addrs.size()) {  // (past the list: zeroed, then nobody's; the program may go
                                   // on counting a removed endpoint's draining flows there,
                                   // which nobody reads)
      if (o == row_owner_.end()) continue;
      const l4_ep_counters zero{};
      const uint32_t none = 0;
      bpf_map_update_elem(cnt_fd, &row, &zero, BPF_ANY);
      bpf_map_update_elem(flows_fd, &row, &none, BPF_ANY);
      row_owner_.erase(o);
      continue;
    }
    const RowOwner want{slot.generation, slot.addrs[i].first, slot.addrs[i].second};
    if (o != row_owner_.end() && o->second == want) {
      held.erase(want);
      continue;
    }
    l4_ep_counters c{};
    uint32_t f = 0;
    if (auto h = held.find(want); h != held.end()) {
      std::tie(c, f) = h->second;
      held.erase(h);
    } else if (auto d = departed_.find(want); d != departed_.end()) {
      std::memcpy(&c, d->second.first.data(), sizeof c);  // (a commit undone brings it back)
      f = d->second.second;
      departed_.erase(d);
    }
    bpf_map_update_elem(cnt_fd, &row, &c, BPF_ANY);
    bpf_map_update_elem(flows_fd, &row, &f, BPF_ANY);
    row_owner_[row] = want;
  }
  // (endpoints that left the slot: kept until the next apply(), should this commit be undone)
  static_assert(sizeof(l4_ep_counters) == sizeof(std::array<uint64_t, 5>));
  for (auto& [owner, v] : held) {
    if (std::get<0>(owner) != slot.generation) continue;
    auto& d = departed_[owner];
    std::memcpy(d.first.data(), &v.first, sizeof v.first);
    d.second = v.second;
  }
}

void L4Plane::rowsOf(const Slot& slot, std::vector<l4_ep>& rows, l4_svc& svc) {
  const size_t n = slot.eps.size() / sizeof(l4_ep);
  rows.resize(n);
  std::memcpy(rows.data(), slot.eps.data(), n * sizeof(l4_ep));  // (as planned: all up)
  std::memcpy(&svc, slot.svc.data(), sizeof svc);
  uint32_t planned_before = 0, cum = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t weight = rows[i].cum_weight - planned_before;
    planned_before = rows[i].cum_weight;
    rows[i].up = i < slot.down.size() && slot.down[i] ? 0 : 1;
    if (rows[i].up) cum += weight;
    rows[i].cum_weight = cum;
  }
  svc.total_weight = cum;
}

std::vector<std::string> L4Plane::syncHealth(
    const std::function<bool(const std::string& rule, const std::string& ip, uint16_t port)>& up) {
  std::vector<std::string> changed;
  const int ep_fd = bpf_map__fd(skel_->maps.endpoints);
  const int svc_fd = bpf_map__fd(skel_->maps.services);
  std::optional<NodeView> node;  // (read once, when a one-arm rule needs it)
  std::map<uint32_t, uint32_t> sources;  // one-arm: endpoint -> source toward it (0: none)
  for (auto& [key, slot] : now_.slots) {
    if (key.rfind(kPinnedPrefix, 0) == 0) continue;  // (not a rule's: removed by the next apply)
    std::vector<uint8_t> down = slot.down;
    for (size_t i = 0; i < slot.addrs.size() && i < down.size(); ++i)
      down[i] = up(key, slot.addrs[i].first, slot.addrs[i].second) ? 0 : 1;
    // One-arm: the source address toward each endpoint followed as routes and addresses change
    // (new flows take the new one; a route gone keeps the last).
    std::vector<uint8_t> eps = slot.eps;
    std::vector<std::string> moved;
    l4_svc planned;
    std::memcpy(&planned, slot.svc.data(), sizeof planned);
    std::vector<uint8_t> keys = slot.key;
    if (planned.mode == L4_MODE_HOSTONEARM && slot.key.size() >= sizeof(l4_svc_key)) {
      // Mode 5: the node's addresses followed (one another rule serves are left to it).
      if (!node) node = NodeView::read(ifaces_);
      l4_svc_key first;
      std::memcpy(&first, slot.key.data(), sizeof first);
      std::vector<l4_svc_key> ks;
      std::string list;
      for (uint32_t a : node->hostAddrs()) {
        const l4_svc_key k{a, first.port, first.proto, 0};
        bool other = false;
        for (const auto& [okey, oslot] : now_.slots)
          other |= okey != key && hasKey(oslot.key, reinterpret_cast<const uint8_t*>(&k));
        if (other) continue;
        ks.push_back(k);
        char text[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &a, text, sizeof text);
        list += (list.empty() ? "" : ",") + std::string(text);
      }
      if (!ks.empty()) keys = bytesOf(ks.data(), ks.size());
      if (keys != slot.key) moved.push_back(key + ": addresses " + list);
    }
    if (planned.mode == L4_MODE_ONEARM || planned.mode == L4_MODE_HOSTONEARM) {
      if (!node) node = NodeView::read(ifaces_);
      L4Rows rows(slot.eps);
      bool lost = false;
      for (size_t i = 0; i < rows.rows.size() && i < slot.addrs.size(); ++i) {
        auto c = sources.find(rows.rows[i].ip);
        if (c == sources.end()) {
          auto src = oneArmSource(rows.rows[i].ip, *node, "");
          c = sources.emplace(rows.rows[i].ip, src ? *src : 0).first;
        }
        if (c->second == 0) {  // (no route now, or not through an L4 interface: the last kept)
          if (!slot.source_lost)
            log::warn("l4", "rule " + key + ": endpoint " + slot.addrs[i].first +
                                " has no route through --l4-ifaces now; new flows keep the last "
                                "source address");
          lost = true;
          continue;
        }
        const uint32_t src = c->second;
        if (src == rows.rows[i].snat_ip) continue;
        rows.rows[i].snat_ip = src;
        char text[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &src, text, sizeof text);
        moved.push_back(key + ": " + slot.addrs[i].first + ":" +
                        std::to_string(slot.addrs[i].second) + " source " + text);
      }
      if (!moved.empty()) eps = bytesOf(rows.rows.data(), rows.rows.size());
      slot.source_lost = lost;
    }
    if (down == slot.down && eps == slot.eps && keys == slot.key) continue;
    Slot next = slot;
    next.down = down;
    next.eps = eps;
    next.key = keys;
    std::vector<l4_ep> rows;
    l4_svc svc;
    rowsOf(next, rows, svc);
    bool ok = true;
    for (uint32_t i = 0; i < rows.size() && ok; ++i) {
      const uint32_t row = slot.id * L4_MAX_ENDPOINTS + i;
      ok = bpf_map_update_elem(ep_fd, &row, &rows[i], BPF_ANY) == 0;
    }
    if (ok && !writeService(svc_fd, next.key, svc)) {
      ok = false;  // (keys written that the slot does not have yet: removed again)
      for (size_t off = 0; off + sizeof(l4_svc_key) <= next.key.size(); off += sizeof(l4_svc_key))
        if (!hasKey(slot.key, next.key.data() + off))
          bpf_map_delete_elem(svc_fd, next.key.data() + off);
    }
    if (ok)  // (mode 5: addresses the node no longer has)
      for (size_t off = 0; off + sizeof(l4_svc_key) <= slot.key.size(); off += sizeof(l4_svc_key))
        if (!hasKey(next.key, slot.key.data() + off))
          bpf_map_delete_elem(svc_fd, slot.key.data() + off);
    if (!ok) {  // (tried again next second; said once)
      if (!slot.sync_failed)
        log::error("l4", "cannot program the endpoint map for " + key + ": " + errnoText(errno));
      slot.sync_failed = true;
      continue;
    }
    slot.sync_failed = false;
    slot.eps = std::move(eps);
    slot.key = std::move(keys);
    changed.insert(changed.end(), moved.begin(), moved.end());
    for (size_t i = 0; i < down.size(); ++i)
      if (down[i] != slot.down[i])
        changed.push_back(key + ": " + slot.addrs[i].first + ":" +
                          std::to_string(slot.addrs[i].second) + (down[i] ? " down" : " up"));
    slot.down = std::move(down);
  }
  return changed;
}

std::vector<L4Plane::ConnectOutcomes> L4Plane::connectOutcomes() {
  std::vector<ConnectOutcomes> out;
  const int ep_fd = bpf_map__fd(skel_->maps.ep_counters);
  for (auto& [key, slot] : now_.slots) {
    if (key.rfind(kPinnedPrefix, 0) == 0) continue;
    for (uint32_t i = 0; i < slot.addrs.size(); ++i) {
      const uint32_t row = slot.id * L4_MAX_ENDPOINTS + i;
      l4_ep_counters c{};
      if (bpf_map_lookup_elem(ep_fd, &row, &c) != 0) continue;
      const std::array<uint64_t, 3> now{c.answered, c.refused, c.unanswered};
      auto& seen = slot.outcomes_seen[slot.addrs[i]];  // (new: from zero, as its row starts)
      std::array<uint64_t, 3> d{};
      for (size_t k = 0; k < 3; ++k) d[k] = now[k] >= seen[k] ? now[k] - seen[k] : now[k];
      seen = now;
      if (d[0] + d[1] + d[2] == 0) continue;
      out.push_back({key, slot.addrs[i].first, slot.addrs[i].second, d[0], d[1], d[2]});
    }
  }
  return out;
}

void L4Plane::syncFlows() {
  // Every second while a rule picks by live flows (sel 4); otherwise every 10th call, for
  // kvgate_l4_endpoint_flows only (a sweep reads the whole flow table).
  bool lc = false;
  for (const auto& [key, slot] : now_.slots) {
    l4_svc svc;
    std::memcpy(&svc, slot.svc.data(), sizeof svc);
    lc |= svc.sel == L4_SEL_LC;
  }
  if (!lc && (flows_calls_++ % 10) != 0) return;
  struct Counting {
    Slot* slot;
    std::map<std::pair<uint32_t, uint16_t>, uint32_t> index;  // endpoint (ip, port) -> its row
    std::vector<uint32_t> live;
  };
  std::map<uint32_t, Counting> by_id;
  for (auto& [key, slot] : now_.slots) {
    Counting c{&slot, {}, std::vector<uint32_t>(slot.addrs.size(), 0)};
    const L4Rows rows(slot.eps);
    for (uint32_t i = 0; i < rows.rows.size(); ++i)
      c.index.emplace(std::make_pair(rows.rows[i].ip, rows.rows[i].port), i);
    by_id.emplace(slot.id, std::move(c));
  }
  if (by_id.empty()) return;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // (bpf_ktime_get_ns's clock)
  const uint64_t now =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  // The tracked flows in batches (a bucket's entries come whole: ENOSPC asks for a larger batch).
  const int ct_fd = bpf_map__fd(skel_->maps.ct);
  uint32_t batch_n = 4096;
  std::vector<l4_flow_key> keys;
  std::vector<l4_flow> vals;
  uint64_t token = 0;  // (the hash table's position: a bucket number)
  bool first = true;
  for (;;) {
    keys.resize(batch_n);
    vals.resize(batch_n);
    uint32_t n = batch_n;
    const int rc = bpf_map_lookup_batch(ct_fd, first ? nullptr : &token, &token, keys.data(),
                                        vals.data(), &n, nullptr);
    const int err = rc ? errno : 0;
    if (rc && err == ENOSPC && n == 0 && batch_n < (1u << 20)) {
      batch_n *= 2;
      continue;
    }
    if (rc && err != ENOENT) {  // (the last counts stay: the program goes on counting up)
      if (!flows_sync_failed_)
        log::warn("l4", "cannot read the tracked flows (live flows per endpoint, sel 4): " +
                            errnoText(err));
      flows_sync_failed_ = true;
      return;
    }
    first = false;
    for (uint32_t i = 0; i < n; ++i) {
      const l4_flow& f = vals[i];
      auto it = by_id.find(f.svc_id);
      if (it == by_id.end() || it->second.slot->generation != f.generation) continue;
      if (f.state == L4_CT_CLOSING) continue;
      const uint64_t limit =
          (f.state == L4_CT_OPEN ? f.timeout_s : L4_SHORT_TIMEOUT_S) * 1000000000ull;
      if (static_cast<int64_t>(now - f.last_ns) > static_cast<int64_t>(limit)) continue;
      // (by address: the endpoint's row may have moved since the flow was picked; an endpoint
      // no longer the rule's drains uncounted)
      auto e = it->second.index.find({f.nat_ip, f.nat_port});
      if (e != it->second.index.end() && e->second < it->second.live.size())
        ++it->second.live[e->second];
    }
    if (rc) break;  // ENOENT: that was the last batch
  }
  flows_sync_failed_ = false;
  const int flows_fd = bpf_map__fd(skel_->maps.ep_flows);
  for (auto& [id, c] : by_id) {
    for (uint32_t i = 0; i < c.live.size(); ++i) {
      const uint32_t row = id * L4_MAX_ENDPOINTS + i;
      bpf_map_update_elem(flows_fd, &row, &c.live[i], BPF_ANY);
    }
    c.slot->live = std::move(c.live);
  }
}

static_assert(L4_DROP_REASONS == 4, "ServiceStats::drops and dropReason follow l4_maps.h");
const char* L4Plane::dropReason(size_t i) {
  return i == L4_DROP_NO_ENDPOINT ? "no_endpoint"
         : i == L4_DROP_UNTRACKED ? "untracked"
         : i == L4_DROP_NO_PORT   ? "no_port"
                                  : "no_route";
}

std::vector<L4Plane::ServiceStats> L4Plane::stats() const {
  std::vector<ServiceStats> out;
  const int cnt_fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<l4_counters> per(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  for (const auto& [key, slot] : now_.slots) {
    if (key.rfind(kPinnedPrefix, 0) == 0) continue;
    ServiceStats s;
    s.rule = key;
    if (bpf_map_lookup_elem(cnt_fd, &slot.id, per.data()) == 0)
      for (const auto& c : per) {
        s.packets += c.packets;
        s.bytes += c.bytes;
        for (size_t i = 0; i < L4_DROP_REASONS; ++i) s.drops[i] += c.drops[i];
      }
    const int ep_fd = bpf_map__fd(skel_->maps.ep_counters);
    for (uint32_t i = 0; i < slot.addrs.size(); ++i) {
      ServiceStats::Endpoint e;
      e.addr = slot.addrs[i].first + ":" + std::to_string(slot.addrs[i].second);
      const uint32_t row = slot.id * L4_MAX_ENDPOINTS + i;
      l4_ep_counters c{};
      if (bpf_map_lookup_elem(ep_fd, &row, &c) == 0) {
        e.packets = c.packets;
        e.bytes = c.bytes;
      }
      e.flows = i < slot.live.size() ? slot.live[i] : 0;
      e.answered = c.answered;
      e.refused = c.refused;
      e.unanswered = c.unanswered;
      e.up = !(i < slot.down.size() && slot.down[i]);
      s.endpoints.push_back(std::move(e));
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvgate::l4
