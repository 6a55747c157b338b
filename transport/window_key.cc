#include "transport/window_key.h"

#include <map>
#include <mutex>
#include <vector>

#include "base/strings.h"
#include "fabric/host/shared_backing.h"
#include "transport/codes.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

// ibv_access_flags a window works with.
using access_bit::kLocalWrite, access_bit::kRemoteWrite, access_bit::kRemoteRead, access_bit::kRemoteAtomic;
using access_bit::kMwBind, access_bit::kZeroBased, access_bit::kOnDemand;
// Every access bit a device knows: the above, ON_DEMAND, HUGETLB (mlx5 ignores it on a window,
// rxe refuses it: the more lenient wins), the kernel's FLUSH_GLOBAL / FLUSH_PERSISTENT (bits 8, 9)
// and the optional range (IBV_ACCESS_OPTIONAL_RANGE, bits 20..29).
constexpr uint32_t kWindowAcceptedAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic | kMwBind |
                                           kZeroBased | (1u << 6) | (1u << 7) | (1u << 8) | (1u << 9) |
                                           0x3ff00000u;

// This process's windows by key slot. The lock also serialises binds with MR deregistration,
// so no window binds to an MR that is being deregistered.
struct WindowDirectory {
  std::mutex mu;
  std::map<uint32_t, std::weak_ptr<WindowKey>> windows;
};
WindowDirectory& Windows() {
  static WindowDirectory* d = new WindowDirectory;  // never destroyed: windows may outlive static destructors
  return *d;
}

}  // namespace

Result<std::shared_ptr<WindowKey>> WindowKey::Create(fabric::LocalProcess& local, uint64_t pd, WindowType type) {
  auto key = AllocateKey(local.registry());  // binds change its variant (ibv_inc_rkey)
  if (!key.ok()) return key.status();
  std::shared_ptr<WindowKey> w(new WindowKey(local, pd, type, key->slot, key->key));
  // ibv_alloc_mw(3): "The MW is created not bound": nothing is published until a bind.
  std::lock_guard lock(Windows().mu);
  Windows().windows[key->slot] = w;
  return w;
}

WindowKey::~WindowKey() {
  {
    std::lock_guard lock(Windows().mu);
    Windows().windows.erase(slot_);
  }
  fabric::HostRegistry& registry = local_.registry();
  WithdrawKey(registry, slot_);  // ibv_dealloc_mw(3): "Unbinds in case was previously bound"
  fabric::ClearBacking(registry, slot_);
  registry.keys().Free(slot_, fabric::ProcessToken::Self());
}

std::shared_ptr<WindowKey> WindowKey::FindBySlot(uint32_t slot) {
  std::shared_ptr<WindowKey> w;  // released after the lock: it may be the last reference
  std::lock_guard lock(Windows().mu);
  if (auto it = Windows().windows.find(slot); it != Windows().windows.end()) w = it->second.lock();
  return w;
}

std::shared_ptr<WindowKey> WindowKey::Find(uint32_t handle) {
  std::shared_ptr<WindowKey> w = FindBySlot(KeySlot(handle));
  return w != nullptr && w->handle_ == handle ? w : nullptr;
}

std::string WindowKey::CheckBind(const BindRequest& req, const WindowQp& qp) const {
  fabric::HostRegistry& registry = local_.registry();
  // C10-72: the window, and the QP that binds it, are of one PD.
  if (pd_ != qp.pd) return "the window's PD is not the QP's PD (IBA C10-72)";
  // Binds may change the key's low 8 bits only: the rest names the window (ibv_inc_rkey(3)).
  if ((req.rkey & ~0xffu) != (handle_ & ~0xffu))
    return "R_Key " + Hex(req.rkey) + " does not keep the window's index " + Hex(handle_ & ~0xffu) +
           " (only its low 8 bits change: ibv_inc_rkey)";
  // o10-37.2.30: a type 2 window is bound from the free state only (after an invalidation).
  if (type_ == WindowType::kType2 && KeyHeldBy(registry, slot_) != 0)
    return "type 2 window " + Hex(handle_) + " is still bound: invalidate it first (IBV_WR_LOCAL_INV)";
  // A window grants the REMOTE_* bits (and may be ZERO_BASED); the other ibv_access_flags are
  // accepted and ignored, as the devices do: rxe_bind_mw refuses only bits outside
  // RXE_ACCESS_SUPPORTED_MW (LOCAL_WRITE, REMOTE_*, MW_BIND, ON_DEMAND, FLUSH_*, the optional
  // range, ZERO_BASED), and mlx5's set_umr_mkey_seg checks none. Bits that are no
  // ibv_access_flags at all are refused, as rxe does (EOPNOTSUPP there).
  if (req.access & ~kWindowAcceptedAccess)
    return "mw_access_flags " + Hex(req.access) + " has bits " + Hex(req.access & ~kWindowAcceptedAccess) +
           " that are no ibv_access_flags (rxe_bind_mw refuses them)";
  // A zero-length bind covers nothing (for type 1 it unbinds, o10-36.2.2): its MR is not used.
  if (req.length == 0 && (req.mr_key == 0 || type_ == WindowType::kType1)) return "";
  KeyView mr;
  if (!KeyPin::Peek(registry, req.mr_key, &mr) || mr.indirect() || mr.window())
    return "lkey " + Hex(req.mr_key) + " names no valid memory region";
  if (mr.owner_process_slot() != local_.slot() || mr.pd != qp.pd)
    return "the MR " + Hex(req.mr_key) + " is not in the QP's PD";
  if (!(mr.access & kMwBind)) return "the MR was not registered with IBV_ACCESS_MW_BIND (IBA C10-73)";
  if ((req.access & (kRemoteWrite | kRemoteAtomic)) && !(mr.access & kLocalWrite))
    return "REMOTE_WRITE / REMOTE_ATOMIC on a window need LOCAL_WRITE on its MR (IBA C10-74, ibv_bind_mw(3))";
  if (req.addr < mr.iova || req.length > mr.length || req.addr - mr.iova > mr.length - req.length)
    return "[" + Hex(req.addr) + ", +" + std::to_string(req.length) + ") is not inside the MR [" + Hex(mr.iova) +
           ", +" + std::to_string(mr.length) + ") (IBA C10-75)";
  return "";
}

std::string WindowKey::Bind(const BindRequest& req, const WindowQp& qp) {
  std::lock_guard lock(Windows().mu);
  if (std::string rule = CheckBind(req, qp); !rule.empty()) return rule;
  fabric::HostRegistry& registry = local_.registry();
  // A type 1 window may be bound again while bound: accesses through the old binding finish
  // first (a type 2 window is free here already).
  WithdrawKey(registry, slot_);
  bound_rkey_ = 0;
  bound_mr_ = 0;
  bound_qpn_ = 0;
  if (req.length == 0 && type_ == WindowType::kType1) return "";  // ibv_alloc_mw(3): unbinds it
  KeyView mr{};
  if (req.length != 0) KeyPin::Peek(registry, req.mr_key, &mr);  // checked above, under the lock
  KeyView v;
  v.key = req.rkey;
  // A window over an ODP MR is on demand too: its accesses check the pages (OnDemandPresent).
  v.access = (req.access & (kRemoteWrite | kRemoteRead | kRemoteAtomic)) | kWindowKey | (mr.access & kOnDemand);
  v.pd = type_ == WindowType::kType2 ? (static_cast<uint64_t>(local_.slot()) << 32 | kQpBound | qp.qp_num) : pd_;
  v.addr = mr.addr + (req.addr - mr.iova);
  v.length = req.length;
  v.owner = local_.slot();
  // ibv_bind_mw(3): with IBV_ACCESS_ZERO_BASED remote addresses are offsets from the start.
  v.iova = (req.access & kZeroBased) ? 0 : req.addr;
  // A window over a shared-backed MR reaches the same file (fabric/host/shared_backing.h): the
  // MR cannot be deregistered while the window is bound, so its file stays open.
  fabric::ClearBacking(registry, slot_);
  if ((mr.access & kSharedBacking) && req.length != 0 &&
      fabric::PublishBackingWithin(registry, KeySlot(req.mr_key), req.mr_key, slot_, req.rkey, v.addr - mr.addr))
    v.access |= kSharedBacking;
  PublishKey(registry, slot_, v);
  bound_rkey_ = req.rkey;
  bound_mr_ = req.mr_key;
  if (type_ == WindowType::kType2) bound_qpn_ = qp.qp_num;
  return "";
}

std::string LocalInvalidate(fabric::LocalProcess& local, uint32_t rkey, const WindowQp& qp) {
  fabric::HostRegistry& registry = local.registry();
  KeyView k;
  if (!KeyPin::Peek(registry, rkey, &k)) return "R_Key " + Hex(rkey) + " is not valid (already invalidated?)";
  if (k.owner_process_slot() != local.slot()) return "R_Key " + Hex(rkey) + " is not a key of this process";
  if (k.window()) {
    std::shared_ptr<WindowKey> w = WindowKey::FindBySlot(KeySlot(rkey));
    if (w == nullptr) return "R_Key " + Hex(rkey) + " names no window of this process";
    // IBA 10.6.7.2: type 1 windows are unbound by a zero-length ibv_bind_mw, not invalidated.
    if (w->type() == WindowType::kType1) return "R_Key " + Hex(rkey) + " is a type 1 window: invalidation applies to type 2";
    if (w->pd() != qp.pd) return "the window's PD is not the QP's PD";
  } else if (k.indirect()) {
    if (k.pd != qp.pd) return "the mkey's PD is not the QP's PD";
  } else {
    return "R_Key " + Hex(rkey) + " is a memory region registered with ibv_reg_mr: it cannot be invalidated";
  }
  if (!InvalidateKey(registry, rkey)) return "R_Key " + Hex(rkey) + " was invalidated meanwhile";
  return "";
}

bool RemoteInvalidate(fabric::HostRegistry& registry, uint32_t rkey, uint32_t owner_slot, uint32_t qp_num) {
  KeyView k;
  if (!KeyPin::Peek(registry, rkey, &k)) return false;
  if (!k.qp_bound() || k.owner_process_slot() != owner_slot || k.bound_qpn() != qp_num) return false;
  return InvalidateKey(registry, rkey);
}

void InvalidateWindowsBoundTo(fabric::HostRegistry& registry, uint32_t qp_num) {
  std::vector<std::shared_ptr<WindowKey>> seen;  // released after the lock (see FindBySlot)
  std::lock_guard lock(Windows().mu);
  for (auto& [slot, weak] : Windows().windows) {
    std::shared_ptr<WindowKey>& w = seen.emplace_back(weak.lock());
    if (w != nullptr && w->bound_qpn_ == qp_num && w->bound_rkey_ != 0) InvalidateKey(registry, w->bound_rkey_);
  }
}

bool WithdrawUnlessWindowsBound(fabric::HostRegistry& registry, uint32_t mr_slot, uint32_t mr_key) {
  std::vector<std::shared_ptr<WindowKey>> seen;  // released after the lock (see FindBySlot)
  std::lock_guard lock(Windows().mu);
  for (auto& [slot, weak] : Windows().windows) {
    std::shared_ptr<WindowKey>& w = seen.emplace_back(weak.lock());
    if (w == nullptr) continue;
    KeyView v;
    if (w->bound_mr_ == mr_key && w->bound_rkey_ != 0 && KeyPin::Peek(registry, w->bound_rkey_, &v)) return false;
  }
  WithdrawKey(registry, mr_slot);
  return true;
}

}  // namespace softverbs::transport
