// The multicast groups of a host (ibv_attach_mcast(3)): one host-table slot per (group, QP)
// attachment. A UD send to a multicast GID is delivered to every QP attached to it, whichever
// process owns it (IBA 10.5: the fabric replicates a multicast packet to every member).
#pragma once

#include <cstdint>
#include <cstring>

#include "base/status.h"
#include "fabric/host/host_directory.h"

namespace softverbs::transport {

// IBA 9.6.1.1 / 10.5: a multicast message carries this destination QP number.
inline constexpr uint32_t kMulticastQpn = 0xffffff;

// True for a multicast GID: ff00::/8, or an IPv4 multicast address 224.0.0.0/4 in its
// IPv4-mapped form (RoCE v2 over IPv4).
bool IsMulticastGid(const uint8_t gid[16]);

// Attaches QP `qpn` (owned by this process) to group `mgid`; false if it already was (attaching
// twice is one attachment: the QP still receives one copy). ENOMEM when the host table is full.
Result<bool> McastAttach(fabric::LocalProcess& local, uint32_t qpn, const uint8_t mgid[16], uint16_t mlid);
// EINVAL if QP `qpn` is not attached to `mgid`.
Status McastDetach(fabric::LocalProcess& local, uint32_t qpn, const uint8_t mgid[16]);

// The QPs attached to `mgid` now: calls `member(qpn)` for each (an attachment whose QP has been
// destroyed since is skipped).
template <typename Member>
void ForEachMcastMember(fabric::HostRegistry& registry, const uint8_t mgid[16], Member&& member);

// ---------------------------------------------------------------------------------------------

// Payload of a multicast-table slot. The fields are written before qp_num (release); a reader
// re-checks the slot's generation after reading them, so a slot reused meanwhile is skipped.
struct McastEntry {
  std::atomic<uint32_t> qp_num;  // 0: not (yet) an attachment
  uint32_t qp_generation;        // the QP table slot's generation at attach time
  uint16_t mlid;
  uint8_t mgid[16];
};
static_assert(sizeof(McastEntry) <= sizeof(fabric::HostSlot::payload));

// The generation of QP `qpn`'s host-table slot, or 0 if `qpn` is no QP number.
uint32_t QpSlotGeneration(fabric::HostRegistry& registry, uint32_t qpn);

template <typename Member>
void ForEachMcastMember(fabric::HostRegistry& registry, const uint8_t mgid[16], Member&& member) {
  fabric::SlotTable& table = registry.mcasts();
  for (uint32_t i = 0; i < table.extent(); ++i) {
    fabric::HostSlot& slot = table.slot(i);
    if (slot.owner.load(std::memory_order_acquire) == 0) continue;
    const uint32_t generation = slot.generation.load(std::memory_order_acquire);
    auto& e = fabric::EntryOf<McastEntry>(slot);
    const uint32_t qpn = e.qp_num.load(std::memory_order_acquire);
    if (qpn == 0) continue;
    uint8_t group[16];
    memcpy(group, e.mgid, 16);
    const uint32_t qp_generation = e.qp_generation;
    if (slot.generation.load(std::memory_order_acquire) != generation || e.qp_num.load(std::memory_order_acquire) != qpn)
      continue;  // detached or reused while read
    if (memcmp(group, mgid, 16) != 0) continue;
    if (QpSlotGeneration(registry, qpn) != qp_generation) continue;  // that QP is gone
    member(qpn);
  }
}

}  // namespace softverbs::transport
