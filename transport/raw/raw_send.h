// The send side of a raw QP: a SEND work request is one whole Ethernet frame, gathered from
// inline bytes or from SGEs checked against this process's keys (IBA 10.6.3.1). With
// IBV_SEND_IP_CSUM the IPv4 header checksum and the TCP/UDP checksum are computed, as the
// NIC's checksum offload does (ibv_post_send(3)).
#pragma once

#include <cstdint>
#include <vector>

#include "fabric/host/host_directory.h"
#include "transport/work_request.h"

namespace softverbs::transport::raw {

struct RawSendConfig {
  uint32_t process_slot = 0;
  uint64_t pd = 0;
  uint32_t max_frame = 0;  // the interface's MTU plus the Ethernet header and two tags
};

// The frame(s) `wr` sends, appended to `frames`; IBV_WC_SUCCESS or the completion error
// (IBV_WC_LOC_PROT_ERR: an SGE outside the PD's memory; IBV_WC_LOC_LEN_ERR: longer than the
// port takes, or shorter than an Ethernet header).
uint32_t BuildFrames(fabric::LocalProcess& local, const RawSendConfig& config, const SendWr& wr,
                     std::vector<std::vector<uint8_t>>* frames);

// Gathers the WR's bytes (inline or SGEs) into `out`; a wc status.
uint32_t GatherBytes(fabric::LocalProcess& local, const RawSendConfig& config, const SendWr& wr,
                     std::vector<uint8_t>* out);

}  // namespace softverbs::transport::raw
