// IP addresses of the CM onto softverbs0 (DESIGN.md section 3): every address of this host's
// network namespace is a GID of port 1 (IPv4 as ::ffff:a.b.c.d), so resolving an address is
// finding its GID index. Same host only: any other destination is unreachable.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "cm/wire.h"

namespace softverbs::cm {

// The device an identifier binds to, as abi/ reads it through the verbs (ibv_query_gid).
struct DeviceView {
  std::vector<Gid> gids;      // port 1's GID table, index = GID index (zero GID: empty slot)
  uint8_t port_num = 1;
  uint8_t active_mtu = 3;     // enum ibv_mtu of the port (3 = 1024)
  uint64_t node_guid = 0;     // the CA GUID of REQ / REP (host order)
  int GidIndex(const Gid& gid) const;  // -1 when absent
};

bool IsIpFamily(const sockaddr* addr);  // AF_INET or AF_INET6
socklen_t AddressLength(const sockaddr* addr);
bool IsWildcard(const sockaddr* addr);
bool IsLoopback(const sockaddr* addr);
bool IsMulticast(const sockaddr* addr);
// 127.0.0.1 or ::1, port 0.
sockaddr_storage LoopbackOf(sa_family_t family);
uint16_t PortOf(const sockaddr* addr);  // host order
void SetPort(sockaddr_storage* addr, uint16_t port);
// The RoCEv2 GID of an address (IPv4-mapped for IPv4).
Gid GidOf(const sockaddr* addr);
// "127.0.0.1", "::1" (IPv4-mapped IPv6 addresses print as IPv4: they are the same endpoint).
std::string AddressText(const sockaddr* addr);
// Whether `addr` is one of this namespace's interface addresses (getifaddrs).
bool IsHostAddress(const sockaddr* addr);
// The address a connection to a wildcard destination goes to: 0.0.0.0 → 127.0.0.1, :: → ::1,
// as connect(2) does on Linux.
sockaddr_storage ConcreteDestination(const sockaddr* dst);
// The source address the host's routing picks to reach a local destination: the destination
// itself (a local address is reached through lo with itself as source).
sockaddr_storage SourceFor(const sockaddr* dst);
// The source address the host's routing picks for a destination of another host: what a UDP
// socket connected to it is bound to (the kernel's rdma_resolve_addr asks the routing too).
// ENETUNREACH when there is no route.
Result<sockaddr_storage> RouteSourceFor(const sockaddr* dst);
// The source for any destination (rdma_getaddrinfo's ai_src_addr): SourceFor for an address of
// this host or a wildcard, else RouteSourceFor (SourceFor when there is no route: resolving it
// then fails as it should).
sockaddr_storage AnySourceFor(const sockaddr* dst);

}  // namespace softverbs::cm
