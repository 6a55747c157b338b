// TCP segmentation offload (IBV_WR_TSO, ibv_wr_send_tso): one work request's header (Ethernet,
// IPv4 or IPv6, TCP) and payload become frames of at most `mss` payload bytes each, with the
// headers a NIC writes: IP total/payload length, IPv4 identification counting up and its
// header checksum, TCP sequence numbers advancing by the bytes before, FIN and PSH on the last
// segment only, CWR on the first only, and the TCP checksum (RFC 9293; Linux's tcp_gso_segment).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace softverbs::transport::raw {

// False if `header` is not exactly Ethernet (+ tags) + IPv4/IPv6 (no extension headers) + TCP
// with options, or `mss` is 0.
bool SegmentTso(std::span<const uint8_t> header, std::span<const uint8_t> payload, uint16_t mss,
                std::vector<std::vector<uint8_t>>* frames);

}  // namespace softverbs::transport::raw
