#include "cm/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <cstring>

namespace softverbs::cm {

int DeviceView::GidIndex(const Gid& gid) const {
  for (size_t i = 0; i < gids.size(); ++i)
    if (gids[i] == gid) return static_cast<int>(i);
  return -1;
}

bool IsIpFamily(const sockaddr* addr) {
  return addr != nullptr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
}

socklen_t AddressLength(const sockaddr* addr) {
  return addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

bool IsWildcard(const sockaddr* addr) {
  if (addr->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

bool IsMulticast(const sockaddr* addr) {
  if (addr->sa_family == AF_INET)
    return IN_MULTICAST(ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr));
  return IN6_IS_ADDR_MULTICAST(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
}

sockaddr_storage LoopbackOf(sa_family_t family) {
  sockaddr_storage out{};
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&out);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
  }
  return out;
}

uint16_t PortOf(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  if (addr->sa_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port);
  return 0;
}

void SetPort(sockaddr_storage* addr, uint16_t port) {
  if (addr->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(addr)->sin_port = htons(port);
  if (addr->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(addr)->sin6_port = htons(port);
}

Gid GidOf(const sockaddr* addr) {
  Gid gid{};
  if (addr->sa_family == AF_INET) {
    // RoCEv2 IPv4 GID: the IPv4-mapped IPv6 address (IBA annex A17), as core/device.cc builds it.
    gid[10] = gid[11] = 0xff;
    memcpy(&gid[12], &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, 4);
  } else {
    memcpy(gid.data(), &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, 16);
  }
  return gid;
}

std::string AddressText(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof(text));
  } else {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
    else
      inet_ntop(AF_INET6, &a, text, sizeof(text));
  }
  return text;
}

bool IsHostAddress(const sockaddr* addr) {
  Gid wanted = GidOf(addr);
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (struct ifaddrs* ifa = list; ifa != nullptr && !found; ifa = ifa->ifa_next) {
    if (!IsIpFamily(ifa->ifa_addr) || !(ifa->ifa_flags & IFF_UP)) continue;
    found = GidOf(ifa->ifa_addr) == wanted;
  }
  freeifaddrs(list);
  return found;
}

sockaddr_storage ConcreteDestination(const sockaddr* dst) {
  sockaddr_storage out{};
  memcpy(&out, dst, AddressLength(dst));
  if (!IsWildcard(dst)) return out;
  if (dst->sa_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&out)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else
    reinterpret_cast<sockaddr_in6*>(&out)->sin6_addr = in6addr_loopback;
  return out;
}

sockaddr_storage SourceFor(const sockaddr* dst) {
  sockaddr_storage out = ConcreteDestination(dst);
  SetPort(&out, 0);
  return out;
}

}  // namespace softverbs::cm

namespace softverbs::cm {

Result<sockaddr_storage> RouteSourceFor(const sockaddr* dst) {
  int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(errno, std::string("socket: ") + strerror(errno));
  sockaddr_storage to{};
  memcpy(&to, dst, AddressLength(dst));
  SetPort(&to, 4791);  // any port: connect(2) on UDP only picks the route
  sockaddr_storage out{};
  socklen_t len = sizeof(out);
  Status s = Status::Ok();
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), AddressLength(dst)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&out), &len) != 0)
    s = Status(ENETUNREACH, "no route to " + AddressText(dst) + ": " + strerror(errno));
  close(fd);
  if (!s.ok()) return s;
  SetPort(&out, 0);
  return out;
}

sockaddr_storage AnySourceFor(const sockaddr* dst) {
  if (IsWildcard(dst) || IsMulticast(dst) || IsHostAddress(dst)) return SourceFor(dst);
  Result<sockaddr_storage> routed = RouteSourceFor(dst);
  return routed.ok() ? routed.value() : SourceFor(dst);
}

}  // namespace softverbs::cm
