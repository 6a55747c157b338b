#include "fabric/wire/faults.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "tests/unit/fabric/wire/wire_test_util.h"

namespace softverbs::fabric::wire {
namespace {

FaultInjector Injector(const std::string& text) {
  Result<FaultSpec> spec = FaultSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << spec.status().rule();
  return FaultInjector(spec.ok() ? spec.value() : FaultSpec());
}

// A datagram with a BTH for `qpn` and a 32-bit sequence number after it (read back with
// wire_test_util.h's SeqOf).
Datagram Packet(uint32_t qpn, uint32_t seq) {
  Datagram dg;
  dg.bytes.assign(20, 0);
  dg.bytes[5] = static_cast<uint8_t>(qpn >> 16);
  dg.bytes[6] = static_cast<uint8_t>(qpn >> 8);
  dg.bytes[7] = static_cast<uint8_t>(qpn);
  for (int i = 0; i < 4; ++i) dg.bytes[12 + i] = static_cast<uint8_t>(seq >> (8 * i));
  return dg;
}

// Everything that leaves for `n` packets of QP 0x11 and 0x22 alternating, one per microsecond,
// then whatever is still held once its time has come.
std::vector<Datagram> RunMixed(FaultInjector& f, int n, Direction dir = Direction::kTx) {
  std::vector<Datagram> out;
  uint64_t now = 1'000'000;
  for (int i = 0; i < n; ++i, now += 1000) f.Process(dir, Packet(i % 2 ? 0x22 : 0x11, i), now, out);
  f.ReleaseDue(dir, UINT64_MAX - 1, out);
  return out;
}

TEST(FaultInjectorTest, TheSameSeedAndPacketsGiveTheSameDecisions) {
  const std::string spec = "loss=10%,dup=10%,reorder=20%,corrupt=5%,delay=3us,seed=99";
  FaultInjector a = Injector(spec), b = Injector(spec);
  const std::vector<Datagram> x = RunMixed(a, 3000), y = RunMixed(b, 3000);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i].bytes, y[i].bytes) << i;
  EXPECT_GT(a.stats(Direction::kTx).lost, 0u);
  EXPECT_GT(a.stats(Direction::kTx).duplicated, 0u);
  EXPECT_GT(a.stats(Direction::kTx).reordered, 0u);
  EXPECT_GT(a.stats(Direction::kTx).corrupted, 0u);
  FaultInjector c = Injector("loss=10%,dup=10%,reorder=20%,corrupt=5%,delay=3us,seed=100");
  const std::vector<Datagram> z = RunMixed(c, 3000);
  bool differs = z.size() != x.size();
  for (size_t i = 0; !differs && i < x.size(); ++i) differs = x[i].bytes != z[i].bytes;
  EXPECT_TRUE(differs) << "another seed gives other decisions";
}

// Decisions for one QP's stream do not depend on other QPs' datagrams interleaved with it (so they
// do not depend on thread timing across QPs either).
TEST(FaultInjectorTest, AQpsDecisionsIgnoreOtherQpsTraffic) {
  FaultInjector alone = Injector("loss=30%,seed=5"), mixed = Injector("loss=30%,seed=5");
  std::vector<uint32_t> kept_alone, kept_mixed;
  std::vector<Datagram> out;
  for (uint32_t i = 0; i < 500; ++i) alone.Process(Direction::kRx, Packet(0x11, i), 0, out);
  for (const Datagram& d : out) kept_alone.push_back(testing_util::SeqOf(d.bytes));
  out.clear();
  for (uint32_t i = 0; i < 500; ++i) {
    mixed.Process(Direction::kRx, Packet(0x77, 1000 + i), 0, out);
    if (i % 3 == 0) mixed.Process(Direction::kRx, Packet(0x78, 5000 + i), 0, out);
    mixed.Process(Direction::kRx, Packet(0x11, i), 0, out);
  }
  for (const Datagram& d : out)
    if (testing_util::SeqOf(d.bytes) < 1000) kept_mixed.push_back(testing_util::SeqOf(d.bytes));
  EXPECT_EQ(kept_alone, kept_mixed);
  EXPECT_LT(kept_alone.size(), 450u);
}

TEST(FaultInjectorTest, LossRateFollowsTheSpec) {
  FaultInjector f = Injector("loss=25%,seed=3");
  std::vector<Datagram> out;
  for (uint32_t i = 0; i < 8000; ++i) f.Process(Direction::kTx, Packet(i % 7, i), 0, out);
  EXPECT_EQ(f.stats(Direction::kTx).lost + out.size(), 8000u);
  EXPECT_GT(out.size(), 5600u);  // 6000 expected; these bounds are > 10 standard deviations wide
  EXPECT_LT(out.size(), 6400u);
}

TEST(FaultInjectorTest, DirectionAndQpScopesAreHonoured) {
  FaultInjector f = Injector("rx:loss=100%,qp=0x22:dup=100%");
  EXPECT_TRUE(f.Affects(Direction::kRx));
  EXPECT_TRUE(f.Affects(Direction::kTx));  // the QP rule has no direction
  std::vector<Datagram> out;
  f.Process(Direction::kRx, Packet(0x11, 1), 0, out);
  EXPECT_TRUE(out.empty());
  f.Process(Direction::kTx, Packet(0x11, 2), 0, out);
  ASSERT_EQ(out.size(), 1u);
  f.Process(Direction::kTx, Packet(0x22, 3), 0, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].bytes, out[2].bytes);
  FaultInjector only_rx = Injector("rx:delay=1ms");
  EXPECT_FALSE(only_rx.Affects(Direction::kTx));
}

TEST(FaultInjectorTest, CorruptionFlipsExactlyOneBit) {
  FaultInjector f = Injector("corrupt=100%,seed=11");
  for (uint32_t i = 0; i < 200; ++i) {
    std::vector<Datagram> out;
    const Datagram in = Packet(0x33, i);
    f.Process(Direction::kTx, in, 0, out);
    ASSERT_EQ(out.size(), 1u);
    int bits = 0;
    for (size_t b = 0; b < in.bytes.size(); ++b) bits += __builtin_popcount(in.bytes[b] ^ out[0].bytes[b]);
    ASSERT_EQ(bits, 1) << i;
  }
}

TEST(FaultInjectorTest, DelayHoldsUntilTheDeadline) {
  FaultInjector f = Injector("delay=200us");
  std::vector<Datagram> out;
  f.Process(Direction::kTx, Packet(1, 1), 1000, out);
  f.Process(Direction::kTx, Packet(1, 2), 1500, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(f.NextDeadline(), 201'000u);
  f.ReleaseDue(Direction::kRx, 10'000'000, out);  // the other direction holds nothing
  EXPECT_TRUE(out.empty());
  f.ReleaseDue(Direction::kTx, 200'999, out);
  EXPECT_TRUE(out.empty());
  f.ReleaseDue(Direction::kTx, 201'000, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(testing_util::SeqOf(out[0].bytes), 1u);
  f.ReleaseDue(Direction::kTx, 300'000, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(testing_util::SeqOf(out[1].bytes), 2u);
  EXPECT_EQ(f.NextDeadline(), UINT64_MAX);
}

// A reordered datagram leaves right after `reorder_after` later datagrams of its stream, or at its
// deadline if they never come; every datagram leaves exactly once.
TEST(FaultInjectorTest, ReorderedDatagramsFollowLaterOnesAndNoneIsLost) {
  FaultInjector f = Injector("reorder=30%,reorder_after=2,reorder_max=1ms,seed=8");
  std::vector<Datagram> out;
  for (uint32_t i = 0; i < 1000; ++i) f.Process(Direction::kTx, Packet(0x44, i), 0, out);
  const size_t before_deadline = out.size();
  f.ReleaseDue(Direction::kTx, 999'999, out);
  EXPECT_EQ(out.size(), before_deadline);
  f.ReleaseDue(Direction::kTx, 1'000'000, out);
  ASSERT_EQ(out.size(), 1000u);
  std::vector<uint32_t> seqs;
  for (const Datagram& d : out) seqs.push_back(testing_util::SeqOf(d.bytes));
  EXPECT_FALSE(std::is_sorted(seqs.begin(), seqs.end()));
  std::map<uint32_t, size_t> position;
  for (size_t i = 0; i < seqs.size(); ++i) position[seqs[i]] = i;
  EXPECT_EQ(position.size(), 1000u);
  EXPECT_GT(f.stats(Direction::kTx).reordered, 200u);
}

TEST(FaultInjectorTest, ShortDatagramsHaveNoQpButStillSeeUnscopedFaults) {
  FaultInjector f = Injector("qp=0:loss=100%,dup=100%");
  std::vector<Datagram> out;
  Datagram runt;
  runt.bytes = {1, 2, 3};
  f.Process(Direction::kTx, runt, 0, out);
  EXPECT_EQ(out.size(), 2u);  // qp=0 does not match a datagram without a DestQP
  EXPECT_EQ(DestQpOf(out[0].bytes), std::nullopt);
}

}  // namespace
}  // namespace softverbs::fabric::wire
