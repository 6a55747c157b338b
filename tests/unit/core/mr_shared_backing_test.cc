// ibv_reg_mr / ibv_rereg_mr / ibv_dereg_mr publish, change and clear a registration's shared
// backing (fabric/host/shared_backing.h) together with its key.
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/dm.h"
#include "core/mr.h"
#include "fabric/host/private_share.h"
#include "fabric/host/shared_backing.h"
#include "tests/unit/core/test_context.h"
#include "transport/key_table.h"

namespace softverbs::core {
namespace {

class MrSharedBackingTest : public CoreTest {
 protected:
  void SetUp() override {
    fd_ = memfd_create("sv-mr", MFD_CLOEXEC);
    ASSERT_EQ(ftruncate(fd_, 4 * page_), 0);
    void* p = mmap(nullptr, 4 * page_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    ASSERT_NE(p, MAP_FAILED);
    file_ = static_cast<uint8_t*>(p);
  }
  void TearDown() override {
    munmap(file_, 4 * page_);
    close(fd_);
  }
  // What initiators see of `key`: its access bits, and the record next to it if it names it.
  uint32_t PublishedAccess(uint32_t key) {
    transport::KeyView v;
    EXPECT_TRUE(transport::KeyPin::Peek(context_->registry(), key, &v));
    return v.access;
  }
  const fabric::BackingRecord& Record(uint32_t key) {
    return fabric::BackingOf(context_->registry(), transport::KeySlot(key));
  }
  const size_t page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int fd_ = -1;
  uint8_t* file_ = nullptr;
  std::vector<uint8_t> private_ = std::vector<uint8_t>(8192, 1);
};

TEST_F(MrSharedBackingTest, RegistrationOnASharedFileIsMarkedAndDescribed) {
  constexpr uint32_t kAccess = access::kLocalWrite | access::kRemoteWrite;
  const uint64_t addr = reinterpret_cast<uint64_t>(file_) + page_ + 24;
  auto mr = Mr::Register(*pd_, MrLayout{addr, 1000, addr, kAccess});
  ASSERT_TRUE(mr.ok()) << mr.status().rule();
  const uint32_t key = (*mr)->lkey();
  EXPECT_EQ(PublishedAccess(key), kAccess | transport::kSharedBacking);
  EXPECT_EQ((*mr)->layout().access, kAccess);  // the application's view is unchanged
  const fabric::BackingRecord& r = Record(key);
  EXPECT_EQ(r.key.load(), key);
  EXPECT_EQ(r.kind, fabric::BackingKind::kFile);
  EXPECT_EQ(r.offset, page_ + 24);
  struct stat st {};
  ASSERT_EQ(fstat(fd_, &st), 0);
  EXPECT_EQ(r.ino, st.st_ino);
  mr.value().reset();  // ibv_dereg_mr
  EXPECT_EQ(r.key.load(), 0u);
}

// Whether registrations of private memory are moved into a memfd here: not with
// SOFTVERBS_PRIVATE_SHARE=0, and under ThreadSanitizer not once the process has another thread:
// TSan's background thread (started with the first other thread) takes no signal, so the other
// threads are never all parked (fabric/host/world_stop.h). A process alone needs no stop.
bool MovesPrivateMemory() {
  if (!fabric::PrivateShareEnabled()) return false;
#if defined(__SANITIZE_THREAD__)
  size_t tasks = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) tasks += e->d_name[0] != '.';
    closedir(d);
  }
  return tasks == 1;
#else
  return true;
#endif
}

// Private memory is moved into a memfd (issue 16), and then marked and described like any
// shared file; with SOFTVERBS_PRIVATE_SHARE=0 it is neither.
TEST_F(MrSharedBackingTest, PrivateMemoryIsMarkedOnlyWhenMoved) {
  const uint64_t addr = reinterpret_cast<uint64_t>(private_.data());
  auto mr = Mr::Register(*pd_, MrLayout{addr, private_.size(), addr, access::kLocalWrite});
  ASSERT_TRUE(mr.ok());
  const bool moved = MovesPrivateMemory();
  EXPECT_EQ(PublishedAccess((*mr)->lkey()), access::kLocalWrite | (moved ? transport::kSharedBacking : 0));
  EXPECT_EQ(Record((*mr)->lkey()).key.load() == (*mr)->lkey(), moved);
  if (moved) {
    EXPECT_EQ(Record((*mr)->lkey()).offset, addr % 4096);
  }
}

TEST_F(MrSharedBackingTest, ReregisterFollowsTheNewTranslation) {
  const uint64_t shared = reinterpret_cast<uint64_t>(file_);
  const uint64_t priv = reinterpret_cast<uint64_t>(private_.data());
  auto mr = std::move(Mr::Register(*pd_, MrLayout{priv, 100, priv, access::kLocalWrite}).value());
  const uint32_t key = mr->lkey();
  const bool moved = MovesPrivateMemory();  // private memory is moved into a memfd
  EXPECT_EQ((PublishedAccess(key) & transport::kSharedBacking) != 0, moved);
  // Onto the shared file: marked, described.
  ASSERT_TRUE(mr->Reregister(rereg::kChangeTranslation, nullptr, MrLayout{shared + 8, 64, 0, 0}).ok());
  EXPECT_TRUE(PublishedAccess(key) & transport::kSharedBacking);
  EXPECT_EQ(Record(key).key.load(), key);
  EXPECT_EQ(Record(key).offset, 8u);
  // An access change keeps the backing.
  ASSERT_TRUE(mr->Reregister(rereg::kChangeAccess, nullptr,
                             MrLayout{0, 0, 0, access::kLocalWrite | access::kRemoteRead}).ok());
  EXPECT_EQ(PublishedAccess(key), access::kLocalWrite | access::kRemoteRead | transport::kSharedBacking);
  // Back to private memory: moved again, or neither mark nor record.
  ASSERT_TRUE(mr->Reregister(rereg::kChangeTranslation, nullptr, MrLayout{priv, 100, 0, 0}).ok());
  EXPECT_EQ((PublishedAccess(key) & transport::kSharedBacking) != 0, moved);
  EXPECT_EQ(Record(key).key.load(), moved ? key : 0u);
}

// "rw-s" / "rw-p": how the mapping holding `p` is shared now (private memory moved into a memfd
// is MAP_SHARED while a registration holds the move).
bool MrBackingMappedShared(const void* p) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  bool shared = false;
  const auto at = reinterpret_cast<uint64_t>(p);
  while (f != nullptr && fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && at >= lo && at < hi) shared = perms[3] == 's';
  }
  if (f != nullptr) fclose(f);
  return shared;
}

// Page-aligned private anonymous memory of its own (a vector's heap pages may hold other MRs').
struct MrBackingPages {
  explicit MrBackingPages(size_t n) : size(n * static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (base != nullptr) memset(base, 0x3c, size);
  }
  ~MrBackingPages() {
    if (base != nullptr) munmap(base, size);
  }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(base); }
  size_t size;
  uint8_t* base;
};

// ODP MRs follow the address space at each access: their pages are never moved, and while an
// ODP key covers pages no other registration moves them (a peer's process_vm_writev through
// the ODP key could be in flight), nor moves them back.
TEST_F(MrSharedBackingTest, OdpMrsAreNeverMovedAndHoldBackMoves) {
  if (!MovesPrivateMemory()) GTEST_SKIP() << "no move here (SOFTVERBS_PRIVATE_SHARE=0 or ThreadSanitizer)";
  MrBackingPages pages(4);
  ASSERT_NE(pages.base, nullptr);
  const uint64_t at = pages.addr();
  const size_t lingering = fabric::PrivateShareStats().lingering;
  constexpr uint32_t kOdp = access::kLocalWrite | access::kRemoteWrite | access::kOnDemand;
  {
    auto odp = Mr::Register(*pd_, MrLayout{at, pages.size, at, kOdp});
    ASSERT_TRUE(odp.ok()) << odp.status().rule();
    EXPECT_EQ(PublishedAccess((*odp)->lkey()) & transport::kSharedBacking, 0u);
    EXPECT_FALSE(MrBackingMappedShared(pages.base));
    auto plain = Mr::Register(*pd_, MrLayout{at + 100, 1000, at + 100, access::kLocalWrite});
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(PublishedAccess((*plain)->lkey()) & transport::kSharedBacking, 0u) << "moved under an ODP key";
    EXPECT_FALSE(MrBackingMappedShared(pages.base));
  }
  // Moved first, then an ODP MR over the same pages: the ODP key reaches them as they are (no
  // backing), and the move stays while that key lives; once it is gone the pages are private.
  auto plain = Mr::Register(*pd_, MrLayout{at, 2 * page_, at, access::kLocalWrite});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(PublishedAccess((*plain)->lkey()) & transport::kSharedBacking);
  EXPECT_TRUE(MrBackingMappedShared(pages.base));
  auto odp = Mr::Register(*pd_, MrLayout{at + page_, page_, at + page_, kOdp});
  ASSERT_TRUE(odp.ok());
  EXPECT_EQ(PublishedAccess((*odp)->lkey()) & transport::kSharedBacking, 0u);
  plain.value().reset();  // ibv_dereg_mr: the ODP key still touches the pages
  EXPECT_TRUE(MrBackingMappedShared(pages.base));
  odp.value().reset();  // the last key on them: moved back
  EXPECT_FALSE(MrBackingMappedShared(pages.base));
  EXPECT_EQ(pages.base[page_ + 7], 0x3c);
  // ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS) onto ODP: the move is dropped with the backing.
  auto mr = Mr::Register(*pd_, MrLayout{at, page_, at, access::kLocalWrite | access::kRemoteWrite});
  ASSERT_TRUE(mr.ok());
  EXPECT_TRUE(MrBackingMappedShared(pages.base));
  ASSERT_TRUE((*mr)->Reregister(rereg::kChangeAccess, nullptr, MrLayout{0, 0, 0, kOdp}).ok());
  EXPECT_EQ(PublishedAccess((*mr)->lkey()), kOdp);
  EXPECT_EQ(Record((*mr)->lkey()).key.load(), 0u);
  // Moved back while the key was withdrawn for the change: the ODP key reaches private pages.
  EXPECT_FALSE(MrBackingMappedShared(pages.base));
  EXPECT_EQ(pages.base[5], 0x3c);
  mr.value().reset();
  EXPECT_EQ(fabric::PrivateShareStats().lingering, lingering);
}

// An implicit ODP MR covers every address: no registration of the process is moved meanwhile.
TEST_F(MrSharedBackingTest, ImplicitOdpKeepsEveryRegistrationWhereItIs) {
  if (!MovesPrivateMemory()) GTEST_SKIP() << "no move here (SOFTVERBS_PRIVATE_SHARE=0 or ThreadSanitizer)";
  MrBackingPages pages(2);
  ASSERT_NE(pages.base, nullptr);
  const uint64_t at = pages.addr();
  {
    auto implicit = Mr::Register(*pd_, MrLayout{0, UINT64_MAX, 0, access::kLocalWrite | access::kOnDemand});
    ASSERT_TRUE(implicit.ok()) << implicit.status().rule();
    auto plain = Mr::Register(*pd_, MrLayout{at, page_, at, access::kLocalWrite});
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(PublishedAccess((*plain)->lkey()) & transport::kSharedBacking, 0u);
    EXPECT_FALSE(MrBackingMappedShared(pages.base));
  }
  auto plain = Mr::Register(*pd_, MrLayout{at, page_, at, access::kLocalWrite});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(PublishedAccess((*plain)->lkey()) & transport::kSharedBacking);  // the implicit MR is gone
}

// Device memory is the device's own memfd: its MRs are reached through it, nothing is moved.
TEST_F(MrSharedBackingTest, DeviceMemoryMrIsReachedThroughItsOwnFile) {
  auto dm = DeviceMemory::Allocate(*context_, 8192, 0);
  ASSERT_TRUE(dm.ok());
  const size_t moved = fabric::PrivateShareStats().moved;
  MrLayout l{reinterpret_cast<uint64_t>((*dm)->base()) + 12, 100, 0,
             access::kLocalWrite | access::kRemoteWrite | access::kZeroBased, true};
  auto mr = Mr::Register(*pd_, l);
  ASSERT_TRUE(mr.ok()) << mr.status().rule();
  EXPECT_TRUE(PublishedAccess((*mr)->lkey()) & transport::kSharedBacking);
  EXPECT_EQ(Record((*mr)->lkey()).offset, 12u);
  EXPECT_EQ(fabric::PrivateShareStats().moved, moved);
}

// An MR over moved pages that are only partly its own stays on the process_vm path (it reaches
// the same bytes) and keeps them moved after the first MR goes; its own deregistration moves
// them back.
TEST_F(MrSharedBackingTest, PartlyOverlappingMrHoldsTheMoveUntilItGoes) {
  if (!MovesPrivateMemory()) GTEST_SKIP() << "no move here (SOFTVERBS_PRIVATE_SHARE=0 or ThreadSanitizer)";
  MrBackingPages pages(4);
  ASSERT_NE(pages.base, nullptr);
  const uint64_t at = pages.addr();
  auto first = Mr::Register(*pd_, MrLayout{at, 2 * page_, at, access::kLocalWrite});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(PublishedAccess((*first)->lkey()) & transport::kSharedBacking);
  auto second = Mr::Register(*pd_, MrLayout{at + page_, 2 * page_, at + page_, access::kLocalWrite});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(PublishedAccess((*second)->lkey()) & transport::kSharedBacking, 0u);
  EXPECT_FALSE(MrBackingMappedShared(pages.base + 2 * page_));  // its own page was not moved
  first.value().reset();
  EXPECT_TRUE(MrBackingMappedShared(pages.base));  // the second key still touches the move
  second.value().reset();
  EXPECT_FALSE(MrBackingMappedShared(pages.base));
  EXPECT_EQ(pages.base[page_ + 1], 0x3c);
}

}  // namespace
}  // namespace softverbs::core
