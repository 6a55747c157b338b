// The destination QP of a request as the responder reaches it: the responder is written once,
// against this interface, and each fabric implements it (DESIGN.md section 6, "one transport, two
// fabrics"). On the same host the initiator does the responder's work and reaches the target
// process's shared state and memory from its own (transport/host/host_target.h); on the wire the
// target's own process runs the responder on the packets it receives.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "fabric/host/shared_arena.h"
#include "transport/completion.h"
#include "transport/qp_endpoint.h"

namespace softverbs::fabric {
class HostRegistry;
}

namespace softverbs::transport {

class PinnedPieces;
class ReceiveKeys;
struct CqEntry;

class TargetQp {
 public:
  virtual ~TargetQp() = default;

  // The QP's shared endpoint (state, type, access, PD, Q_Key, where its queues are).
  virtual QpEndpoint& endpoint() const = 0;
  // The owner process's slot on its host: the owner that its keys must name (IBA 10.6.3).
  virtual uint32_t process_slot() const = 0;
  // The host registry holding the owner's keys (transport/key_table.h rules them).
  virtual fabric::HostRegistry& registry() const = 0;
  // This process's address of a block of the owner's arena; nullptr if unreachable.
  virtual void* Resolve(fabric::SharedRef ref) const = 0;

  // Copies between `local` (this process) and the owner's pinned `remote` pieces.
  virtual Status Move(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const = 0;
  // Applies `op` to the naturally aligned 8-byte word `remote` (one piece, pinned) atomically
  // with respect to every other initiator (IBV_ATOMIC_HCA); returns the value before.
  virtual Result<uint64_t> AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                        const void* arg) const = 0;
  // Makes the owner's eventfd `fd` (incarnation `tag`) readable: its channel or async fd.
  virtual void Signal(int fd, uint64_t tag) const = 0;
  // False once the owner process has died (its endpoint may still read as it was).
  virtual bool IsAlive() const = 0;
  // A small SEND may travel inside its receive completion, for the owner's poll to scatter
  // (transport/cq_ring.h): worth it when reaching the owner's memory costs a system call.
  virtual bool LandsInCompletion() const = 0;
  // QP `qpn`, the requester of a message to this one, reached the same way: the target's side
  // of a tag matching rendezvous READs the requester's memory and SENDs it the FIN
  // (transport/tag_matcher.h). nullptr where the fabric cannot reach it.
  virtual std::unique_ptr<TargetQp> Requester(uint32_t /*qpn*/) const { return nullptr; }
  // Where the sender keeps the receive buffers' keys it checked last (transport/receive_keys.h);
  // nullptr: each is read from the key table.
  virtual ReceiveKeys* receive_keys() const { return nullptr; }
};

}  // namespace softverbs::transport
