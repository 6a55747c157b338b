#include "fabric/host/host_registry.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/host/host_directory.h"

namespace softverbs::fabric {
namespace {

// A process token of a process that no longer exists: a child that has exited and been reaped.
ProcessToken DeadToken() {
  int pipefd[2];
  EXPECT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    (void)!read(pipefd[0], &c, 1);  // wait until the parent has read our token
    _exit(0);
  }
  ProcessToken t = ProcessToken::Of(child);
  EXPECT_FALSE(t.empty());
  EXPECT_TRUE(t.IsAlive());
  (void)!write(pipefd[1], "x", 1);
  int status;
  waitpid(child, &status, 0);
  close(pipefd[0]);
  close(pipefd[1]);
  return t;
}

class SlotTableTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kCount = 8;
  SlotTableTest() : slots_(kCount), table_(&cursor_, slots_.data(), kCount) {
    for (auto& s : slots_) s.owner = 0, s.generation = 0;
  }
  std::atomic<uint64_t> cursor_{0};
  std::vector<HostSlot> slots_;
  SlotTable table_;
};

TEST_F(SlotTableTest, AllocatesDistinctSlotsUntilFull) {
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < kCount; ++i) {
    auto r = table_.Allocate(ProcessToken::Self());
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(seen.insert(*r).second);
  }
  auto full = table_.Allocate(ProcessToken::Self());
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), ENOMEM);
}

TEST_F(SlotTableTest, FreedNumbersAreReusedLast) {
  auto a = table_.Allocate(ProcessToken::Self());
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(table_.Free(*a, ProcessToken::Self()));
  // The cursor rotates: the next allocations take the other free slots first.
  for (uint32_t i = 1; i < kCount; ++i) {
    auto r = table_.Allocate(ProcessToken::Self());
    ASSERT_TRUE(r.ok());
    EXPECT_NE(*r, *a);
  }
}

TEST_F(SlotTableTest, OnlyTheOwnerFrees) {
  auto a = table_.Allocate(ProcessToken::Self());
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(table_.Free(*a, ProcessToken(12345ull << 32)));
  EXPECT_TRUE(table_.Free(*a, ProcessToken::Self()));
  EXPECT_FALSE(table_.Free(*a, ProcessToken::Self()));  // already free
  EXPECT_FALSE(table_.Free(kCount, ProcessToken::Self()));  // out of range
}

TEST_F(SlotTableTest, GenerationChangesOnEveryAllocation) {
  auto a = table_.Allocate(ProcessToken::Self());
  uint32_t g1 = slots_[*a].generation;
  ASSERT_TRUE(table_.Free(*a, ProcessToken::Self()));
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(table_.Allocate(ProcessToken::Self()).ok());
  EXPECT_NE(slots_[*a].generation.load(), g1);
}

TEST_F(SlotTableTest, SlotsOfDeadProcessesAreReclaimedWhenFull) {
  ProcessToken dead = DeadToken();
  EXPECT_FALSE(dead.IsAlive());
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(table_.Allocate(dead).ok());
  // Full of a dead process's entries: allocation reclaims them instead of failing.
  auto r = table_.Allocate(ProcessToken::Self());
  ASSERT_TRUE(r.ok()) << r.status().rule();
  EXPECT_EQ(slots_[*r].owner.load(), ProcessToken::Self().raw());
}

TEST_F(SlotTableTest, LiveOwnersAreNeverReclaimed) {
  for (uint32_t i = 0; i < kCount; ++i) ASSERT_TRUE(table_.Allocate(ProcessToken::Self()).ok());
  EXPECT_EQ(table_.ReclaimDead(), 0u);
  EXPECT_FALSE(table_.Allocate(ProcessToken::Self()).ok());
}

TEST(ProcessTokenTest, SelfIsAliveAndRecycledPidsDoNotMatch) {
  ProcessToken self = ProcessToken::Self();
  EXPECT_EQ(self.pid(), getpid());
  EXPECT_TRUE(self.IsAlive());
  // Same pid, another start time: a different incarnation, not alive.
  ProcessToken impostor(self.raw() ^ 1);
  EXPECT_FALSE(impostor.IsAlive());
  EXPECT_FALSE(ProcessToken().IsAlive());
}

TEST(HostRegistryTest, RegionIsPrivateAndSharedBetweenOpens) {
  std::string name = "/softverbs-unit-" + std::to_string(getpid());
  auto a = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(a.ok()) << a.status().rule();
  auto b = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(b.ok());
  auto q = a.value()->qps().Allocate(ProcessToken::Self());
  ASSERT_TRUE(q.ok());
  // The second mapping sees the first one's allocation: it is one shared region.
  EXPECT_EQ(b.value()->qps().slot(*q).owner.load(), ProcessToken::Self().raw());
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  shm_unlink(name.c_str());
  delete a.value();
  delete b.value();
}

TEST(HostRegistryTest, RefusesARegionOfAnotherLayout) {
  std::string name = "/softverbs-unit-bad-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  uint64_t bogus = 0x1234;
  ASSERT_EQ(write(fd, &bogus, sizeof(bogus)), 8);
  close(fd);
  auto r = HostRegistry::OpenForTesting(name);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  shm_unlink(name.c_str());
}

TEST(HostRegistryTest, HostNameIsPerUserAndNamespaceAndHonoursSoftverbsHost) {
  unsetenv("SOFTVERBS_HOST");
  std::string plain = HostRegistry::HostName();
  EXPECT_EQ(plain.rfind("/softverbs-" + std::to_string(getuid()) + "-", 0), 0u);
  setenv("SOFTVERBS_HOST", "a/b", 1);
  EXPECT_EQ(HostRegistry::HostName(), plain + "-a_b");
  setenv("SOFTVERBS_HOST", "unit-tests", 1);
}

// Issue 17 item 6: the region is sparse and grows with use.
TEST(HostRegistryTest, AnIdleRegionAllocatesLittleOfItsCapacity) {
  std::string name = "/softverbs-unit-sparse-" + std::to_string(getpid());
  auto r = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(r.ok()) << r.status().rule();
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_GT(st.st_size, 16 << 20);                       // the capacity: every table's full size
  EXPECT_LT(st.st_blocks * 512, 2 << 20) << st.st_blocks;  // what is allocated: the initial extents
  // Filling past the initial extent grows it; every number stays distinct.
  SlotTable& qps = r.value()->qps();
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < SlotTable::kInitialExtent + 10; ++i) {
    auto q = qps.Allocate(ProcessToken::Self());
    ASSERT_TRUE(q.ok()) << q.status().rule();
    EXPECT_TRUE(seen.insert(*q).second);
  }
  EXPECT_EQ(qps.extent(), 2 * SlotTable::kInitialExtent);
  shm_unlink(name.c_str());
  delete r.value();
}

TEST(HostRegistryTest, ReclaimingADeadProcessWithdrawsItsKeysAndFreesEveryEntry) {
  std::string name = "/softverbs-unit-reclaim-" + std::to_string(getpid());
  auto r = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(r.ok()) << r.status().rule();
  HostRegistry& reg = *r.value();
  ProcessToken dead = DeadToken();
  auto p = reg.processes().Allocate(dead);
  auto q = reg.qps().Allocate(dead);
  auto k = reg.keys().Allocate(dead);
  auto s = reg.srqs().Allocate(dead);
  ASSERT_TRUE(p.ok() && q.ok() && k.ok() && s.ok());
  EntryOf<KeyEntry>(reg.keys().slot(*k)).key.store(0x1234);
  EntryOf<QpEntry>(reg.qps().slot(*q)).qp_num.store(0x100 + *q);
  auto mine = reg.keys().Allocate(ProcessToken::Self());
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(reg.ReclaimDead(), 4u);  // without any table being full
  EXPECT_EQ(reg.processes().slot(*p).owner.load(), 0u);
  EXPECT_EQ(reg.qps().slot(*q).owner.load(), 0u);
  EXPECT_EQ(reg.keys().slot(*k).owner.load(), 0u);
  EXPECT_EQ(reg.srqs().slot(*s).owner.load(), 0u);
  EXPECT_EQ(EntryOf<KeyEntry>(reg.keys().slot(*k)).key.load(), 0u);  // no initiator passes its check
  EXPECT_EQ(EntryOf<QpEntry>(reg.qps().slot(*q)).qp_num.load(), 0u);
  EXPECT_EQ(reg.keys().slot(*mine).owner.load(), ProcessToken::Self().raw());  // live: kept
  shm_unlink(name.c_str());
  delete r.value();
}

// The last user removes the name; a user still holding it keeps it.
TEST(HostRegistryTest, TheLastUserToLeaveRemovesTheRegion) {
  std::string name = "/softverbs-unit-leave-" + std::to_string(getpid());
  std::string path = "/dev/shm" + name;
  auto a = HostRegistry::OpenForTesting(name);
  auto b = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(a.ok() && b.ok());
  a.value()->Leave();
  EXPECT_EQ(access(path.c_str(), F_OK), 0);  // b still uses it
  // A user in another process too (the child holds its own lock until it exits). Two pipes:
  // ready (child -> parent) and done (parent -> child); the parent's wait is bounded.
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  pid_t child = fork();
  if (child == 0) {
    auto c = HostRegistry::OpenForTesting(name);
    (void)!write(ready[1], c.ok() ? "y" : "n", 1);
    char x;
    (void)!read(done[0], &x, 1);
    _exit(0);
  }
  pollfd pfd{ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 10000), 1) << "the child never opened the region";
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  b.value()->Leave();
  EXPECT_EQ(access(path.c_str(), F_OK), 0);  // the child still uses it
  (void)!write(done[1], "x", 1);
  waitpid(child, nullptr, 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  // Now nobody holds it: a leave (here a new user that leaves at once) removes it.
  auto d = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d.value()->NameIsOurs());
  d.value()->Leave();
  EXPECT_NE(access(path.c_str(), F_OK), 0);
  EXPECT_FALSE(a.value()->NameIsOurs());
  // A process joining afterwards gets a fresh, empty region under the same name.
  auto e = HostRegistry::OpenForTesting(name);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e.value()->NameIsOurs());
  e.value()->Leave();
  for (auto* r : {a.value(), b.value(), d.value(), e.value()}) delete r;
}

}  // namespace
}  // namespace softverbs::fabric
