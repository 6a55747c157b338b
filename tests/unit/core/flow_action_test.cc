// ESP flow actions' rules (core/flow_action.h): what uverbs and mlx5 accept and refuse, with
// their errnos, on create and on modify.
#include "core/flow_action.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace softverbs::core {
namespace {

EspActionParams Good() {
  EspActionParams p;
  p.has_attrs = true;
  p.flags = esp_flag::kEncrypt;
  p.has_keymat = true;
  p.icv_len = 16;
  p.key_len = 16;
  return p;
}

int CreateErrno(const EspActionParams& p) {
  auto r = FlowActionEsp::Create(p);
  return r.ok() ? 0 : r.status().code();
}

TEST(FlowActionEsp, CreatesAes128And256EncryptOrDecrypt) {
  EXPECT_EQ(CreateErrno(Good()), 0);
  auto p = Good();
  p.key_len = 32;
  p.flags = 0;  // decrypt
  auto r = FlowActionEsp::Create(p);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value()->encrypt());
}

TEST(FlowActionEsp, CreateRefusesAsUverbsAndMlx5) {
  struct Case {
    const char* what;
    void (*change)(EspActionParams&);
    int errno_;
  };
  const Case cases[] = {
      {"no esp_attr", [](EspActionParams& p) { p.has_attrs = false; }, EINVAL},
      {"no keymat", [](EspActionParams& p) { p.has_keymat = false; }, EINVAL},
      {"unknown keymat", [](EspActionParams& p) { p.keymat_proto = 1; }, EOPNOTSUPP},
      {"key of 20 bytes", [](EspActionParams& p) { p.key_len = 20; }, EINVAL},
      {"AES-192", [](EspActionParams& p) { p.key_len = 24; }, EOPNOTSUPP},
      {"ICV of 10 bytes", [](EspActionParams& p) { p.icv_len = 10; }, EINVAL},
      {"ICV of 12 bytes", [](EspActionParams& p) { p.icv_len = 12; }, EOPNOTSUPP},
      {"iv_algo 1", [](EspActionParams& p) { p.iv_algo = 1; }, EOPNOTSUPP},
      {"spi", [](EspActionParams& p) { p.spi = 5; }, EOPNOTSUPP},
      {"seq", [](EspActionParams& p) { p.seq = 5; }, EOPNOTSUPP},
      {"tfc_pad", [](EspActionParams& p) { p.tfc_pad = 5; }, EOPNOTSUPP},
      {"hard limit", [](EspActionParams& p) { p.hard_limit_pkts = 5; }, EOPNOTSUPP},
      {"transport mode", [](EspActionParams& p) { p.flags |= esp_flag::kTransport; }, EOPNOTSUPP},
      {"full offload", [](EspActionParams& p) { p.flags |= esp_flag::kFullOffload; }, EOPNOTSUPP},
      {"unknown flag", [](EspActionParams& p) { p.flags |= 1u << 4; }, EOPNOTSUPP},
      {"replay none", [](EspActionParams& p) { p.has_replay = true; }, EINVAL},
      {"replay bitmap", [](EspActionParams& p) { p.has_replay = true, p.replay_proto = 1; }, EOPNOTSUPP},
      {"unknown replay", [](EspActionParams& p) { p.has_replay = true, p.replay_proto = 7; }, EOPNOTSUPP},
      {"encap", [](EspActionParams& p) { p.has_encap = true; }, EOPNOTSUPP},
  };
  for (const Case& c : cases) {
    auto p = Good();
    c.change(p);
    EXPECT_EQ(CreateErrno(p), c.errno_) << c.what;
  }
}

TEST(FlowActionEsp, ModifyChangesTheEsnOnlyOfActionsMadeWithOne) {
  auto with = Good();
  with.has_esn = true;
  with.esn = 3;
  auto a = std::move(FlowActionEsp::Create(with).value());
  EXPECT_EQ(a->sa()->esn_high(), 3u);
  EspActionParams m;
  m.has_esn = true;
  m.esn = 9;
  m.flags = esp_flag::kEsnNewWindow;
  ASSERT_TRUE(a->Modify(m).ok());
  EXPECT_EQ(a->sa()->esn_high(), 9u);
  EspActionParams key;
  key.has_keymat = true;
  key.icv_len = key.key_len = 16;
  EXPECT_EQ(a->Modify(key).code(), EOPNOTSUPP);
  EspActionParams spi;
  spi.has_attrs = true;
  spi.spi = 1;
  EXPECT_EQ(a->Modify(spi).code(), EOPNOTSUPP);
  EspActionParams enc;
  enc.has_attrs = true;
  enc.flags = esp_flag::kEncrypt;
  EXPECT_EQ(a->Modify(enc).code(), EOPNOTSUPP);
  auto without = std::move(FlowActionEsp::Create(Good()).value());
  EspActionParams esn;
  esn.has_esn = true;
  EXPECT_EQ(without->Modify(esn).code(), EINVAL);
  EXPECT_TRUE(without->Modify(EspActionParams{}).ok());
}

}  // namespace
}  // namespace softverbs::core
