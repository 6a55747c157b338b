// The network interface a raw QP's frames use: the one that owns the port's GIDs.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace softverbs::fabric::raw {

struct Interface {
  int index = 0;
  std::string name;
  uint8_t mac[6] = {};
  uint32_t mtu = 1500;
  bool loopback = false;
};

// The first interface, in the kernel's index order, holding an address that is one of `gids`
// (IPv4-mapped or IPv6, as the GID table lists them), loopback last: a namespace whose only
// address is 127.0.0.1 gets `lo`. SOFTVERBS_RAW_IF=<name> picks an interface by name instead.
// ENODEV when none holds any.
Result<Interface> InterfaceOwning(std::span<const std::array<uint8_t, 16>> gids);

// The interface named `name` (ENODEV if it does not exist).
Result<Interface> InterfaceNamed(const std::string& name);

}  // namespace softverbs::fabric::raw
