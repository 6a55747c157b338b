#include "base/inlined_vector.h"

#include <gtest/gtest.h>

#include <memory>

namespace softverbs {
namespace {

// Counts live objects: an inlined vector constructs and destroys only what it holds.
struct Counted {
  static inline int live = 0;
  int value = 0;
  Counted() { ++live; }
  explicit Counted(int v) : value(v) { ++live; }
  Counted(Counted&& o) noexcept : value(o.value) { ++live; }
  Counted& operator=(Counted&& o) noexcept {
    value = o.value;
    return *this;
  }
  ~Counted() { --live; }
};

TEST(InlinedVectorTest, ConstructsOnlyWhatItHolds) {
  Counted::live = 0;
  {
    InlinedVector<Counted, 4> v;
    EXPECT_EQ(Counted::live, 0);
    v.push_back(Counted(7));
    EXPECT_EQ(Counted::live, 1);
    EXPECT_EQ(v.size(), 1u);
    EXPECT_EQ(v.back().value, 7);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlinedVectorTest, SpillsPastCapacityKeepingOrderAndCount) {
  Counted::live = 0;
  {
    InlinedVector<Counted, 2> v;
    for (int i = 0; i < 5; ++i) v.push_back(Counted(i));
    EXPECT_EQ(Counted::live, 5);  // the inline ones were moved out and destroyed
    ASSERT_EQ(v.size(), 5u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(v.data()[i].value, i);
    v.clear();
    EXPECT_EQ(Counted::live, 0);
    EXPECT_TRUE(v.empty());
    v.push_back(Counted(9));  // inline again after a clear
    EXPECT_EQ(v.data()[0].value, 9);
    EXPECT_EQ(Counted::live, 1);
  }
  EXPECT_EQ(Counted::live, 0);
}

TEST(InlinedVectorTest, MoveOnlyElementsAreReleased) {
  auto shared = std::make_shared<int>(3);
  {
    InlinedVector<std::shared_ptr<int>, 2> v;
    v.push_back(shared);
    v.push_back(shared);
    EXPECT_EQ(shared.use_count(), 3);
    v.push_back(shared);  // spilled
    EXPECT_EQ(shared.use_count(), 4);
  }
  EXPECT_EQ(shared.use_count(), 1);
}

// A pushed element is moved into place once (a KeyPin is 72 bytes, pushed per work request).
struct MoveCounted {
  static inline int moves = 0;
  static inline int copies = 0;
  MoveCounted() = default;
  MoveCounted(MoveCounted&&) noexcept { ++moves; }
  MoveCounted(const MoveCounted&) { ++copies; }
};

TEST(InlinedVectorTest, APushedElementIsMovedOrCopiedOnce) {
  MoveCounted::moves = MoveCounted::copies = 0;
  InlinedVector<MoveCounted, 2> v;
  MoveCounted m;
  v.push_back(std::move(m));
  EXPECT_EQ(MoveCounted::moves, 1);
  v.push_back(m);
  EXPECT_EQ(MoveCounted::copies, 1);
  EXPECT_EQ(MoveCounted::moves, 1);
}

}  // namespace
}  // namespace softverbs
