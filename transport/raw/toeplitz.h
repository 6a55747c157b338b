// The Toeplitz hash of receive-side scaling (Microsoft's "RSS hashing" specification, the
// function mlx5 implements for IBV_RX_HASH_FUNC_TOEPLITZ): which work queue of an indirection
// table a frame goes to.
#pragma once

#include <cstdint>
#include <span>

#include "fabric/raw/frame.h"

namespace softverbs::transport::raw {

// The hash of `input` under `key` (at least 4 bytes; key bits past its end count as 0).
uint32_t ToeplitzHash(std::span<const uint8_t> key, std::span<const uint8_t> input);

// enum ibv_rx_hash_fields
namespace rx_hash {
inline constexpr uint64_t kSrcIpv4 = 1u << 0;
inline constexpr uint64_t kDstIpv4 = 1u << 1;
inline constexpr uint64_t kSrcIpv6 = 1u << 2;
inline constexpr uint64_t kDstIpv6 = 1u << 3;
inline constexpr uint64_t kSrcPortTcp = 1u << 4;
inline constexpr uint64_t kDstPortTcp = 1u << 5;
inline constexpr uint64_t kSrcPortUdp = 1u << 6;
inline constexpr uint64_t kDstPortUdp = 1u << 7;
inline constexpr uint64_t kIpsecSpi = 1u << 8;
inline constexpr uint64_t kInner = 1ull << 31;
}  // namespace rx_hash

// The hash input a NIC builds from a frame for `fields`: source then destination address, source
// then destination port, each only if selected and present in the frame (the order of the RSS
// specification). Returns its length (at most 36 bytes).
size_t RssInput(const fabric::raw::FrameView& view, uint64_t fields, uint8_t out[36]);

// As RssInput, for a whole frame, with the SPI of an ESP packet after its addresses for
// rx_hash::kIpsecSpi (IBV_RX_HASH_IPSEC_SPI); with rx_hash::kInner (IBV_RX_HASH_INNER) the fields are those
// of the frame a VXLAN packet carries, as mlx5's rx_hash_field_selector_inner takes them; a frame
// without a VXLAN header has no inner headers and is hashed on its own.
size_t RssFrameInput(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, uint64_t fields,
                     uint8_t out[36]);

}  // namespace softverbs::transport::raw
