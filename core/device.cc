#include "core/device.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace softverbs::core {
namespace {

// FNV-1a: a stable hash for the node GUID (not security relevant).
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The GUID is stable for a host (user + network namespace + machine), locally administered
// (first byte 0x02) and starts with "SV" so it is recognisable in ibv_devinfo output.
std::array<uint8_t, 8> HostGuid() {
  std::string seed;
  std::ifstream("/etc/machine-id") >> seed;
  struct stat ns {};
  stat("/proc/self/ns/net", &ns);
  seed.append("/").append(std::to_string(getuid())).append("/").append(std::to_string(ns.st_ino));
  if (const char* host = getenv("SOFTVERBS_HOST")) seed.append("/").append(host);
  uint64_t h = Fnv1a(seed);
  std::array<uint8_t, 8> guid{0x02, 'S', 'V'};
  for (int i = 3; i < 8; ++i) guid[i] = static_cast<uint8_t>(h >> (8 * (i - 3)));
  return guid;
}

bool EnvFlag(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' && strcmp(v, "0") != 0;
}

DeviceIdentity MakeIdentity() {
  DeviceIdentity id;
  id.node_guid = HostGuid();
  id.mlx5_identity = EnvFlag("SOFTVERBS_MLX5_IDENTITY");
  if (id.mlx5_identity) {
    id.vendor_id = 0x02c9;       // Mellanox
    id.vendor_part_id = 4123;    // ConnectX-6
  } else {
    id.vendor_id = 0x5356;       // softverbs' own ("SV")
    id.vendor_part_id = 1;
  }
  id.hw_ver = 1;
  id.fw_ver = "softverbs-0.1.0";
  return id;
}

}  // namespace

const DeviceIdentity& Identity() {
  static const DeviceIdentity identity = MakeIdentity();
  return identity;
}

GidTable GidTable::Read() {
  GidTable t;
  GidEntry& link_local = t.entries_[0];
  link_local.gid[0] = 0xfe;
  link_local.gid[1] = 0x80;
  memcpy(&link_local.gid[8], Identity().node_guid.data(), 8);
  link_local.valid = true;

  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return t;
  uint32_t next = 1;
  for (int family : {AF_INET, AF_INET6}) {
    for (struct ifaddrs* ifa = list; ifa != nullptr && next < t.entries_.size(); ifa = ifa->ifa_next) {
      if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != family) continue;
      if (!(ifa->ifa_flags & IFF_UP)) continue;
      GidEntry e;
      if (family == AF_INET) {
        // RoCEv2 IPv4 GID: the IPv4-mapped IPv6 address (IBA annex A17).
        e.gid[10] = e.gid[11] = 0xff;
        memcpy(&e.gid[12], &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, 4);
      } else {
        memcpy(e.gid.data(), &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, 16);
      }
      if (t.Find(e.gid) >= 0) continue;
      e.ifindex = if_nametoindex(ifa->ifa_name);
      e.valid = true;
      t.entries_[next++] = e;
    }
  }
  freeifaddrs(list);
  return t;
}

Mtu ActiveMtu() {
  constexpr uint32_t kRoceHeaders = 80;  // rxe's RXE_MAX_HDR_LENGTH margin: IPv6 + UDP + BTH + ...
  uint32_t smallest = MtuBytes(DeviceLimits::kMaxMtu) + kRoceHeaders;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return DeviceLimits::kMaxMtu;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  for (struct ifaddrs* ifa = list; ifa != nullptr && fd >= 0; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK)) continue;
    const int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    // An IPv6 link-local address is not a route off the host (transport/wire/wire_fabric.cc).
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
      continue;
    ifreq req{};
    strncpy(req.ifr_name, ifa->ifa_name, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFMTU, &req) == 0 && req.ifr_mtu > 0)
      smallest = std::min(smallest, static_cast<uint32_t>(req.ifr_mtu));
  }
  if (fd >= 0) close(fd);
  freeifaddrs(list);
  for (Mtu m : {Mtu::k4096, Mtu::k2048, Mtu::k1024, Mtu::k512})
    if (smallest >= MtuBytes(m) + kRoceHeaders) return m;
  return Mtu::k256;  // rxe: a netdev too small for any IB MTU still reports 256
}

uint64_t GidTable::valid_mask() const {
  uint64_t m = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].valid) m |= 1ull << i;
  return m;
}

int GidTable::Find(const Gid& gid) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].valid && entries_[i].gid == gid) return static_cast<int>(i);
  return -1;
}

}  // namespace softverbs::core
