// Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3), ibv_dealloc_mw(3)) and the bind request shared
// by the three ways to post one: ibv_bind_mw (type 1), IBV_WR_BIND_MW in ibv_post_send and
// ibv_wr_bind_mw (ibv_wr_post(3)).
#include <memory>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/strings.h"
#include "core/mw.h"

namespace softverbs::abi {

Status ToBindRequest(ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info, transport::BindRequest* out) {
  if (mw == nullptr) return Invalid("the bind names no memory window (mw is NULL)");
  // ibv_alloc_mw(3): the window allows access "to a subset of the MR to which it was bound";
  // only an unbind (type 1, length 0) names no MR.
  if (info.mr == nullptr && info.length != 0) return Invalid("bind_info.mr is NULL with a non-zero length");
  out->window = ToSv(mw)->core->handle();
  out->rkey = rkey;
  out->mr_key = info.mr != nullptr ? info.mr->lkey : 0;
  out->addr = info.addr;
  out->length = info.length;
  out->access = info.mw_access_flags;
  return Status::Ok();
}

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  auto mw = core::Mw::Allocate(*ToSv(pd)->core, static_cast<uint32_t>(type));
  if (!mw.ok()) return ReturnNull<ibv_mw>("ibv_alloc_mw", Name(pd), mw.status());
  auto* m = new SvMw{};
  m->core = std::move(mw.value());
  m->mw.context = pd->context;
  m->mw.pd = pd;
  m->mw.rkey = m->core->handle();
  m->mw.handle = m->core->handle();
  m->mw.type = type;
  return &m->mw;
}

int DeallocMw(ibv_mw* mw) {
  delete ToSv(mw);
  return 0;
}

// ibv_bind_mw(3): posts a bind of a type 1 window; on success mw->rkey holds the R_Key the
// window has once the bind completes (the low 8 bits advance, ibv_inc_rkey).
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (mw == nullptr || bind == nullptr) return ReturnErrno("ibv_bind_mw", Name(qp), Invalid("mw or mw_bind is NULL"));
  if (mw->type != IBV_MW_TYPE_1)
    return ReturnErrno("ibv_bind_mw", Name(qp),
                       Invalid("mw " + Hex(mw->handle) + " is a type 2 window: post IBV_WR_BIND_MW instead (ibv_bind_mw(3))"));
  transport::SendWr wr;
  wr.wr_id = bind->wr_id;
  wr.opcode = transport::WrOpcode::kBindMw;
  wr.flags = bind->send_flags;
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  Status s = ToBindRequest(mw, rkey, bind->bind_info, &wr.bind);
  if (s.ok()) s = ToSv(qp)->core->PostSend(wr);
  if (!s.ok()) return ReturnErrno("ibv_bind_mw", Name(qp), s);
  mw->rkey = rkey;
  return 0;
}

}  // namespace softverbs::abi
