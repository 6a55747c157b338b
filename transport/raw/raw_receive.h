// The receive side of a raw QP: a steered frame lands in the oldest receive WQE, checked
// against this process's keys as a NIC's DMA is (IBA 10.6.3.1), and becomes its completion.
#pragma once

#include <cstdint>
#include <span>

#include "fabric/host/host_directory.h"
#include "fabric/raw/frame.h"
#include "transport/completion.h"
#include "transport/raw/flow_table.h"
#include "transport/recv_queue.h"

namespace softverbs::transport::raw {

inline constexpr uint32_t kWcIpCsumOk = 1u << 2;  // IBV_WC_IP_CSUM_OK

struct RawReceiveConfig {
  uint32_t qp_num = 0;
  uint32_t process_slot = 0;
  uint64_t pd = 0;
  bool scatter_fcs = false;    // IBV_QP_CREATE_SCATTER_FCS: the 4-byte FCS follows the frame
  bool strip_cvlan = false;    // IBV_QP_CREATE_CVLAN_STRIPPING: the outer 802.1Q tag goes to the completion
  // MLX5DV_QP_CREATE_TUNNEL_OFFLOADS: a VXLAN frame's IP_CSUM_OK also covers its inner packet.
  bool tunnel_offloads = false;
};

// Places `frame` in `wqe` and returns the completion: success with byte_len, IP_CSUM_OK, the
// flow tag and the stripped VLAN; IBV_WC_LOC_LEN_ERR if it does not fit; IBV_WC_LOC_PROT_ERR
// if an SGE is not writable memory of the QP's PD.
Completion ReceiveFrame(fabric::LocalProcess& local, const RawReceiveConfig& config, const TakenWqe& wqe,
                        std::span<const uint8_t> frame, const fabric::raw::FrameView& view, const FlowMark& mark);

}  // namespace softverbs::transport::raw
