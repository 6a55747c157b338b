// Receive work queues and RSS indirection tables: ibv_create_wq(3), ibv_modify_wq(3),
// ibv_destroy_wq, ibv_post_wq_recv, ibv_create_rwq_ind_table(3), ibv_destroy_rwq_ind_table
// (the verbs_context ops verbs.h's inline functions call). The rules are core/wq.cc.
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "core/wq.h"

namespace softverbs::abi {
namespace {

struct SvWq {
  ibv_wq wq;
  std::unique_ptr<core::Wq> core;
};

struct SvRwqIndTable {
  ibv_rwq_ind_table table;
  std::unique_ptr<core::RwqIndTable> core;
};

SvWq* ToSvWq(ibv_wq* wq) { return reinterpret_cast<SvWq*>(wq); }

std::string WqName(const ibv_wq* wq) { return ObjectName("wq", wq->wq_num); }

int PostWqRecv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  transport::RecvSge sges[transport::kMaxSge];
  for (; wr != nullptr; wr = wr->next) {
    Status s = Status::Ok();
    if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(ToSvWq(wq)->core->max_sge()))
      s = Invalid("num_sge " + std::to_string(wr->num_sge) + " is outside 0..max_sge");
    for (int i = 0; s.ok() && i < wr->num_sge; ++i)
      sges[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    if (s.ok()) s = ToSvWq(wq)->core->PostRecv(wr->wr_id, sges, static_cast<uint32_t>(wr->num_sge));
    if (!s.ok()) {
      *bad_wr = wr;
      return ReturnErrno("ibv_post_wq_recv", WqName(wq), s);
    }
  }
  return 0;
}

}  // namespace

ibv_wq* CreateWq(ibv_context* context, ibv_wq_init_attr* attr) {
  const char* verb = "ibv_create_wq";
  if (attr->comp_mask & ~IBV_WQ_INIT_ATTR_FLAGS)
    return ReturnNull<ibv_wq>(verb, context->device->name, Invalid("comp_mask has unknown bits"));
  if ((attr->pd && attr->pd->context != context) || (attr->cq && attr->cq->context != context))
    return ReturnNull<ibv_wq>(verb, context->device->name, Invalid("pd and cq must belong to this context"));
  const uint32_t flags = (attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) ? attr->create_flags : 0;
  auto core = core::Wq::Create(*ToSv(context)->core, attr->pd ? ToSv(attr->pd)->core : nullptr,
                               attr->cq ? ToSv(attr->cq)->core.get() : nullptr, attr->wq_type, attr->max_wr,
                               attr->max_sge, flags);
  if (!core.ok()) return ReturnNull<ibv_wq>(verb, context->device->name, core.status());
  auto* w = new (std::nothrow) SvWq{};
  if (w == nullptr) return ReturnNull<ibv_wq>(verb, context->device->name, NoMemory("out of memory"));
  w->core = std::move(core.value());
  ibv_wq& q = w->wq;
  q.context = context;
  q.wq_context = attr->wq_context;
  q.pd = attr->pd;
  q.cq = attr->cq;
  q.wq_num = w->core->wq_num();
  q.handle = q.wq_num;
  q.state = IBV_WQS_RESET;
  q.wq_type = attr->wq_type;
  q.post_recv = PostWqRecv;
  // The actual sizes (ibv_create_wq(3): max_wr and max_sge are written back).
  attr->max_wr = w->core->max_wr();
  attr->max_sge = w->core->max_sge();
  return &q;
}

int ModifyWq(ibv_wq* wq, ibv_wq_attr* attr) {
  Status s = ToSvWq(wq)->core->Modify(attr->attr_mask, static_cast<core::WqState>(attr->wq_state),
                                      static_cast<core::WqState>(attr->curr_wq_state), attr->flags, attr->flags_mask);
  if (!s.ok()) return ReturnErrno("ibv_modify_wq", WqName(wq), s);
  wq->state = static_cast<ibv_wq_state>(ToSvWq(wq)->core->state());
  return 0;
}

int DestroyWq(ibv_wq* wq) {
  if (int n = ToSvWq(wq)->core->users().count(); n > 0)
    return ReturnErrno("ibv_destroy_wq", WqName(wq),
                       Busy("the WQ is listed by " + std::to_string(n) + " indirection table(s)"));
  delete ToSvWq(wq);
  return 0;
}

ibv_rwq_ind_table* CreateRwqIndTable(ibv_context* context, ibv_rwq_ind_table_init_attr* attr) {
  const char* verb = "ibv_create_rwq_ind_table";
  if (attr->comp_mask != 0) return ReturnNull<ibv_rwq_ind_table>(verb, context->device->name, Invalid("comp_mask must be 0"));
  if (attr->log_ind_tbl_size > core::kMaxLogIndTableSize || attr->ind_tbl == nullptr)
    return ReturnNull<ibv_rwq_ind_table>(
        verb, context->device->name,
        Invalid("log_ind_tbl_size " + std::to_string(attr->log_ind_tbl_size) + " exceeds rss_caps' 2^" +
                std::to_string(core::kMaxLogIndTableSize) + " entries (or ind_tbl is NULL)"));
  std::vector<core::Wq*> wqs;
  for (uint32_t i = 0; i < (1u << attr->log_ind_tbl_size); ++i) {
    ibv_wq* w = attr->ind_tbl[i];
    if (w != nullptr && w->context != context)
      return ReturnNull<ibv_rwq_ind_table>(verb, context->device->name, Invalid("a WQ of another context"));
    wqs.push_back(w ? ToSvWq(w)->core.get() : nullptr);
  }
  auto core = core::RwqIndTable::Create(attr->log_ind_tbl_size, std::move(wqs));
  if (!core.ok()) return ReturnNull<ibv_rwq_ind_table>(verb, context->device->name, core.status());
  auto* t = new (std::nothrow) SvRwqIndTable{};
  if (t == nullptr) return ReturnNull<ibv_rwq_ind_table>(verb, context->device->name, NoMemory("out of memory"));
  t->core = std::move(core.value());
  t->table.context = context;
  t->table.ind_tbl_handle = static_cast<int>(t->core->number());
  t->table.ind_tbl_num = static_cast<int>(t->core->number());
  return &t->table;
}

int DestroyRwqIndTable(ibv_rwq_ind_table* table) {
  auto* t = reinterpret_cast<SvRwqIndTable*>(table);
  if (int n = t->core->users().count(); n > 0)
    return ReturnErrno("ibv_destroy_rwq_ind_table", ObjectName("rwq_ind_table", table->ind_tbl_num),
                       Busy("the table is used by " + std::to_string(n) + " QP(s)"));
  delete t;
  return 0;
}

core::RwqIndTable* CoreOf(ibv_rwq_ind_table* table) {
  return table ? reinterpret_cast<SvRwqIndTable*>(table)->core.get() : nullptr;
}

}  // namespace softverbs::abi
