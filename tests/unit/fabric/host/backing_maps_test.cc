#include "fabric/host/backing_maps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// A memfd of `pages` pages mapped MAP_SHARED in this process, filled with `fill`.
struct SharedFile {
  int fd = -1;
  uint8_t* p = nullptr;
  size_t len = 0;
  explicit SharedFile(size_t pages, uint8_t fill = 0) {
    fd = memfd_create("sv-maps", MFD_CLOEXEC);
    len = pages * kPage;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(len)), 0);
    p = static_cast<uint8_t*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(p, MAP_FAILED);
    memset(p, fill, len);
  }
  ~SharedFile() {
    munmap(p, len);
    close(fd);
  }
  // The backing ibv_reg_mr would publish for [p + offset, +length), as owned by `owner`.
  BackingId Id(uint64_t owner, uint64_t offset, uint64_t length, uint64_t* file_offset = nullptr) const {
    auto b = FindSharedBacking(reinterpret_cast<uint64_t>(p) + offset, length);
    EXPECT_TRUE(b.has_value());
    backing = b;
    if (file_offset != nullptr) *file_offset = b->offset;
    return BackingId{owner, b->file->kind(), b->file->handle(), b->file->dev(), b->file->tag(), b->file->ino()};
  }
  mutable std::optional<SharedBacking> backing;  // keeps the owner's descriptor, as an MR does
};

std::shared_ptr<PeerProcess> Self() {
  auto self = PeerProcess::Open(ProcessToken::Self());
  EXPECT_TRUE(self.ok());
  return self.value();
}

TEST(BackingMapsTest, MapsOnceAndReachesTheOwnersBytes) {
  SharedFile f(4, 0x11);
  auto self = Self();
  BackingMaps maps;
  uint64_t offset = 0;
  const BackingId id = f.Id(self->token().raw(), kPage, kPage, &offset);
  EXPECT_EQ(offset, kPage);
  auto w = maps.Get(*self, id, offset, kPage);
  ASSERT_TRUE(w.ok()) << w.status().rule();
  ASSERT_GE((*w)->size(), 4 * kPage);
  EXPECT_NE((*w)->base(), f.p);  // a mapping of its own: the owner's mappings are untouched
  EXPECT_EQ((*w)->base()[offset + 5], 0x11);
  (*w)->base()[offset + 5] = 0x22;  // the same pages
  EXPECT_EQ(f.p[kPage + 5], 0x22);
  // A second access finds the same window.
  auto again = maps.Get(*self, id, offset, 8);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), w->get());
  EXPECT_EQ(maps.size(), 1u);
}

TEST(BackingMapsTest, RefusesARangeBeyondTheEndOfTheFile) {
  SharedFile f(2);
  auto self = Self();
  BackingMaps maps;
  const BackingId id = f.Id(self->token().raw(), 0, kPage);
  // Truncated after registration: a memcpy there would raise SIGBUS.
  ASSERT_EQ(ftruncate(f.fd, static_cast<off_t>(kPage / 2)), 0);
  auto w = maps.Get(*self, id, 0, kPage);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ERANGE);
  // Remembered: the next access does not try again.
  EXPECT_EQ(maps.Get(*self, id, 0, kPage).status().code(), ENXIO);
}

TEST(BackingMapsTest, RefusesADescriptorThatNamesAnotherFile) {
  SharedFile f(1), other(1);
  auto self = Self();
  BackingMaps maps;
  BackingId id = f.Id(self->token().raw(), 0, 64);
  id.handle = other.fd;  // the owner's number now names another file
  auto w = maps.Get(*self, id, 0, 64);
  EXPECT_EQ(w.status().code(), ESTALE);
}

TEST(BackingMapsTest, EvictsTheLeastRecentlyUsedAndKeepsWindowsInUse) {
  SharedFile a(1, 0xa), b(1, 0xb), c(1, 0xc);
  auto self = Self();
  BackingMaps maps(2);
  const uint64_t owner = self->token().raw();
  auto wa = maps.Get(*self, a.Id(owner, 0, 64), 0, 64);
  auto wb = maps.Get(*self, b.Id(owner, 0, 64), 0, 64);
  ASSERT_TRUE(wa.ok() && wb.ok());
  ASSERT_TRUE(maps.Get(*self, a.Id(owner, 0, 64), 0, 64).ok());  // a is the most recent now
  auto wc = maps.Get(*self, c.Id(owner, 0, 64), 0, 64);
  ASSERT_TRUE(wc.ok());
  EXPECT_EQ(maps.size(), 2u);  // b went
  // b's window is still usable by whoever holds it.
  EXPECT_EQ((*wb)->base()[0], 0xb);
  (*wb)->base()[1] = 0xbb;
  EXPECT_EQ(b.p[1], 0xbb);
  // a stayed: same window.
  auto wa2 = maps.Get(*self, a.Id(owner, 0, 64), 0, 64);
  ASSERT_TRUE(wa2.ok());
  EXPECT_EQ(wa2->get(), wa->get());
}

TEST(BackingMapsTest, BorrowsTheThreadsLastWindowWithoutAReference) {
  SharedFile a(1, 0xa), b(1, 0xb);
  auto self = Self();
  BackingMaps maps;
  const uint64_t owner = self->token().raw();
  const BackingId ida = a.Id(owner, 0, 64), idb = b.Id(owner, 0, 64);
  EXPECT_FALSE(maps.Borrow(ida, 0, 64));  // never reached: Get first
  auto wa = maps.Get(*self, ida, 0, 64);  // maps it
  ASSERT_TRUE(wa.ok());
  ASSERT_TRUE(maps.Get(*self, ida, 0, 64).ok());  // this thread's last window now
  const long refs = wa->use_count();
  {
    BorrowedWindow borrowed = maps.Borrow(ida, 0, 64);
    ASSERT_TRUE(borrowed);
    EXPECT_EQ(borrowed.get(), wa->get());
    EXPECT_EQ(wa->use_count(), refs);  // no reference taken
    EXPECT_EQ(borrowed.get()->base()[0], 0xa);
  }
  EXPECT_FALSE(maps.Borrow(idb, 0, 64));                 // another file
  EXPECT_FALSE(maps.Borrow(ida, 0, 2 * kPage));          // beyond the mapping
  EXPECT_FALSE(maps.Borrow(ida, UINT64_MAX - 8, 64));    // wraps
  maps.Forget(wa->get());                                // the cache changed: Get again
  EXPECT_FALSE(maps.Borrow(ida, 0, 64));
}

TEST(BackingMapsTest, ABorrowedWindowStaysMappedWhileThisThreadReachesOthers) {
  SharedFile a(1, 0xa), b(1, 0xb);
  auto self = Self();
  BackingMaps maps(1);  // room for one: reaching b evicts a
  const uint64_t owner = self->token().raw();
  const BackingId ida = a.Id(owner, 0, 64), idb = b.Id(owner, 0, 64);
  ASSERT_TRUE(maps.Get(*self, ida, 0, 64).ok());
  ASSERT_TRUE(maps.Get(*self, ida, 0, 64).ok());
  BorrowedWindow borrowed = maps.Borrow(ida, 0, 64);
  ASSERT_TRUE(borrowed);
  auto wb = maps.Get(*self, idb, 0, 64);
  ASSERT_TRUE(wb.ok());
  ASSERT_TRUE(maps.Get(*self, idb, 0, 64).ok());
  EXPECT_EQ(maps.size(), 1u);  // a was evicted
  // Still mapped: the thread's entry was not replaced while the borrow lives.
  borrowed.get()->base()[1] = 0xaa;
  EXPECT_EQ(a.p[1], 0xaa);
  borrowed = BorrowedWindow();
  // Now the thread's entry moves on to b.
  ASSERT_TRUE(maps.Get(*self, idb, 0, 64).ok());
  EXPECT_EQ(maps.Borrow(idb, 0, 64).get(), wb->get());
}

TEST(BackingMapsTest, OnlyAFileSealedAgainstShrinkingIsCopiedUnguarded) {
  auto self = Self();
  const uint64_t owner = self->token().raw();
  SharedFile plain(1);
  BackingMaps maps;
  auto w = maps.Get(*self, plain.Id(owner, 0, 64), 0, 64);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE((*w)->can_shrink());
  // memfd_create(2): F_SEAL_SHRINK needs MFD_ALLOW_SEALING.
  const int fd = memfd_create("sv-maps-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kPage)), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto* p = static_cast<uint8_t*>(mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  {
    auto b = FindSharedBacking(reinterpret_cast<uint64_t>(p), 64);
    ASSERT_TRUE(b.has_value());
    const BackingId id{owner, b->file->kind(), b->file->handle(), b->file->dev(), b->file->tag(), b->file->ino()};
    auto sealed = maps.Get(*self, id, 0, 64);
    ASSERT_TRUE(sealed.ok()) << sealed.status().rule();
    EXPECT_FALSE((*sealed)->can_shrink());
    EXPECT_NE(ftruncate(fd, 0), 0);  // the kernel holds the seal
  }
  munmap(p, kPage);
  close(fd);
}

TEST(BackingMapsTest, MapsAnotherProcessFileAndForgetsItWhenTheOwnerIsGone) {
  int from_child[2], to_child[2];
  ASSERT_EQ(pipe(from_child), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // as softverbs' AllowPeerAccess
    int fd = memfd_create("sv-child", 0);
    (void)!ftruncate(fd, static_cast<off_t>(kPage));
    auto* p = static_cast<uint8_t*>(mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    memset(p, 0x5c, kPage);
    struct stat st {};
    fstat(fd, &st);
    uint64_t msg[3] = {static_cast<uint64_t>(fd), EncodeDev(st.st_dev), st.st_ino};
    (void)!write(from_child[1], msg, sizeof msg);
    char c;
    (void)!read(to_child[0], &c, 1);
    _exit(p[7] == 0x77 ? 0 : 1);  // the parent's write reached our pages
  }
  uint64_t msg[3];
  ASSERT_EQ(read(from_child[0], msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  auto owner = PeerProcess::Open(ProcessToken::Of(pid));
  ASSERT_TRUE(owner.ok()) << owner.status().rule();
  BackingMaps maps;
  const BackingId id{(*owner)->token().raw(), BackingKind::kFile, static_cast<int32_t>(msg[0]),
                     static_cast<uint32_t>(msg[1]), 0, msg[2]};
  auto w = maps.Get(**owner, id, 0, kPage);
  ASSERT_TRUE(w.ok()) << w.status().rule();
  EXPECT_EQ((*w)->base()[100], 0x5c);
  (*w)->base()[7] = 0x77;
  w = Status(ESRCH, "released");
  (void)!write(to_child[1], "x", 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps.ForgetDead(), 1u);
  EXPECT_EQ(maps.size(), 0u);
  // And it cannot be mapped again: the process (and its descriptor) is gone.
  EXPECT_FALSE(maps.Get(**owner, id, 0, kPage).ok());
  for (int fd : {from_child[0], from_child[1], to_child[0], to_child[1]}) close(fd);
}

TEST(BackingMapsTest, AttachesASysvSegmentByIdAndChecksItsCreator) {
  const int id = shmget(IPC_PRIVATE, 2 * kPage, IPC_CREAT | 0600);
  ASSERT_GE(id, 0);
  auto* p = static_cast<uint8_t*>(shmat(id, nullptr, 0));
  ASSERT_NE(p, reinterpret_cast<uint8_t*>(-1));
  shmctl(id, IPC_RMID, nullptr);  // removed: still attachable by id while attached (Linux)
  memset(p, 0x3d, 2 * kPage);
  auto self = Self();
  BackingMaps maps;
  BackingId b{self->token().raw(), BackingKind::kSysvShm, id, 0, static_cast<uint64_t>(getpid()), 0};
  auto w = maps.Get(*self, b, kPage, kPage);
  ASSERT_TRUE(w.ok()) << w.status().rule();
  EXPECT_EQ((*w)->base()[kPage + 1], 0x3d);
  (*w)->base()[kPage + 1] = 0x4e;
  EXPECT_EQ(p[kPage + 1], 0x4e);
  EXPECT_FALSE(maps.Get(*self, b, kPage, 2 * kPage).ok());  // beyond it
  b.tag += 1;  // another creator: another segment
  EXPECT_EQ(maps.Get(*self, b, 0, 8).status().code(), ESTALE);
  w = Status(ESRCH, "released");
  shmdt(p);
}

}  // namespace
}  // namespace softverbs::fabric
