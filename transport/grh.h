// The 40-byte GRH area a UD receive starts with (ibv_post_recv(3), IBA 11.4.1.1). RoCEv2 carries
// no GRH on the wire: its IP header stands in for it (IBA annex A17.4.5.2), so a fabric that
// delivers a datagram writes the IP header the datagram arrived with -- for IPv4 in the last 20
// bytes of the area, as the kernel's union rdma_network_hdr lays it out.
#pragma once

#include <cstdint>

#include "transport/request.h"

namespace softverbs::transport {

inline constexpr uint32_t kGrhBytes = 40;

// IPv4-mapped (::ffff:a.b.c.d): a RoCEv2 GID of an IPv4 address.
bool IsIpv4MappedGid(const uint8_t gid[16]);

// What a RoCE receive completion reports in ibv_wc.sl for a datagram that arrived with `grh`
// (as BuildGrh writes it): the L3 header type, 2 for IPv4 and 1 for IPv6. RoCE has no service
// level on the wire; mlx5 reports the packet type there (PRM CQE sl field: bits 2:0 L3 header
// type) and UCX's UD transport relies on it to find the destination address in the 40 bytes
// (uct_ud_iface_check_grh).
uint8_t RoceL3Type(const uint8_t grh[kGrhBytes]);

// Writes the header a datagram of `payload` bytes from a.sgid to a.dgid arrives with.
void BuildGrh(uint8_t out[kGrhBytes], const Addressing& a, uint32_t payload);

}  // namespace softverbs::transport
