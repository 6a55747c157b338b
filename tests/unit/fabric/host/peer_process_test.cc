#include "fabric/host/peer_process.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

// A child process that exposes a page of memory and an eventfd, then waits to be told to exit.
struct Child {
  pid_t pid = -1;
  int to_child[2], from_child[2];
  uint64_t buffer = 0;  // the address of the child's page
  int efd = -1;         // the child's eventfd number
  int mfd = -1;         // the child's memfd number (it holds "child")
  static constexpr size_t kPage = 4096;

  void Start() {
    ASSERT_EQ(pipe(to_child), 0);
    ASSERT_EQ(pipe(from_child), 0);
    pid = fork();
    if (pid == 0) {
      // One page followed by a hole, so a transfer running past it faults.
      auto* page = static_cast<uint8_t*>(mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      munmap(page + kPage, kPage);
      memset(page, 0xab, kPage);
      int fd = eventfd(0, EFD_NONBLOCK);  // read once at the end: 0 if nobody signalled it
      int memfd = memfd_create("peer-test", 0);
      (void)!write(memfd, "child", 5);
      uint64_t msg[3] = {reinterpret_cast<uint64_t>(page), static_cast<uint64_t>(fd), static_cast<uint64_t>(memfd)};
      (void)!write(from_child[1], msg, sizeof(msg));
      char c;
      (void)!read(to_child[0], &c, 1);
      // Report back what the parent wrote at offset 100 and the eventfd count.
      uint64_t count = 0;
      (void)!read(fd, &count, sizeof(count));
      uint64_t reply[2] = {0, count};
      memcpy(&reply[0], page + 100, 8);
      (void)!write(from_child[1], reply, sizeof(reply));
      _exit(0);
    }
    uint64_t msg[3];
    ASSERT_EQ(read(from_child[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
    buffer = msg[0];
    efd = static_cast<int>(msg[1]);
    mfd = static_cast<int>(msg[2]);
  }
  void Finish(uint64_t* at100, uint64_t* count) {
    (void)!write(to_child[1], "x", 1);
    uint64_t reply[2];
    ASSERT_EQ(read(from_child[0], reply, sizeof(reply)), static_cast<ssize_t>(sizeof(reply)));
    *at100 = reply[0];
    *count = reply[1];
    int status;
    waitpid(pid, &status, 0);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
  }
};

// With and without the pidfd system calls (kNever: liveness from the token, fds through /proc).
class PeerProcessTest : public ::testing::TestWithParam<PeerProcess::Pidfd> {};

TEST_P(PeerProcessTest, ReadsAndWritesAnotherProcessWithoutItsHelp) {
  Child child;
  child.Start();
  auto peer = PeerProcess::Open(ProcessToken::Of(child.pid), GetParam());
  ASSERT_TRUE(peer.ok()) << peer.status().rule();
  EXPECT_FALSE((*peer)->is_self());
  EXPECT_TRUE((*peer)->IsAlive());

  uint8_t got[16];
  iovec in{got, sizeof(got)};
  ASSERT_TRUE((*peer)->Read(child.buffer, &in, 1).ok());
  for (uint8_t b : got) EXPECT_EQ(b, 0xab);

  // Running past the child's page: not mapped there.
  uint8_t big[2 * Child::kPage] = {};
  iovec over{big, sizeof(big)};
  EXPECT_EQ((*peer)->Read(child.buffer, &over, 1).code(), EFAULT);

  // A gather list of two pieces lands contiguously at the remote address.
  uint32_t lo = 0x11223344, hi = 0x55667788;
  iovec out[2] = {{&lo, 4}, {&hi, 4}};
  ASSERT_TRUE((*peer)->Write(child.buffer + 100, out, 2).ok());

  auto fd = (*peer)->BorrowFd(child.efd);
  if (GetParam() == PeerProcess::Pidfd::kNever) {
    // An eventfd reopened through /proc would be another file: refused, not silently wrong.
    EXPECT_EQ(fd.status().code(), ENOSYS);
  } else {
    ASSERT_TRUE(fd.ok()) << fd.status().rule();
    EXPECT_EQ((*peer)->BorrowFd(child.efd).value(), fd.value());  // borrowed once, then reused
    uint64_t two = 2;
    ASSERT_EQ(write(fd.value(), &two, sizeof(two)), 8);
  }

  // A file (the memfd) is the same object either way.
  auto copy = (*peer)->CopyFd(child.mfd);
  ASSERT_TRUE(copy.ok()) << copy.status().rule();
  char text[6] = {};
  EXPECT_EQ(pread(copy->get(), text, 5, 0), 5);
  EXPECT_STREQ(text, "child");

  uint64_t at100 = 0, count = 0;
  child.Finish(&at100, &count);
  EXPECT_EQ(at100, 0x5566778811223344ull);
  EXPECT_EQ(count, GetParam() == PeerProcess::Pidfd::kNever ? 0u : 2u);  // the child's eventfd saw our signal

  EXPECT_FALSE((*peer)->IsAlive());
  EXPECT_EQ((*peer)->Write(child.buffer, &in, 1).code(), ESRCH);
  EXPECT_EQ(PeerProcess::Open(ProcessToken::Of(child.pid), GetParam()).status().code(), ESRCH);
}

INSTANTIATE_TEST_SUITE_P(Pidfd, PeerProcessTest,
                         ::testing::Values(PeerProcess::Pidfd::kIfAvailable, PeerProcess::Pidfd::kNever));

TEST(PeerSelfTest, SelfIsReachedByMemcpy) {
  auto self = PeerProcess::Open(ProcessToken::Self());
  ASSERT_TRUE(self.ok());
  EXPECT_TRUE((*self)->is_self());
  std::vector<uint8_t> target(32, 0);
  uint8_t a[3] = {1, 2, 3}, b[2] = {4, 5};
  iovec out[2] = {{a, 3}, {b, 2}};
  ASSERT_TRUE((*self)->Write(reinterpret_cast<uint64_t>(target.data() + 1), out, 2).ok());
  EXPECT_EQ(std::vector<uint8_t>(target.begin(), target.begin() + 7), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 0}));
  uint8_t back[5];
  iovec in{back, 5};
  ASSERT_TRUE((*self)->Read(reinterpret_cast<uint64_t>(target.data() + 1), &in, 1).ok());
  EXPECT_EQ(memcmp(back, "\x01\x02\x03\x04\x05", 5), 0);
}

// Issue 17 item 11: what a process grants depends on Yama's ptrace_scope; nothing without Yama.
TEST(PeerAccessTest, GrantFollowsYamaPtraceScope) {
  EXPECT_EQ(PeerAccessGrantFor(-1), PeerAccessGrant::kNothingNeeded);  // Yama absent
  EXPECT_EQ(PeerAccessGrantFor(0), PeerAccessGrant::kNothingNeeded);   // classic ptrace permissions
  EXPECT_EQ(PeerAccessGrantFor(1), PeerAccessGrant::kAnyProcessOfTheUser);
  EXPECT_EQ(PeerAccessGrantFor(2), PeerAccessGrant::kImpossible);  // admin-only attach
  EXPECT_EQ(PeerAccessGrantFor(3), PeerAccessGrant::kImpossible);  // no attach
}

TEST(PeerAccessTest, ReadsTheScopeOrReportsYamaAbsent) {
  EXPECT_EQ(YamaPtraceScope("/nonexistent/ptrace_scope"), -1);
  char path[] = "/tmp/sv-ptrace-scope-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "1\n", 2), 2);
  close(fd);
  EXPECT_EQ(YamaPtraceScope(path), 1);
  unlink(path);
}

}  // namespace
}  // namespace softverbs::fabric
