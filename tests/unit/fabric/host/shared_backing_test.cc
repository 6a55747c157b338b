#include "fabric/host/shared_backing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

TEST(MapsLineTest, ParsesFileAnonymousAndSysvLines) {
  MapsLine m;
  ASSERT_TRUE(ParseMapsLine("7f0000001000-7f0000003000 rw-s 00002000 00:1a 12345      /dev/shm/x", &m));
  EXPECT_EQ(m.lo, 0x7f0000001000u);
  EXPECT_EQ(m.hi, 0x7f0000003000u);
  EXPECT_TRUE(m.readable && m.writable && m.shared);
  EXPECT_EQ(m.offset, 0x2000u);
  EXPECT_EQ(m.dev_major, 0u);
  EXPECT_EQ(m.dev_minor, 0x1au);
  EXPECT_EQ(m.ino, 12345u);
  EXPECT_EQ(m.path, "/dev/shm/x");

  ASSERT_TRUE(ParseMapsLine("55d0c000-55d0e000 rw-p 00000000 00:00 0 ", &m));
  EXPECT_FALSE(m.shared);
  EXPECT_EQ(m.ino, 0u);
  EXPECT_TRUE(m.path.empty());

  ASSERT_TRUE(ParseMapsLine("7f00-8f00 rw-s 00000000 00:01 32770  /SYSV00000000 (deleted)", &m));
  EXPECT_EQ(m.ino, 32770u);
  EXPECT_EQ(m.path, "/SYSV00000000 (deleted)");

  EXPECT_FALSE(ParseMapsLine("", &m));
  EXPECT_FALSE(ParseMapsLine("not a maps line", &m));
  EXPECT_FALSE(ParseMapsLine("1000-2000 rw", &m));
}

TEST(MapsLineTest, FindsTheOneLineHoldingARange) {
  const std::string maps =
      "1000-3000 rw-s 00000000 00:1a 7 /a\n"
      "3000-5000 rw-s 00002000 00:1a 7 /a\n"
      "6000-7000 rw-p 00000000 00:00 0\n";
  auto m = FindMapping(maps, 0x1800, 0x800);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->lo, 0x1000u);
  EXPECT_TRUE(FindMapping(maps, 0x3000, 0x2000).has_value());
  // Across two lines (even of the same file), into a hole, in a hole, empty: no.
  EXPECT_FALSE(FindMapping(maps, 0x2000, 0x2000).has_value());
  EXPECT_FALSE(FindMapping(maps, 0x4000, 0x2000).has_value());
  EXPECT_FALSE(FindMapping(maps, 0x5800, 0x10).has_value());
  EXPECT_FALSE(FindMapping(maps, 0x8000, 0x10).has_value());
  EXPECT_FALSE(FindMapping(maps, 0x1000, 0).has_value());
}

// A file descriptor, a mapping, and the file's identity.
struct Mapped {
  int fd = -1;
  uint8_t* p = nullptr;
  size_t len = 0;
  ~Mapped() {
    if (p != nullptr) munmap(p, len);
    if (fd >= 0) close(fd);
  }
  struct stat Stat() const {
    struct stat st {};
    EXPECT_EQ(fstat(fd, &st), 0);
    return st;
  }
};

void MapFile(Mapped& m, int fd, size_t pages, int flags, off_t offset = 0) {
  m.fd = fd;
  m.len = pages * kPage;
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(m.len + offset)), 0);
  void* p = mmap(nullptr, m.len, PROT_READ | PROT_WRITE, flags, fd, offset);
  ASSERT_NE(p, MAP_FAILED);
  m.p = static_cast<uint8_t*>(p);
  memset(m.p, 1, m.len);
}

TEST(SharedBackingTest, MemfdMappedSharedIsFoundWithTheOffsetOfTheRange) {
  Mapped m;
  MapFile(m, memfd_create("sv-backing", MFD_CLOEXEC), 4, MAP_SHARED, static_cast<off_t>(3 * kPage));
  auto b = FindSharedBacking(reinterpret_cast<uint64_t>(m.p) + kPage + 10, 100);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->file->kind(), BackingKind::kFile);
  EXPECT_EQ(b->offset, 3 * kPage + kPage + 10);
  const struct stat st = m.Stat();
  EXPECT_EQ(b->file->dev(), EncodeDev(st.st_dev));
  EXPECT_EQ(b->file->ino(), st.st_ino);
  // The descriptor is the library's own (the application may close its one), open read-write.
  EXPECT_NE(b->file->handle(), m.fd);
  struct stat held {};
  ASSERT_EQ(fstat(b->file->handle(), &held), 0);
  EXPECT_EQ(held.st_ino, st.st_ino);
  EXPECT_EQ(fcntl(b->file->handle(), F_GETFL) & O_ACCMODE, O_RDWR);
}

TEST(SharedBackingTest, RegistrationsOfOneFileShareOneDescriptorClosedWithTheLast) {
  Mapped m;
  MapFile(m, memfd_create("sv-backing", MFD_CLOEXEC), 2, MAP_SHARED);
  auto a = FindSharedBacking(reinterpret_cast<uint64_t>(m.p), 64);
  auto b = FindSharedBacking(reinterpret_cast<uint64_t>(m.p) + kPage, 64);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->file, b->file);
  const int handle = a->file->handle();
  const uint64_t ino = a->file->ino();
  a.reset();
  b.reset();
  struct stat st {};
  EXPECT_TRUE(fstat(handle, &st) != 0 || st.st_ino != ino);  // closed (or the number reused)
}

TEST(SharedBackingTest, DevShmFileIsFoundEvenAfterTheApplicationClosesItsDescriptor) {
  const std::string name = "/sv-backing-test-" + std::to_string(getpid());
  Mapped m;
  MapFile(m, shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600), 2, MAP_SHARED);
  const struct stat st = m.Stat();
  close(m.fd);
  m.fd = -1;
  auto b = FindSharedBacking(reinterpret_cast<uint64_t>(m.p), 2 * kPage);
  shm_unlink(name.c_str());
  ASSERT_TRUE(b.has_value());  // reopened by the path the maps line gives, checked by inode
  EXPECT_EQ(b->file->ino(), st.st_ino);
  EXPECT_EQ(b->offset, 0u);
}

TEST(SharedBackingTest, MemfdWithNoDescriptorLeftIsNotShared) {
  Mapped m;
  MapFile(m, memfd_create("sv-backing", MFD_CLOEXEC), 1, MAP_SHARED);
  close(m.fd);  // "/memfd:sv-backing (deleted)": nothing left to borrow
  m.fd = -1;
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(m.p), 64).has_value());
}

TEST(SharedBackingTest, PrivateFileMappingIsNotShared) {
  Mapped m;
  MapFile(m, memfd_create("sv-backing", MFD_CLOEXEC), 2, MAP_PRIVATE);
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(m.p), 64).has_value());
  // Not touched yet: the maps decide (pagemap tells nothing of an absent page).
  void* fresh = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, m.fd, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(fresh), 64).has_value());
  munmap(fresh, kPage);
}

TEST(SharedBackingTest, AnonymousMemoryIsNotShared) {
  std::string heap(10000, 'x');
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(heap.data()), heap.size()).has_value());
  void* untouched = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(untouched, MAP_FAILED);
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(untouched), kPage).has_value());
  munmap(untouched, 4 * kPage);
  // MAP_SHARED | MAP_ANONYMOUS is shared, but with no file anyone could open.
  void* shared_anon = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared_anon, MAP_FAILED);
  memset(shared_anon, 1, kPage);
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(shared_anon), kPage).has_value());
  munmap(shared_anon, kPage);
}

TEST(SharedBackingTest, RangeAcrossTwoMappingsIsNotShared) {
  // Two adjacent shared mappings of two files: each half is shared, the whole is not one mapping.
  void* area = mmap(nullptr, 2 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(area, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(area);
  int fds[2] = {memfd_create("sv-a", MFD_CLOEXEC), memfd_create("sv-b", MFD_CLOEXEC)};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(ftruncate(fds[i], static_cast<off_t>(kPage)), 0);
    ASSERT_NE(mmap(base + i * kPage, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[i], 0), MAP_FAILED);
  }
  memset(base, 1, 2 * kPage);
  EXPECT_TRUE(FindSharedBacking(reinterpret_cast<uint64_t>(base), kPage).has_value());
  EXPECT_TRUE(FindSharedBacking(reinterpret_cast<uint64_t>(base) + kPage, kPage).has_value());
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(base) + kPage - 8, 16).has_value());
  munmap(base, 2 * kPage);
  close(fds[0]);
  close(fds[1]);
}

TEST(SharedBackingTest, SysvSegmentIsFoundByItsId) {
  const int id = shmget(IPC_PRIVATE, 4 * kPage, IPC_CREAT | 0600);
  ASSERT_GE(id, 0);
  auto* p = static_cast<uint8_t*>(shmat(id, nullptr, 0));
  ASSERT_NE(p, reinterpret_cast<uint8_t*>(-1));
  shmctl(id, IPC_RMID, nullptr);  // as perftest --use_hugepages does: gone once detached
  memset(p, 1, 4 * kPage);
  auto b = FindSharedBacking(reinterpret_cast<uint64_t>(p) + 2 * kPage, kPage);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->file->kind(), BackingKind::kSysvShm);
  EXPECT_EQ(b->file->handle(), id);
  EXPECT_EQ(b->file->tag(), static_cast<uint64_t>(getpid()));  // the creator
  EXPECT_EQ(b->offset, 2 * kPage);
  // Beyond the segment: not one mapping.
  EXPECT_FALSE(FindSharedBacking(reinterpret_cast<uint64_t>(p) + 2 * kPage, 4 * kPage).has_value());
  shmdt(p);
}

TEST(SharedBackingTest, RecordIsPublishedAndCleared) {
  auto registry = HostRegistry::OpenForTesting("/softverbs-unit-backing-" + std::to_string(getpid()));
  ASSERT_TRUE(registry.ok()) << registry.status().rule();
  Mapped m;
  MapFile(m, memfd_create("sv-backing", MFD_CLOEXEC), 1, MAP_SHARED);
  auto b = FindSharedBacking(reinterpret_cast<uint64_t>(m.p) + 8, 8);
  ASSERT_TRUE(b.has_value());
  PublishBacking(**registry, 77, 0x4e01, *b);
  const BackingRecord& r = BackingOf(**registry, 77);
  EXPECT_EQ(r.key.load(), 0x4e01u);
  EXPECT_EQ(r.kind, BackingKind::kFile);
  EXPECT_EQ(r.handle, b->file->handle());
  EXPECT_EQ(r.offset, 8u);
  EXPECT_EQ(r.ino, m.Stat().st_ino);
  // A range inside it (a memory window): the same file, further in; only while 0x4e01 is there.
  EXPECT_TRUE(PublishBackingWithin(**registry, 77, 0x4e01, 78, 0x4f07, 100));
  const BackingRecord& w = BackingOf(**registry, 78);
  EXPECT_EQ(w.key.load(), 0x4f07u);
  EXPECT_EQ(w.handle, r.handle);
  EXPECT_EQ(w.ino, r.ino);
  EXPECT_EQ(w.offset, 108u);
  EXPECT_FALSE(PublishBackingWithin(**registry, 77, 0x4e02, 79, 0x5001, 0));  // another key
  EXPECT_EQ(BackingOf(**registry, 79).key.load(), 0u);
  ClearBacking(**registry, 77);
  EXPECT_EQ(r.key.load(), 0u);
  EXPECT_FALSE(PublishBackingWithin(**registry, 77, 0x4e01, 79, 0x5001, 0));  // cleared
  shm_unlink((*registry)->name().c_str());
  delete registry.value();
}

}  // namespace
}  // namespace softverbs::fabric
