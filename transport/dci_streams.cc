#include "transport/dci_streams.h"

#include <string>

namespace softverbs::transport {

DciStreams::Outcome DciStreams::OnError(uint16_t stream) {
  if (!config_.enabled) return Outcome::kQpError;
  errored_.insert(stream);  // a stream already in error counts once ("unique stream_id")
  // log_num_errored <= 16 (core/dc.cc checks it against the caps), so the shift stays in range.
  const size_t limit = size_t{1} << config_.log_num_errored;
  return errored_.size() >= limit ? Outcome::kQpError : Outcome::kStreamError;
}

Status DciStreams::Reset(uint16_t stream) {
  if (!config_.enabled)
    return Invalid("the DCI was created without MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS: it has no streams to reset");
  if (errored_.erase(stream) == 0)
    return Invalid("stream " + std::to_string(stream) + " is not in error (mlx5dv_dci_stream_id_reset(3) "
                   "resets an errored stream_id)");
  return Status::Ok();
}

}  // namespace softverbs::transport
