// Completion queues (ibv_create_cq, ibv_create_cq_ex and its polling interface), completion
// channels and CQ events.
#include <unistd.h>

#include <cstring>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/convert.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "transport/cq_ring.h"

using namespace softverbs;
using namespace softverbs::abi;

namespace softverbs::abi {

std::string Name(const ibv_cq* cq) { return ObjectName("cq", cq->handle); }

// The completion flags an ibv_cq_ex can deliver: the standard ones, both timestamps, the
// CVLAN and flow tag of raw packet QPs' receives, and the TMH of tag-matched receives.
constexpr uint64_t kDeliverableWcFlags =
    static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG |
    IBV_WC_EX_WITH_TM_INFO;

namespace {

SvCq* Cur(ibv_cq_ex* cq) { return ToSv(cq); }

// ibv_start_poll / ibv_next_poll position the CQ on one completion; ENOENT when empty.
int Advance(ibv_cq_ex* cqx) {
  SvCq* cq = Cur(cqx);
  if (cq->core->Poll(&cq->current, 1, &cq->current_tm) == 0) return ENOENT;
  cqx->wr_id = cq->current.wr_id;
  cqx->status = static_cast<ibv_wc_status>(cq->current.status);
  return 0;
}

int StartPoll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0)
    return ReturnErrno("ibv_start_poll", Name(ibv_cq_ex_to_cq(cq)), Invalid("attr->comp_mask must be 0"));
  SvCq* c = Cur(cq);
  if (!c->single_threaded) c->poll_mu.lock();
  int r = Advance(cq);
  // ibv_create_cq_ex(3): after ENOENT from start_poll, end_poll is not called.
  if (r != 0 && !c->single_threaded) c->poll_mu.unlock();
  return r;
}
int NextPoll(ibv_cq_ex* cq) { return Advance(cq); }
void EndPoll(ibv_cq_ex* cq) {
  SvCq* c = Cur(cq);
  if (!c->single_threaded) c->poll_mu.unlock();
}
ibv_wc_opcode ReadOpcode(ibv_cq_ex* cq) { return static_cast<ibv_wc_opcode>(Cur(cq)->current.opcode); }
uint32_t ReadVendorErr(ibv_cq_ex* cq) { return Cur(cq)->current.vendor_err; }
uint32_t ReadByteLen(ibv_cq_ex* cq) { return Cur(cq)->current.byte_len; }
__be32 ReadImmData(ibv_cq_ex* cq) { return Cur(cq)->current.imm_data; }
uint32_t ReadQpNum(ibv_cq_ex* cq) { return Cur(cq)->current.qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* cq) { return Cur(cq)->current.src_qp; }
unsigned int ReadWcFlags(ibv_cq_ex* cq) { return Cur(cq)->current.wc_flags; }
uint32_t ReadSlid(ibv_cq_ex* cq) { return Cur(cq)->current.slid; }
uint8_t ReadSl(ibv_cq_ex* cq) { return Cur(cq)->current.sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex* cq) { return Cur(cq)->current.dlid_path_bits; }
uint64_t ReadCompletionTs(ibv_cq_ex* cq) { return Cur(cq)->current.timestamp_ns; }
uint64_t ReadCompletionWallclockNs(ibv_cq_ex* cq) { return Cur(cq)->current.wallclock_ns; }
// Raw packet receives: the stripped VLAN TCI and the steering rule's tag (0 without one).
uint16_t ReadCvlan(ibv_cq_ex* cq) { return Cur(cq)->current.cvlan; }
uint32_t ReadFlowTag(ibv_cq_ex* cq) { return Cur(cq)->current.flow_tag; }
// The TMH of a tag-matched receive (IBV_WC_TM_MATCH); zeros for any other completion, as mlx5
// reports for unexpected messages.
void ReadTmInfo(ibv_cq_ex* cq, ibv_wc_tm_info* info) {
  memset(info, 0, sizeof(*info));
  info->tag = Cur(cq)->current_tm.tag;
  info->priv = Cur(cq)->current_tm.priv;
}

}  // namespace

void InitCqEx(SvCq* cq) {
  ibv_cq_ex& x = cq->cqx;
  x.start_poll = StartPoll;
  x.next_poll = NextPoll;
  x.end_poll = EndPoll;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImmData;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  x.read_completion_ts = ReadCompletionTs;
  x.read_cvlan = ReadCvlan;
  x.read_flow_tag = ReadFlowTag;
  x.read_tm_info = ReadTmInfo;
  x.read_completion_wallclock_ns = ReadCompletionWallclockNs;
}

// Shared by ibv_create_cq and the create_cq_ex context op.
ibv_cq_ex* CreateCq(const char* verb, ibv_context* context, int cqe, void* cq_context,
                    ibv_comp_channel* channel, int comp_vector, uint64_t wc_flags, bool single_threaded) {
  // Producers read the clocks only for a CQ that asked for them.
  uint32_t stamp = transport::kCqStampNone;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) stamp |= transport::kCqStampDevice;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) stamp |= transport::kCqStampWallclock;
  auto core = core::Cq::Create(*ToSv(context)->core, cqe, channel ? ToSv(channel)->core.get() : nullptr,
                               comp_vector, stamp);
  if (!core.ok()) return ReturnNull<ibv_cq_ex>(verb, context->device->name, core.status());
  auto* cq = new (std::nothrow) SvCq{};
  if (cq == nullptr) return ReturnNull<ibv_cq_ex>(verb, context->device->name, NoMemory("out of memory"));
  cq->core = std::move(core.value());
  cq->core->set_user_handle(cq);
  cq->wc_flags = wc_flags;
  cq->single_threaded = single_threaded;
  ibv_cq_ex& x = cq->cqx;
  x.context = context;
  x.channel = channel;
  x.cq_context = cq_context;
  x.handle = cq->core->handle();
  x.cqe = static_cast<int>(cq->core->capacity());
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  InitCqEx(cq);
  return &x;
}

ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  const char* verb = "ibv_create_cq_ex";
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
    return ReturnNull<ibv_cq_ex>(verb, context->device->name, Invalid("comp_mask has unknown bits"));
  // IBV_CQ_INIT_ATTR_MASK_PD: "parent_domain" must be a parent domain of this context (mlx5_create_cq).
  const bool on_parent = attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD;
  if (on_parent && (attr->parent_domain == nullptr || attr->parent_domain->context != context ||
                    !ToSv(attr->parent_domain)->parent))
    return ReturnNull<ibv_cq_ex>(verb, context->device->name,
                                 Invalid("IBV_CQ_INIT_ATTR_MASK_PD: parent_domain is not a parent domain of this context"));
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
    return ReturnNull<ibv_cq_ex>(verb, context->device->name, Invalid("flags has unknown bits"));
  if (attr->wc_flags & ~kDeliverableWcFlags)
    return ReturnNull<ibv_cq_ex>(verb, context->device->name, NotSupported(
        "wc_flags asks for fields softverbs0 cannot deliver: " +
        std::to_string(attr->wc_flags & ~kDeliverableWcFlags)));
  // A CQ on a parent domain with a thread domain is polled by that thread only (ibv_alloc_td(3):
  // objects under a TD "disable internal locking"; mlx5 drops the CQ lock the same way).
  const bool single_threaded =
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) ||
      (on_parent && ToSv(attr->parent_domain)->parent->td != nullptr);
  SvPd* parent = nullptr;
  const size_t ring = sizeof(transport::CqRing) + sizeof(transport::CqEntry) * (static_cast<size_t>(attr->cqe) + 1);
  if (Status s = UseParentDomain(verb, on_parent ? attr->parent_domain : nullptr, ring,
                                 static_cast<size_t>(sysconf(_SC_PAGESIZE)), MLX5DV_RES_TYPE_CQ, &parent);
      !s.ok())
    return ReturnNull<ibv_cq_ex>(verb, context->device->name, s);
  ibv_cq_ex* cq = CreateCq(verb, context, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                           static_cast<int>(attr->comp_vector), attr->wc_flags, single_threaded);
  if (cq == nullptr) {
    ReleaseParentDomain(parent);
  } else {
    ToSv(cq)->parent_domain = parent;
    ToSv(cq)->extended = true;
  }
  return cq;
}

int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  // ibv_poll_cq(3): a negative value on failure.
  if (num_entries <= 0)
    return num_entries == 0 ? 0 : ReturnNegErrno("ibv_poll_cq", Name(cq), Invalid("num_entries is negative"));
  // Each completion converted from its ring entry into the caller's array: no copy between.
  return ToSv(cq)->core->PollWith(num_entries, [wc](const core::Completion& c, const transport::CqEntry&) mutable {
    ToIbv(c, wc++);
  });
}

int ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  Status s = ToSv(cq)->core->RequestNotify(solicited_only != 0);
  return s.ok() ? 0 : ReturnErrno("ibv_req_notify_cq", Name(cq), s);
}

}  // namespace softverbs::abi

SV_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto core = core::CompChannel::Create(*ToSv(context)->core);
  if (!core.ok()) return ReturnNull<ibv_comp_channel>("ibv_create_comp_channel", "", core.status());
  auto* ch = new (std::nothrow) SvCompChannel{};
  if (ch == nullptr) return ReturnNull<ibv_comp_channel>("ibv_create_comp_channel", "", NoMemory("out of memory"));
  ch->core = std::move(core.value());
  ch->channel.context = context;
  ch->channel.fd = ch->core->fd();
  ch->channel.refcnt = 0;
  return &ch->channel;
}

SV_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  SvCompChannel* ch = ToSv(channel);
  // ibv_destroy_comp_channel(3): fails while CQs are still associated with the channel.
  if (int n = ch->core->users().count(); n > 0)
    return ReturnErrno("ibv_destroy_comp_channel", ObjectName("channel fd", channel->fd),
                       Busy(std::to_string(n) + " CQ(s) still use this channel"));
  delete ch;
  return 0;
}

SV_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                int comp_vector) {
  return ibv_cq_ex_to_cq(CreateCq("ibv_create_cq", context, cqe, cq_context, channel, comp_vector,
                                  IBV_WC_STANDARD_FLAGS, false));
}
SV_DEFAULT_VERSION(ibv_create_cq);

SV_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  Status s = ToSv(cq)->core->Resize(cqe);
  if (!s.ok()) return ReturnErrno("ibv_resize_cq", Name(cq), s);
  cq->cqe = static_cast<int>(ToSv(cq)->core->capacity());
  return 0;
}
SV_DEFAULT_VERSION(ibv_resize_cq);

SV_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  SvCq* c = ToSv(cq);
  if (int n = c->core->users().count(); n > 0)
    return ReturnErrno("ibv_destroy_cq", Name(cq), Busy(std::to_string(n) + " QP(s)/SRQ(s) still complete here"));
  c->core->DetachFromChannel();
  c->core->WaitForAcks();
  ToSv(cq->context)->core->DropAsyncEventsFor(cq);
  pthread_cond_destroy(&cq->cond);
  pthread_mutex_destroy(&cq->mutex);
  ReleaseParentDomain(c->parent_domain);
  delete c;
  return 0;
}
SV_DEFAULT_VERSION(ibv_destroy_cq);

SV_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  auto got = ToSv(channel)->core->Wait();
  if (!got.ok()) {
    errno = got.status().code();  // EAGAIN on a non-blocking channel: not worth a log line
    return -1;
  }
  // The core CQ is owned by exactly one SvCq; find it by its handle back-pointer.
  core::Cq* core = got.value();  // already counted by the channel
  SvCq* sv = static_cast<SvCq*>(core->user_handle());
  *cq = ibv_cq_ex_to_cq(&sv->cqx);
  *cq_context = sv->cqx.cq_context;
  return 0;
}
SV_DEFAULT_VERSION(ibv_get_cq_event);

SV_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) { ToSv(cq)->core->AckEvents(nevents); }
SV_DEFAULT_VERSION(ibv_ack_cq_events);
