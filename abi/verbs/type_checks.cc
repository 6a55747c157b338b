// Compile-time proof that the core's enumerators carry rdma-core's values (core/types.h), so the
// conversions in convert.cc are casts.
#include <infiniband/verbs.h>

#include "core/context.h"
#include "core/cq.h"
#include "core/device.h"
#include "core/mr.h"
#include "core/qp.h"
#include "core/srq.h"
#include "core/types.h"
#include "transport/work_request.h"

namespace softverbs::core {

#define SV_SAME(core_value, ibv_value) \
  static_assert(static_cast<uint64_t>(core_value) == static_cast<uint64_t>(ibv_value), #ibv_value)

SV_SAME(QpState::kReset, IBV_QPS_RESET);
SV_SAME(QpState::kInit, IBV_QPS_INIT);
SV_SAME(QpState::kRtr, IBV_QPS_RTR);
SV_SAME(QpState::kRts, IBV_QPS_RTS);
SV_SAME(QpState::kSqd, IBV_QPS_SQD);
SV_SAME(QpState::kSqe, IBV_QPS_SQE);
SV_SAME(QpState::kErr, IBV_QPS_ERR);
SV_SAME(QpState::kUnknown, IBV_QPS_UNKNOWN);

SV_SAME(QpType::kRc, IBV_QPT_RC);
SV_SAME(QpType::kUc, IBV_QPT_UC);
SV_SAME(QpType::kUd, IBV_QPT_UD);
SV_SAME(QpType::kRawPacket, IBV_QPT_RAW_PACKET);
SV_SAME(QpType::kXrcSend, IBV_QPT_XRC_SEND);
SV_SAME(QpType::kXrcRecv, IBV_QPT_XRC_RECV);
SV_SAME(QpType::kDriver, IBV_QPT_DRIVER);

SV_SAME(Mtu::k256, IBV_MTU_256);
SV_SAME(Mtu::k4096, IBV_MTU_4096);
SV_SAME(MigState::kMigrated, IBV_MIG_MIGRATED);
SV_SAME(MigState::kRearm, IBV_MIG_REARM);
SV_SAME(MigState::kArmed, IBV_MIG_ARMED);

SV_SAME(attr::kState, IBV_QP_STATE);
SV_SAME(attr::kCurState, IBV_QP_CUR_STATE);
SV_SAME(attr::kEnSqdAsyncNotify, IBV_QP_EN_SQD_ASYNC_NOTIFY);
SV_SAME(attr::kAccessFlags, IBV_QP_ACCESS_FLAGS);
SV_SAME(attr::kPkeyIndex, IBV_QP_PKEY_INDEX);
SV_SAME(attr::kPort, IBV_QP_PORT);
SV_SAME(attr::kQkey, IBV_QP_QKEY);
SV_SAME(attr::kAv, IBV_QP_AV);
SV_SAME(attr::kPathMtu, IBV_QP_PATH_MTU);
SV_SAME(attr::kTimeout, IBV_QP_TIMEOUT);
SV_SAME(attr::kRetryCnt, IBV_QP_RETRY_CNT);
SV_SAME(attr::kRnrRetry, IBV_QP_RNR_RETRY);
SV_SAME(attr::kRqPsn, IBV_QP_RQ_PSN);
SV_SAME(attr::kMaxQpRdAtomic, IBV_QP_MAX_QP_RD_ATOMIC);
SV_SAME(attr::kAltPath, IBV_QP_ALT_PATH);
SV_SAME(attr::kMinRnrTimer, IBV_QP_MIN_RNR_TIMER);
SV_SAME(attr::kSqPsn, IBV_QP_SQ_PSN);
SV_SAME(attr::kMaxDestRdAtomic, IBV_QP_MAX_DEST_RD_ATOMIC);
SV_SAME(attr::kPathMigState, IBV_QP_PATH_MIG_STATE);
SV_SAME(attr::kCap, IBV_QP_CAP);
SV_SAME(attr::kDestQpn, IBV_QP_DEST_QPN);
SV_SAME(attr::kRateLimit, IBV_QP_RATE_LIMIT);

SV_SAME(access::kLocalWrite, IBV_ACCESS_LOCAL_WRITE);
SV_SAME(access::kRemoteWrite, IBV_ACCESS_REMOTE_WRITE);
SV_SAME(access::kRemoteRead, IBV_ACCESS_REMOTE_READ);
SV_SAME(access::kRemoteAtomic, IBV_ACCESS_REMOTE_ATOMIC);
SV_SAME(access::kMwBind, IBV_ACCESS_MW_BIND);
SV_SAME(access::kZeroBased, IBV_ACCESS_ZERO_BASED);
SV_SAME(access::kOnDemand, IBV_ACCESS_ON_DEMAND);
SV_SAME(access::kHugetlb, IBV_ACCESS_HUGETLB);
SV_SAME(access::kRelaxedOrdering, IBV_ACCESS_RELAXED_ORDERING);
SV_SAME(access::kOptionalRange, IBV_ACCESS_OPTIONAL_RANGE);

SV_SAME(rereg::kChangeTranslation, IBV_REREG_MR_CHANGE_TRANSLATION);
SV_SAME(rereg::kChangePd, IBV_REREG_MR_CHANGE_PD);
SV_SAME(rereg::kChangeAccess, IBV_REREG_MR_CHANGE_ACCESS);

SV_SAME(srq_attr::kMaxWr, IBV_SRQ_MAX_WR);
SV_SAME(srq_attr::kLimit, IBV_SRQ_LIMIT);

SV_SAME(create_flag::kBlockSelfMcastLb, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
SV_SAME(create_flag::kScatterFcs, IBV_QP_CREATE_SCATTER_FCS);
SV_SAME(create_flag::kCvlanStripping, IBV_QP_CREATE_CVLAN_STRIPPING);
SV_SAME(create_flag::kSourceQpn, IBV_QP_CREATE_SOURCE_QPN);
SV_SAME(create_flag::kPciWriteEndPadding, IBV_QP_CREATE_PCI_WRITE_END_PADDING);

SV_SAME(send_op::kRdmaWrite, IBV_QP_EX_WITH_RDMA_WRITE);
SV_SAME(send_op::kRdmaWriteWithImm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
SV_SAME(send_op::kSend, IBV_QP_EX_WITH_SEND);
SV_SAME(send_op::kSendWithImm, IBV_QP_EX_WITH_SEND_WITH_IMM);
SV_SAME(send_op::kRdmaRead, IBV_QP_EX_WITH_RDMA_READ);
SV_SAME(send_op::kAtomicCmpSwp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
SV_SAME(send_op::kAtomicFetchAdd, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
SV_SAME(send_op::kLocalInv, IBV_QP_EX_WITH_LOCAL_INV);
SV_SAME(send_op::kBindMw, IBV_QP_EX_WITH_BIND_MW);
SV_SAME(send_op::kSendWithInv, IBV_QP_EX_WITH_SEND_WITH_INV);
SV_SAME(send_op::kTso, IBV_QP_EX_WITH_TSO);
SV_SAME(send_op::kAtomicWrite, IBV_QP_EX_WITH_ATOMIC_WRITE);

SV_SAME(GidType::kIb, IBV_GID_TYPE_IB);
SV_SAME(GidType::kRoceV1, IBV_GID_TYPE_ROCE_V1);
SV_SAME(GidType::kRoceV2, IBV_GID_TYPE_ROCE_V2);

SV_SAME(kEventCqErr, IBV_EVENT_CQ_ERR);
SV_SAME(kEventQpFatal, IBV_EVENT_QP_FATAL);
SV_SAME(kEventQpAccessErr, IBV_EVENT_QP_ACCESS_ERR);
SV_SAME(kEventSqDrained, IBV_EVENT_SQ_DRAINED);
SV_SAME(kEventPortActive, IBV_EVENT_PORT_ACTIVE);
SV_SAME(kEventSrqLimitReached, IBV_EVENT_SRQ_LIMIT_REACHED);
SV_SAME(kEventQpLastWqeReached, IBV_EVENT_QP_LAST_WQE_REACHED);


}  // namespace softverbs::core

// transport/work_request.h: the work request and completion codes (copied, not translated).
namespace softverbs::transport {

SV_SAME(WrOpcode::kRdmaWrite, IBV_WR_RDMA_WRITE);
SV_SAME(WrOpcode::kRdmaWriteWithImm, IBV_WR_RDMA_WRITE_WITH_IMM);
SV_SAME(WrOpcode::kSend, IBV_WR_SEND);
SV_SAME(WrOpcode::kSendWithImm, IBV_WR_SEND_WITH_IMM);
SV_SAME(WrOpcode::kRdmaRead, IBV_WR_RDMA_READ);
SV_SAME(WrOpcode::kAtomicCmpSwp, IBV_WR_ATOMIC_CMP_AND_SWP);
SV_SAME(WrOpcode::kAtomicFetchAdd, IBV_WR_ATOMIC_FETCH_AND_ADD);
SV_SAME(WrOpcode::kLocalInv, IBV_WR_LOCAL_INV);
SV_SAME(WrOpcode::kBindMw, IBV_WR_BIND_MW);
SV_SAME(WrOpcode::kSendWithInv, IBV_WR_SEND_WITH_INV);
SV_SAME(WrOpcode::kTso, IBV_WR_TSO);
SV_SAME(WrOpcode::kDriver1, IBV_WR_DRIVER1);
SV_SAME(WrOpcode::kAtomicWrite, IBV_WR_ATOMIC_WRITE);
SV_SAME(send_flag::kFence, IBV_SEND_FENCE);
SV_SAME(send_flag::kSignaled, IBV_SEND_SIGNALED);
SV_SAME(send_flag::kSolicited, IBV_SEND_SOLICITED);
SV_SAME(send_flag::kInline, IBV_SEND_INLINE);
SV_SAME(send_flag::kIpCsum, IBV_SEND_IP_CSUM);
SV_SAME(wc_opcode::kSend, IBV_WC_SEND);
SV_SAME(wc_opcode::kRdmaWrite, IBV_WC_RDMA_WRITE);
SV_SAME(wc_opcode::kRdmaRead, IBV_WC_RDMA_READ);
SV_SAME(wc_opcode::kCompSwap, IBV_WC_COMP_SWAP);
SV_SAME(wc_opcode::kFetchAdd, IBV_WC_FETCH_ADD);
SV_SAME(wc_opcode::kBindMw, IBV_WC_BIND_MW);
SV_SAME(wc_opcode::kLocalInv, IBV_WC_LOCAL_INV);
SV_SAME(wc_opcode::kAtomicWrite, IBV_WC_ATOMIC_WRITE);
SV_SAME(wc_opcode::kRecv, IBV_WC_RECV);
SV_SAME(wc_opcode::kRecvRdmaWithImm, IBV_WC_RECV_RDMA_WITH_IMM);
SV_SAME(wc_opcode::kDriver1, IBV_WC_DRIVER1);
SV_SAME(wc_opcode::kTmAdd, IBV_WC_TM_ADD);
SV_SAME(wc_opcode::kTmDel, IBV_WC_TM_DEL);
SV_SAME(wc_opcode::kTmSync, IBV_WC_TM_SYNC);
SV_SAME(wc_opcode::kTmRecv, IBV_WC_TM_RECV);
SV_SAME(wc_opcode::kTmNoTag, IBV_WC_TM_NO_TAG);
SV_SAME(wc_status::kSuccess, IBV_WC_SUCCESS);
SV_SAME(wc_status::kLocLenErr, IBV_WC_LOC_LEN_ERR);
SV_SAME(wc_status::kLocQpOpErr, IBV_WC_LOC_QP_OP_ERR);
SV_SAME(wc_status::kLocProtErr, IBV_WC_LOC_PROT_ERR);
SV_SAME(wc_status::kWrFlushErr, IBV_WC_WR_FLUSH_ERR);
SV_SAME(wc_status::kMwBindErr, IBV_WC_MW_BIND_ERR);
SV_SAME(wc_status::kRemInvReqErr, IBV_WC_REM_INV_REQ_ERR);
SV_SAME(wc_status::kRemAccessErr, IBV_WC_REM_ACCESS_ERR);
SV_SAME(wc_status::kRemOpErr, IBV_WC_REM_OP_ERR);
SV_SAME(wc_status::kRetryExcErr, IBV_WC_RETRY_EXC_ERR);
SV_SAME(wc_status::kRnrRetryExcErr, IBV_WC_RNR_RETRY_EXC_ERR);
SV_SAME(wc_status::kFatalErr, IBV_WC_FATAL_ERR);
SV_SAME(wc_status::kTmErr, IBV_WC_TM_ERR);
SV_SAME(wc_status::kTmRndvIncomplete, IBV_WC_TM_RNDV_INCOMPLETE);
SV_SAME(wc_flag::kGrh, IBV_WC_GRH);
SV_SAME(wc_flag::kWithImm, IBV_WC_WITH_IMM);
SV_SAME(wc_flag::kWithInv, IBV_WC_WITH_INV);
SV_SAME(wc_flag::kTmSyncReq, IBV_WC_TM_SYNC_REQ);
SV_SAME(wc_flag::kTmMatch, IBV_WC_TM_MATCH);
SV_SAME(wc_flag::kTmDataValid, IBV_WC_TM_DATA_VALID);
SV_SAME(core::srq_op::kTagAdd, IBV_WR_TAG_ADD);
SV_SAME(core::srq_op::kTagDel, IBV_WR_TAG_DEL);
SV_SAME(core::srq_op::kTagSync, IBV_WR_TAG_SYNC);
SV_SAME(core::srq_op::kSignaled, IBV_OPS_SIGNALED);
SV_SAME(core::srq_op::kTmSync, IBV_OPS_TM_SYNC);

}  // namespace softverbs::transport

#undef SV_SAME
