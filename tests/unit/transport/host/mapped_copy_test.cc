// Bounded copies (revocation checked between chunks: issue 17 item 1) and copies through a
// mapping of a file its owner truncated (an error, never a SIGBUS: issue 17 item 9).
#include "transport/host/mapped_copy.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/host/fault_guard.h"

namespace softverbs::transport {
namespace {

Status Memmove(const iovec* l, size_t ln, const iovec* r, size_t rn) {
  return CopyMapped(true, l, ln, r, rn);
}
const auto kMemmove = [](const iovec* l, size_t ln, const iovec* r, size_t rn) { return Memmove(l, ln, r, rn); };

TEST(CopyBounded, CopiesInChunksAndChecksBeforeEach) {
  const size_t n = 4 * kCopyChunkBytes + 3;
  std::vector<uint8_t> from(n, 7), to(n, 0);
  iovec l{from.data(), n}, r{to.data(), n};
  int chunks = 0, checks = 0;
  Status s = CopyBounded(
      &l, 1, &r, 1,
      [&](const iovec* lv, size_t ln, const iovec* rv, size_t rn) {
        size_t bytes = 0;
        for (size_t i = 0; i < rn; ++i) bytes += rv[i].iov_len;
        EXPECT_LE(bytes, kCopyChunkBytes);
        ++chunks;
        return Memmove(lv, ln, rv, rn);
      },
      [&] {
        ++checks;
        return false;
      });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(chunks, 5);
  EXPECT_EQ(checks, 5);
  EXPECT_EQ(to, from);
}

TEST(CopyBounded, StopsAtTheFirstCheckAfterARevocation) {
  const size_t n = 4 * kCopyChunkBytes;
  std::vector<uint8_t> from(n, 7), to(n, 0);
  iovec l{from.data(), n};
  // The target side in many pieces, as an indirect key's are.
  std::vector<iovec> r;
  for (size_t off = 0; off < n; off += 4096) r.push_back({to.data() + off, 4096});
  int chunks = 0;
  Status s = CopyBounded(
      &l, 1, r.data(), r.size(),
      [&](const iovec* lv, size_t ln, const iovec* rv, size_t rn) {
        ++chunks;
        return Memmove(lv, ln, rv, rn);
      },
      [&] { return chunks == 2; });  // withdrawn while the second chunk was copied
  EXPECT_EQ(s.code(), ECANCELED);
  EXPECT_EQ(chunks, 2);
  size_t written = 0;
  for (uint8_t b : to) written += b != 0;
  EXPECT_EQ(written, 2 * kCopyChunkBytes) << "a revoked copy went on";
}

TEST(CopyBounded, RevokedBeforeItStartsCopiesNothing) {
  uint8_t from[16] = {1}, to[16] = {};
  iovec l{from, 16}, r{to, 16};
  Status s = CopyBounded(&l, 1, &r, 1, kMemmove, [] { return true; });
  EXPECT_EQ(s.code(), ECANCELED);
  EXPECT_EQ(to[0], 0);
}

// A mapping of a memfd that its "owner" then shrinks to one page.
struct Shrunk {
  Shrunk() {
    fd = memfd_create("sv-mapped-copy-test", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(fd, kBytes), 0);
    base = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(base, MAP_FAILED);
    EXPECT_EQ(ftruncate(fd, 4096), 0);
  }
  ~Shrunk() {
    munmap(base, kBytes);
    close(fd);
  }
  static constexpr size_t kBytes = 64 * 1024;
  int fd = -1;
  uint8_t* base = nullptr;
};

TEST(CopyMapped, ATruncatedFileIsAnErrorNotASignal) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer wraps signal handlers and cannot leave one by siglongjmp from a synchronous
  // fault; the release and ASan runs test this.
  GTEST_SKIP() << "the fault guard's siglongjmp out of SIGBUS does not run under ThreadSanitizer";
#endif
  fabric::InstallFaultGuard();
  Shrunk file;
  std::vector<uint8_t> mine(Shrunk::kBytes, 0x5a);
  iovec l{mine.data(), mine.size()}, m{file.base, Shrunk::kBytes};
  const size_t faults = fabric::GuardedFaults();
  Status w = CopyMapped(true, &l, 1, &m, 1);
  EXPECT_EQ(w.code(), EFAULT);  // (how much landed before the fault is memmove's business)
  Status r = CopyMapped(false, &l, 1, &m, 1);  // RDMA READ from it
  EXPECT_EQ(r.code(), EFAULT);
  EXPECT_EQ(fabric::GuardedFaults(), faults + 2);
  // The guard leaves SIGBUS unblocked: a later fault is caught again.
  EXPECT_EQ(CopyMapped(true, &l, 1, &m, 1).code(), EFAULT);
}

TEST(CopyMapped, AFaultOutsideAGuardedCopyStillKills) {
  fabric::InstallFaultGuard();
  pid_t child = fork();
  if (child == 0) {
    alarm(10);
    Shrunk file;
    file.base[8192] = 1;  // beyond the end, not in a copy of ours: the default action
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) << status;
}

}  // namespace
}  // namespace softverbs::transport
