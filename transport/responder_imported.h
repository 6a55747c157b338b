// The responder's receives into a scatter list naming an lkey imported from another process
// (ibv_import_mr(3)): on hardware that lkey names the exporter's pages, so the message lands
// there. Those bytes are written through imported_key.h; the rest of the list is the target's
// memory, reached through TargetQp::Move as any receive.
#pragma once

#include <sys/uio.h>

#include <cstdint>

#include "base/status.h"
#include "transport/recv_queue.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

// Whether `lkey`, which the target's own keys refused, is an MR of the target QP's PD that
// another process registered (Responder::Scatter then leaves the SGE to the function below).
bool ResponderIsImportedKey(const TargetQp& t, uint32_t lkey);

// Lands the `need` bytes of `gather` into WQE `w`'s scatter list from its byte `skip` on. Each
// SGE is checked as Responder::Scatter checks it (IBA 10.6.3.1: PD, LOCAL_WRITE, the whole SGE
// inside its MR). ESRCH: the target QP went away meanwhile (it answers nothing); any other error
// is the receive's local protection error (logged).
Status ResponderImportedReceive(const TargetQp& t, const TakenWqe& w, uint64_t skip, const iovec* gather,
                                size_t count, uint64_t need);

}  // namespace softverbs::transport
