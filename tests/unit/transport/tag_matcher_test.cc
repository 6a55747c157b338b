#include "transport/tag_matcher.h"

#include <gtest/gtest.h>

#include <vector>

namespace softverbs::transport {
namespace {

// A table on the heap: the shared arena is only where the owner keeps it.
class TagMatcherTest : public ::testing::Test {
 protected:
  void Make(uint32_t max_tags) {
    mem_.assign(TagTableBytes(max_tags) / 8 + 1, 0);
    table_ = reinterpret_cast<TagTable*>(mem_.data());
    TagTableInit(*table_, max_tags);
  }
  uint32_t Add(uint64_t tag, uint64_t mask, uint64_t wr_id) {
    TagOpResult r = TagAdd(*table_, TagSpec{tag, mask, wr_id, 0x1000, 64, 7, 1});
    EXPECT_TRUE(r.ok);
    return r.handle;
  }
  std::vector<uint64_t> mem_;
  TagTable* table_ = nullptr;
};

TEST_F(TagMatcherTest, TmhRoundTripsInNetworkOrder) {
  uint8_t b[kTmhBytes];
  WriteTmh(TmHeader{kTmhEager, 0x01020304, 0x1122334455667788ull}, b);
  EXPECT_EQ(b[0], kTmhEager);
  EXPECT_EQ(b[1] | b[2] | b[3], 0);
  EXPECT_EQ(b[4], 0x01);
  EXPECT_EQ(b[8], 0x11);
  EXPECT_EQ(b[15], 0x88);
  TmHeader h = ParseTmh(b);
  EXPECT_EQ(h.opcode, kTmhEager);
  EXPECT_EQ(h.app_ctx, 0x01020304u);
  EXPECT_EQ(h.tag, 0x1122334455667788ull);
}

TEST_F(TagMatcherTest, MatchesTheOldestPostedUnderItsMask) {
  Make(8);
  Add(0x15, 0xff, 1);    // matches 0x15 exactly
  Add(0x10, 0xf0, 2);    // matches 0x10..0x1f
  Add(0x15, 0xff, 3);
  TagMatch m = TagMatchTake(*table_, 0x15);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.entry.wr_id, 1u);  // posting order, not the most specific
  m = TagMatchTake(*table_, 0x1a);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.entry.wr_id, 2u);
  EXPECT_EQ(m.entry.addr, 0x1000u);
  EXPECT_EQ(m.entry.length, 64u);
  EXPECT_EQ(m.entry.lkey, 7u);
  EXPECT_FALSE(TagMatchTake(*table_, 0x1a).found);  // consumed: a tag matches once
  m = TagMatchTake(*table_, 0x15);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.entry.wr_id, 3u);
  EXPECT_EQ(TagPosted(*table_), 0u);
}

TEST_F(TagMatcherTest, MaskIgnoresBitsOutsideIt) {
  Make(2);
  Add(0xabcd0005, 0xffff, 9);
  EXPECT_FALSE(TagMatchTake(*table_, 0x6).found);
  TagMatch m = TagMatchTake(*table_, 0x12340005);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.entry.wr_id, 9u);
}

TEST_F(TagMatcherTest, OrderSurvivesReusedSlots) {
  Make(3);
  uint32_t a = Add(5, ~0ull, 1);
  Add(5, ~0ull, 2);
  ASSERT_TRUE(TagRemove(*table_, a).ok);
  Add(5, ~0ull, 3);  // takes slot `a` again, but is the newest
  EXPECT_EQ(TagMatchTake(*table_, 5).entry.wr_id, 2u);
  EXPECT_EQ(TagMatchTake(*table_, 5).entry.wr_id, 3u);
}

TEST_F(TagMatcherTest, DeleteRemovesAndFailsOnConsumedOrUnknown) {
  Make(4);
  uint32_t h = Add(7, ~0ull, 1);
  uint32_t g = Add(8, ~0ull, 2);
  EXPECT_TRUE(TagRemove(*table_, h).ok);
  EXPECT_FALSE(TagMatchTake(*table_, 7).found);
  EXPECT_FALSE(TagRemove(*table_, h).ok);  // already removed: IBV_WC_TM_ERR
  ASSERT_TRUE(TagMatchTake(*table_, 8).found);
  EXPECT_FALSE(TagRemove(*table_, g).ok);  // consumed meanwhile
  EXPECT_FALSE(TagRemove(*table_, 3).ok);  // never added
}

TEST_F(TagMatcherTest, CapacityIsMaxTags) {
  Make(2);
  Add(1, ~0ull, 1);
  uint32_t h = Add(2, ~0ull, 2);
  EXPECT_FALSE(TagAdd(*table_, TagSpec{3, ~0ull, 3}).ok);  // full: ENOMEM at the verb
  ASSERT_TRUE(TagRemove(*table_, h).ok);
  EXPECT_TRUE(TagAdd(*table_, TagSpec{3, ~0ull, 3}).ok);
  EXPECT_EQ(TagPosted(*table_), 2u);
}

TEST_F(TagMatcherTest, UnexpectedMessagesStopMatchingUntilSynced) {
  Make(4);
  Add(1, ~0ull, 1);
  EXPECT_FALSE(TagNoteUnexpected(*table_));
  // The application has not seen the unexpected message yet: no tag matches, and an ADD asks
  // for a sync.
  EXPECT_FALSE(TagMatchTake(*table_, 1).found);
  TagOpResult add = TagAdd(*table_, TagSpec{2, ~0ull, 2});
  ASSERT_TRUE(add.ok);
  EXPECT_TRUE(add.sync_req);
  TagSync(*table_, 5);  // a wrong count keeps it off
  EXPECT_FALSE(TagMatchTake(*table_, 1).found);
  TagSync(*table_, 1);
  TagMatch m = TagMatchTake(*table_, 1);
  ASSERT_TRUE(m.found);
  EXPECT_EQ(m.entry.wr_id, 1u);
  EXPECT_FALSE(TagAdd(*table_, TagSpec{3, ~0ull, 3}).sync_req);
}

TEST_F(TagMatcherTest, DriftBeyondTheLimitAsksForSync) {
  Make(1);
  for (uint32_t i = 0; i < kTmMaxSyncDiff; ++i) ASSERT_FALSE(TagNoteUnexpected(*table_));
  EXPECT_TRUE(TagNoteUnexpected(*table_));
}

TEST_F(TagMatcherTest, ZeroTagsMatchesNothing) {
  Make(0);
  EXPECT_FALSE(TagAdd(*table_, TagSpec{1, ~0ull, 1}).ok);
  EXPECT_FALSE(TagMatchTake(*table_, 1).found);
}

}  // namespace
}  // namespace softverbs::transport
