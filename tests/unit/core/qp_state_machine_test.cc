// Tests of the QP state machine against an expectation written here independently, as text:
// ibv_modify_qp(3)'s required attributes and the IBA's optional ones, per QP type.
#include "core/qp_state_machine.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/device_limits.h"

namespace softverbs::core {
namespace {

constexpr QpType kTypes[] = {QpType::kRc,      QpType::kUc,      QpType::kUd,
                             QpType::kXrcSend, QpType::kXrcRecv, QpType::kRawPacket};
constexpr QpState kStates[] = {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts,
                               QpState::kSqd,   QpState::kSqe,  QpState::kErr};

const char* TypeText(QpType t) {
  switch (t) {
    case QpType::kRc: return "RC";
    case QpType::kUc: return "UC";
    case QpType::kUd: return "UD";
    case QpType::kXrcSend: return "XRC_SEND";
    case QpType::kXrcRecv: return "XRC_RECV";
    case QpType::kRawPacket: return "RAW_PACKET";
    case QpType::kDriver: return "DRIVER";
  }
  return "?";
}
const char* StateText(QpState s) {
  static const char* const kText[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return kText[static_cast<int>(s)];
}

// rdma-core's ibv_qp_attr_mask, by name without the IBV_QP_ prefix.
const std::map<std::string, uint32_t>& Bits() {
  static const std::map<std::string, uint32_t> kBits = {
      {"STATE", 1u << 0},           {"CUR_STATE", 1u << 1},   {"EN_SQD_ASYNC_NOTIFY", 1u << 2},
      {"ACCESS_FLAGS", 1u << 3},    {"PKEY_INDEX", 1u << 4},  {"PORT", 1u << 5},
      {"QKEY", 1u << 6},            {"AV", 1u << 7},          {"PATH_MTU", 1u << 8},
      {"TIMEOUT", 1u << 9},         {"RETRY_CNT", 1u << 10},  {"RNR_RETRY", 1u << 11},
      {"RQ_PSN", 1u << 12},         {"MAX_QP_RD_ATOMIC", 1u << 13}, {"ALT_PATH", 1u << 14},
      {"MIN_RNR_TIMER", 1u << 15},  {"SQ_PSN", 1u << 16},     {"MAX_DEST_RD_ATOMIC", 1u << 17},
      {"PATH_MIG_STATE", 1u << 18}, {"CAP", 1u << 19},        {"DEST_QPN", 1u << 20},
      {"RATE_LIMIT", 1u << 25},
  };
  return kBits;
}
uint32_t Bit(const std::string& name) { return Bits().at(name); }
std::string NameOf(uint32_t bit) {
  for (const auto& [name, b] : Bits()) {
    if (b == bit) return "IBV_QP_" + name;
  }
  return "?";
}

// The expectation. "*" as type: every type; "*" as from: every state. Required lists omit STATE
// (every transition requires it). Anything not listed is not a transition.
constexpr const char* kSpec = R"(
*          *     RESET |                                              |
*          INIT  ERR   |                                              |
*          RTR   ERR   |                                              |
*          RTS   ERR   |                                              |
*          SQD   ERR   |                                              |
*          SQE   ERR   |                                              |
*          ERR   ERR   |                                              |
RC         RESET INIT  | PKEY_INDEX PORT ACCESS_FLAGS                 |
UC         RESET INIT  | PKEY_INDEX PORT ACCESS_FLAGS                 |
UD         RESET INIT  | PKEY_INDEX PORT QKEY                         |
XRC_SEND   RESET INIT  | PKEY_INDEX PORT                              | ACCESS_FLAGS
XRC_RECV   RESET INIT  | PKEY_INDEX PORT ACCESS_FLAGS                 |
RAW_PACKET RESET INIT  | PORT                                         |
RC         INIT  INIT  |                     | PKEY_INDEX PORT ACCESS_FLAGS
UC         INIT  INIT  |                     | PKEY_INDEX PORT ACCESS_FLAGS
UD         INIT  INIT  |                     | PKEY_INDEX PORT QKEY
XRC_SEND   INIT  INIT  |                     | PKEY_INDEX PORT ACCESS_FLAGS
XRC_RECV   INIT  INIT  |                     | PKEY_INDEX PORT ACCESS_FLAGS
RAW_PACKET INIT  INIT  |                     | PORT
RC         INIT  RTR   | AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
                                             | ALT_PATH ACCESS_FLAGS PKEY_INDEX
UC         INIT  RTR   | AV PATH_MTU DEST_QPN RQ_PSN | ALT_PATH ACCESS_FLAGS PKEY_INDEX
UD         INIT  RTR   |                     | PKEY_INDEX QKEY
XRC_SEND   INIT  RTR   | AV PATH_MTU DEST_QPN | RQ_PSN ALT_PATH ACCESS_FLAGS PKEY_INDEX
XRC_RECV   INIT  RTR   | AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
                                             | ALT_PATH ACCESS_FLAGS PKEY_INDEX
RAW_PACKET INIT  RTR   |                     |
RC         RTR   RTS   | SQ_PSN TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC
                       | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE RATE_LIMIT
UC         RTR   RTS   | SQ_PSN | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE RATE_LIMIT
UD         RTR   RTS   | SQ_PSN | CUR_STATE QKEY RATE_LIMIT
XRC_SEND   RTR   RTS   | SQ_PSN TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC
                       | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
XRC_RECV   RTR   RTS   |
                       | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE TIMEOUT SQ_PSN
RAW_PACKET RTR   RTS   |        | CUR_STATE RATE_LIMIT
RC         RTS   RTS   | | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE RATE_LIMIT
UC         RTS   RTS   | | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE RATE_LIMIT
UD         RTS   RTS   | | CUR_STATE QKEY RATE_LIMIT
XRC_SEND   RTS   RTS   | | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
XRC_RECV   RTS   RTS   | | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE
RAW_PACKET RTS   RTS   | | CUR_STATE RATE_LIMIT
*          RTS   SQD   | | EN_SQD_ASYNC_NOTIFY
RC         SQD   RTS   | | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE
UC         SQD   RTS   | | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
UD         SQD   RTS   | | CUR_STATE QKEY
XRC_SEND   SQD   RTS   | | CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
XRC_RECV   SQD   RTS   | | CUR_STATE ACCESS_FLAGS MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE
RAW_PACKET SQD   RTS   | | CUR_STATE
RC         SQD   SQD   | | PORT AV PKEY_INDEX ACCESS_FLAGS TIMEOUT RETRY_CNT RNR_RETRY
                           MAX_QP_RD_ATOMIC MAX_DEST_RD_ATOMIC MIN_RNR_TIMER ALT_PATH PATH_MIG_STATE
UC         SQD   SQD   | | AV PKEY_INDEX ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
UD         SQD   SQD   | | PKEY_INDEX QKEY
XRC_SEND   SQD   SQD   | | PORT AV PKEY_INDEX ACCESS_FLAGS TIMEOUT RETRY_CNT RNR_RETRY
                           MAX_QP_RD_ATOMIC ALT_PATH PATH_MIG_STATE
XRC_RECV   SQD   SQD   | | PORT AV PKEY_INDEX ACCESS_FLAGS TIMEOUT MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
                           ALT_PATH PATH_MIG_STATE
RAW_PACKET SQD   SQD   | |
RC         SQE   RTS   | | CUR_STATE
UC         SQE   RTS   | | CUR_STATE ACCESS_FLAGS
UD         SQE   RTS   | | CUR_STATE QKEY
XRC_SEND   SQE   RTS   | | CUR_STATE
XRC_RECV   SQE   RTS   | | CUR_STATE
RAW_PACKET SQE   RTS   | | CUR_STATE
)";

struct Transition {
  QpType type;
  QpState from;
  QpState to;
  bool operator<(const Transition& o) const {
    return std::tie(type, from, to) < std::tie(o.type, o.from, o.to);
  }
};
struct Attrs {
  uint32_t required = 0;  // without STATE
  uint32_t optional = 0;
};

// Parses kSpec; an entry continues on following lines that do not start with a type.
const std::map<Transition, Attrs>& Spec() {
  static const std::map<Transition, Attrs> kParsed = [] {
    std::map<std::string, QpType> types;
    for (QpType t : kTypes) types[TypeText(t)] = t;
    std::map<std::string, QpState> states;
    for (QpState s : kStates) states[StateText(s)] = s;

    std::vector<std::string> entries;
    std::istringstream lines(kSpec);
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(' ') == std::string::npos) continue;
      const bool starts_entry = line[0] != ' ';
      if (starts_entry) entries.push_back(line);
      else entries.back() += " " + line;
    }
    std::map<Transition, Attrs> out;
    for (const std::string& e : entries) {
      std::istringstream in(e);
      std::string type, from, to, word;
      in >> type >> from >> to >> word;
      EXPECT_EQ(word, "|") << e;
      Attrs a;
      uint32_t* into = &a.required;
      while (in >> word) {
        if (word == "|") into = &a.optional;
        else *into |= Bit(word);
      }
      for (QpType t : kTypes) {
        if (type != "*" && types.at(type) != t) continue;
        for (QpState f : kStates) {
          if (from != "*" && states.at(from) != f) continue;
          EXPECT_TRUE(out.emplace(Transition{t, f, states.at(to)}, a).second) << e;
        }
      }
    }
    return out;
  }();
  return kParsed;
}

// Valid values for every attribute.
AddressVector GoodAv() {
  AddressVector av;
  av.is_global = true;
  av.sgid_index = 1;
  av.dgid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  av.hop_limit = 64;
  av.port_num = 1;
  av.static_rate = 0;
  return av;
}
QpAttributes GoodAttrs(QpState from, QpState to) {
  QpAttributes a;
  a.qp_state = to;
  a.cur_qp_state = from;
  a.path_mtu = Mtu::k1024;
  a.path_mig_state = MigState::kMigrated;
  a.qkey = 0x11111111;
  a.rq_psn = 0x123456;
  a.sq_psn = 0x654321;
  a.dest_qp_num = 0x12;
  a.qp_access_flags = access::kLocalWrite | access::kRemoteWrite;
  a.ah_attr = GoodAv();
  a.pkey_index = 0;
  a.en_sqd_async_notify = 1;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.port_num = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.rate_limit = 0;
  a.alt_ah_attr = GoodAv();  // IBV_QP_ALT_PATH (IBA 17.2.8)
  a.alt_port_num = 1;
  a.alt_timeout = 14;
  return a;
}
ModifyContext Ctx(QpType type, QpState current, uint64_t gids = 0b11) {
  ModifyContext c;
  c.type = type;
  c.current = current;
  c.valid_gids = gids;
  return c;
}
std::string Prefix(QpType t, QpState from, QpState to) {
  return std::string(TypeText(t)) + " " + StateText(from) + "->" + StateText(to) + " ";
}

// Rules about a value (and features not offered) read "RC INIT->RTR: <rule>".
std::string ValuePrefix(QpType t, QpState from, QpState to) {
  return std::string(TypeText(t)) + " " + StateText(from) + "->" + StateText(to) + ": ";
}

// ---- the table ----

TEST(QpStateMachineTable, EveryTypeAndPairMatchesTheSpec) {
  int valid = 0;
  for (QpType t : kTypes) {
    for (QpState f : kStates) {
      for (QpState to : kStates) {
        SCOPED_TRACE(Prefix(t, f, to));
        auto it = Spec().find({t, f, to});
        const bool expected = it != Spec().end();
        valid += expected;
        EXPECT_EQ(IsValidTransition(t, f, to), expected);
        EXPECT_EQ(RequiredAttrs(t, f, to), expected ? (it->second.required | Bit("STATE")) : 0u)
            << AttrMaskNames(RequiredAttrs(t, f, to));
        EXPECT_EQ(OptionalAttrs(t, f, to), expected ? it->second.optional : 0u)
            << AttrMaskNames(OptionalAttrs(t, f, to));
        EXPECT_EQ(RequiredAttrs(t, f, to) & OptionalAttrs(t, f, to), 0u);
        EXPECT_EQ(OptionalAttrs(t, f, to) & Bit("CAP"), 0u);
      }
    }
  }
  EXPECT_EQ(valid, 6 * 22);  // 22 transitions per type (RESET->ERR is not one)
}

TEST(QpStateMachineTable, UnknownStateAndDriverHaveNoTransitions) {
  for (QpType t : kTypes) {
    EXPECT_FALSE(IsValidTransition(t, QpState::kUnknown, QpState::kReset));
    EXPECT_FALSE(IsValidTransition(t, QpState::kRts, QpState::kUnknown));
  }
  for (QpState f : kStates) {
    for (QpState to : kStates) {
      EXPECT_FALSE(IsValidTransition(QpType::kDriver, f, to));
      EXPECT_EQ(RequiredAttrs(QpType::kDriver, f, to), 0u);
      EXPECT_EQ(OptionalAttrs(QpType::kDriver, f, to), 0u);
    }
  }
}

// ---- every valid transition, driven by the spec ----

class TransitionTest : public ::testing::TestWithParam<Transition> {
 protected:
  QpType type() const { return GetParam().type; }
  QpState from() const { return GetParam().from; }
  QpState to() const { return GetParam().to; }
  const Attrs& spec() const { return Spec().at(GetParam()); }
  uint32_t required() const { return spec().required | Bit("STATE"); }
  Result<QpState> Modify(uint32_t mask) const {
    return CheckModify(Ctx(type(), from()), GoodAttrs(from(), to()), mask);
  }
};

std::vector<Transition> AllValid() {
  std::vector<Transition> v;
  for (const auto& [t, a] : Spec()) v.push_back(t);
  return v;
}

TEST_P(TransitionTest, ExactlyTheRequiredAttributesSucceed) {
  auto r = Modify(required());
  ASSERT_TRUE(r.ok()) << r.status().rule();
  EXPECT_EQ(*r, to());
}

TEST_P(TransitionTest, EachMissingRequiredBitIsNamed) {
  for (const auto& [name, bit] : Bits()) {
    // Without STATE the request is a different (in-place) transition; tested separately.
    if (!(spec().required & bit)) continue;
    auto r = Modify(required() & ~bit);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), EINVAL);
    EXPECT_EQ(r.status().rule(), Prefix(type(), from(), to()) + "is missing IBV_QP_" + name);
  }
}

TEST_P(TransitionTest, EachBitNeitherRequiredNorOptionalIsRefused) {
  int refused = 0;
  for (const auto& [name, bit] : Bits()) {
    if ((required() | spec().optional) & bit) continue;
    auto r = Modify(required() | bit);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), EINVAL) << name;
    const std::string expected =
        name == "CAP" ? "resizing a QP (IBV_QP_CAP) is not supported: "
                        "IBV_DEVICE_RESIZE_MAX_WR is not set"
                      : "does not accept IBV_QP_" + name;
    EXPECT_EQ(r.status().rule(), Prefix(type(), from(), to()) + expected);
    ++refused;
  }
  EXPECT_GT(refused, 0);  // at least CAP
}

TEST_P(TransitionTest, EachOptionalBitAloneIsAccepted) {
  for (const auto& [name, bit] : Bits()) {
    if (!(spec().optional & bit)) continue;
    auto r = Modify(required() | bit);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().rule();
    EXPECT_EQ(*r, to());
  }
}

TEST_P(TransitionTest, AllOptionalBitsTogetherAreAccepted) {
  auto r = Modify(required() | spec().optional);
  ASSERT_TRUE(r.ok()) << r.status().rule();
  EXPECT_EQ(*r, to());
}

INSTANTIATE_TEST_SUITE_P(AllTypes, TransitionTest, ::testing::ValuesIn(AllValid()),
                         [](const ::testing::TestParamInfo<Transition>& info) {
                           return std::string(TypeText(info.param.type)) + "_" +
                                  StateText(info.param.from) + "_" + StateText(info.param.to);
                         });

// ---- values ----

struct ValueCase {
  const char* name;
  QpType type;
  QpState from;
  QpState to;
  uint32_t extra_mask;  // added to the spec's required mask
  std::function<void(QpAttributes&)> set;
  int expected_errno;   // 0: accepted
  std::string rule;     // expected rule after the "<TYPE> <FROM>-><TO> " prefix; "" = don't care
  uint64_t gids = 0b11;
};

class ValueTest : public ::testing::TestWithParam<ValueCase> {};

TEST_P(ValueTest, Check) {
  const ValueCase& c = GetParam();
  QpAttributes a = GoodAttrs(c.from, c.to);
  c.set(a);
  const uint32_t mask = Spec().at({c.type, c.from, c.to}).required | Bit("STATE") | c.extra_mask;
  auto r = CheckModify(Ctx(c.type, c.from, c.gids), a, mask);
  if (c.expected_errno == 0) {
    ASSERT_TRUE(r.ok()) << r.status().rule();
    EXPECT_EQ(*r, c.to);
    return;
  }
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), c.expected_errno) << r.status().rule();
  if (!c.rule.empty()) {
    EXPECT_EQ(r.status().rule(), ValuePrefix(c.type, c.from, c.to) + c.rule);
  }
}

using S = QpState;
constexpr QpType kRc = QpType::kRc;
constexpr QpType kUc = QpType::kUc;
constexpr int kOk = 0;

const ValueCase kValueCases[] = {
    // port_num: only port 1 exists.
    {"port_1", kRc, S::kReset, S::kInit, 0, [](auto& a) { a.port_num = 1; }, kOk, ""},
    {"port_0", kRc, S::kReset, S::kInit, 0, [](auto& a) { a.port_num = 0; }, EINVAL,
     "port_num 0 does not exist: softverbs0 has 1 port"},
    {"port_2", kRc, S::kReset, S::kInit, 0, [](auto& a) { a.port_num = 2; }, EINVAL,
     "port_num 2 does not exist: softverbs0 has 1 port"},
    {"port_2_in_init_init", kRc, S::kInit, S::kInit, attr::kPort,
     [](auto& a) { a.port_num = 2; }, EINVAL, ""},
    // pkey_index: a one-entry table.
    {"pkey_0", QpType::kUd, S::kReset, S::kInit, 0, [](auto& a) { a.pkey_index = 0; }, kOk, ""},
    {"pkey_1", QpType::kUd, S::kReset, S::kInit, 0, [](auto& a) { a.pkey_index = 1; }, EINVAL,
     "pkey_index 1 is outside the P_Key table of 1 entry"},
    // path_mtu: IBV_MTU_256 (1) .. IBV_MTU_4096 (5).
    {"mtu_256", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.path_mtu = Mtu::k256; }, kOk, ""},
    {"mtu_4096", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.path_mtu = Mtu::k4096; }, kOk, ""},
    {"mtu_0", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.path_mtu = static_cast<Mtu>(0); },
     EINVAL, ""},
    {"mtu_6", kUc, S::kInit, S::kRtr, 0, [](auto& a) { a.path_mtu = static_cast<Mtu>(6); },
     EINVAL, ""},
    // timeout, retry_cnt, rnr_retry, min_rnr_timer: wider values are cut, not refused
    // (FitFieldWidths, tested below).
    {"timeout_0", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.timeout = 0; }, kOk, ""},
    {"timeout_31", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.timeout = 31; }, kOk, ""},
    {"retry_7", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.retry_cnt = 7; }, kOk, ""},
    {"rnr_retry_7", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.rnr_retry = 7; }, kOk, ""},
    {"min_rnr_31", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.min_rnr_timer = 31; }, kOk, ""},
    // max_rd_atomic / max_dest_rd_atomic: the device limits.
    {"rd_atomic_0", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.max_rd_atomic = 0; }, kOk, ""},
    {"rd_atomic_16", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.max_rd_atomic = 16; }, kOk, ""},
    {"rd_atomic_17", kRc, S::kRtr, S::kRts, 0, [](auto& a) { a.max_rd_atomic = 17; }, EINVAL,
     "max_rd_atomic 17 exceeds the device limit max_qp_init_rd_atom 16"},
    {"dest_rd_atomic_16", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.max_dest_rd_atomic = 16; },
     kOk, ""},
    {"dest_rd_atomic_17", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.max_dest_rd_atomic = 17; },
     EINVAL, "max_dest_rd_atomic 17 exceeds the device limit max_qp_rd_atom 16"},
    {"dest_rd_atomic_17_xrc_recv", QpType::kXrcRecv, S::kInit, S::kRtr, 0,
     [](auto& a) { a.max_dest_rd_atomic = 17; }, EINVAL, ""},
    // PSNs and QPNs: 24 bits (wider values are cut by FitFieldWidths).
    {"rq_psn_max", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.rq_psn = 0xffffff; }, kOk, ""},
    {"sq_psn_max", QpType::kUd, S::kRtr, S::kRts, 0, [](auto& a) { a.sq_psn = 0xffffff; }, kOk,
     ""},
    {"dest_qpn_max", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.dest_qp_num = 0xffffff; }, kOk,
     ""},
    {"dest_qpn_2", kUc, S::kInit, S::kRtr, 0, [](auto& a) { a.dest_qp_num = 2; }, kOk, ""},
    {"dest_qpn_0_rc", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.dest_qp_num = 0; }, EINVAL,
     "dest_qp_num 0 is a management QP (QP0/QP1), never a connected peer"},
    {"dest_qpn_1_rc", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.dest_qp_num = 1; }, EINVAL,
     "dest_qp_num 1 is a management QP (QP0/QP1), never a connected peer"},
    {"dest_qpn_0_uc", kUc, S::kInit, S::kRtr, 0, [](auto& a) { a.dest_qp_num = 0; }, EINVAL, ""},
    {"dest_qpn_1_xrc_send", QpType::kXrcSend, S::kInit, S::kRtr, 0,
     [](auto& a) { a.dest_qp_num = 1; }, EINVAL, ""},
    {"dest_qpn_0_xrc_recv", QpType::kXrcRecv, S::kInit, S::kRtr, 0,
     [](auto& a) { a.dest_qp_num = 0; }, EINVAL, ""},
    // qp_access_flags: the QP access bits of IBA 11.2.4.2 (MW_BIND included); UC accepts
    // READ/ATOMIC grants it will never serve, as hardware does.
    {"access_none", kRc, S::kReset, S::kInit, 0, [](auto& a) { a.qp_access_flags = 0; }, kOk, ""},
    {"access_all_four_rc", kRc, S::kReset, S::kInit, 0,
     [](auto& a) { a.qp_access_flags = 0xf; }, kOk, ""},
    {"access_all_four_xrc_recv", QpType::kXrcRecv, S::kReset, S::kInit, 0,
     [](auto& a) { a.qp_access_flags = 0xf; }, kOk, ""},
    {"access_mw_bind", kRc, S::kReset, S::kInit, 0,
     [](auto& a) { a.qp_access_flags = access::kLocalWrite | access::kMwBind; }, kOk, ""},
    {"access_zero_based", kRc, S::kInit, S::kInit, attr::kAccessFlags,
     [](auto& a) { a.qp_access_flags = access::kZeroBased; }, EINVAL,
     "qp_access_flags 0x20 has bits 0x20 beyond IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | "
     "REMOTE_READ | REMOTE_ATOMIC | MW_BIND"},
    {"access_bit31", kRc, S::kRtr, S::kRts, attr::kAccessFlags,
     [](auto& a) { a.qp_access_flags = 1u << 31; }, EINVAL, ""},
    {"access_uc_write", kUc, S::kReset, S::kInit, 0,
     [](auto& a) { a.qp_access_flags = access::kLocalWrite | access::kRemoteWrite; }, kOk, ""},
    {"access_uc_read", kUc, S::kReset, S::kInit, 0,
     [](auto& a) { a.qp_access_flags = access::kRemoteRead | access::kRemoteAtomic; }, kOk, ""},
    // ah_attr: RoCE needs a GRH with a real source GID and a destination GID.
    {"av_no_grh", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.is_global = false; },
     EINVAL, "RoCE requires a GRH: ah_attr.is_global must be 1"},
    {"av_no_grh_uc", kUc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.is_global = false; },
     EINVAL, "RoCE requires a GRH: ah_attr.is_global must be 1"},
    {"av_port_0", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.port_num = 0; }, kOk, ""},
    {"av_port_1", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.port_num = 1; }, kOk, ""},
    {"av_port_2", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.port_num = 2; }, EINVAL,
     "ah_attr.port_num 2 does not exist: softverbs0 has 1 port"},
    {"av_sgid_0", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.sgid_index = 0; }, kOk, ""},
    {"av_sgid_empty", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.sgid_index = 5; },
     EINVAL, "ah_attr.grh.sgid_index 5 is an empty GID table entry"},
    {"av_sgid_empty_table", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.sgid_index = 0; },
     EINVAL, "ah_attr.grh.sgid_index 0 is an empty GID table entry", /*gids=*/0},
    {"av_sgid_between_valid_ones", kRc, S::kInit, S::kRtr, 0,
     [](auto& a) { a.ah_attr.sgid_index = 1; }, EINVAL,
     "ah_attr.grh.sgid_index 1 is an empty GID table entry", /*gids=*/0b101},
    {"av_sgid_63", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.sgid_index = 63; }, kOk,
     "", /*gids=*/1ull << 63},
    {"av_sgid_64", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.sgid_index = 64; }, EINVAL,
     "ah_attr.grh.sgid_index 64 is outside the GID table of 64 entries", ~0ull},
    {"av_rate_max", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 0; }, kOk,
     ""},
    {"av_rate_1", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 1; }, EINVAL,
     "ah_attr.static_rate 1 is not a valid enum ibv_rate"},
    {"av_rate_2_5", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 2; }, kOk,
     ""},
    {"av_rate_600", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 22; }, kOk,
     ""},
    {"av_rate_1200", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 24; }, kOk,
     ""},
    {"av_rate_25", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.static_rate = 25; }, EINVAL,
     "ah_attr.static_rate 25 is not a valid enum ibv_rate"},
    {"av_hop_limit_0", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.hop_limit = 0; }, kOk,
     ""},
    {"av_hop_limit_255", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.hop_limit = 255; },
     kOk, ""},
    {"av_dgid_zero", kRc, S::kInit, S::kRtr, 0, [](auto& a) { a.ah_attr.dgid = Gid{}; }, EINVAL,
     "ah_attr.grh.dgid is zero"},
    {"av_dgid_last_byte", kRc, S::kInit, S::kRtr, 0,
     [](auto& a) {
       a.ah_attr.dgid = Gid{};
       a.ah_attr.dgid[15] = 1;
     },
     kOk, ""},
    {"av_checked_in_sqd_sqd", kRc, S::kSqd, S::kSqd, attr::kAv,
     [](auto& a) { a.ah_attr.dgid = Gid{}; }, EINVAL, "ah_attr.grh.dgid is zero"},
    // rate_limit: 0 is "unlimited"; any other rate within packet_pacing_caps paces RC, UC and UD.
    {"rate_limit_0", kRc, S::kRts, S::kRts, attr::kRateLimit, [](auto& a) { a.rate_limit = 0; },
     kOk, ""},
    {"rate_limit_min", kRc, S::kRts, S::kRts, attr::kRateLimit, [](auto& a) { a.rate_limit = 1; },
     kOk, ""},
    {"rate_limit_max", kUc, S::kRtr, S::kRts, attr::kRateLimit,
     [](auto& a) { a.rate_limit = 100000000; }, kOk, ""},
    {"rate_limit_ud", QpType::kUd, S::kRtr, S::kRts, attr::kRateLimit,
     [](auto& a) { a.rate_limit = 100000; }, kOk, ""},
    {"rate_limit_above_max", kRc, S::kRts, S::kRts, attr::kRateLimit,
     [](auto& a) { a.rate_limit = 100000001; }, EINVAL,
     "rate_limit 100000001 kbps is outside packet_pacing_caps [1, 100000000]"},
    {"rate_limit_burst_without_rate", kRc, S::kRts, S::kRts, attr::kRateLimit,
     [](auto& a) { a.max_burst_sz = 4096; }, EINVAL,
     "max_burst_sz 4096 / typical_pkt_sz 0 without a rate_limit: they shape a rate "
     "(ibv_modify_qp_rate_limit(3))"},
    {"rate_limit_typical_without_rate", QpType::kUd, S::kRts, S::kRts, attr::kRateLimit,
     [](auto& a) { a.typical_pkt_sz = 1024; }, EINVAL,
     "max_burst_sz 0 / typical_pkt_sz 1024 without a rate_limit: they shape a rate "
     "(ibv_modify_qp_rate_limit(3))"},
    {"rate_limit_burst_with_rate", kRc, S::kRts, S::kRts, attr::kRateLimit,
     [](auto& a) {
       a.rate_limit = 1000;
       a.max_burst_sz = 4096;
       a.typical_pkt_sz = 1024;
     },
     kOk, ""},
    {"rate_limit_raw_0", QpType::kRawPacket, S::kRtr, S::kRts, attr::kRateLimit,
     [](auto& a) { a.rate_limit = 0; }, kOk, ""},
    {"rate_limit_raw", QpType::kRawPacket, S::kRts, S::kRts, attr::kRateLimit,
     [](auto& a) { a.rate_limit = 1000; }, kOk, ""},  // its frames wait (core/raw_qp.h)
    // path_mig_state (IBA 17.2.8, core/path_migration.h): arming needs an alternate path.
    {"mig_migrated", kRc, S::kRtr, S::kRts, attr::kPathMigState,
     [](auto& a) { a.path_mig_state = MigState::kMigrated; }, kOk, ""},
    {"mig_rearm_without_alt", kRc, S::kRtr, S::kRts, attr::kPathMigState,
     [](auto& a) { a.path_mig_state = MigState::kRearm; }, EINVAL,
     "path_mig_state REARM arms the alternate path, but none is loaded (IBV_QP_ALT_PATH, IBA 17.2.8)"},
    {"mig_armed_without_alt", kUc, S::kRts, S::kRts, attr::kPathMigState,
     [](auto& a) { a.path_mig_state = MigState::kArmed; }, EINVAL, ""},
    {"mig_rearm_with_alt", kRc, S::kRtr, S::kRts, attr::kPathMigState | attr::kAltPath,
     [](auto& a) { a.path_mig_state = MigState::kRearm; }, kOk, ""},
    {"alt_port_num_2", kUc, S::kInit, S::kRtr, attr::kAltPath,
     [](auto& a) { a.alt_port_num = 2; }, EINVAL, "alt_port_num 2 does not exist: softverbs0 has 1 port"},
    {"alt_pkey_index_1", kRc, S::kRts, S::kRts, attr::kAltPath,
     [](auto& a) { a.alt_pkey_index = 1; }, EINVAL, "alt_pkey_index 1 is outside the P_Key table of 1 entry"},
    {"mig_3", kRc, S::kRts, S::kRts, attr::kPathMigState,
     [](auto& a) { a.path_mig_state = static_cast<MigState>(3); }, EINVAL,
     "path_mig_state 3 is not an enum ibv_mig_state"},
    // Values whose bit is absent are not looked at.
    {"absent_bits_ignored", kUc, S::kRtr, S::kRts, 0,
     [](auto& a) {
       a.timeout = 99;
       a.retry_cnt = 99;
       a.port_num = 9;
       a.pkey_index = 9;
       a.max_rd_atomic = 200;
       a.qp_access_flags = ~0u;
       a.ah_attr = AddressVector{};
       a.rate_limit = 5;
       a.path_mig_state = MigState::kArmed;
       a.dest_qp_num = 0;
       a.rq_psn = ~0u;
     },
     kOk, ""},
    // A refused bit is reported before a value.
    {"not_accepted_before_unsupported", QpType::kUd, S::kRtr, S::kRts, attr::kAltPath,
     [](auto&) {}, EINVAL, ""},
};

INSTANTIATE_TEST_SUITE_P(Rules, ValueTest, ::testing::ValuesIn(kValueCases),
                         [](const ::testing::TestParamInfo<ValueCase>& info) {
                           return std::string(info.param.name);
                         });

// ---- messages and order ----

TEST(CheckModify, MissingOnlyMinRnrTimerExactMessage) {
  const uint32_t mask = attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn |
                        attr::kRqPsn | attr::kMaxDestRdAtomic;
  auto r = CheckModify(Ctx(kRc, S::kInit), GoodAttrs(S::kInit, S::kRtr), mask);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "RC INIT->RTR is missing IBV_QP_MIN_RNR_TIMER");
}

TEST(CheckModify, AllMissingBitsAreListed) {
  auto r = CheckModify(Ctx(kRc, S::kInit), GoodAttrs(S::kInit, S::kRtr), attr::kState);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule(),
            "RC INIT->RTR is missing IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC, "
            "IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_RQ_PSN");
}

TEST(CheckModify, UdRtrDoesNotAcceptPathMtu) {
  auto r = CheckModify(Ctx(QpType::kUd, S::kInit), GoodAttrs(S::kInit, S::kRtr),
                       attr::kState | attr::kPathMtu);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "UD INIT->RTR does not accept IBV_QP_PATH_MTU");
  // A bit the transition does not take is refused as such before any "not supported" rule.
  ModifyContext rts{QpType::kUd, QpState::kRtr, false, 0b11};
  QpAttributes to_rts;
  to_rts.qp_state = QpState::kRts;
  auto alt = CheckModify(rts, to_rts, attr::kState | attr::kSqPsn | attr::kAltPath);
  EXPECT_EQ(alt.status().rule(), "UD RTR->RTS does not accept IBV_QP_ALT_PATH");
}

TEST(CheckModify, InvalidTransitionMessage) {
  auto r = CheckModify(Ctx(kRc, S::kReset), GoodAttrs(S::kReset, S::kRts),
                       attr::kState | attr::kSqPsn);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "RC RESET->RTS is not a valid transition");
}

TEST(CheckModify, CurStateMismatch) {
  QpAttributes a = GoodAttrs(S::kRts, S::kRts);
  a.cur_qp_state = S::kRtr;
  auto r = CheckModify(Ctx(kRc, S::kRts), a, attr::kState | attr::kCurState);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "RC RTS->RTS cur_qp_state says RTR but the QP is in RTS");

  // A UD QP the device moved to SQE while the consumer still believes RTS.
  a = GoodAttrs(S::kRts, S::kRts);
  auto sqe = CheckModify(Ctx(QpType::kUd, S::kSqe), a, attr::kState | attr::kCurState);
  ASSERT_FALSE(sqe.ok());
  EXPECT_EQ(sqe.status().rule(), "UD SQE->RTS cur_qp_state says RTS but the QP is in SQE");
  a.cur_qp_state = S::kSqe;
  auto ok = CheckModify(Ctx(QpType::kUd, S::kSqe), a, attr::kState | attr::kCurState);
  ASSERT_TRUE(ok.ok()) << ok.status().rule();
  EXPECT_EQ(*ok, S::kRts);
}

TEST(CheckModify, CurStateMismatchComesBeforeTheTransitionCheck) {
  QpAttributes a = GoodAttrs(S::kReset, S::kRts);
  a.cur_qp_state = S::kInit;
  auto r = CheckModify(Ctx(kRc, S::kReset), a, attr::kState | attr::kCurState);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule(), "RC RESET->RTS cur_qp_state says INIT but the QP is in RESET");
}

TEST(CheckModify, UnknownMaskBits) {
  for (uint32_t bit : {21u, 22u, 23u, 24u, 26u, 31u}) {
    // A perfectly valid request plus one unknown bit.
    const uint32_t mask = attr::kState | attr::kSqPsn | (1u << bit);
    auto r = CheckModify(Ctx(QpType::kUd, S::kRtr), GoodAttrs(S::kRtr, S::kRts), mask);
    ASSERT_FALSE(r.ok()) << bit;
    EXPECT_EQ(r.status().code(), EINVAL);
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", 1u << bit);
    EXPECT_EQ(r.status().rule(), std::string("UD RTR->RTS attr_mask has unknown bits ") + hex);
  }
  // Unknown bits are reported before anything else, even an invalid transition.
  auto r = CheckModify(Ctx(kRc, S::kReset), GoodAttrs(S::kReset, S::kSqd),
                       attr::kState | (1u << 22));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().rule().find("unknown bits 0x400000"), std::string::npos);
}

TEST(CheckModify, QpStateOutOfRange) {
  for (int s : {7, 8, 255}) {
    QpAttributes a = GoodAttrs(S::kInit, S::kInit);
    a.qp_state = static_cast<QpState>(s);
    auto r = CheckModify(Ctx(kRc, S::kInit), a, attr::kState);
    ASSERT_FALSE(r.ok()) << s;
    EXPECT_EQ(r.status().code(), EINVAL);
    EXPECT_NE(r.status().rule().find("is not a state a QP can be moved to"), std::string::npos)
        << r.status().rule();
  }
}

TEST(CheckModify, WithoutStateBitTheQpStaysWhereItIs) {
  // RTS->RTS in place.
  auto rts = CheckModify(Ctx(kRc, S::kRts), GoodAttrs(S::kRts, S::kRts), attr::kMinRnrTimer);
  ASSERT_TRUE(rts.ok()) << rts.status().rule();
  EXPECT_EQ(*rts, S::kRts);
  // qp_state is ignored without the bit.
  QpAttributes a = GoodAttrs(S::kInit, S::kInit);
  a.qp_state = S::kErr;
  auto init = CheckModify(Ctx(kRc, S::kInit), a, attr::kAccessFlags | attr::kPkeyIndex);
  ASSERT_TRUE(init.ok()) << init.status().rule();
  EXPECT_EQ(*init, S::kInit);
  // An empty mask is RESET->RESET for a fresh QP...
  auto reset = CheckModify(Ctx(kRc, S::kReset), GoodAttrs(S::kReset, S::kReset), 0);
  ASSERT_TRUE(reset.ok());
  EXPECT_EQ(*reset, S::kReset);
  // ...but RTR has no RTR->RTR.
  auto rtr = CheckModify(Ctx(kRc, S::kRtr), GoodAttrs(S::kRtr, S::kRtr), 0);
  ASSERT_FALSE(rtr.ok());
  EXPECT_EQ(rtr.status().rule(), "RC RTR->RTR is not a valid transition");
  // And the in-place transition's attribute rules still apply.
  auto port = CheckModify(Ctx(kRc, S::kReset), GoodAttrs(S::kReset, S::kReset), attr::kPort);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().rule(), "RC RESET->RESET does not accept IBV_QP_PORT");
  // Removing STATE from RESET->INIT is RESET->RESET, which accepts nothing.
  auto init_mask = CheckModify(Ctx(kRc, S::kReset), GoodAttrs(S::kReset, S::kInit),
                               attr::kPkeyIndex | attr::kPort | attr::kAccessFlags);
  ASSERT_FALSE(init_mask.ok());
  EXPECT_EQ(init_mask.status().code(), EINVAL);
}

TEST(CheckModify, CapHasItsOwnMessageEvenWithOtherExtras) {
  auto r = CheckModify(Ctx(QpType::kUd, S::kRts), GoodAttrs(S::kRts, S::kRts),
                       attr::kState | attr::kCap | attr::kPathMtu);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(),
            "UD RTS->RTS resizing a QP (IBV_QP_CAP) is not supported: IBV_DEVICE_RESIZE_MAX_WR "
            "is not set");
}

TEST(CheckModify, SeveralExtraBitsAreAllNamed) {
  auto r = CheckModify(Ctx(QpType::kUd, S::kInit), GoodAttrs(S::kInit, S::kRtr),
                       attr::kState | attr::kTimeout | attr::kAv);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule(), "UD INIT->RTR does not accept IBV_QP_AV, IBV_QP_TIMEOUT");
}

TEST(CheckModify, MissingComesBeforeExtraAndValues) {
  QpAttributes a = GoodAttrs(S::kRtr, S::kRts);
  a.timeout = 99;
  auto r = CheckModify(Ctx(kRc, S::kRtr), a,
                       attr::kState | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry |
                           attr::kMaxQpRdAtomic | attr::kCap);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule(), "RC RTR->RTS is missing IBV_QP_SQ_PSN");
}

TEST(CheckModify, DriverQpsAreNotModifiedHere) {
  for (QpState f : kStates) {
    auto r = CheckModify(Ctx(QpType::kDriver, f), GoodAttrs(f, S::kErr), attr::kState);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), EOPNOTSUPP);
    EXPECT_EQ(r.status().rule(), "DRIVER QPs are modified through their provider");
  }
}

TEST(CheckModify, UnknownQpTypeIsInvalid) {
  for (int t : {0, 1, 5, 7, 11}) {
    const QpType type = static_cast<QpType>(t);
    EXPECT_FALSE(IsValidTransition(type, S::kReset, S::kInit));
    auto r = CheckModify(Ctx(type, S::kReset), GoodAttrs(S::kReset, S::kErr), attr::kState);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), EINVAL);
  }
}

TEST(CheckModify, QpInUnknownStateCannotBeModified) {
  auto r = CheckModify(Ctx(kRc, S::kUnknown), GoodAttrs(S::kReset, S::kReset), attr::kState);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
}

TEST(CheckModify, FullRcBringUp) {
  QpState s = S::kReset;
  const std::pair<QpState, uint32_t> steps[] = {
      {S::kInit, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags},
      {S::kRtr, attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn | attr::kRqPsn |
                    attr::kMaxDestRdAtomic | attr::kMinRnrTimer},
      {S::kRts, attr::kState | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry |
                    attr::kSqPsn | attr::kMaxQpRdAtomic},
      {S::kSqd, attr::kState | attr::kEnSqdAsyncNotify},
      {S::kSqd, attr::kState | attr::kAv | attr::kTimeout},
      {S::kRts, attr::kState},
      {S::kErr, attr::kState},
      {S::kReset, attr::kState},
  };
  for (const auto& [to, mask] : steps) {
    auto r = CheckModify(Ctx(kRc, s), GoodAttrs(s, to), mask);
    ASSERT_TRUE(r.ok()) << r.status().rule();
    ASSERT_EQ(*r, to);
    s = *r;
  }
}

// ---- AttrMaskNames ----

// ---- field widths: cut as mlx5 does, never refused (issue 17 item 12) ----

TEST(FitFieldWidths, WiderValuesKeepTheirLowBitsAndAreNamed) {
  QpAttributes a;
  a.rq_psn = 0xfe123456;  // lrand48() gives 31 bits
  a.sq_psn = 0x1000005;
  a.dest_qp_num = 0x7000123;
  a.timeout = 33;
  a.min_rnr_timer = 255;
  a.retry_cnt = 9;
  a.rnr_retry = 15;
  const uint32_t mask = Bit("RQ_PSN") | Bit("SQ_PSN") | Bit("DEST_QPN") | Bit("TIMEOUT") |
                        Bit("MIN_RNR_TIMER") | Bit("RETRY_CNT") | Bit("RNR_RETRY");
  const std::string cut = FitFieldWidths(a, mask);
  EXPECT_EQ(a.rq_psn, 0x123456u);
  EXPECT_EQ(a.sq_psn, 0x5u);
  EXPECT_EQ(a.dest_qp_num, 0x123u);
  EXPECT_EQ(a.timeout, 1);
  EXPECT_EQ(a.min_rnr_timer, 31);
  EXPECT_EQ(a.retry_cnt, 1);
  EXPECT_EQ(a.rnr_retry, 7);
  EXPECT_EQ(cut,
            "rq_psn 0xfe123456 masked to its 24 bits: 0x123456, "
            "sq_psn 0x1000005 masked to its 24 bits: 0x5, "
            "dest_qp_num 0x7000123 masked to its 24 bits: 0x123, "
            "timeout 33 masked to its 5 bits: 1, min_rnr_timer 255 masked to its 5 bits: 31, "
            "retry_cnt 9 masked to its 3 bits: 1, rnr_retry 15 masked to its 3 bits: 7");
}

TEST(FitFieldWidths, ValuesInRangeAndFieldsOutsideTheMaskAreLeftAlone) {
  QpAttributes a;
  a.rq_psn = 0xffffff;
  a.timeout = 31;
  a.retry_cnt = 7;
  a.sq_psn = 0x1000000;  // not in the mask: not touched, not named
  EXPECT_EQ(FitFieldWidths(a, Bit("RQ_PSN") | Bit("TIMEOUT") | Bit("RETRY_CNT")), "");
  EXPECT_EQ(a.rq_psn, 0xffffffu);
  EXPECT_EQ(a.timeout, 31);
  EXPECT_EQ(a.retry_cnt, 7);
  EXPECT_EQ(a.sq_psn, 0x1000000u);
}

TEST(FitFieldWidths, CutValuesThenPassTheValueRules) {
  // A 25-bit dest_qp_num whose low bits are a management QP is refused after the cut, as a
  // 24-bit 1 would be.
  QpAttributes a = GoodAttrs(QpState::kInit, QpState::kRtr);
  a.dest_qp_num = 0x1000001;
  a.rq_psn = 0x3000000;
  const uint32_t mask = Spec().at({QpType::kRc, QpState::kInit, QpState::kRtr}).required | Bit("STATE");
  EXPECT_NE(FitFieldWidths(a, mask), "");
  auto r = CheckModify(Ctx(QpType::kRc, QpState::kInit), a, mask);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule(), ValuePrefix(QpType::kRc, QpState::kInit, QpState::kRtr) +
                                   "dest_qp_num 1 is a management QP (QP0/QP1), never a connected peer");
  a.dest_qp_num = 0x1000123;
  FitFieldWidths(a, mask);
  EXPECT_TRUE(CheckModify(Ctx(QpType::kRc, QpState::kInit), a, mask).ok());
}

TEST(AttrMaskNames, EveryBitHasItsRdmaCoreName) {
  for (const auto& [name, bit] : Bits()) EXPECT_EQ(AttrMaskNames(bit), "IBV_QP_" + name);
  EXPECT_EQ(NameOf(attr::kRateLimit), "IBV_QP_RATE_LIMIT");
}

TEST(AttrMaskNames, Combinations) {
  EXPECT_EQ(AttrMaskNames(attr::kState | attr::kPkeyIndex), "IBV_QP_STATE | IBV_QP_PKEY_INDEX");
  EXPECT_EQ(AttrMaskNames(attr::kDestQpn | attr::kRateLimit | attr::kState),
            "IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RATE_LIMIT");
  EXPECT_EQ(AttrMaskNames(0), "0");
  EXPECT_EQ(AttrMaskNames(attr::kState | (1u << 21) | (1u << 30)), "IBV_QP_STATE | 0x40200000");
  EXPECT_EQ(AttrMaskNames(1u << 24), "0x1000000");
  std::string all = AttrMaskNames(attr::kAllValid);
  for (const auto& [name, bit] : Bits()) {
    EXPECT_NE(all.find("IBV_QP_" + name), std::string::npos) << name;
  }
  EXPECT_EQ(all.find("0x"), std::string::npos);
}

}  // namespace
}  // namespace softverbs::core
