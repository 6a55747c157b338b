// The object space behind a context's cmd_fd (core/object_space.h) and the imports that use it:
// Pd::Import, ImportMr, and the refusal to register memory on a PD of another process.
#include "core/object_space.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/dm.h"
#include "core/mkey.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "transport/key_table.h"

namespace softverbs::core {
namespace {

std::shared_ptr<ObjectSpace> ObjectSpaceOpenDup(const ObjectSpace& space) {
  auto s = ObjectSpace::Open(dup(space.fd()));
  EXPECT_TRUE(s.ok()) << s.status().rule();
  return s.ok() ? s.value() : nullptr;
}

bool ObjectSpaceFdOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(ObjectSpaceTest, TwoMappingsOfOneFdShareHandlesAndObjects) {
  auto a = ObjectSpace::Create();
  ASSERT_TRUE(a.ok()) << a.status().rule();
  std::shared_ptr<ObjectSpace> b = ObjectSpaceOpenDup(*a.value());
  ASSERT_NE(b, nullptr);
  // One counter: a handle is never handed out twice in a space, whichever context asks.
  const uint32_t h1 = a.value()->NewHandle();
  const uint32_t h2 = b->NewHandle();
  EXPECT_EQ(h2, h1 + 1);

  ASSERT_TRUE(a.value()->AddPd({h1, 0x1234'0000'0007}).ok());
  std::optional<PdRecord> found = b->FindPd(h1);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->host_id, 0x1234'0000'0007u);
  EXPECT_FALSE(b->FindPd(h2).has_value());
  b->RemovePd(h1);
  EXPECT_FALSE(a.value()->FindPd(h1).has_value());

  b->AddMr(0x1a07);
  EXPECT_TRUE(a.value()->HasMr(0x1a07));
  EXPECT_FALSE(a.value()->HasMr(0x1a08));  // same key slot, another variant
  a.value()->RemoveMr(0x1a08);             // not what the slot lists: nothing removed
  EXPECT_TRUE(b->HasMr(0x1a07));
  a.value()->RemoveMr(0x1a07);
  EXPECT_FALSE(b->HasMr(0x1a07));
}

TEST(ObjectSpaceTest, PdHandlesOnTheSameHomeEntryAreAllFound) {
  auto s = ObjectSpace::Create();
  ASSERT_TRUE(s.ok());
  ObjectSpace& space = *s.value();
  const uint32_t a = 5, b = 5 + ObjectSpace::kPdEntries, c = 5 + 2 * ObjectSpace::kPdEntries;
  ASSERT_TRUE(space.AddPd({a, 1}).ok());
  ASSERT_TRUE(space.AddPd({b, 2}).ok());
  ASSERT_TRUE(space.AddPd({c, 3}).ok());
  space.RemovePd(b);  // a hole in the middle of the chain must not hide c
  EXPECT_EQ(space.FindPd(a)->host_id, 1u);
  EXPECT_FALSE(space.FindPd(b).has_value());
  EXPECT_EQ(space.FindPd(c)->host_id, 3u);
  const uint32_t d = 5 + 3 * ObjectSpace::kPdEntries;
  ASSERT_TRUE(space.AddPd({d, 4}).ok());  // reuses the hole
  EXPECT_EQ(space.FindPd(d)->host_id, 4u);
  EXPECT_EQ(space.FindPd(c)->host_id, 3u);
}

TEST(ObjectSpaceTest, DeviceMemoryIsListedForEveryMappingUntilRemoved) {
  auto a = ObjectSpace::Create();
  ASSERT_TRUE(a.ok());
  std::shared_ptr<ObjectSpace> b = ObjectSpaceOpenDup(*a.value());
  ASSERT_NE(b, nullptr);
  const uint32_t h = 7, same_home = 7 + ObjectSpace::kDmEntries;
  ASSERT_TRUE(a.value()->AddDm({h, 0xabc, 12, 34, 56, 4096}).ok());
  ASSERT_TRUE(a.value()->AddDm({same_home, 0xdef, 13, 35, 57, 8192}).ok());
  std::optional<DmRecord> r = b->FindDm(h);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(std::make_tuple(r->owner, r->fd, r->dev, r->ino, r->length),
            std::make_tuple(0xabcull, 12, 34ull, 56ull, 4096ull));
  b->RemoveDm(h);  // a hole before same_home must not hide it
  EXPECT_FALSE(a.value()->FindDm(h).has_value());
  ASSERT_TRUE(a.value()->FindDm(same_home).has_value());
  EXPECT_EQ(a.value()->FindDm(same_home)->length, 8192u);
  EXPECT_FALSE(a.value()->FindDm(h + 1).has_value());
}

TEST(ObjectSpaceTest, OpenRefusesWhatIsNotACmdFdAndKeepsIt) {
  // ibv_import_device's checks: fstat failing or no command fd -> EINVAL; a character device
  // (rdma-core: not one of the listed devices) -> ENODEV. The fd is not taken on a refusal.
  EXPECT_EQ(ObjectSpace::Open(-1).status().code(), EINVAL);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  EXPECT_EQ(ObjectSpace::Open(null_fd).status().code(), ENODEV);
  EXPECT_TRUE(ObjectSpaceFdOpen(null_fd));
  close(null_fd);

  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  EXPECT_EQ(ObjectSpace::Open(pipe_fds[0]).status().code(), EINVAL);
  EXPECT_TRUE(ObjectSpaceFdOpen(pipe_fds[0]));
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  // A file of the right size whose header is not a cmd_fd's: refused before it is mapped, and
  // left unwritten.
  auto real = ObjectSpace::Create();
  ASSERT_TRUE(real.ok());
  off_t size = lseek(real.value()->fd(), 0, SEEK_END);
  int other = memfd_create("not-softverbs", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, size), 0);
  auto r = ObjectSpace::Open(other);
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().rule().find("not the cmd_fd"), std::string::npos);
  uint64_t first = 1;
  ASSERT_EQ(pread(other, &first, sizeof first, 0), static_cast<ssize_t>(sizeof first));
  EXPECT_EQ(first, 0u);
  close(other);
}

class ImportTest : public CoreTest {
 protected:
  // A second context on this context's object space: what ibv_import_device gives.
  std::unique_ptr<Context> Imported() {
    auto c = Context::Open(ObjectSpaceOpenDup(context_->object_space()));
    EXPECT_TRUE(c.ok()) << c.status().rule();
    return c.ok() ? std::move(c.value()) : nullptr;
  }
  std::vector<uint8_t> memory_ = std::vector<uint8_t>(4096, 0);
  MrLayout Layout() const {
    const uint64_t a = reinterpret_cast<uint64_t>(memory_.data());
    return MrLayout{a, memory_.size(), a, access::kLocalWrite | access::kRemoteWrite};
  }
};

TEST_F(ImportTest, ImportedPdIsTheSamePdAndOutlivesNothing) {
  auto pd = Pd::Create(*context_);
  ASSERT_TRUE(pd.ok());
  std::unique_ptr<Context> importer = Imported();
  ASSERT_NE(importer, nullptr);
  auto imported = Pd::Import(*importer, pd.value()->handle());
  ASSERT_TRUE(imported.ok()) << imported.status().rule();
  EXPECT_EQ(imported.value()->host_id(), pd.value()->host_id());
  EXPECT_EQ(imported.value()->handle(), pd.value()->handle());
  EXPECT_FALSE(imported.value()->foreign());  // this process's own PD
  // Freeing the imported handle leaves the PD listed; freeing the PD does not.
  const uint32_t handle = pd.value()->handle();
  imported.value().reset();
  EXPECT_TRUE(Pd::Import(*importer, handle).ok());
  pd.value().reset();
  auto gone = Pd::Import(*importer, handle);
  EXPECT_EQ(gone.status().code(), ENOENT);
  EXPECT_NE(gone.status().rule().find("no PD with handle"), std::string::npos);
}

TEST_F(ImportTest, PdOfAnotherObjectSpaceIsUnknown) {
  auto pd = Pd::Create(*context_);
  ASSERT_TRUE(pd.ok());
  auto elsewhere = Context::Open();  // its own object space, as a second ibv_open_device
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(Pd::Import(*elsewhere.value(), pd.value()->handle()).status().code(), ENOENT);
}

TEST_F(ImportTest, ImportedMrReadsTheRegistration) {
  auto pd = Pd::Create(*context_);
  ASSERT_TRUE(pd.ok());
  auto mr = Mr::Register(*pd.value(), Layout());
  ASSERT_TRUE(mr.ok()) << mr.status().rule();
  std::unique_ptr<Context> importer = Imported();
  auto ipd = Pd::Import(*importer, pd.value()->handle());
  ASSERT_TRUE(ipd.ok());
  auto r = ImportMr(*ipd.value(), mr.value()->lkey());
  ASSERT_TRUE(r.ok()) << r.status().rule();
  EXPECT_EQ(r->lkey, mr.value()->lkey());
  EXPECT_EQ(r->rkey, mr.value()->rkey());
  EXPECT_EQ(r->iova, Layout().iova);
  EXPECT_EQ(r->length, memory_.size());
  // An MR registered through the importer's handle of the PD is in the space too.
  auto second = Mr::Register(*ipd.value(), Layout());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(ImportMr(*pd.value(), second.value()->lkey()).ok());
  // Unknown and deregistered handles: ENOENT.
  EXPECT_EQ(ImportMr(*ipd.value(), 0).status().code(), ENOENT);
  EXPECT_EQ(ImportMr(*ipd.value(), mr.value()->lkey() + 1).status().code(), ENOENT);
  const uint32_t key = mr.value()->lkey();
  mr.value().reset();
  EXPECT_EQ(ImportMr(*ipd.value(), key).status().code(), ENOENT);
}

TEST_F(ImportTest, MrOfAnotherObjectSpaceIsUnknown) {
  auto mr = Mr::Register(*pd_, Layout());  // pd_: on context_'s space
  ASSERT_TRUE(mr.ok());
  auto elsewhere = Context::Open();
  ASSERT_TRUE(elsewhere.ok());
  Pd other(*elsewhere.value(), elsewhere.value()->NewHandle());
  EXPECT_EQ(ImportMr(other, mr.value()->lkey()).status().code(), ENOENT);
}

TEST_F(ImportTest, MemoryOfThisProcessOnAPdOfAnother) {
  // A PD listed by another process (its host id carries that process's slot): MRs registered on
  // it here reach this process's memory (the key's owner), under that PD's id.
  const uint32_t handle = context_->NewHandle();
  const uint64_t other_slot = context_->local().slot() + 1;
  const uint64_t host_id = other_slot << 32 | 77;
  ASSERT_TRUE(context_->object_space().AddPd({handle, host_id}).ok());
  auto foreign = Pd::Import(*context_, handle);
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(foreign.value()->foreign());
  {
    auto mr = Mr::Register(*foreign.value(), Layout());
    ASSERT_TRUE(mr.ok()) << mr.status().rule();
    transport::KeyView k;
    ASSERT_TRUE(transport::KeyPin::Peek(context_->registry(), mr.value()->lkey(), &k));
    EXPECT_EQ(k.owner, context_->local().slot());
    EXPECT_EQ(k.pd, host_id);
    auto null_mr = Mr::AllocateNull(*foreign.value());
    EXPECT_TRUE(null_mr.ok());
    auto mkey = Mkey::Create(*foreign.value(), 4);
    EXPECT_TRUE(mkey.ok());
    // An MR of this process's own PD moves onto it too.
    auto own = Mr::Register(*pd_, Layout());
    ASSERT_TRUE(own.ok());
    EXPECT_TRUE(own.value()->Reregister(rereg::kChangePd, foreign.value().get(), MrLayout{}).ok());
    EXPECT_EQ(&own.value()->pd(), foreign.value().get());
    ASSERT_TRUE(transport::KeyPin::Peek(context_->registry(), own.value()->lkey(), &k));
    EXPECT_EQ(k.owner, context_->local().slot());
    EXPECT_EQ(k.pd, host_id);
  }
  EXPECT_EQ(foreign.value()->users().count(), 0);
  context_->object_space().RemovePd(handle);
}

TEST_F(ImportTest, DeviceMemoryImportsThroughASharedSpaceOnly) {
  auto dm = DeviceMemory::Allocate(*context_, 4096, 0);
  ASSERT_TRUE(dm.ok()) << dm.status().rule();
  ASSERT_TRUE(dm.value()->CopyTo(10, "softverbs", 9).ok());
  auto imported = DeviceMemory::Import(*context_, dm.value()->handle());
  ASSERT_TRUE(imported.ok()) << imported.status().rule();
  EXPECT_NE(imported.value()->base(), dm.value()->base());  // a mapping of its own
  char got[9];
  ASSERT_TRUE(imported.value()->CopyFrom(got, 10, 9).ok());
  EXPECT_EQ(std::string(got, 9), "softverbs");
  EXPECT_EQ(imported.value()->length(), 4096u);
  // Another space does not list it; a freed DM is forgotten (its importers keep their mapping).
  auto elsewhere = Context::Open();
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(DeviceMemory::Import(*elsewhere.value(), dm.value()->handle()).status().code(), ENOENT);
  const uint32_t handle = dm.value()->handle();
  dm.value().reset();
  EXPECT_EQ(DeviceMemory::Import(*context_, handle).status().code(), ENOENT);
  ASSERT_TRUE(imported.value()->CopyFrom(got, 10, 9).ok());
  EXPECT_EQ(std::string(got, 9), "softverbs");
}

}  // namespace
}  // namespace softverbs::core
