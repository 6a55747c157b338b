#include "fabric/raw/neighbour.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_vlan.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "fabric/raw/interface.h"

namespace softverbs::fabric::raw {
namespace {

// An IP address as the kernel's tables hold it: 4 or 16 bytes.
struct IpAddress {
  int family = AF_INET6;
  uint8_t bytes[16] = {};
  size_t size() const { return family == AF_INET ? 4 : 16; }
  bool Equals(const void* other, size_t len) const { return len == size() && memcmp(bytes, other, len) == 0; }
};

IpAddress AddressOf(const GidBytes& gid) {
  IpAddress a;
  a.family = GidIsIpv4(gid) ? AF_INET : AF_INET6;
  memcpy(a.bytes, gid.data() + (a.family == AF_INET ? 12 : 0), a.size());
  return a;
}

// The index of the interface holding `addr` (neigh.c neigh_get_oif_from_src), 0 when none.
int InterfaceHolding(const IpAddress& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  int index = 0;
  for (ifaddrs* a = list; a != nullptr && index == 0; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != addr.family) continue;
    const void* bytes = addr.family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    if (addr.Equals(bytes, addr.size())) index = static_cast<int>(if_nametoindex(a->ifa_name));
  }
  freeifaddrs(list);
  return index;
}

Result<Interface> InterfaceAt(int index) {
  char name[IF_NAMESIZE] = {};
  if (if_indextoname(static_cast<unsigned>(index), name) == nullptr)
    return Status(ENODEV, "no interface with index " + std::to_string(index));
  return InterfaceNamed(name);
}

// 802.1Q id of a VLAN interface (the 8021q driver answers; a plain device does not).
uint16_t VlanOf(const std::string& name) {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  vlan_ioctl_args args{};
  args.cmd = GET_VLAN_VID_CMD;
  strncpy(args.device1, name.c_str(), sizeof(args.device1) - 1);
  if (fd.get() < 0 || ioctl(fd.get(), SIOCGIFVLAN, &args) != 0) return kNoVlan;
  return static_cast<uint16_t>(args.u.VID & 0xfff);
}

// One rtnetlink request; `on_message` sees every answer until the dump (or the single answer)
// ends. The kernel's error answer becomes the Status.
Status Transact(void* request, uint32_t len, const std::function<void(const nlmsghdr*)>& on_message) {
  UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd.get() < 0) return Status(errno, "cannot open an rtnetlink socket");
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd.get(), request, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    return Status(errno, "rtnetlink request failed");
  std::vector<char> buf(32768);
  for (;;) {
    const ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
    if (n < 0) return Status(errno, "rtnetlink answer failed");
    size_t left = static_cast<size_t>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return Status::Ok();
      if (h->nlmsg_type == NLMSG_ERROR) {
        const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
        return err == 0 ? Status::Ok() : Status(err, "rtnetlink refused the request");
      }
      on_message(h);
      if (!(h->nlmsg_flags & NLM_F_MULTI)) return Status::Ok();
    }
  }
}

// Appends an attribute to the request at the start of `msg` (the caller sized the buffer).
void AddAttribute(char* msg, uint16_t type, const void* data, size_t len) {
  auto* h = reinterpret_cast<nlmsghdr*>(msg);
  auto* rta = reinterpret_cast<rtattr*>(msg + NLMSG_ALIGN(h->nlmsg_len));
  rta->rta_type = type;
  rta->rta_len = static_cast<uint16_t>(RTA_LENGTH(len));
  memcpy(RTA_DATA(rta), data, len);
  h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(rta->rta_len);
}

struct Route {
  bool local = false;  // the destination is an address of this host
  int oif = 0;
  IpAddress next_hop;  // the gateway, or the destination itself
};

// RTM_GETROUTE towards `dst` out of `oif` (as `ip route get <dst> oif <dev>`).
Result<Route> RouteTo(const IpAddress& dst, int oif) {
  alignas(nlmsghdr) char req[NLMSG_SPACE(sizeof(rtmsg)) + 2 * RTA_SPACE(16)] = {};
  auto* h = reinterpret_cast<nlmsghdr*>(req);
  h->nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  h->nlmsg_type = RTM_GETROUTE;
  h->nlmsg_flags = NLM_F_REQUEST;
  auto* r = static_cast<rtmsg*>(NLMSG_DATA(h));
  r->rtm_family = static_cast<uint8_t>(dst.family);
  r->rtm_dst_len = static_cast<uint8_t>(dst.size() * 8);
  AddAttribute(req, RTA_DST, dst.bytes, dst.size());
  AddAttribute(req, RTA_OIF, &oif, sizeof(oif));
  Route route;
  route.next_hop = dst;
  route.oif = oif;
  Status s = Transact(req, h->nlmsg_len, [&](const nlmsghdr* answer) {
    if (answer->nlmsg_type != RTM_NEWROUTE) return;
    const auto* a_r = static_cast<const rtmsg*>(NLMSG_DATA(answer));
    route.local = a_r->rtm_type == RTN_LOCAL;
    int len = static_cast<int>(RTM_PAYLOAD(answer));
    for (auto* a = RTM_RTA(a_r); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      if (a->rta_type == RTA_GATEWAY && RTA_PAYLOAD(a) == dst.size())
        memcpy(route.next_hop.bytes, RTA_DATA(a), dst.size());
      if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) == sizeof(int)) memcpy(&route.oif, RTA_DATA(a), sizeof(int));
    }
  });
  if (!s.ok()) return Status(EHOSTUNREACH, "no route to the destination GID (" + std::string(strerror(s.code())) + ")");
  return route;
}

// What the neighbour table says about `addr` on interface `oif`.
struct Neighbour {
  bool found = false;
  uint16_t state = 0;  // NUD_*
  MacBytes mac{};
  bool has_mac = false;
};

Result<Neighbour> LookUpNeighbour(const IpAddress& addr, int oif) {
  struct {
    nlmsghdr h;
    ndmsg n;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  req.h.nlmsg_type = RTM_GETNEIGH;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.n.ndm_family = static_cast<uint8_t>(addr.family);
  Neighbour out;
  Status s = Transact(&req, req.h.nlmsg_len, [&](const nlmsghdr* h) {
    const auto* n = static_cast<const ndmsg*>(NLMSG_DATA(h));
    if (h->nlmsg_type != RTM_NEWNEIGH || n->ndm_ifindex != oif || out.found) return;
    Neighbour here;
    here.state = n->ndm_state;
    int len = static_cast<int>(NLMSG_PAYLOAD(h, sizeof(ndmsg)));
    for (auto* a = reinterpret_cast<rtattr*>(const_cast<ndmsg*>(n) + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      if (a->rta_type == NDA_DST) here.found = addr.Equals(RTA_DATA(a), RTA_PAYLOAD(a));
      if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == 6) {
        memcpy(here.mac.data(), RTA_DATA(a), 6);
        here.has_mac = true;
      }
    }
    if (here.found) out = here;
  });
  if (!s.ok()) return s;
  return out;
}

constexpr uint16_t kUsable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

// A datagram towards `dst`: the kernel queues it and starts ARP / neighbour discovery for the
// next hop (neigh.c sends one for the same reason). Its content does not matter.
Status TriggerResolution(const IpAddress& dst, int oif) {
  UniqueFd fd(socket(dst.family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status(errno, "cannot open a UDP socket");
  sockaddr_storage to{};
  socklen_t to_len = 0;
  constexpr uint16_t kDiscardPort = 9;
  if (dst.family == AF_INET) {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&to);
    s4->sin_family = AF_INET, s4->sin_port = htons(kDiscardPort);
    memcpy(&s4->sin_addr, dst.bytes, 4);
    to_len = sizeof(*s4);
  } else {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&to);
    s6->sin6_family = AF_INET6, s6->sin6_port = htons(kDiscardPort), s6->sin6_scope_id = static_cast<uint32_t>(oif);
    memcpy(&s6->sin6_addr, dst.bytes, 16);
    to_len = sizeof(*s6);
  }
  const char byte = 0;
  if (sendto(fd.get(), &byte, 1, 0, reinterpret_cast<sockaddr*>(&to), to_len) < 0)
    return Status(EHOSTUNREACH, std::string("cannot send towards the destination GID: ") + strerror(errno));
  return Status::Ok();
}

// The next hop's MAC from the neighbour table, resolving it first when needed.
Result<MacBytes> NeighbourMac(const IpAddress& dst, const Route& route, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool triggered = false;
  for (;;) {
    Result<Neighbour> n = LookUpNeighbour(route.next_hop, route.oif);
    if (!n.ok()) return n.status();
    if (n->found && (n->state & kUsable) && n->has_mac) return n->mac;
    if (triggered && n->found && (n->state & NUD_FAILED))
      return Status(EHOSTUNREACH, "the neighbour of the destination GID did not answer (NUD_FAILED)");
    if (!triggered) {
      SV_RETURN_IF_ERROR(TriggerResolution(dst, route.oif));
      triggered = true;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Status(EHOSTUNREACH, "the neighbour of the destination GID was not resolved in " +
                                      std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

bool GidIsIpv4(const GidBytes& g) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr uint8_t kMcast4[12] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g.data(), kMapped, 12) == 0 || memcmp(g.data(), kMcast4, 12) == 0;
}

std::optional<MacBytes> MacEncodedInGid(const GidBytes& g) {
  if (GidIsIpv4(g)) {
    if ((g[12] & 0xf0) != 0xe0) return std::nullopt;  // 224.0.0.0/4 (RFC 1112 section 6.4)
    return MacBytes{0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7f), g[14], g[15]};
  }
  if (g[0] == 0xff) return MacBytes{0x33, 0x33, g[12], g[13], g[14], g[15]};  // RFC 2464 section 7
  static constexpr uint8_t kLinkLocal[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  if (memcmp(g.data(), kLinkLocal, 8) == 0)  // RFC 4291 appendix A: EUI-64 back to the MAC
    return MacBytes{static_cast<uint8_t>(g[8] ^ 2), g[9], g[10], g[13], g[14], g[15]};
  return std::nullopt;
}

Result<L2Address> ResolveL2(const GidBytes& sgid, const GidBytes& dgid, std::chrono::milliseconds timeout) {
  const IpAddress src = AddressOf(sgid), dst = AddressOf(dgid);
  const int oif = InterfaceHolding(src);
  if (oif == 0) return Invalid("no network interface holds the address of the source GID");
  L2Address out;
  if (std::optional<MacBytes> mac = MacEncodedInGid(dgid)) {
    Result<Interface> dev = InterfaceAt(oif);
    if (!dev.ok()) return dev.status();
    out.mac = *mac;
    out.vid = VlanOf(dev->name);
    return out;
  }
  if (src.family != dst.family) return Invalid("the source and destination GIDs are of different IP families");
  Result<Route> route = RouteTo(dst, oif);
  if (!route.ok()) return route.status();
  if (route->local) {
    // A GID of this host: the frames stay here, addressed to the interface that holds it.
    Result<Interface> dev = InterfaceAt(InterfaceHolding(dst));
    if (!dev.ok()) return dev.status();
    memcpy(out.mac.data(), dev->mac, 6);
    out.vid = VlanOf(dev->name);
    return out;
  }
  Result<MacBytes> mac = NeighbourMac(dst, *route, timeout);
  if (!mac.ok()) return mac.status();
  Result<Interface> dev = InterfaceAt(route->oif);
  if (!dev.ok()) return dev.status();
  out.mac = *mac;
  out.vid = VlanOf(dev->name);
  return out;
}

}  // namespace softverbs::fabric::raw
