// A work completion: plain data, stored in shared completion rings.
#pragma once

#include <cstdint>

namespace softverbs::transport {

// One work completion, the core's ibv_wc. Field meanings and values are those of ibv_poll_cq(3).
struct Completion {
  uint64_t wr_id = 0;
  uint32_t status = 0;    // enum ibv_wc_status
  uint32_t opcode = 0;    // enum ibv_wc_opcode
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // network order, or the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;  // enum ibv_wc_flags
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  bool solicited = false;   // raises an event on a CQ armed solicited-only
  bool has_cvlan = false;   // raw QPs: a stripped 802.1Q tag (IBV_QP_CREATE_CVLAN_STRIPPING)
  bool has_flow_tag = false;  // raw QPs: the steering rule's IBV_FLOW_SPEC_ACTION_TAG
  uint16_t cvlan = 0;       // its TCI (ibv_wc_read_cvlan)
  uint32_t flow_tag = 0;    // ibv_wc_read_flow_tag
  uint64_t timestamp_ns = 0;  // device clock (base/clock.h), if the CQ asked for it
  uint64_t wallclock_ns = 0;  // CLOCK_REALTIME, if the CQ asked for it
};

// A tag-matched receive's TMH fields (ibv_wc_read_tm_info(3)); kept beside the completion in
// its ring entry (transport/cq_ring.h), read only for completions with IBV_WC_TM_MATCH.
struct TmInfo {
  uint64_t tag = 0;
  uint32_t priv = 0;  // the TMH's app_ctx
};

}  // namespace softverbs::transport
