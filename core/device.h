// softverbs0: the one device of a host (DESIGN.md section 3). Its identity and its GID table.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/device_limits.h"
#include "core/types.h"

namespace softverbs::core {

struct DeviceIdentity {
  std::string name = "softverbs0";
  std::array<uint8_t, 8> node_guid{};  // in network byte order, as ibv_device_attr carries it
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  uint32_t hw_ver = 0;
  std::string fw_ver;
  bool mlx5_identity = false;  // SOFTVERBS_MLX5_IDENTITY=1 (docs/device.md)
};

// The vendor identity softverbs0 presents: its own unless SOFTVERBS_MLX5_IDENTITY=1 asks for
// an mlx5 one (Mellanox vendor id 0x02c9, ConnectX-6 part id 4123), for software that only enables
// DC or mlx5dv paths on Mellanox devices. Read once per process.
const DeviceIdentity& Identity();

// ibv_gid_type values.
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };

struct GidEntry {
  Gid gid{};
  GidType type = GidType::kRoceV2;
  uint32_t ifindex = 0;  // the netdev the address belongs to (0 for index 0)
  bool valid = false;
};

// Port 1's active MTU, as rxe derives it from its netdev (rxe_set_mtu: the netdev MTU less the
// 80 bytes a RoCEv2 packet's headers may take, rounded down to an IB MTU, at most 4096): the
// smallest among the interfaces holding this namespace's routable GIDs, so a packet of that
// size leaves by any of them. 4096 when only loopback has addresses (the same-host fabric has
// no MTU). Read from the kernel on every call (ibv_query_port(3)).
Mtu ActiveMtu();

// Port 1's GID table: index 0 is the link-local GID made from the node GUID; then one RoCEv2 GID
// per IP address of the network namespace, in interface order: IPv4 as ::ffff:a.b.c.d (127.0.0.1
// included), IPv6 as is. Empty slots read as a zero GID, as on hardware.
class GidTable {
 public:
  static GidTable Read();

  const GidEntry& at(uint32_t index) const { return entries_[index]; }
  uint64_t valid_mask() const;
  // The index holding `gid`, or -1.
  int Find(const Gid& gid) const;

 private:
  std::array<GidEntry, DeviceLimits::kGidTableLen> entries_{};
};

}  // namespace softverbs::core
