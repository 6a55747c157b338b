// The responder's accesses through signature mkeys (signature_access.h): an RDMA WRITE into or
// READ from a signature rkey, and a receive whose scatter list names a signature lkey. The
// target's memory is reached through TargetQp::Move, so the owner may be any process.
#pragma once

#include <cstdint>

#include "transport/recv_queue.h"
#include "transport/request.h"
#include "transport/signature_access.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

// RDMA WRITE (`write`) or READ of `r` at `t` when its rkey is a signature mkey; kNotSignature
// otherwise. Called when the plain check of the rkey failed (a signature mkey refuses it).
SigAccessResult ResponderSigRdma(const TargetQp& t, const Request& r, bool write, uint32_t access);

// Whether `lkey` names a signature mkey of the target (a receive into it is scattered by
// ResponderSigReceive).
bool ResponderIsSigKey(const TargetQp& t, uint32_t lkey);

// Lands the `need` bytes of `gather` into WQE `w`'s scatter list, converting where an SGE names
// a signature mkey; false if any SGE's key refuses the access (IBV_WC_LOC_PROT_ERR).
bool ResponderSigReceive(const TargetQp& t, const TakenWqe& w, const iovec* gather, size_t n, uint64_t need);

}  // namespace softverbs::transport
