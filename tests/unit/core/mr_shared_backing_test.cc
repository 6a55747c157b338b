// ibv_reg_mr / ibv_rereg_mr / ibv_dereg_mr publish, change and clear a registration's shared
// backing (fabric/host/shared_backing.h) together with its key.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

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
// SOFTVERBS_PRIVATE_SHARE=0, and not under ThreadSanitizer, whose background thread takes no
// signal, so the other threads are never all parked (fabric/host/world_stop.h).
bool MovesPrivateMemory() {
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  return fabric::PrivateShareEnabled();
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

}  // namespace
}  // namespace softverbs::core
