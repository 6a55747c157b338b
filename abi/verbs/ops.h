// The context operations defined next to the verbs they belong to and installed into the
// verbs_context / ibv_context_ops tables by context_ops.cc.
#pragma once

#include <infiniband/verbs.h>

#include "base/status.h"
#include "transport/work_request.h"

namespace softverbs::core {
class FlowActionEsp;
class FlowCounters;
class RwqIndTable;
}

namespace softverbs::abi {

int QueryDeviceEx(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
int QueryPort(ibv_context*, uint8_t, ibv_port_attr*, size_t);
ibv_cq_ex* CreateCqEx(ibv_context*, ibv_cq_init_attr_ex*);
int PollCq(ibv_cq*, int, ibv_wc*);
int ReqNotifyCq(ibv_cq*, int);
int PostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
int PostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
int PostSrqRecv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
ibv_qp* CreateQpEx(ibv_context*, ibv_qp_init_attr_ex*);
ibv_srq* CreateSrqEx(ibv_context*, ibv_srq_init_attr_ex*);
int GetSrqNum(ibv_srq*, uint32_t*);
ibv_xrcd* OpenXrcd(ibv_context*, ibv_xrcd_init_attr*);
int CloseXrcd(ibv_xrcd*);
ibv_qp* OpenQp(ibv_context*, ibv_qp_open_attr*);
ibv_mw* AllocMw(ibv_pd*, ibv_mw_type);
int BindMw(ibv_qp*, ibv_mw*, ibv_mw_bind*);
int DeallocMw(ibv_mw*);
int AdviseMr(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t);  // pd_mr.cc
ibv_mr* AllocNullMr(ibv_pd*);                                                // pd_mr.cc
// Thread and parent domains (domains.cc); ibv_dealloc_pd of a parent domain comes here too.
ibv_td* AllocTd(ibv_context*, ibv_td_init_attr*);
int DeallocTd(ibv_td*);
ibv_pd* AllocParentDomain(ibv_context*, ibv_parent_domain_init_attr*);
int DeallocParentDomain(ibv_pd*);
// Device memory (dm.cc).
ibv_dm* AllocDm(ibv_context*, ibv_alloc_dm_attr*);
int FreeDm(ibv_dm*);
ibv_mr* RegDmMr(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int);
// Flow steering (flow.cc).
ibv_flow* CreateFlow(ibv_qp*, ibv_flow_attr*);
int DestroyFlow(ibv_flow*);
// Flow counters (counters.cc).
ibv_counters* CreateCounters(ibv_context*, ibv_counters_init_attr*);
int DestroyCounters(ibv_counters*);
int AttachCountersPointFlow(ibv_counters*, ibv_counter_attach_attr*, ibv_flow*);
int ReadCounters(ibv_counters*, uint64_t*, uint32_t, uint32_t);
core::FlowCounters* CoreOf(ibv_counters* counters);
// ESP flow actions (flow_action.cc).
ibv_flow_action* CreateFlowActionEsp(ibv_context*, ibv_flow_action_esp_attr*);
int ModifyFlowActionEsp(ibv_flow_action*, ibv_flow_action_esp_attr*);
int DestroyFlowAction(ibv_flow_action*);
core::FlowActionEsp* CoreOf(ibv_flow_action* action);
// Receive work queues and RSS indirection tables (wq.cc).
ibv_wq* CreateWq(ibv_context*, ibv_wq_init_attr*);
int ModifyWq(ibv_wq*, ibv_wq_attr*);
int DestroyWq(ibv_wq*);
ibv_rwq_ind_table* CreateRwqIndTable(ibv_context*, ibv_rwq_ind_table_init_attr*);
int DestroyRwqIndTable(ibv_rwq_ind_table*);
core::RwqIndTable* CoreOf(ibv_rwq_ind_table* table);

// The bind request of window `mw` taking R_Key `rkey` (abi/verbs/mw.cc).
Status ToBindRequest(ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info, transport::BindRequest* out);

}  // namespace softverbs::abi
