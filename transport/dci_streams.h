// The streams of a DCI created with mlx5dv_dci_streams (mlx5dv_create_qp(3)): which streams are
// in error, and when the DCI as a whole must leave RTS.
//
// mlx5dv_dci_stream_id_reset(3): "Errors which are stream related will cause only that
// stream_id's work request to be flushed [...] Work requested for other stream_id's will
// continue to be processed by the QP. The DCI QP will move to an error state and stop operating
// once the number of unique stream_id in error reaches the DCI QP's 'log_num_errored' streams",
// i.e. 2^log_num_errored of them (rdma-core's tests/mlx5_base.py expects ERR after exactly
// 1 << log_num_errored stream errors). A stream in error flushes its work requests until the
// application resets it; resetting a stream that is not in error is refused, as the firmware
// refuses it (rdma-core's DCI stream test expects that failure).
//
// A stream is its 16-bit stream_id: the man page counts "unique stream_id" in error, and
// rdma-core's own test posts stream ids beyond 2^log_num_concurent, which the hardware accepts;
// log_num_concurent bounds the streams a NIC runs in parallel, a software send queue runs them
// one after another, in posting order.
#pragma once

#include <cstdint>
#include <set>

#include "base/status.h"

namespace softverbs::transport {

// mlx5dv_dci_streams in the transport's terms; `enabled` false: a DCI without streams (or any
// other QP), whose first completion error takes it to ERR as RC's does.
struct DciStreamsConfig {
  bool enabled = false;
  uint8_t log_num_concurrent = 0;
  uint8_t log_num_errored = 0;
};

class DciStreams {
 public:
  // What a completion error on a stream does.
  enum class Outcome {
    kStreamError,  // only that stream is in error: the DCI stays in RTS
    kQpError,      // the streams in error reached 2^log_num_errored (or no streams): the DCI enters ERR
  };

  // The configuration is the DCI's creation attributes; the streams in error stay as they are.
  void Configure(const DciStreamsConfig& config) { config_ = config; }
  bool enabled() const { return config_.enabled; }

  // A work request of `stream` completed in error.
  Outcome OnError(uint16_t stream);
  // Whether the work requests of `stream` are flushed (it is in error and was not reset).
  bool InError(uint16_t stream) const { return config_.enabled && errored_.count(stream) != 0; }
  size_t errored() const { return errored_.size(); }
  // mlx5dv_dci_stream_id_reset(3): `stream` serves again. EINVAL when the DCI has no streams or
  // `stream` is not in error.
  Status Reset(uint16_t stream);
  // The DCI went back to RESET: no stream is in error.
  void Clear() { errored_.clear(); }

 private:
  DciStreamsConfig config_;
  std::set<uint16_t> errored_;
};

}  // namespace softverbs::transport
