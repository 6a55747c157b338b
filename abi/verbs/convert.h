// Conversions between rdma-core structs and the core's types. The enum values are identical by
// construction (type_checks.cc proves it at compile time), so conversions are field copies.
#pragma once

#include <infiniband/verbs.h>

#include "core/cq.h"
#include "core/types.h"

namespace softverbs::abi {

core::AddressVector ToCore(const ibv_ah_attr& a);
ibv_ah_attr ToIbv(const core::AddressVector& av);

core::QpAttributes ToCore(const ibv_qp_attr& a);
ibv_qp_attr ToIbv(const core::QpAttributes& a);

core::QpCaps ToCore(const ibv_qp_cap& c);
ibv_qp_cap ToIbv(const core::QpCaps& c);

// Inline: ibv_poll_cq converts every completion straight from the CQ's ring.
inline void ToIbv(const core::Completion& c, ibv_wc* wc) {
  wc->wr_id = c.wr_id;
  wc->status = static_cast<ibv_wc_status>(c.status);
  wc->opcode = static_cast<ibv_wc_opcode>(c.opcode);
  wc->vendor_err = c.vendor_err;
  wc->byte_len = c.byte_len;
  wc->imm_data = c.imm_data;
  wc->qp_num = c.qp_num;
  wc->src_qp = c.src_qp;
  wc->wc_flags = c.wc_flags;
  wc->pkey_index = c.pkey_index;
  wc->slid = c.slid;
  wc->sl = c.sl;
  wc->dlid_path_bits = c.dlid_path_bits;
}

}  // namespace softverbs::abi
