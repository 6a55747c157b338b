// The QP state machine of ibv_modify_qp(3) / IBA 10.3 and 11.2.4.2, as one table, and the checks
// of a whole modify request. See qp_state_machine.h for the contract.
#include "core/qp_state_machine.h"

#include "core/ah.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "core/device_limits.h"

namespace softverbs::core {
namespace {

// Short names for the table; the values are core::attr (= rdma-core's ibv_qp_attr_mask).
constexpr uint32_t kCur = attr::kCurState;
constexpr uint32_t kSqdNotify = attr::kEnSqdAsyncNotify;
constexpr uint32_t kAcc = attr::kAccessFlags;
constexpr uint32_t kPkey = attr::kPkeyIndex;
constexpr uint32_t kPort = attr::kPort;
constexpr uint32_t kQkey = attr::kQkey;
constexpr uint32_t kAv = attr::kAv;
constexpr uint32_t kMtu = attr::kPathMtu;
constexpr uint32_t kTmo = attr::kTimeout;
constexpr uint32_t kRetry = attr::kRetryCnt;
constexpr uint32_t kRnrRetry = attr::kRnrRetry;
constexpr uint32_t kRqPsn = attr::kRqPsn;
constexpr uint32_t kInitRd = attr::kMaxQpRdAtomic;     // initiator depth (max_rd_atomic)
constexpr uint32_t kAlt = attr::kAltPath;
constexpr uint32_t kRnrTmr = attr::kMinRnrTimer;
constexpr uint32_t kSqPsn = attr::kSqPsn;
constexpr uint32_t kDestRd = attr::kMaxDestRdAtomic;   // responder resources
constexpr uint32_t kMig = attr::kPathMigState;
constexpr uint32_t kQpn = attr::kDestQpn;
constexpr uint32_t kRate = attr::kRateLimit;

// Attributes of a transition beyond IBV_QP_STATE, which every transition requires.
struct Masks {
  uint32_t req = 0;
  uint32_t opt = 0;
};

// A transition that does not exist for one QP type although it exists for others.
constexpr uint32_t kNever = 1u << 31;
constexpr Masks kNo = {kNever, 0};

// Column of a QP type in the table. DCI and DCT are IBV_QPT_DRIVER QPs of mlx5dv_create_qp(3).
enum Col { kColRc, kColUc, kColUd, kColXrcSend, kColXrcRecv, kColRaw, kColDci, kColDct, kColCount };

struct Row {
  QpState from;
  QpState to;
  std::array<Masks, kColCount> by_type;  // RC, UC, UD, XRC_SEND, XRC_RECV, RAW_PACKET, DCI, DCT
};

constexpr QpState kAnyState = QpState::kUnknown;  // `from` of the rows valid from every state

// The state machine. Every transition is valid for every QP type; the types differ in the
// attributes. Required sets for RESET->INIT->RTR->RTS are the tables of ibv_modify_qp(3); the
// optional sets are IBA 11.2.4.2 (Modify QP) as enforced by real HCAs.
//
// XRC (IBA annex A14) splits an RC QP in two halves and each half requires only what it uses:
//  - XRC_SEND (initiator) has no receive queue and no responder: nothing of RC's responder side
//    (MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER) is accepted, and RQ_PSN / ACCESS_FLAGS (meaningless for
//    a pure requester) are optional instead of required.
//  - XRC_RECV (target) has no send queue: RTR->RTS requires nothing; TIMEOUT and SQ_PSN are
//    accepted (and ignored) because Linux's ib_modify_qp_is_ok() requires them for XRC_TGT, so
//    every application tested on hardware passes them. RETRY_CNT, RNR_RETRY and
//    MAX_QP_RD_ATOMIC are refused here.
//  The kernel drops the other half's attributes from the mask before its own check
//  (modify_qp_mask, core/xrc_qp.h), and so does Qp::Modify: a mask that works on a real HCA
//  works here.
// DC (mlx5dv_create_qp(3); core/dc.h) has no connection, so no DEST_QPN, RQ_PSN or remote path:
//  - DCI (initiator): INIT needs PKEY_INDEX and PORT; RTR needs only PATH_MTU (an AV is accepted:
//    each WR carries its own); RTS needs RC's requester attributes (TIMEOUT, RETRY_CNT,
//    RNR_RETRY, SQ_PSN, MAX_QP_RD_ATOMIC). ACCESS_FLAGS is accepted and unused: a DCI serves no
//    remote access. It then behaves like an RC requester (SQD, SQE recovery, ERR).
//  - DCT (target): INIT needs PKEY_INDEX, PORT and ACCESS_FLAGS (what it lets DCIs do); RTR needs
//    MIN_RNR_TIMER, PATH_MTU and the AV, and in RTR it serves. RTS and SQD do not exist for a DCT
//    (it has no send queue; Linux's mlx5_ib_modify_dct refuses every other transition).
// RATE_LIMIT (packet pacing) is part of RTR->RTS and RTS->RTS for RC/UC/UD/RAW_PACKET; its value
// is then checked against the device's pacing caps (CheckModify, step f).
constexpr Row kTable[] = {
    // IBA 10.3: every state may be reset, with the state alone. Every state but RESET may be put
    // in error: a QP in RESET has no resources to fail, and HCAs refuse RESET->ERR (Linux's
    // ib_modify_qp_is_ok() does too), so it is refused here as well.
    {kAnyState, QpState::kReset, {}},
    {QpState::kInit, QpState::kErr, {}},
    {QpState::kRtr, QpState::kErr, {}},
    {QpState::kRts, QpState::kErr, {}},
    {QpState::kSqd, QpState::kErr, {}},
    {QpState::kSqe, QpState::kErr, {}},
    {QpState::kErr, QpState::kErr, {}},
    {QpState::kReset, QpState::kInit, {{
        /*RC*/       {kPkey | kPort | kAcc, 0},
        /*UC*/       {kPkey | kPort | kAcc, 0},
        /*UD*/       {kPkey | kPort | kQkey, 0},
        /*XRC_SEND*/ {kPkey | kPort, kAcc},
        /*XRC_RECV*/ {kPkey | kPort | kAcc, 0},
        /*RAW*/      {kPort, 0},  // ibv_modify_qp(3): raw packet INIT needs only the port
        /*DCI*/      {kPkey | kPort, kAcc},
        /*DCT*/      {kPkey | kPort | kAcc, 0},
    }}},
    {QpState::kInit, QpState::kInit, {{
        {0, kPkey | kPort | kAcc},
        {0, kPkey | kPort | kAcc},
        {0, kPkey | kPort | kQkey},
        {0, kPkey | kPort | kAcc},
        {0, kPkey | kPort | kAcc},
        {0, kPort},
        {0, kPkey | kPort | kAcc},
        {0, kPkey | kPort | kAcc},
    }}},
    {QpState::kInit, QpState::kRtr, {{
        {kAv | kMtu | kQpn | kRqPsn | kDestRd | kRnrTmr, kAlt | kAcc | kPkey},
        {kAv | kMtu | kQpn | kRqPsn, kAlt | kAcc | kPkey},
        {0, kPkey | kQkey},
        {kAv | kMtu | kQpn, kRqPsn | kAlt | kAcc | kPkey},
        {kAv | kMtu | kQpn | kRqPsn | kDestRd | kRnrTmr, kAlt | kAcc | kPkey},
        {0, 0},
        {kMtu, kAv | kAcc | kPkey},
        {kAv | kMtu | kRnrTmr, kAcc | kPkey},
    }}},
    {QpState::kRtr, QpState::kRts, {{
        {kSqPsn | kTmo | kRetry | kRnrRetry | kInitRd, kCur | kAcc | kRnrTmr | kAlt | kMig | kRate},
        {kSqPsn, kCur | kAcc | kAlt | kMig | kRate},
        {kSqPsn, kCur | kQkey | kRate},
        {kSqPsn | kTmo | kRetry | kRnrRetry | kInitRd, kCur | kAcc | kAlt | kMig},
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig | kTmo | kSqPsn},
        {0, kCur | kRate},
        {kSqPsn | kTmo | kRetry | kRnrRetry | kInitRd, kCur | kAcc | kRnrTmr | kAlt | kMig},
        kNo,
    }}},
    {QpState::kRts, QpState::kRts, {{
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig | kRate},
        {0, kCur | kAcc | kAlt | kMig | kRate},
        {0, kCur | kQkey | kRate},
        {0, kCur | kAcc | kAlt | kMig},
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig},
        {0, kCur | kRate},
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig},
        kNo,
    }}},
    // IBA 11.2.4.2: the SQD.drained affiliated event is requested on the way into SQD.
    {QpState::kRts, QpState::kSqd, {{
        {0, kSqdNotify}, {0, kSqdNotify}, {0, kSqdNotify},
        {0, kSqdNotify}, {0, kSqdNotify}, {0, kSqdNotify},
        {0, kSqdNotify}, kNo,
    }}},
    {QpState::kSqd, QpState::kRts, {{
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig},
        {0, kCur | kAcc | kAlt | kMig},
        {0, kCur | kQkey},
        {0, kCur | kAcc | kAlt | kMig},
        {0, kCur | kAcc | kRnrTmr | kAlt | kMig},
        {0, kCur},
        {0, kCur | kAcc | kAlt | kMig},
        kNo,
    }}},
    // IBA 10.3: a drained SQD QP may change its path and its RDMA/atomic resources.
    {QpState::kSqd, QpState::kSqd, {{
        {0, kPort | kAv | kPkey | kAcc | kTmo | kRetry | kRnrRetry | kInitRd | kDestRd | kRnrTmr |
                kAlt | kMig},
        {0, kAv | kPkey | kAcc | kAlt | kMig},  // UC: no PORT change in SQD (as HCAs enforce)
        {0, kPkey | kQkey},
        {0, kPort | kAv | kPkey | kAcc | kTmo | kRetry | kRnrRetry | kInitRd | kAlt | kMig},
        {0, kPort | kAv | kPkey | kAcc | kTmo | kDestRd | kRnrTmr | kAlt | kMig},
        {0, 0},
        {0, kPort | kPkey | kAcc | kTmo | kRetry | kRnrRetry | kInitRd | kAlt | kMig},
        kNo,
    }}},
    // SQE is entered by the device on a send error of an unreliable QP; the consumer recovers to
    // RTS (IBA 10.3). CUR_STATE lets it do so while believing the QP is still in RTS.
    {QpState::kSqe, QpState::kRts, {{
        {0, kCur}, {0, kCur | kAcc}, {0, kCur | kQkey},
        {0, kCur}, {0, kCur}, {0, kCur},
        {0, kCur}, kNo,
    }}},
};

int Column(QpType type, DcRole dc = DcRole::kNone) {
  switch (type) {
    case QpType::kRc: return kColRc;
    case QpType::kUc: return kColUc;
    case QpType::kUd: return kColUd;
    case QpType::kXrcSend: return kColXrcSend;
    case QpType::kXrcRecv: return kColXrcRecv;
    case QpType::kRawPacket: return kColRaw;
    case QpType::kDriver:
      if (dc == DcRole::kDci) return kColDci;
      if (dc == DcRole::kDct) return kColDct;
      break;
  }
  return -1;
}

bool Settable(QpState s) { return s <= QpState::kErr; }

const Masks* Find(QpType type, DcRole dc, QpState from, QpState to) {
  const int col = Column(type, dc);
  if (col < 0 || !Settable(from) || !Settable(to)) return nullptr;
  for (const Row& row : kTable) {
    if ((row.from == from || row.from == kAnyState) && row.to == to) {
      return (row.by_type[col].req & kNever) ? nullptr : &row.by_type[col];
    }
  }
  return nullptr;
}
const Masks* Find(QpType type, QpState from, QpState to) { return Find(type, DcRole::kNone, from, to); }

bool Connected(QpType type) {
  return type == QpType::kRc || type == QpType::kUc || type == QpType::kXrcSend ||
         type == QpType::kXrcRecv;
}

struct NamedBit {
  uint32_t bit;
  const char* name;
};
// rdma-core's enum ibv_qp_attr_mask, in bit order.
constexpr NamedBit kNames[] = {
    {attr::kState, "IBV_QP_STATE"},
    {attr::kCurState, "IBV_QP_CUR_STATE"},
    {attr::kEnSqdAsyncNotify, "IBV_QP_EN_SQD_ASYNC_NOTIFY"},
    {attr::kAccessFlags, "IBV_QP_ACCESS_FLAGS"},
    {attr::kPkeyIndex, "IBV_QP_PKEY_INDEX"},
    {attr::kPort, "IBV_QP_PORT"},
    {attr::kQkey, "IBV_QP_QKEY"},
    {attr::kAv, "IBV_QP_AV"},
    {attr::kPathMtu, "IBV_QP_PATH_MTU"},
    {attr::kTimeout, "IBV_QP_TIMEOUT"},
    {attr::kRetryCnt, "IBV_QP_RETRY_CNT"},
    {attr::kRnrRetry, "IBV_QP_RNR_RETRY"},
    {attr::kRqPsn, "IBV_QP_RQ_PSN"},
    {attr::kMaxQpRdAtomic, "IBV_QP_MAX_QP_RD_ATOMIC"},
    {attr::kAltPath, "IBV_QP_ALT_PATH"},
    {attr::kMinRnrTimer, "IBV_QP_MIN_RNR_TIMER"},
    {attr::kSqPsn, "IBV_QP_SQ_PSN"},
    {attr::kMaxDestRdAtomic, "IBV_QP_MAX_DEST_RD_ATOMIC"},
    {attr::kPathMigState, "IBV_QP_PATH_MIG_STATE"},
    {attr::kCap, "IBV_QP_CAP"},
    {attr::kDestQpn, "IBV_QP_DEST_QPN"},
    {attr::kRateLimit, "IBV_QP_RATE_LIMIT"},
};

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

std::string Num(uint32_t v) { return std::to_string(v); }

// Known bits as a sorted, comma separated list: the form refusals print.
std::string NameList(uint32_t mask) {
  std::vector<std::string> names;
  for (const NamedBit& nb : kNames) {
    if (mask & nb.bit) names.emplace_back(nb.name);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string TypeStr(QpType t, DcRole dc = DcRole::kNone) {
  if (t == QpType::kDriver && dc != DcRole::kNone) return DcRoleName(dc);
  return Column(t) >= 0 || t == QpType::kDriver ? QpTypeName(t)
                                                 : "qp_type " + Num(static_cast<uint32_t>(t));
}

std::string StateStr(QpState s) {
  return s <= QpState::kUnknown ? QpStateName(s) : Num(static_cast<uint32_t>(s));
}

// ibv_ah_attr of IBV_QP_AV (the RoCE rules live with address handles). Returns the broken rule,
// or "" when the AV is usable. Port 0 stands for the QP's own port.
std::string CheckAv(const ModifyContext& ctx, const AddressVector& av) {
  Status s = CheckRoceAddressVector(av, ctx.valid_gids, /*allow_port0=*/true);
  return s.ok() ? "" : s.rule();
}

// Step g: the range of every value whose bit is in `mask`. Returns the broken rule or "".
std::string CheckValues(const ModifyContext& ctx, const QpAttributes& a, uint32_t mask) {
  using L = DeviceLimits;
  auto has = [mask](uint32_t bit) { return (mask & bit) != 0; };

  if (has(kPort) && (a.port_num < 1 || a.port_num > L::kPortCount)) {
    return "port_num " + Num(a.port_num) + " does not exist: softverbs0 has " +
           Num(L::kPortCount) + " port";
  }
  if (has(kPkey) && a.pkey_index >= L::kPkeyTableLen) {
    return "pkey_index " + Num(a.pkey_index) + " is outside the P_Key table of " +
           Num(L::kPkeyTableLen) + " entry";
  }
  if (has(kAcc)) {
    // The QP access bits of IBA 11.2.4.2. MW_BIND is accepted and not required to bind windows
    // on the QP (as mlx5 does not require it). REMOTE_READ/ATOMIC on UC are
    // accepted and never used, as hardware does (UC has no such operations to serve).
    constexpr uint32_t kQpAccess = access::kLocalWrite | access::kRemoteWrite |
                                   access::kRemoteRead | access::kRemoteAtomic | access::kMwBind;
    if (a.qp_access_flags & ~kQpAccess) {
      return "qp_access_flags " + Hex(a.qp_access_flags) + " has bits " +
             Hex(a.qp_access_flags & ~kQpAccess) +
             " beyond IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | MW_BIND";
    }
  }
  if (has(kAv)) {
    std::string rule = CheckAv(ctx, a.ah_attr);
    if (!rule.empty()) return rule;
  }
  if (has(kAlt)) {
    // The alternate path (IBA 17.2.8) obeys the primary path's rules. Linux's uverbs refuses an
    // alt_port_num that is no port of the device (ib_uverbs_modify_qp: rdma_is_port_valid).
    if (a.alt_port_num < 1 || a.alt_port_num > L::kPortCount)
      return "alt_port_num " + Num(a.alt_port_num) + " does not exist: softverbs0 has " + Num(L::kPortCount) + " port";
    if (a.alt_pkey_index >= L::kPkeyTableLen)
      return "alt_pkey_index " + Num(a.alt_pkey_index) + " is outside the P_Key table of " +
             Num(L::kPkeyTableLen) + " entry";
    std::string rule = CheckAv(ctx, a.alt_ah_attr);
    if (!rule.empty()) return "alt_ah_attr: " + rule;
  }
  if (has(kMtu)) {
    const uint32_t mtu = static_cast<uint32_t>(a.path_mtu);
    if (mtu < static_cast<uint32_t>(Mtu::k256) || mtu > static_cast<uint32_t>(L::kMaxMtu)) {
      return "path_mtu " + Num(mtu) + " is not an ibv_mtu from IBV_MTU_256 (1) to the port's " +
             "max_mtu IBV_MTU_4096 (5)";
    }
  }
  if (has(kQpn)) {
    // QP0 and QP1 are the SMI/GSI management QPs: never a connected peer.
    if (Connected(ctx.type) && a.dest_qp_num <= 1) {
      return "dest_qp_num " + Num(a.dest_qp_num) +
             " is a management QP (QP0/QP1), never a connected peer";
    }
  }
  // PSNs, dest_qp_num, timeout, retry_cnt, rnr_retry and min_rnr_timer are not range-checked:
  // FitFieldWidths() cut them to their wire widths before (as mlx5 does).
  // The device limits of ibv_query_device(3).
  if (has(kInitRd) && a.max_rd_atomic > L::kMaxQpInitRdAtom) {
    return "max_rd_atomic " + Num(a.max_rd_atomic) + " exceeds the device limit " +
           "max_qp_init_rd_atom " + Num(L::kMaxQpInitRdAtom);
  }
  if (has(kDestRd) && a.max_dest_rd_atomic > L::kMaxQpRdAtom) {
    return "max_dest_rd_atomic " + Num(a.max_dest_rd_atomic) + " exceeds the device limit " +
           "max_qp_rd_atom " + Num(L::kMaxQpRdAtom);
  }
  return "";
}

}  // namespace

// The wire widths of IBA 9.2 (BTH: 24-bit PSN and destination QP) and 9.7 (5-bit Local ACK
// Timeout and RNR timer, 3-bit retry counters). mlx5_ib_modify_qp stores each value with
// MLX5_SET into its QPC field of that width (next_rcv_psn, next_send_psn, remote_qpn,
// ack_timeout, min_rnr_nak, retry_count, rnr_retry), which keeps the low bits, and
// mlx5_ib_query_qp reads the fields back: ibv_query_qp reports the cut value. rxe masks the PSNs
// the same way (rxe_qp_from_attr: "& BTH_PSN_MASK") but refuses timeout > 31 (rxe_qp_chk_attr) and
// keeps retry counts > 7 whole; programs that were only ever run on hardware rely on mlx5's
// behaviour (lrand48() PSNs, timeout = 32), so that is the one followed here.
std::string FitFieldWidths(QpAttributes& a, uint32_t mask) {
  std::string cut;
  auto fit = [&](uint32_t bit, auto& field, uint32_t bits, const char* name, bool hex) {
    const uint32_t width_mask = (1u << bits) - 1;
    const uint32_t value = field;
    if (!(mask & bit) || value <= width_mask) return;
    field = static_cast<std::remove_reference_t<decltype(field)>>(value & width_mask);
    cut += std::string(cut.empty() ? "" : ", ") + name + " " + (hex ? Hex(value) : Num(value)) +
           " masked to its " + Num(bits) + " bits: " + (hex ? Hex(field) : Num(field));
  };
  fit(kRqPsn, a.rq_psn, 24, "rq_psn", true);
  fit(kSqPsn, a.sq_psn, 24, "sq_psn", true);
  fit(kQpn, a.dest_qp_num, 24, "dest_qp_num", true);
  fit(kTmo, a.timeout, 5, "timeout", false);
  fit(kAlt, a.alt_timeout, 5, "alt_timeout", false);
  fit(kRnrTmr, a.min_rnr_timer, 5, "min_rnr_timer", false);
  fit(kRetry, a.retry_cnt, 3, "retry_cnt", false);
  fit(kRnrRetry, a.rnr_retry, 3, "rnr_retry", false);
  return cut;
}

namespace {
// IBV_QP_RATE_LIMIT's values, against packet_pacing_caps (ibv_query_device_ex(3)). rate_limit 0
// is "unlimited", what every QP has anyway. As mlx5: max_burst_sz / typical_pkt_sz without a
// rate is EINVAL (mlx5_modify_qp_rate_limit), a rate outside [qp_rate_limit_min, _max] EINVAL
// (mlx5_rl_add_rate), a QP type the device does not pace EOPNOTSUPP (mlx5_ib's qp_rl_parse).
Status CheckRateLimit(const ModifyContext& ctx, const QpAttributes& a) {
  if (a.rate_limit == 0) {
    if (a.max_burst_sz != 0 || a.typical_pkt_sz != 0)
      return Invalid("max_burst_sz " + Num(a.max_burst_sz) + " / typical_pkt_sz " + Num(a.typical_pkt_sz) +
                     " without a rate_limit: they shape a rate (ibv_modify_qp_rate_limit(3))");
    return Status::Ok();
  }
  // The requester paces (transport/pacer.h); a raw QP's frames wait in its paced send queue
  // (transport/raw/paced_send_queue.h).
  const bool paced = ctx.dc == DcRole::kNone && (ctx.type == QpType::kRc || ctx.type == QpType::kUc ||
                                                 ctx.type == QpType::kUd || ctx.type == QpType::kRawPacket);
  if (!paced)
    return NotSupported("rate_limit " + Num(a.rate_limit) + " kbps: packet_pacing_caps.supported_qpts has " +
                        "RC, UC, UD and RAW_PACKET only, not " + TypeStr(ctx.type, ctx.dc));
  if (a.rate_limit < DeviceLimits::kPacingMinKbps || a.rate_limit > DeviceLimits::kPacingMaxKbps)
    return Invalid("rate_limit " + Num(a.rate_limit) + " kbps is outside packet_pacing_caps [" +
                   Num(DeviceLimits::kPacingMinKbps) + ", " + Num(DeviceLimits::kPacingMaxKbps) + "]");
  return Status::Ok();
}
}  // namespace

bool IsValidTransition(QpType type, QpState from, QpState to) {
  return Find(type, from, to) != nullptr;
}

uint32_t RequiredAttrs(QpType type, QpState from, QpState to) {
  const Masks* m = Find(type, from, to);
  return m ? (m->req | attr::kState) : 0;
}

uint32_t OptionalAttrs(QpType type, QpState from, QpState to) {
  const Masks* m = Find(type, from, to);
  return m ? m->opt : 0;
}

Result<QpState> CheckModify(const ModifyContext& ctx, const QpAttributes& attr, uint32_t mask,
                            MigrationStep* step) {
  const QpState from = ctx.current;
  // ibv_modify_qp(3): without IBV_QP_STATE the QP stays where it is and only the attributes
  // change, i.e. the request is the transition current->current.
  const bool has_state = (mask & attr::kState) != 0;
  const QpState to = has_state ? attr.qp_state : from;
  // "RC INIT->RTR ", built only when a rule is broken (modify is on the QP-lifecycle hot path).
  auto where = [&] { return TypeStr(ctx.type, ctx.dc) + " " + StateStr(from) + "->" + StateStr(to) + " "; };
  // Value rules read "RC INIT->RTR: <rule>".
  auto where_value = [&] { return TypeStr(ctx.type, ctx.dc) + " " + StateStr(from) + "->" + StateStr(to) + ": "; };

  // a. Bits 21..24 are kernel-internal and anything above RATE_LIMIT does not exist.
  if (const uint32_t unknown = mask & ~attr::kAllValid) {
    return Invalid(where() + "attr_mask has unknown bits " + Hex(unknown));
  }
  if (ctx.type == QpType::kDriver && ctx.dc == DcRole::kNone) {
    return NotSupported("DRIVER QPs are modified through their provider");
  }
  if (Column(ctx.type, ctx.dc) < 0) return Invalid(where() + "is not a QP type softverbs0 implements");

  // b. IBV_QP_CUR_STATE asserts the state the consumer believes the QP is in (IBA 11.2.4.2).
  if ((mask & attr::kCurState) && attr.cur_qp_state != from) {
    return Invalid(where() + "cur_qp_state says " + StateStr(attr.cur_qp_state) +
                   " but the QP is in " + StateStr(from));
  }

  // c. The transition itself. UNKNOWN is a state ibv_query_qp may report, never a target.
  if (has_state && !Settable(attr.qp_state)) {
    return Invalid(where() + "qp_state " + StateStr(attr.qp_state) +
                   " is not a state a QP can be moved to");
  }
  const Masks* m = Find(ctx.type, ctx.dc, from, to);
  if (m == nullptr) return Invalid(where() + "is not a valid transition");

  // d. Required attributes (IBV_QP_STATE is implied when absent, see above).
  const uint32_t required = m->req | attr::kState;
  if (const uint32_t missing = required & ~(mask | attr::kState)) {
    return Invalid(where() + "is missing " + NameList(missing));
  }

  // e. Everything else must be optional for this transition. ibv_modify_qp(3): QP resizing
  // needs IBV_DEVICE_RESIZE_MAX_WR, which softverbs0 does not set, so CAP is accepted nowhere.
  if (const uint32_t extra = mask & ~(required | m->opt)) {
    if (extra & attr::kCap) {
      return Invalid(where() +
                     "resizing a QP (IBV_QP_CAP) is not supported: IBV_DEVICE_RESIZE_MAX_WR is "
                     "not set");
    }
    return Invalid(where() + "does not accept " + NameList(extra));
  }

  // f. The path migration state (IBA 17.2.8, core/path_migration.h) and packet pacing.
  MigrationStep mig_step = MigrationStep::kNone;
  const bool alt_loaded = ctx.alt_loaded || (mask & attr::kAltPath);
  if (std::string rule = CheckMigration(ctx.mig, alt_loaded, mask, attr.path_mig_state, &mig_step); !rule.empty())
    return Invalid(where_value() + rule);
  if (mask & attr::kRateLimit) {
    Status pacing = CheckRateLimit(ctx, attr);
    if (!pacing.ok()) return Status(pacing.code(), where_value() + pacing.rule());
  }

  // g. Values.
  const std::string rule = CheckValues(ctx, attr, mask);
  if (!rule.empty()) return Invalid(where_value() + rule);
  if (step != nullptr) *step = mig_step;
  return to;
}

std::string AttrMaskNames(uint32_t mask) {
  if (mask == 0) return "0";
  std::string out;
  uint32_t known = 0;
  for (const NamedBit& nb : kNames) {
    if (mask & nb.bit) {
      out += (out.empty() ? "" : " | ") + std::string(nb.name);
      known |= nb.bit;
    }
  }
  if (const uint32_t rest = mask & ~known) out += (out.empty() ? "" : " | ") + Hex(rest);
  return out;
}

}  // namespace softverbs::core
