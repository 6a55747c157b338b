#include "transport/imported_key.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "core/context.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

using transport::ImportedAccess;
using transport::MoveImportedKey;

// An MR of this process used as if another process's QP had imported it: the access names a
// QP slot that is not the owner's, and the owner is reached through a PeerProcess of this very
// process (its memcpy), or one of a child that exited.
class ImportedKeyTest : public CoreTest {
 protected:
  std::unique_ptr<Mr> Register(uint32_t access) {
    MrLayout l{reinterpret_cast<uint64_t>(buf_), sizeof(buf_), 0x1000, access};
    return std::move(Mr::Register(*pd_, l).value());
  }
  ImportedAccess Access(const Mr& mr, uint64_t iova, bool writes) const {
    return {mr.lkey(), pd_->host_id(), context_->local().slot() + 1, 0x123, iova, writes};
  }
  static Result<std::shared_ptr<fabric::Peer>> Self(uint32_t slot) {
    auto process = fabric::PeerProcess::Open(fabric::ProcessToken::Self());
    if (!process.ok()) return process.status();
    return std::make_shared<fabric::Peer>(slot, std::move(process.value()));
  }
  Status Move(const ImportedAccess& a, void* bytes, size_t n) {
    const iovec v{bytes, n};
    return MoveImportedKey(context_->registry(), Self, a, &v, 1);
  }
  alignas(4096) uint8_t buf_[256] = {};
};

TEST_F(ImportedKeyTest, WritesAndReadsTheOwnersBytesAtTheIova) {
  auto mr = Register(access::kLocalWrite);
  uint8_t in[16];
  for (int i = 0; i < 16; ++i) in[i] = static_cast<uint8_t>(0x40 + i);
  ASSERT_TRUE(Move(Access(*mr, 0x1000 + 100, true), in, sizeof in).ok());
  EXPECT_EQ(memcmp(buf_ + 100, in, sizeof in), 0);
  EXPECT_EQ(buf_[99], 0);
  EXPECT_EQ(buf_[116], 0);
  uint8_t out[16] = {};
  ASSERT_TRUE(Move(Access(*mr, 0x1000 + 100, false), out, sizeof out).ok());
  EXPECT_EQ(memcmp(out, in, sizeof in), 0);
}

TEST_F(ImportedKeyTest, AWriteNeedsLocalWriteAReadDoesNot) {
  auto mr = Register(access::kRemoteRead);
  uint8_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Status s = Move(Access(*mr, 0x1000, true), in, sizeof in);
  EXPECT_EQ(s.code(), EACCES);
  EXPECT_NE(s.rule().find("IBV_ACCESS_LOCAL_WRITE"), std::string::npos) << s.rule();
  EXPECT_EQ(buf_[0], 0);
  EXPECT_TRUE(Move(Access(*mr, 0x1000, false), in, sizeof in).ok());
  EXPECT_EQ(transport::CheckImportedKey(context_->registry(), Access(*mr, 0x1000, true), 8).code(), EACCES);
}

TEST_F(ImportedKeyTest, RangesLeavingTheMrAndOtherPdsAreRefused) {
  auto mr = Register(access::kLocalWrite);
  uint8_t in[16] = {};
  EXPECT_EQ(Move(Access(*mr, 0x1000 + 250, true), in, sizeof in).code(), EACCES);
  EXPECT_EQ(Move(Access(*mr, 0xff8, true), in, sizeof in).code(), EACCES);
  EXPECT_EQ(Move(Access(*mr, UINT64_MAX - 4, false), in, sizeof in).code(), EACCES);
  ImportedAccess other = Access(*mr, 0x1000, true);
  other.pd ^= 1;
  EXPECT_EQ(Move(other, in, sizeof in).code(), EACCES);
  EXPECT_FALSE(transport::IsImportedKey(context_->registry(), mr->lkey(), other.pd, other.self_slot));
  // The owner's own QP: not an import (its keys resolve as any), refused here.
  ImportedAccess own = Access(*mr, 0x1000, true);
  own.self_slot = context_->local().slot();
  EXPECT_EQ(Move(own, in, sizeof in).code(), EINVAL);
  EXPECT_FALSE(transport::IsImportedKey(context_->registry(), mr->lkey(), own.pd, own.self_slot));
  EXPECT_TRUE(transport::IsImportedKey(context_->registry(), mr->lkey(), own.pd, own.self_slot + 1));
}

TEST_F(ImportedKeyTest, ADeregisteredMrIsGone) {
  auto mr = Register(access::kLocalWrite);
  const ImportedAccess a = Access(*mr, 0x1000, true);
  mr.reset();
  uint8_t in[8] = {9};
  EXPECT_EQ(Move(a, in, sizeof in).code(), ENOENT);
  EXPECT_EQ(transport::CheckImportedKey(context_->registry(), a, sizeof in).code(), ENOENT);
  EXPECT_EQ(buf_[0], 0);
}

TEST_F(ImportedKeyTest, AnOwnerThatDiedIsNotWritten) {
  auto mr = Register(access::kLocalWrite);
  uint8_t in[8] = {9};
  // The owner's process slot names nobody any more.
  auto gone = [](uint32_t) -> Result<std::shared_ptr<fabric::Peer>> { return Status(ESRCH, "slot free"); };
  const iovec v{in, sizeof in};
  EXPECT_EQ(MoveImportedKey(context_->registry(), gone, Access(*mr, 0x1000, true), &v, 1).code(), ESRCH);
  // The owner's process exited after it was reached (a pidfd, or its token, says so).
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    (void)!read(ready[0], &c, 1);
    _exit(0);
  }
  auto process = fabric::PeerProcess::Open(fabric::ProcessToken::Of(child));
  ASSERT_TRUE(process.ok()) << process.status().rule();
  auto peer = std::make_shared<fabric::Peer>(7, std::move(process.value()));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  auto dead = [&peer](uint32_t) -> Result<std::shared_ptr<fabric::Peer>> { return peer; };
  EXPECT_EQ(MoveImportedKey(context_->registry(), dead, Access(*mr, 0x1000, true), &v, 1).code(), ESRCH);
  EXPECT_EQ(buf_[0], 0);
}

}  // namespace
}  // namespace softverbs::core
