#include "core/counters.h"

#include <gtest/gtest.h>

#include <vector>

namespace softverbs::core {
namespace {

TEST(FlowCountersTest, ReadPlacesEachDescriptionAtItsIndex) {
  FlowCounters c;
  ASSERT_TRUE(c.Describe(counter_desc::kBytes, 0).ok());
  ASSERT_TRUE(c.Describe(counter_desc::kPackets, 2).ok());
  auto counter = c.Bind();
  ASSERT_TRUE(counter.ok());
  (*counter)->Count(60);
  (*counter)->Count(100);
  std::vector<uint64_t> out(4, 99);
  ASSERT_TRUE(c.Read(out, 0).ok());
  EXPECT_EQ(out, (std::vector<uint64_t>{160, 0, 2, 0}));  // entries no description names read 0
  ASSERT_TRUE(c.Read(out, kReadCountersPreferCached).ok());
  EXPECT_EQ(out, (std::vector<uint64_t>{160, 0, 2, 0}));  // a cached read is exact too
}

TEST(FlowCountersTest, DescriptionsSharingAnIndexAddUp) {
  // As mlx5_ib_read_counters: counters_buff[index] += value.
  FlowCounters c;
  ASSERT_TRUE(c.Describe(counter_desc::kPackets, 0).ok());
  ASSERT_TRUE(c.Describe(counter_desc::kBytes, 0).ok());
  auto counter = c.Bind();
  ASSERT_TRUE(counter.ok());
  (*counter)->Count(64);
  uint64_t v = 0;
  ASSERT_TRUE(c.Read({&v, 1}, 0).ok());
  EXPECT_EQ(v, 65u);
}

TEST(FlowCountersTest, RefusalsAsMlx5) {
  FlowCounters c;
  EXPECT_EQ(c.Describe(2, 0).code(), EOPNOTSUPP);  // neither PACKETS nor BYTES
  ASSERT_TRUE(c.Describe(counter_desc::kPackets, 3).ok());
  std::vector<uint64_t> out(3);
  EXPECT_EQ(c.Read(out, 0).code(), EINVAL);  // index 3 needs 4 entries
  out.resize(4);
  EXPECT_EQ(c.Read(out, 2).code(), EINVAL);  // an unknown flag
  ASSERT_TRUE(c.Bind().ok());
  EXPECT_TRUE(c.bound());
  EXPECT_EQ(c.Bind().status().code(), EINVAL);                       // one flow per counters object
  EXPECT_EQ(c.Describe(counter_desc::kBytes, 0).code(), EBUSY);      // bound: no more descriptions
  c.Unbind();
  EXPECT_FALSE(c.bound());
  EXPECT_TRUE(c.Describe(counter_desc::kBytes, 0).ok());
}

TEST(FlowCountersTest, HighestIndexDoesNotOverflow) {
  FlowCounters c;
  ASSERT_TRUE(c.Describe(counter_desc::kPackets, UINT32_MAX).ok());
  uint64_t v[2] = {};
  // Needs 2^32 entries, more than any ncounters: refused, never written out of bounds.
  EXPECT_EQ(c.Read(v, 0).code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::core
