// The responder's work, done by the initiator on the target's behalf (DESIGN.md section 5): check
// the target QP and the remote key, place or fetch the data, consume a receive WQE and write the
// target's receive completion. Each function reports the outcome the requester turns into its
// completion (IBA 9.7.5: ACK, RNR NAK, or NAK with an error syndrome).
#pragma once

#include <sys/uio.h>

#include <cstdint>

#include "fabric/host/host_directory.h"
#include "transport/indirect_key.h"
#include "transport/key_table.h"
#include "transport/recv_queue.h"
#include "transport/target.h"
#include "transport/work_request.h"

namespace softverbs::transport {

enum class Reply : uint8_t {
  kAck,             // done
  kRnr,             // no receive WQE (RC: retry later)
  kDropped,         // UC/UD: silently lost (no WQE, wrong Q_Key, target not ready)
  kNotReady,        // RC: the target does not answer (not in RTR/RTS, or gone): transport retry
  kRemoteAccess,    // NAK: remote access error
  kInvalidRequest,  // NAK: invalid request (e.g. message too long for the WQE)
  kRemoteOp,        // NAK: remote operation error (the target could not complete it)
};

// What a delivered message carries besides its bytes.
struct MessageInfo {
  uint32_t src_qp = 0;
  uint32_t imm_data = 0;
  bool with_imm = false;
  bool solicited = false;
  bool rdma_write = false;  // WRITE_WITH_IMM: the WQE is consumed, its buffers are not written
  bool invalidate = false;  // SEND_WITH_INV: invalidates `invalidate_rkey` at the target
  uint32_t invalidate_rkey = 0;
  // UD: the GRH written into the first 40 bytes of the receive buffer.
  const uint8_t* grh = nullptr;
};

// Where a receive WQE's buffers are in the target process, and the pins that keep them.
struct ScatterList {
  PinnedPieces pieces;   // no pins when only checked (Responder::Scatter's peek_only)
  uint32_t lkey[kMaxSge];  // peek_only: the key of each piece (one per SGE)
  bool indirect = false;   // peek_only: an SGE names an indirect key (not checked: never landed)
};

class Responder {
 public:
  explicit Responder(fabric::LocalProcess& local) : local_(local) {}

  // SEND / SEND_WITH_IMM / RDMA_WRITE_WITH_IMM's receive side: takes a WQE of the target, scatters
  // `local` (length `total`) into it and completes it on the target's receive CQ.
  Reply Deliver(const Target& t, uint32_t qp_type, const iovec* local, size_t nl, uint64_t total,
                const MessageInfo& info);
  // RDMA WRITE: `local` into [remote_addr, +total) through `rkey`.
  Reply Write(const Target& t, uint32_t rkey, uint64_t remote_addr, const iovec* local, size_t nl, uint64_t total);
  // RDMA READ: [remote_addr, +total) through `rkey` into `local`.
  Reply Read(const Target& t, uint32_t rkey, uint64_t remote_addr, const iovec* local, size_t nl, uint64_t total);
  // ATOMIC CMP_AND_SWP / FETCH_AND_ADD on the 8 bytes at remote_addr; `original` gets the value
  // before the operation.
  Reply Atomic(const Target& t, WrOpcode op, uint32_t rkey, uint64_t remote_addr, uint64_t compare_add,
               uint64_t swap, uint64_t* original);

 private:
  // Resolves [remote_addr, +length) of `rkey` to pieces of the target's memory (one, or several
  // through an indirect key), checking IBA 10.6.3's rules: the key is the target's, in the target
  // QP's PD, grants `access`, covers the range, and the QP grants the same access.
  Reply CheckRemote(const Target& t, uint32_t rkey, uint64_t remote_addr, uint64_t length, uint32_t access,
                    PinnedPieces* pieces);
  // Resolves WQE `w`'s buffers for a message of `need` bytes (see Deliver).
  Reply Scatter(const Target& t, const TakenWqe& w, uint64_t need, bool peek_only, ScatterList* out);
  // RDMA WRITE (write) or READ: the shared checks, then the copy.
  Reply Rdma(const Target& t, bool write, uint32_t rkey, uint64_t remote_addr, const iovec* local, size_t nl,
             uint64_t total);
  fabric::LocalProcess& local_;
};

}  // namespace softverbs::transport
