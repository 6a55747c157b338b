#include "fabric/host/shared_arena.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "fabric/host/peer_process.h"

namespace softverbs::fabric {
namespace {

TEST(SharedArenaTest, BlocksAreZeroedAlignedAndDisjoint) {
  SharedArena arena;
  std::set<uint32_t> offsets;
  for (int i = 0; i < 100; ++i) {
    auto r = arena.Allocate(100);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->valid());
    EXPECT_EQ(r->offset % SharedArena::kAlign, 0u);
    EXPECT_TRUE(offsets.insert(r->offset).second);
    auto* p = static_cast<uint8_t*>(arena.At(*r));
    for (int b = 0; b < 100; ++b) ASSERT_EQ(p[b], 0);
    memset(p, 0xff, 100);
  }
}

TEST(SharedArenaTest, FreedBlocksCoalesceAndAreReused) {
  SharedArena arena;
  auto a = arena.Allocate(64).value();
  auto b = arena.Allocate(64).value();
  auto c = arena.Allocate(64).value();
  memset(arena.At(b), 0x5a, 64);
  arena.Free(a, 64);
  arena.Free(b, 64);  // coalesces with a
  auto d = arena.Allocate(128).value();
  EXPECT_EQ(d.offset, a.offset);
  EXPECT_EQ(static_cast<uint8_t*>(arena.At(d))[64], 0);  // reused blocks are zeroed again
  EXPECT_NE(c.offset, d.offset);
  EXPECT_FALSE(arena.Allocate(0).ok());
  EXPECT_FALSE(arena.Allocate(SharedArena::kMaxBlock + 1).ok());
}

TEST(SharedArenaTest, LargeRequestsOpenNewSegments) {
  SharedArena arena;
  auto a = arena.Allocate(SharedArena::kSegmentSize / 2 + 1).value();
  auto b = arena.Allocate(SharedArena::kSegmentSize / 2 + 1).value();
  EXPECT_NE(a.segment, b.segment);
  EXPECT_GE(arena.SegmentFd(b.segment), 0);
  EXPECT_EQ(arena.SegmentFd(7), -1);
}

TEST(SharedArenaTest, APeerMapsASegmentThroughTheBorrowedMemfd) {
  SharedArena arena;
  auto ref = arena.Allocate(64).value();
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  if (child == 0) {
    // The child plays the peer: borrow the parent's memfd, map it, write into the block.
    auto parent = PeerProcess::Open(ProcessToken::Of(getppid()));
    if (!parent.ok()) _exit(1);
    auto fd = (*parent)->BorrowFd(arena.SegmentFd(ref.segment));
    if (!fd.ok()) _exit(2);
    auto seg = RemoteSegment::Map(fd.value());
    if (!seg.ok()) _exit(3);
    strcpy(static_cast<char*>((*seg)->At(ref.offset)), "written by the peer");
    (void)!write(to_parent[1], "x", 1);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  int status;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(static_cast<char*>(arena.At(ref)), "written by the peer");
  close(to_parent[0]);
  close(to_parent[1]);
}

}  // namespace
}  // namespace softverbs::fabric
