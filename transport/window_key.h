// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3); IBV_WR_BIND_MW, IBV_WR_LOCAL_INV and
// IBV_WR_SEND_WITH_INV of ibv_post_send(3)): the owner's side of a window and the operations
// that change what its R_Key grants. A bound window is a key of the host key table that names a
// range of one of the owner's MRs, with kWindowKey in its access bits (key_table.h); initiators
// check and pin it like any rkey (ResolveKey), but only for remote access.
//
// Binds and local invalidations are work requests executed in order by the send queue that
// posted them (the initiator is the NIC); a remote SEND_WITH_INV invalidates in whichever
// process executes the send. The window's state lives in its key-table entry -- valid or
// invalid -- so every process agrees on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/work_request.h"

namespace softverbs::transport {

// enum ibv_mw_type
enum class WindowType : uint32_t { kType1 = 1, kType2 = 2 };

// The QP executing a bind or local invalidation.
struct WindowQp {
  uint32_t qp_num = 0;
  uint64_t pd = 0;  // host-unique PD id
};

class WindowKey {
 public:
  // A new unbound window of PD `pd` (host id), registered in this process's directory (Find)
  // until destroyed. Its handle is the R_Key it is allocated with.
  static Result<std::shared_ptr<WindowKey>> Create(fabric::LocalProcess& local, uint64_t pd, WindowType type);
  // ibv_dealloc_mw: unbinds (waiting for the accesses in flight) and frees the key.
  ~WindowKey();
  WindowKey(const WindowKey&) = delete;
  WindowKey& operator=(const WindowKey&) = delete;

  // The window of this process with handle `handle`, or nullptr (deallocated).
  static std::shared_ptr<WindowKey> Find(uint32_t handle);
  // The window of this process in key slot `slot` (whatever its key is now), or nullptr.
  static std::shared_ptr<WindowKey> FindBySlot(uint32_t slot);

  // Executes a bind on behalf of `qp` (IBA 10.6.7.2 and the C10-72..75 rules); "" when done,
  // otherwise the rule broken, and the work request completes with IBV_WC_MW_BIND_ERR.
  std::string Bind(const BindRequest& req, const WindowQp& qp);

  uint32_t handle() const { return handle_; }
  WindowType type() const { return type_; }
  uint64_t pd() const { return pd_; }

 private:
  WindowKey(fabric::LocalProcess& local, uint64_t pd, WindowType type, uint32_t slot, uint32_t handle)
      : local_(local), pd_(pd), type_(type), slot_(slot), handle_(handle) {}
  friend bool WithdrawUnlessWindowsBound(fabric::HostRegistry&, uint32_t, uint32_t);
  friend void InvalidateWindowsBoundTo(fabric::HostRegistry&, uint32_t);
  // The checks of Bind, before anything changes.
  std::string CheckBind(const BindRequest& req, const WindowQp& qp) const;

  fabric::LocalProcess& local_;
  uint64_t pd_;
  WindowType type_;
  uint32_t slot_;
  uint32_t handle_;
  // The last bind (guarded by the directory's lock): the window is bound to MR `bound_mr_` (and,
  // type 2, to QP `bound_qpn_`) as long as its key-table entry still holds `bound_rkey_`.
  uint32_t bound_rkey_ = 0;
  uint32_t bound_mr_ = 0;
  uint32_t bound_qpn_ = 0;  // type 2: the QP that bound it
};

// IBV_WR_LOCAL_INV executed for `qp`: invalidates `rkey` if it is a bound type 2 window or an
// indirect mkey of this process in the QP's PD. "" when done, otherwise the rule broken (the
// work request completes with IBV_WC_LOC_QP_OP_ERR).
std::string LocalInvalidate(fabric::LocalProcess& local, uint32_t rkey, const WindowQp& qp);

// IBV_WR_SEND_WITH_INV at its target, in any process: invalidates `rkey` if it is a bound type 2
// window of `owner_slot`'s process bound to target QP `qp_num` (IBA 10.6.7.2.2: remote
// invalidation applies to type 2 windows). False otherwise.
bool RemoteInvalidate(fabric::HostRegistry& registry, uint32_t rkey, uint32_t owner_slot, uint32_t qp_num);

// ibv_destroy_qp of QP `qp_num` of this process: invalidates the type 2 windows bound to it.
void InvalidateWindowsBoundTo(fabric::HostRegistry& registry, uint32_t qp_num);

// ibv_dereg_mr / ibv_rereg_mr of the MR with key `mr_key` (slot `mr_slot`): withdraws the key
// (waiting for the accesses in flight) unless a window of this process is bound to it
// (ibv_alloc_mw(3): "ibv_dereg_mr() fails if any memory window is still bound to this MR").
// False, changing nothing, if one is. Serialised with binds, so none binds to it meanwhile.
bool WithdrawUnlessWindowsBound(fabric::HostRegistry& registry, uint32_t mr_slot, uint32_t mr_key);

}  // namespace softverbs::transport
