#include "fabric/raw/interface.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/unique_fd.h"

namespace softverbs::fabric::raw {
namespace {

// The GID an interface address appears as (DESIGN.md section 3).
bool GidOf(const sockaddr* sa, std::array<uint8_t, 16>* gid) {
  gid->fill(0);
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET) {
    (*gid)[10] = (*gid)[11] = 0xff;
    memcpy(gid->data() + 12, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    memcpy(gid->data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    return true;
  }
  return false;
}

}  // namespace

Result<Interface> InterfaceNamed(const std::string& name) {
  Interface out;
  out.name = name;
  out.index = static_cast<int>(if_nametoindex(name.c_str()));
  if (out.index == 0) return Status(ENODEV, "no network interface named " + name);
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq req{};
  strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (fd.get() >= 0 && ioctl(fd.get(), SIOCGIFHWADDR, &req) == 0) memcpy(out.mac, req.ifr_hwaddr.sa_data, 6);
  if (fd.get() >= 0 && ioctl(fd.get(), SIOCGIFMTU, &req) == 0) out.mtu = static_cast<uint32_t>(req.ifr_mtu);
  if (fd.get() >= 0 && ioctl(fd.get(), SIOCGIFFLAGS, &req) == 0) out.loopback = (req.ifr_flags & IFF_LOOPBACK) != 0;
  return out;
}

Result<Interface> InterfaceOwning(std::span<const std::array<uint8_t, 16>> gids) {
  if (const char* forced = getenv("SOFTVERBS_RAW_IF"); forced != nullptr && *forced) return InterfaceNamed(forced);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Status(errno, "getifaddrs failed");
  int best = 0, best_loopback = 0;
  std::string best_name, loopback_name;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    std::array<uint8_t, 16> gid;
    if (!GidOf(a->ifa_addr, &gid)) continue;
    bool owned = false;
    for (const auto& g : gids) owned = owned || g == gid;
    if (!owned) continue;
    const int index = static_cast<int>(if_nametoindex(a->ifa_name));
    if (a->ifa_flags & IFF_LOOPBACK) {
      if (best_loopback == 0) best_loopback = index, loopback_name = a->ifa_name;
    } else if (best == 0 || index < best) {
      best = index;
      best_name = a->ifa_name;
    }
  }
  freeifaddrs(list);
  if (best != 0) return InterfaceNamed(best_name);
  if (best_loopback != 0) return InterfaceNamed(loopback_name);
  return Status(ENODEV, "no network interface holds an address of the port's GID table");
}

}  // namespace softverbs::fabric::raw
