// The same-host fabric's TargetQp (transport/target_qp.h): the destination QP found through the
// host registry by its number, in this process or another of the same host, with its owner
// reached by shared memory and cross-memory attach (DESIGN.md section 5: the initiator does the
// responder's work on the target's behalf).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "base/status.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/pin_line.h"
#include "transport/qp_endpoint.h"
#include "transport/receive_keys.h"
#include "transport/target_qp.h"

namespace softverbs::fabric {
class BackingMaps;
class BackingWindow;
}  // namespace softverbs::fabric

namespace softverbs::transport {

class MappedPieces;

// The process an initiator reached last, kept by its link: most work requests of a QP go to the
// same process, and this spares the process-cache lookup (DESIGN.md section 5's fast path).
struct PeerHint {
  uint64_t token = 0;  // the process slot owner's token the peer belongs to
  std::shared_ptr<fabric::Peer> peer;
  // The last QP found through this hint, as it was then: found again while its registry entry
  // still names the same process (`token`), block and number -- a link sends to one QP over and
  // over, and resolving its block in the peer's arena is the costly part of a lookup. Checked
  // on every use; the pin taken afterwards decides, as without the hint.
  uint32_t qpn = 0;
  fabric::QpEntry* entry = nullptr;  // its registry entry (entries never move)
  uint32_t process_slot = 0;
  fabric::SharedRef block{};
  QpEndpoint* endpoint = nullptr;
  // The receive buffers' keys its SENDs checked last (any QP of any process: keys are host-wide).
  ReceiveKeys receive_keys;
};

class HostTarget final : public TargetQp {
 public:
  HostTarget(HostTarget&& o) noexcept
      : local_(o.local_), process_slot_(o.process_slot_), qpn_(o.qpn_), owned_peer_(std::move(o.owned_peer_)),
        peer_(o.peer_), endpoint_(std::exchange(o.endpoint_, nullptr)),
        users_word_(std::exchange(o.users_word_, nullptr)), hazard_(std::exchange(o.hazard_, nullptr)),
        receive_keys_(o.receive_keys_) {}
  HostTarget& operator=(HostTarget&&) = delete;
  HostTarget(const HostTarget&) = delete;
  ~HostTarget() override { Release(); }

  // The QP numbered `qpn` on this host; ENOENT if there is none (never created, destroyed, or
  // its process died -- seen within Peer::kLivenessPeriodMs, without a system call per work
  // request: a NIC peer's QPs vanish with its process, and the requester then times out).
  static Result<HostTarget> Find(fabric::LocalProcess& local, uint32_t qpn, PeerHint* hint = nullptr);
  // The receive endpoint of XRC SRQ `srqn` (core::Srq::CreateXrc publishes it in the SRQ table);
  // ENOENT if there is none.
  static Result<HostTarget> FindXrcSrq(fabric::LocalProcess& local, uint32_t srqn);

  QpEndpoint& endpoint() const override { return *endpoint_; }
  uint32_t process_slot() const override { return process_slot_; }
  fabric::HostRegistry& registry() const override { return local_->registry(); }
  void* Resolve(fabric::SharedRef ref) const override;
  Status Move(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const override;
  Result<uint64_t> AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                const void* arg) const override;
  void Signal(int fd, uint64_t tag) const override;
  bool IsAlive() const override { return peer_ == nullptr || peer_->process().IsAlive(); }
  // Another process's memory costs a system call to reach; this process's does not.
  bool LandsInCompletion() const override { return peer_ != nullptr; }
  // The requester of a same-host message is on this host too (usually this very process).
  std::unique_ptr<TargetQp> Requester(uint32_t qpn) const override;
  ReceiveKeys* receive_keys() const override { return receive_keys_; }
  // The link's keys (its PeerHint's): they outlive this target (HostLink::Carry).
  void KeepReceiveKeysIn(ReceiveKeys* keys) { receive_keys_ = keys; }

  // IBV_ATOMIC_HCA on this host: the lock every initiator of an atomic on the word at `va` of
  // process `process_slot` holds, however it reaches the word (a CPU atomic through a mapping,
  // a process_vm read-modify-write), chosen by (process, address).
  static std::atomic<uint64_t>& AtomicStripe(fabric::LocalProcess& local, uint32_t process_slot, uint64_t va);
  // `op` applied to the mapped word `at` with compare-and-swap (under AtomicStripe), the value
  // before in `*before`; `guarded`: under the SIGBUS guard (a file that may shrink), false if
  // the word was not there.
  static bool ApplyAtomicWord(uint64_t* at, uint64_t (*op)(uint64_t, const void*), const void* arg, bool guarded,
                              uint64_t* before) {
    if (guarded) return ApplyAtomicWordGuarded(at, op, arg, before);
    *before = CompareAndSwapWord(at, op, arg);
    return true;
  }

 private:
  // A lock-prefixed compare-and-swap on the word itself: atomic against the other initiators
  // (they hold the same stripe) and against the owner's own CPU atomics on it too. A compare
  // that fails (or an add of 0) writes nothing, as a NIC's. Plain data only: it may run under
  // the SIGBUS guard. The value before.
  static uint64_t CompareAndSwapWord(uint64_t* at, uint64_t (*op)(uint64_t, const void*), const void* arg) {
    std::atomic_ref<uint64_t> word(*at);
    uint64_t seen = word.load(std::memory_order_acquire);
    for (uint64_t next; (next = op(seen, arg)) != seen;)
      if (word.compare_exchange_weak(seen, next, std::memory_order_acq_rel, std::memory_order_acquire)) break;
    return seen;
  }
  static bool ApplyAtomicWordGuarded(uint64_t* at, uint64_t (*op)(uint64_t, const void*), const void* arg,
                                     uint64_t* before);
  // `peer` is kept alive by `owned` or, when found through a PeerHint, by the hint (which
  // outlives the target: HostLink::Carry).
  // How the target is held while it is used: one of a word of the endpoint's `users` line, or
  // an entry of this thread's hazard line (fabric/host/hazard_lines.h).
  struct Hold {
    std::atomic<uint64_t>* word = nullptr;
    std::atomic<uint32_t>* hazard = nullptr;
    explicit operator bool() const { return word != nullptr || hazard != nullptr; }
  };
  friend class DirectRoute;  // holds the QP it keeps (DirectRoute::HeldTarget)
  HostTarget(fabric::LocalProcess& local, uint32_t slot, uint32_t qpn, std::shared_ptr<fabric::Peer> owned,
             fabric::Peer* peer, QpEndpoint* e, Hold hold)
      : local_(&local), process_slot_(slot), qpn_(qpn), owned_peer_(std::move(owned)), peer_(peer), endpoint_(e),
        users_word_(hold.word), hazard_(hold.hazard) {}
  // Move's copy, in bounded chunks that stop when the access is revoked (ECANCELED).
  Status MoveBounded(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const;
  // A mapped copy faulted (the file shrank): says so, and drops the window(s) from the cache.
  void ForgetFaulted(bool write, const Status& s, fabric::BackingMaps& maps, const fabric::BackingWindow* window,
                     const MappedPieces* mapped = nullptr) const;
  void Release() {
    if (users_word_ != nullptr) fabric::Unpin(users_word_, local_->pinner_id());
    if (hazard_ != nullptr) fabric::Retract(hazard_);
    users_word_ = nullptr;
    hazard_ = nullptr;
    endpoint_ = nullptr;
  }
  // The object of `entry` (numbered `number`) in its owner's arena, pinned.
  // `qp`: a QP (held by announcement when it can be); an XRC SRQ's endpoint is pinned.
  static Result<HostTarget> FindEntry(fabric::LocalProcess& local, fabric::QpEntry& entry, uint32_t number,
                                      PeerHint* hint, bool qp);
  // Holds `e` for the life of this target -- announced in this thread's hazard line (a QP, when
  // the thread has a line with room), else pinned on its `users` line (per process:
  // fabric/host/pin_line.h); empty if it no longer is number `qpn`. ibv_destroy_qp waits for both.
  static Hold Pin(fabric::LocalProcess& local, QpEndpoint* e, uint32_t qpn, bool qp);
  // Copies into / out of the target process's memory (process_vm_writev / readv).
  Status CopyV(bool write, const iovec* local, size_t nl, const iovec* remote, size_t nr) const;
  // A copy in progress must stop: a key it holds was withdrawn, or the QP is being destroyed.
  bool Revoked(const PinnedPieces& remote) const;

  fabric::LocalProcess* local_;
  uint32_t process_slot_;
  uint32_t qpn_;
  std::shared_ptr<fabric::Peer> owned_peer_;  // empty when the hint it was found by holds the peer
  fabric::Peer* peer_;                       // null: the target is in this process
  QpEndpoint* endpoint_;
  std::atomic<uint64_t>* users_word_;  // this process's word of the endpoint's `users` line, or
  std::atomic<uint32_t>* hazard_;      // the entry of this thread's hazard line announcing it
  ReceiveKeys* receive_keys_ = nullptr;
};

}  // namespace softverbs::transport
