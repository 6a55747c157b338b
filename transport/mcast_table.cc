#include "transport/mcast_table.h"

#include <mutex>

namespace softverbs::transport {
namespace {

// Attach and detach of this process's QPs, one at a time: a duplicate check is then a scan.
std::mutex g_attach_mu;

// The slot of this process holding (qpn, mgid), or -1.
int64_t FindAttachment(fabric::LocalProcess& local, uint32_t qpn, const uint8_t mgid[16]) {
  fabric::SlotTable& table = local.registry().mcasts();
  const uint64_t self = local.token().raw();
  for (uint32_t i = 0; i < table.extent(); ++i) {
    fabric::HostSlot& slot = table.slot(i);
    if (slot.owner.load(std::memory_order_acquire) != self) continue;
    auto& e = fabric::EntryOf<McastEntry>(slot);
    if (e.qp_num.load(std::memory_order_acquire) == qpn && memcmp(e.mgid, mgid, 16) == 0) return i;
  }
  return -1;
}

}  // namespace

bool IsMulticastGid(const uint8_t gid[16]) {
  static const uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(gid, kV4Mapped, 12) == 0) return (gid[12] & 0xf0) == 0xe0;  // 224.0.0.0/4
  return gid[0] == 0xff;
}

uint32_t QpSlotGeneration(fabric::HostRegistry& registry, uint32_t qpn) {
  // QP numbers are host-table slots plus 0x100 (core::QpnOfSlot).
  if (qpn < 0x100 || qpn - 0x100 >= registry.qps().extent()) return 0;  // never a QP beyond the extent
  return registry.qps().slot(qpn - 0x100).generation.load(std::memory_order_acquire);
}

Result<bool> McastAttach(fabric::LocalProcess& local, uint32_t qpn, const uint8_t mgid[16], uint16_t mlid) {
  std::lock_guard lock(g_attach_mu);
  if (FindAttachment(local, qpn, mgid) >= 0) return false;  // ibv_attach_mcast(3): still one copy
  auto index = local.registry().mcasts().Allocate(local.token());
  if (!index.ok())
    return Status(ENOMEM, "the host's " + std::to_string(fabric::HostRegistry::kMcastSlots) +
                              " multicast attachments are all in use (max_total_mcast_qp_attach)");
  auto& e = fabric::EntryOf<McastEntry>(local.registry().mcasts().slot(*index));
  memcpy(e.mgid, mgid, 16);
  e.mlid = mlid;
  e.qp_generation = QpSlotGeneration(local.registry(), qpn);
  e.qp_num.store(qpn, std::memory_order_release);
  return true;
}

Status McastDetach(fabric::LocalProcess& local, uint32_t qpn, const uint8_t mgid[16]) {
  std::lock_guard lock(g_attach_mu);
  const int64_t index = FindAttachment(local, qpn, mgid);
  if (index < 0) return Invalid("the QP is not attached to that multicast group");
  auto& e = fabric::EntryOf<McastEntry>(local.registry().mcasts().slot(static_cast<uint32_t>(index)));
  e.qp_num.store(0, std::memory_order_release);
  local.registry().mcasts().Free(static_cast<uint32_t>(index), local.token());
  return Status::Ok();
}

}  // namespace softverbs::transport
