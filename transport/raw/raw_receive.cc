#include "transport/raw/raw_receive.h"

#include <cstring>

#include "transport/codes.h"
#include "transport/indirect_key.h"
#include "transport/work_request.h"

namespace softverbs::transport::raw {
namespace {

using access_bit::kLocalWrite;

// Writes `pieces` (in order) into the WQE's SGEs; a wc status.
uint32_t Scatter(fabric::LocalProcess& local, const RawReceiveConfig& config, const TakenWqe& wqe,
                 std::span<const std::span<const uint8_t>> pieces, uint64_t total) {
  uint64_t room = 0;
  for (uint32_t i = 0; i < wqe.num_sge; ++i) room += wqe.sge[i].length;
  if (total > room) return wc_status::kLocLenErr;
  const KeyRule rule{config.process_slot, config.pd, kLocalWrite, true};
  size_t piece = 0, at = 0;
  for (uint32_t i = 0; i < wqe.num_sge && piece < pieces.size(); ++i) {
    const RecvSge& s = wqe.sge[i];
    const uint64_t n = std::min<uint64_t>(s.length, total);
    if (n == 0) continue;
    PinnedPieces dst;
    if (!ResolveKey(local.registry(), s.lkey, s.addr, n, n, rule, [&local](fabric::SharedRef r) { return local.At(r); },
                    &dst))
      return wc_status::kLocProtErr;
    for (size_t d = 0; d < dst.size(); ++d) {
      auto* out = static_cast<uint8_t*>(dst.data()[d].iov_base);
      size_t left = dst.data()[d].iov_len;
      while (left > 0 && piece < pieces.size()) {
        const size_t k = std::min(left, pieces[piece].size() - at);
        memcpy(out, pieces[piece].data() + at, k);
        out += k, left -= k, at += k;
        if (at == pieces[piece].size()) ++piece, at = 0;
      }
    }
    total -= n;
  }
  return wc_status::kSuccess;
}

// IBV_WC_IP_CSUM_OK: the frame's IPv4 and TCP/UDP checksums are right. With tunnel offloads the
// NIC also checks the packet a VXLAN frame carries (mlx5dv_create_qp(3): "checksum ... for
// incoming tunneling traffic"), and reports both together.
bool RawReceiveChecksumsOk(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, bool tunnel) {
  if (!fabric::raw::ChecksumsOk(frame, view)) return false;
  if (!tunnel || !view.has_vxlan) return true;
  fabric::raw::FrameView inner;
  const auto carried = frame.subspan(view.inner_offset);
  return fabric::raw::ParseFrame(carried, &inner) && fabric::raw::ChecksumsOk(carried, inner);
}

}  // namespace

Completion ReceiveFrame(fabric::LocalProcess& local, const RawReceiveConfig& config, const TakenWqe& wqe,
                        std::span<const uint8_t> frame, const fabric::raw::FrameView& view, const FlowMark& mark) {
  Completion c;
  c.wr_id = wqe.wr_id;
  c.opcode = wc_opcode::kRecv;
  c.qp_num = config.qp_num;
  // The FCS covers the frame as it was on the wire, tag included (IEEE 802.3 clause 3.2.9).
  uint8_t fcs[4];
  if (config.scatter_fcs) fabric::raw::EthernetFcs(frame, fcs);
  std::span<const std::span<const uint8_t>> pieces;
  std::span<const uint8_t> parts[3];
  size_t count = 0;
  if (config.strip_cvlan && view.has_vlan && frame.size() >= 16) {
    // The tag leaves the frame for the completion (ibv_wc_read_cvlan).
    parts[count++] = frame.subspan(0, 12);
    parts[count++] = frame.subspan(16);
    c.cvlan = view.vlan_tci;
    c.has_cvlan = true;
  } else {
    parts[count++] = frame;
  }
  if (config.scatter_fcs) parts[count++] = {fcs, 4};
  pieces = {parts, count};
  uint64_t total = 0;
  for (const auto& p : pieces) total += p.size();
  c.status = Scatter(local, config, wqe, pieces, total);
  if (c.status != wc_status::kSuccess) return c;
  c.byte_len = static_cast<uint32_t>(total);
  if (RawReceiveChecksumsOk(frame, view, config.tunnel_offloads)) c.wc_flags |= kWcIpCsumOk;
  c.has_flow_tag = mark.has_tag;
  c.flow_tag = mark.tag;
  return c;
}

}  // namespace softverbs::transport::raw
