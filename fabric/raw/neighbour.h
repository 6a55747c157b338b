// GID -> Ethernet address resolution, for ibv_resolve_eth_l2_from_gid(3): the rules of
// rdma-core's libibverbs/neigh.c, over this network namespace's rtnetlink.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>

#include "base/status.h"

namespace softverbs::fabric::raw {

using GidBytes = std::array<uint8_t, 16>;
using MacBytes = std::array<uint8_t, 6>;

// The VLAN id ibv_resolve_eth_l2_from_gid reports for an interface without one.
constexpr uint16_t kNoVlan = 0xffff;

// True when `gid` stands for an IPv4 address: IPv4-mapped (::ffff:a.b.c.d) or the IPv4
// multicast encoding ff0e::ffff:a.b.c.d (rdma-core verbs.c ipv6_addr_v4mapped).
bool GidIsIpv4(const GidBytes& gid);

// The MAC a GID encodes without asking the network (neigh.c encoded_prefixes): an IPv4
// multicast group (224/4 -> 01:00:5e + low 23 bits), an IPv6 multicast group (ff00::/8 ->
// 33:33 + last 4 bytes), an IPv6 link-local address (fe80::/64 -> the modified EUI-64 of the
// interface identifier, universal/local bit flipped back). Nothing for any other GID.
std::optional<MacBytes> MacEncodedInGid(const GidBytes& gid);

struct L2Address {
  MacBytes mac{};
  uint16_t vid = kNoVlan;  // VLAN id of the egress interface, kNoVlan when untagged
};

// Resolves `dgid` as seen from the interface holding `sgid`:
//   - EINVAL when no interface of this namespace holds the address `sgid` stands for
//     (neigh_get_oif_from_src), or the GIDs' families differ;
//   - the MAC the GID encodes (MacEncodedInGid); the interface's own MAC for a local address;
//   - else the neighbour table entry of the route's next hop (gateway or dgid itself). When
//     absent, a UDP datagram towards dgid makes the kernel resolve it (neigh.c does the same),
//     and the table is read again until `timeout`: EHOSTUNREACH when there is no route, when
//     resolution fails (NUD_FAILED) or when the time is up.
Result<L2Address> ResolveL2(const GidBytes& sgid, const GidBytes& dgid, std::chrono::milliseconds timeout);

}  // namespace softverbs::fabric::raw
