// Indirect keys: the layout walk (MR_LIST, INTERLEAVED) and the resolution of a key's byte range
// into pieces of the owner's memory through core::Mkey's UMR payload.
#include "transport/indirect_key.h"

#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/mkey.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::transport {
namespace {

using Piece = std::tuple<uint32_t, uint64_t, uint64_t>;  // entry, addr, length

std::vector<Piece> Walk(const LayoutHeader& h, const std::vector<LayoutEntry>& e, uint64_t off, uint64_t len,
                        bool* ok = nullptr) {
  std::vector<Piece> out;
  bool r = WalkLayout(h, e.data(), off, len, [&](uint32_t i, uint64_t a, uint64_t n) { out.emplace_back(i, a, n); });
  if (ok) *ok = r;
  return out;
}

LayoutHeader Header(const std::vector<LayoutEntry>& e, uint32_t repeat) {
  LayoutHeader h;
  h.entries = static_cast<uint32_t>(e.size());
  h.repeat_count = repeat;
  EXPECT_TRUE(ComputeLayoutLengths(h, e.data()));
  return h;
}

TEST(LayoutWalk, ListIsTheConcatenationOfItsSges) {
  std::vector<LayoutEntry> e = {{0x1000, 10, 0, 1, 0}, {0x2000, 5, 0, 2, 0}, {0x3000, 7, 0, 3, 0}};
  LayoutHeader h = Header(e, 1);
  EXPECT_EQ(h.total_length, 22u);
  EXPECT_EQ(Walk(h, e, 0, 22), (std::vector<Piece>{{0, 0x1000, 10}, {1, 0x2000, 5}, {2, 0x3000, 7}}));
  // A range inside one entry, and one across an entry boundary.
  EXPECT_EQ(Walk(h, e, 3, 4), (std::vector<Piece>{{0, 0x1003, 4}}));
  EXPECT_EQ(Walk(h, e, 8, 9), (std::vector<Piece>{{0, 0x1008, 2}, {1, 0x2000, 5}, {2, 0x3000, 2}}));
  // Exactly at an entry's start; the last byte.
  EXPECT_EQ(Walk(h, e, 10, 1), (std::vector<Piece>{{1, 0x2000, 1}}));
  EXPECT_EQ(Walk(h, e, 21, 1), (std::vector<Piece>{{2, 0x3006, 1}}));
}

TEST(LayoutWalk, InterleavedRepeatsThePatternAdvancingByCountPlusSkip) {
  // mlx5dv_wr_post(3): bytes_count of data then bytes_skip of padding, repeated repeat_count times.
  std::vector<LayoutEntry> e = {{0x1000, 4, 12, 1, 0}, {0x8000, 2, 0, 2, 0}};
  LayoutHeader h = Header(e, 3);
  EXPECT_EQ(h.pattern_length, 6u);
  EXPECT_EQ(h.total_length, 18u);
  EXPECT_EQ(Walk(h, e, 0, 18), (std::vector<Piece>{{0, 0x1000, 4}, {1, 0x8000, 2}, {0, 0x1010, 4}, {1, 0x8002, 2},
                                                   {0, 0x1020, 4}, {1, 0x8004, 2}}));
  // Starting mid-repetition and wrapping into the next one.
  EXPECT_EQ(Walk(h, e, 5, 4), (std::vector<Piece>{{1, 0x8001, 1}, {0, 0x1010, 3}}));
  EXPECT_EQ(Walk(h, e, 12, 6), (std::vector<Piece>{{0, 0x1020, 4}, {1, 0x8004, 2}}));
}

TEST(LayoutWalk, ZeroLengthEntriesAreSkipped) {
  std::vector<LayoutEntry> e = {{0x1000, 0, 0, 1, 0}, {0x2000, 3, 0, 2, 0}, {0x3000, 0, 0, 3, 0}};
  LayoutHeader h = Header(e, 2);
  EXPECT_EQ(Walk(h, e, 0, 6), (std::vector<Piece>{{1, 0x2000, 3}, {1, 0x2003, 3}}));
}

TEST(LayoutWalk, BeyondTheEndIsRefusedWithoutPieces) {
  std::vector<LayoutEntry> e = {{0x1000, 8, 8, 1, 0}};
  LayoutHeader h = Header(e, 2);  // 16 bytes
  bool ok = true;
  EXPECT_TRUE(Walk(h, e, 10, 7, &ok).empty());
  EXPECT_FALSE(ok);
  EXPECT_TRUE(Walk(h, e, 17, 0, &ok).empty());
  EXPECT_FALSE(ok);
  EXPECT_TRUE(Walk(h, e, UINT64_MAX, 2, &ok).empty());
  EXPECT_FALSE(ok);
  EXPECT_TRUE(Walk(h, e, 16, 0, &ok).empty());  // an empty range at the end is inside
  EXPECT_TRUE(ok);
  EXPECT_EQ(Walk(h, e, 0, 16, &ok).size(), 2u);
  EXPECT_TRUE(ok);
}

TEST(LayoutWalk, LengthsThatOverflowAreRefused) {
  std::vector<LayoutEntry> e = {{0, 0xffffffffu, 0, 1, 0}, {0, 0xffffffffu, 0, 1, 0}};
  LayoutHeader h;
  h.entries = 1;
  h.repeat_count = 0xffffffffu;
  EXPECT_TRUE(ComputeLayoutLengths(h, e.data()));  // (2^32 - 1)^2 fits
  EXPECT_EQ(h.total_length, 0xfffffffe00000001ull);
  h.entries = 2;
  EXPECT_FALSE(ComputeLayoutLengths(h, e.data()));  // about 2^65 does not
}

TEST(CopyInChunks, SplitsLongListsKeepingBytesInStep) {
  std::vector<uint8_t> src(3000), dst(3000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  std::vector<iovec> local, remote;
  for (size_t i = 0; i < 3000; i += 1) local.push_back({&src[i], 1});                // 3000 pieces
  for (size_t i = 0; i < 3000; ++i) remote.push_back({&dst[2999 - i], 1});         // backwards
  size_t calls = 0;
  Status s = CopyInChunks(local.data(), local.size(), remote.data(), remote.size(),
                          [&](const iovec* l, size_t ln, const iovec* r, size_t rn) {
                            EXPECT_LE(ln, kMaxIov);
                            EXPECT_LE(rn, kMaxIov);
                            ++calls;
                            size_t li = 0, lo = 0;
                            for (size_t j = 0; j < rn; ++j)
                              for (size_t k = 0; k < r[j].iov_len; ++k) {
                                static_cast<uint8_t*>(r[j].iov_base)[k] = static_cast<uint8_t*>(l[li].iov_base)[lo];
                                if (++lo == l[li].iov_len) ++li, lo = 0;
                              }
                            return Status::Ok();
                          });
  ASSERT_TRUE(s.ok());
  EXPECT_GT(calls, 1u);
  for (size_t i = 0; i < 3000; ++i) ASSERT_EQ(dst[2999 - i], src[i]) << i;
}

// --- resolution through core::Mkey ------------------------------------------------------------

class IndirectKeyTest : public core::CoreTest {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < sizeof a_; ++i) a_[i] = static_cast<uint8_t>(i), b_[i] = static_cast<uint8_t>(0x80 + i);
    mr_a_ = Register(a_, core::access::kLocalWrite);
    mr_b_ = Register(b_, core::access::kLocalWrite);
  }
  std::unique_ptr<core::Mr> Register(uint8_t* buf, uint32_t access) {
    core::MrLayout l{reinterpret_cast<uint64_t>(buf), sizeof a_, reinterpret_cast<uint64_t>(buf), access};
    return std::move(core::Mr::Register(*pd_, l).value());
  }
  // Runs the UMR the builders would post, as the send queue executes it.
  Status Configure(core::Mkey& mkey, uint32_t access, bool interleaved, uint32_t repeat,
                   const std::vector<LayoutEntry>& entries) {
    return Run(mkey, core::UmrSpec{true, access, true, interleaved, repeat, entries});
  }
  Status Run(core::Mkey& mkey, const core::UmrSpec& spec) {
    auto payload = mkey.BuildUmr(*pd_, spec);
    if (!payload.ok()) return payload.status();
    UmrRequest req;
    memcpy(&req, payload->data(), sizeof req);
    IndirectKey::Find(mkey.key())->Configure(req, reinterpret_cast<const LayoutEntry*>(payload->data() + sizeof req), nullptr);
    return Status::Ok();
  }
  bool Resolve(uint32_t key, uint64_t addr, uint64_t length, const KeyRule& rule, std::vector<uint8_t>* bytes) {
    PinnedPieces pieces;
    auto& local = context_->local();
    if (!ResolveKey(context_->registry(), key, addr, length, length, rule,
                    [&](fabric::SharedRef r) { return local.At(r); }, &pieces))
      return false;
    bytes->clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      auto* p = static_cast<uint8_t*>(pieces.data()[i].iov_base);
      bytes->insert(bytes->end(), p, p + pieces.data()[i].iov_len);
    }
    return true;
  }
  KeyRule Rule(uint32_t access = 0, bool writes = false) {
    return {context_->local().slot(), pd_->host_id(), access, writes};
  }
  uint64_t A(size_t off) { return reinterpret_cast<uint64_t>(a_) + off; }
  uint64_t B(size_t off) { return reinterpret_cast<uint64_t>(b_) + off; }

  uint8_t a_[64];
  uint8_t b_[64];
  std::unique_ptr<core::Mr> mr_a_, mr_b_;
};

TEST_F(IndirectKeyTest, AnUnconfiguredMkeyResolvesNothing) {
  auto mkey = core::Mkey::Create(*pd_, 3);
  ASSERT_TRUE(mkey.ok());
  EXPECT_EQ((*mkey)->max_entries(), 4u);  // rounded up: "greater than or equal to the value requested"
  std::vector<uint8_t> got;
  EXPECT_FALSE(Resolve((*mkey)->key(), 0, 1, Rule(), &got));
}

TEST_F(IndirectKeyTest, ListAndInterleavedResolveByteForByte) {
  auto mkey = std::move(core::Mkey::Create(*pd_, 4).value());
  ASSERT_TRUE(Configure(*mkey, core::access::kLocalWrite | core::access::kRemoteRead, false, 1,
                        {{A(10), 5, 0, mr_a_->lkey(), 0}, {B(0), 3, 0, mr_b_->lkey(), 0}, {A(0), 2, 0, mr_a_->lkey(), 0}})
                  .ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE(Resolve(mkey->key(), 0, 10, Rule(core::access::kRemoteRead), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{10, 11, 12, 13, 14, 0x80, 0x81, 0x82, 0, 1}));
  ASSERT_TRUE(Resolve(mkey->key(), 4, 3, Rule(), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{14, 0x80, 0x81}));
  EXPECT_FALSE(Resolve(mkey->key(), 4, 7, Rule(), &got));   // one byte beyond the end
  EXPECT_FALSE(Resolve(mkey->key(), 0, 1, Rule(core::access::kRemoteWrite), &got));  // not granted

  // Reconfigured as INTERLEAVED: 2 bytes of a_ every 8, then 1 byte of b_ every 2, 3 times.
  ASSERT_TRUE(Configure(*mkey, core::access::kLocalWrite, true, 3,
                        {{A(0), 2, 6, mr_a_->lkey(), 0}, {B(0), 1, 1, mr_b_->lkey(), 0}})
                  .ok());
  ASSERT_TRUE(Resolve(mkey->key(), 0, 9, Rule(core::access::kLocalWrite, true), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{0, 1, 0x80, 8, 9, 0x82, 16, 17, 0x84}));
  EXPECT_FALSE(Resolve(mkey->key(), 9, 1, Rule(), &got));
}

TEST_F(IndirectKeyTest, PiecesAreCheckedAgainstTheirMrAtAccessTime) {
  auto mkey = std::move(core::Mkey::Create(*pd_, 2).value());
  auto ro = Register(b_, 0);  // an MR without LOCAL_WRITE over b_
  ASSERT_TRUE(Configure(*mkey, core::access::kLocalWrite, false, 1,
                        {{A(0), 4, 0, mr_a_->lkey(), 0}, {B(0), 4, 0, ro->lkey(), 0}})
                  .ok());
  std::vector<uint8_t> got;
  EXPECT_TRUE(Resolve(mkey->key(), 0, 8, Rule(), &got));                              // reading: fine
  EXPECT_TRUE(Resolve(mkey->key(), 0, 4, Rule(core::access::kLocalWrite, true), &got));    // writes a_ only
  EXPECT_FALSE(Resolve(mkey->key(), 2, 4, Rule(core::access::kLocalWrite, true), &got));   // reaches ro
  ro.reset();  // the underlying MR is gone: accesses reaching it fail, the rest still work
  EXPECT_FALSE(Resolve(mkey->key(), 0, 8, Rule(), &got));
  EXPECT_TRUE(Resolve(mkey->key(), 0, 4, Rule(), &got));
  // Another process's rule (or PD) does not match the key.
  KeyRule other = Rule();
  other.pd ^= 1;
  EXPECT_FALSE(Resolve(mkey->key(), 0, 4, other, &got));
}

TEST_F(IndirectKeyTest, UmrRefusals) {
  auto mkey = std::move(core::Mkey::Create(*pd_, 4).value());
  const uint32_t la = mr_a_->lkey();
  auto code = [&](uint32_t access, bool inter, uint32_t rep, std::vector<LayoutEntry> e) {
    return Configure(*mkey, access, inter, rep, e).code();
  };
  EXPECT_EQ(code(core::access::kRemoteWrite, false, 1, {{A(0), 4, 0, la, 0}}), EINVAL);  // REMOTE_WRITE w/o LOCAL_WRITE
  EXPECT_EQ(code(core::access::kMwBind, false, 1, {{A(0), 4, 0, la, 0}}), EINVAL);
  EXPECT_EQ(code(0, false, 1, std::vector<LayoutEntry>(5, {A(0), 1, 0, la, 0})), ENOMEM);  // > max_entries (mlx5)
  EXPECT_EQ(code(0, false, 1, std::vector<LayoutEntry>(4, {A(0), 1, 0, la, 0})), 0);
  EXPECT_EQ(code(0, true, 1, std::vector<LayoutEntry>(4, {A(0), 1, 0, la, 0})), ENOMEM);  // needs n + 1
  EXPECT_EQ(code(0, true, 1, std::vector<LayoutEntry>(3, {A(0), 1, 0, la, 0})), 0);
  EXPECT_EQ(code(0, true, 0, {{A(0), 1, 0, la, 0}}), EINVAL);                 // repeat_count 0
  EXPECT_EQ(code(0, false, 1, {}), EINVAL);                                   // no entries
  EXPECT_EQ(code(0, false, 1, {{A(60), 5, 0, la, 0}}), EINVAL);               // beyond the MR
  EXPECT_EQ(code(0, true, 8, {{A(0), 4, 4, la, 0}}), 0);                      // 8 repetitions end at 60
  EXPECT_EQ(code(0, true, 9, {{A(0), 4, 4, la, 0}}), EINVAL);                 // the 9th leaves the MR
  EXPECT_EQ(code(0, false, 1, {{A(0), 4, 0, 0xdead00, 0}}), EINVAL);          // no such MR
  EXPECT_EQ(code(0, false, 1, {{0, 4, 0, mkey->key(), 0}}), EINVAL);          // an mkey is no MR
  core::Pd other(*context_, context_->NewHandle());
  EXPECT_EQ(mkey->BuildUmr(other, core::UmrSpec{true, 0, true, false, 1, {{A(0), 4, 0, la, 0}}}).status().code(),
            EINVAL);  // QP of another PD
  EXPECT_EQ(core::Mkey::Create(*pd_, 0).status().code(), EINVAL);
  EXPECT_EQ(core::Mkey::Create(*pd_, core::Mkey::kMaxEntries + 1).status().code(), EINVAL);
}

// mlx5dv_wr_mkey_configure(3): a configuration WR changes only what its setters name.
TEST_F(IndirectKeyTest, AConfigurationKeepsWhatItsSettersDoNotSet) {
  auto mkey = std::move(core::Mkey::Create(*pd_, 4).value());
  std::vector<uint8_t> got;
  // Access flags alone, before any layout: the key covers nothing yet.
  ASSERT_TRUE(Run(*mkey, core::UmrSpec{true, core::access::kLocalWrite | core::access::kRemoteRead}).ok());
  EXPECT_FALSE(Resolve(mkey->key(), 0, 1, Rule(), &got));
  // A layout alone: the access flags stay.
  ASSERT_TRUE(Run(*mkey, core::UmrSpec{false, 0, true, false, 1, {{A(4), 4, 0, mr_a_->lkey(), 0}}}).ok());
  ASSERT_TRUE(Resolve(mkey->key(), 0, 4, Rule(core::access::kRemoteRead), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{4, 5, 6, 7}));
  // Access flags alone again: the layout stays, the new flags replace the old ones.
  ASSERT_TRUE(Run(*mkey, core::UmrSpec{true, core::access::kLocalWrite}).ok());
  EXPECT_FALSE(Resolve(mkey->key(), 0, 4, Rule(core::access::kRemoteRead), &got));
  ASSERT_TRUE(Resolve(mkey->key(), 1, 3, Rule(core::access::kLocalWrite, true), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{5, 6, 7}));
  // Nothing set (num_setters 0): the mkey is published again unchanged.
  ASSERT_TRUE(Run(*mkey, core::UmrSpec{}).ok());
  ASSERT_TRUE(Resolve(mkey->key(), 0, 4, Rule(core::access::kLocalWrite), &got));
  EXPECT_EQ(got, (std::vector<uint8_t>{4, 5, 6, 7}));
}

TEST_F(IndirectKeyTest, ReconfiguringWaitsForAccessesInFlight) {
  auto mkey = std::move(core::Mkey::Create(*pd_, 2).value());
  ASSERT_TRUE(Configure(*mkey, 0, false, 1, {{A(0), 4, 0, mr_a_->lkey(), 0}}).ok());
  auto pin = KeyPin::Acquire(context_->registry(), mkey->key());
  ASSERT_TRUE(pin);
  EXPECT_TRUE(pin.view().indirect());
  EXPECT_EQ(pin.view().length, 4u);
  std::atomic<bool> done{false};
  std::thread t([&] {
    EXPECT_TRUE(Configure(*mkey, 0, false, 1, {{B(0), 8, 0, mr_b_->lkey(), 0}}).ok());
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());  // the layout does not change under our access
  pin = KeyPin();
  t.join();
  std::vector<uint8_t> got;
  ASSERT_TRUE(Resolve(mkey->key(), 0, 8, Rule(), &got));
  EXPECT_EQ(got[0], 0x80);
  const uint32_t key = mkey->key();
  mkey.reset();
  EXPECT_FALSE(KeyPin::Acquire(context_->registry(), key));
  EXPECT_EQ(IndirectKey::Find(key), nullptr);
}

}  // namespace
}  // namespace softverbs::transport
