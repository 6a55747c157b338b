// The DCI stream error rules (transport/dci_streams.h, mlx5dv_dci_stream_id_reset(3)): an error
// stops only its stream; 2^log_num_errored streams in error stop the DCI; a reset returns an
// errored stream to service and refuses a stream that is not in error.
#include "transport/dci_streams.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace softverbs::transport {
namespace {

using DciOutcome = DciStreams::Outcome;

TEST(DciStreams, WithoutStreamsEveryErrorStopsTheDci) {
  DciStreams s;
  EXPECT_EQ(s.OnError(3), DciOutcome::kQpError);
  EXPECT_FALSE(s.InError(3));  // no streams: nothing is flushed per stream, the QP is in ERR
  const Status reset = s.Reset(3);
  EXPECT_EQ(reset.code(), EINVAL);
  EXPECT_NE(reset.rule().find("without MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS"), std::string::npos) << reset.rule();
}

TEST(DciStreams, TheDciStopsWhenTwoToTheLogNumErroredStreamsAreInError) {
  DciStreams s;
  s.Configure({true, 3, 2});  // 8 concurrent, 4 errored streams allowed
  EXPECT_EQ(s.OnError(1), DciOutcome::kStreamError);
  EXPECT_EQ(s.OnError(1), DciOutcome::kStreamError);  // the same stream counts once
  EXPECT_EQ(s.OnError(2), DciOutcome::kStreamError);
  EXPECT_EQ(s.OnError(300), DciOutcome::kStreamError);  // any 16-bit id is a stream
  EXPECT_EQ(s.errored(), 3u);
  EXPECT_TRUE(s.InError(1));
  EXPECT_FALSE(s.InError(0));
  EXPECT_EQ(s.OnError(7), DciOutcome::kQpError);  // the 4th unique stream in error
}

TEST(DciStreams, LogNumErroredZeroStopsTheDciAtTheFirstError) {
  DciStreams s;
  s.Configure({true, 4, 0});
  EXPECT_EQ(s.OnError(5), DciOutcome::kQpError);
}

TEST(DciStreams, ResetReturnsAnErroredStreamAndRefusesOthers) {
  DciStreams s;
  s.Configure({true, 2, 1});
  ASSERT_EQ(s.OnError(1), DciOutcome::kStreamError);
  const Status not_errored = s.Reset(2);
  EXPECT_EQ(not_errored.code(), EINVAL);
  EXPECT_EQ(not_errored.rule(), "stream 2 is not in error (mlx5dv_dci_stream_id_reset(3) resets an errored stream_id)");
  ASSERT_TRUE(s.Reset(1).ok());
  EXPECT_FALSE(s.InError(1));
  EXPECT_EQ(s.Reset(1).code(), EINVAL);  // once
  // Reset streams no longer count toward log_num_errored.
  EXPECT_EQ(s.OnError(1), DciOutcome::kStreamError);
  EXPECT_EQ(s.OnError(2), DciOutcome::kQpError);
}

TEST(DciStreams, ReconfiguringKeepsTheErrorsAndClearForgetsThem) {
  DciStreams s;
  s.Configure({true, 2, 2});
  ASSERT_EQ(s.OnError(1), DciOutcome::kStreamError);
  s.Configure({true, 2, 2});  // ibv_modify_qp refreshes the configuration
  EXPECT_TRUE(s.InError(1));
  s.Clear();  // RESET
  EXPECT_FALSE(s.InError(1));
  EXPECT_EQ(s.errored(), 0u);
}

}  // namespace
}  // namespace softverbs::transport
