// The L4 data path's control plane (l4_plane.h says what is served).
#include "l4/l4_plane.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "l4/l4_lb.skel.h"
#include "l4/l4_maps.h"

namespace kvgate::l4 {

namespace {

struct Planned {
  std::string key;
  l4_svc_key k{};
  l4_svc svc{};
  std::vector<l4_ep> eps;
};

Result<uint32_t> ipv4(const std::string& s, const std::string& field) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1)
    return fail(400, field, "'" + s + "' is not an IPv4 address (the L4 path serves IPv4)");
  return a.s_addr;
}

Result<Planned> plan(const config::RuleSpec& r) {
  Planned p;
  p.key = r.key();
  auto vip = ipv4(r.vip, "serviceArguments.externalIP");
  if (!vip) return tl::unexpected(vip.error());
  p.k.vip = *vip;
  p.k.port = htons(r.port);
  p.k.proto = r.protocol == "udp" ? IPPROTO_UDP : IPPROTO_TCP;
  if (r.endpoints.size() > L4_MAX_ENDPOINTS)
    return fail(400, "endpoints",
                "mode 0 serves at most " + std::to_string(L4_MAX_ENDPOINTS) + " endpoints a rule");
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
    p.eps.push_back(ep);
  }
  p.svc.sel = static_cast<uint8_t>(r.sel);
  p.svc.mode = static_cast<uint8_t>(r.mode);
  p.svc.n_eps = static_cast<uint16_t>(p.eps.size());
  p.svc.total_weight = cum;
  p.svc.timeout_s = r.inactive_timeout_sec > 0 ? static_cast<uint32_t>(r.inactive_timeout_sec)
                    : r.protocol == "udp"      ? 30
                                               : 120;
  return p;
}

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

Result<std::unique_ptr<L4Plane>> L4Plane::start(const std::vector<std::string>& ifaces) {
  std::unique_ptr<L4Plane> p(new L4Plane());
  p->ifaces_ = ifaces;
  for (const auto& name : ifaces) {
    const unsigned idx = if_nametoindex(name.c_str());
    if (idx == 0) return fail(400, "--l4-ifaces", "no interface named '" + name + "'");
    p->ifindexes_.push_back(static_cast<int>(idx));
  }
  p->skel_ = l4_lb__open_and_load();
  if (!p->skel_)
    return fail(503, "--l4-ifaces",
                "the kernel refused the L4 program (" + errnoText(errno) +
                    "): BPF needs root or CAP_BPF and CAP_NET_ADMIN, and a kernel with tc BPF");
  for (uint32_t i = L4_MAX_SERVICES; i > 0; --i) p->free_.push_back(i - 1);
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
    opts.prog_fd = bpf_program__fd(p->skel_->progs.l4_ingress);
    opts.flags = BPF_TC_F_REPLACE;
    rc = bpf_tc_attach(&hook, &opts);
    if (rc)
      return fail(503, "--l4-ifaces",
                  "cannot attach the L4 program on " + ifaces[i] + ": " + errnoText(rc));
  }
  return p;
}

L4Plane::~L4Plane() {
  for (int ifindex : ifindexes_) {
    bpf_tc_hook hook{};
    hook.sz = sizeof hook;
    hook.ifindex = ifindex;
    hook.attach_point = BPF_TC_INGRESS;
    bpf_tc_opts opts{};
    opts.sz = sizeof opts;
    opts.handle = 0x4b56;
    opts.priority = 1;
    bpf_tc_detach(&hook, &opts);  // (an interface already gone: nothing to do)
  }
  if (skel_) l4_lb__destroy(skel_);
}

Result<void> L4Plane::apply(const std::vector<config::RuleSpec>& rules) {
  std::vector<Planned> want;
  for (const auto& r : rules) {
    if (r.mode != 0) continue;
    auto p = plan(r);
    if (!p) return tl::unexpected(p.error());
    want.push_back(std::move(*p));
  }
  size_t fresh = 0;
  for (const auto& w : want) fresh += slots_.count(w.key) ? 0 : 1;
  // (slots of services about to go are freed first, so a full table can still be replaced)
  size_t going = 0;
  for (const auto& [key, slot] : slots_) {
    bool kept = false;
    for (const auto& w : want) kept |= w.key == key;
    going += kept ? 0 : 1;
  }
  if (fresh > free_.size() + going)
    return fail(400, "serviceArguments",
                "the L4 path serves at most " + std::to_string(L4_MAX_SERVICES) + " mode 0 rules");
  const int svc_fd = bpf_map__fd(skel_->maps.services);
  const int ep_fd = bpf_map__fd(skel_->maps.endpoints);
  const int cnt_fd = bpf_map__fd(skel_->maps.counters);
  // Removed services first: their keys leave the service map (their flows end at their next
  // packet), their slots are free.
  for (auto it = slots_.begin(); it != slots_.end();) {
    bool kept = false;
    for (const auto& w : want) kept |= w.key == it->first;
    if (kept) {
      ++it;
      continue;
    }
    bpf_map_delete_elem(svc_fd, it->second.key.data());
    free_.push_back(it->second.id);
    it = slots_.erase(it);
  }
  for (auto& w : want) {
    auto it = slots_.find(w.key);
    if (it == slots_.end()) {
      const uint32_t id = free_.back();
      free_.pop_back();
      std::vector<uint8_t> k(sizeof w.k);
      std::memcpy(k.data(), &w.k, sizeof w.k);
      it = slots_.emplace(w.key, Slot{id, ++generation_, std::move(k)}).first;
      // a reused slot's counters start at zero
      const int ncpu = libbpf_num_possible_cpus();
      std::vector<l4_counters> zero(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
      bpf_map_update_elem(cnt_fd, &id, zero.data(), BPF_ANY);
    }
    w.svc.id = it->second.id;
    w.svc.generation = it->second.generation;
    // Endpoints before the service: a packet never sees a count whose rows are not written.
    for (uint32_t i = 0; i < w.eps.size(); ++i) {
      const uint32_t slot = w.svc.id * L4_MAX_ENDPOINTS + i;
      if (bpf_map_update_elem(ep_fd, &slot, &w.eps[i], BPF_ANY))
        return fail(503, "l4", "cannot program the endpoint map: " + errnoText(errno));
    }
    if (bpf_map_update_elem(svc_fd, &w.k, &w.svc, BPF_ANY))
      return fail(503, "l4", "cannot program the service map: " + errnoText(errno));
  }
  return {};
}

std::vector<L4Plane::ServiceStats> L4Plane::stats() const {
  std::vector<ServiceStats> out;
  const int cnt_fd = bpf_map__fd(skel_->maps.counters);
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<l4_counters> per(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  for (const auto& [key, slot] : slots_) {
    ServiceStats s;
    s.rule = key;
    if (bpf_map_lookup_elem(cnt_fd, &slot.id, per.data()) == 0)
      for (const auto& c : per) {
        s.packets += c.packets;
        s.bytes += c.bytes;
      }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvgate::l4
