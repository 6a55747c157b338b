#include "transport/raw/raw_send.h"

#include <cstring>

#include "fabric/raw/frame.h"
#include "transport/indirect_key.h"

namespace softverbs::transport::raw {

uint32_t GatherBytes(fabric::LocalProcess& local, const RawSendConfig& config, const SendWr& wr,
                     std::vector<uint8_t>* out) {
  out->clear();
  if (wr.flags & send_flag::kInline) {
    out->assign(wr.inline_data, wr.inline_data + wr.inline_length);
    return wc_status::kSuccess;
  }
  const KeyRule rule{config.process_slot, config.pd, 0, false};
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sge[i];
    if (s.length == 0) continue;
    if (out->size() + s.length > (1u << 20)) return wc_status::kLocLenErr;
    PinnedPieces pieces;
    if (!ResolveKey(local.registry(), s.lkey, s.addr, s.length, s.length, rule,
                    [&local](fabric::SharedRef r) { return local.At(r); }, &pieces))
      return wc_status::kLocProtErr;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const auto* p = static_cast<const uint8_t*>(pieces.data()[k].iov_base);
      out->insert(out->end(), p, p + pieces.data()[k].iov_len);
    }
  }
  return wc_status::kSuccess;
}

uint32_t BuildFrames(fabric::LocalProcess& local, const RawSendConfig& config, const SendWr& wr,
                     std::vector<std::vector<uint8_t>>* frames) {
  std::vector<uint8_t> frame;
  if (uint32_t s = GatherBytes(local, config, wr, &frame); s != wc_status::kSuccess) return s;
  // A frame must hold its Ethernet header and fit the port (a NIC drops it with a length error).
  if (frame.size() < 14 || frame.size() > config.max_frame) return wc_status::kLocLenErr;
  if (wr.flags & send_flag::kIpCsum) fabric::raw::FillChecksums(frame);
  frames->push_back(std::move(frame));
  return wc_status::kSuccess;
}

}  // namespace softverbs::transport::raw
