// Queue pairs: creation (ibv_create_qp(3), ibv_create_qp_ex(3)), the attributes ibv_modify_qp
// applies once core/qp_state_machine has accepted them, and ibv_query_qp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "core/cq.h"
#include "core/dc.h"
#include "core/path_migration.h"
#include "core/pd.h"
#include "transport/qp_endpoint.h"
#include "transport/recv_queue.h"
#include "transport/rendezvous.h"
#include "transport/link.h"
#include "transport/requester.h"
#include "core/srq.h"
#include "core/types.h"
#include "core/xrcd.h"

namespace softverbs::core {

using transport::QpEndpoint;
using transport::RecvQueue;

class Context;
class RawQp;
class RwqIndTable;

// enum ibv_qp_create_flags
namespace create_flag {
inline constexpr uint32_t kBlockSelfMcastLb = 1u << 1;
inline constexpr uint32_t kScatterFcs = 1u << 8;
inline constexpr uint32_t kCvlanStripping = 1u << 9;
inline constexpr uint32_t kSourceQpn = 1u << 10;
inline constexpr uint32_t kPciWriteEndPadding = 1u << 11;
}  // namespace create_flag

// enum ibv_qp_create_send_ops_flags
namespace send_op {
inline constexpr uint64_t kRdmaWrite = 1u << 0;
inline constexpr uint64_t kRdmaWriteWithImm = 1u << 1;
inline constexpr uint64_t kSend = 1u << 2;
inline constexpr uint64_t kSendWithImm = 1u << 3;
inline constexpr uint64_t kRdmaRead = 1u << 4;
inline constexpr uint64_t kAtomicCmpSwp = 1u << 5;
inline constexpr uint64_t kAtomicFetchAdd = 1u << 6;
inline constexpr uint64_t kLocalInv = 1u << 7;
inline constexpr uint64_t kBindMw = 1u << 8;
inline constexpr uint64_t kSendWithInv = 1u << 9;
inline constexpr uint64_t kTso = 1u << 10;
inline constexpr uint64_t kAtomicWrite = 1u << 12;
}  // namespace send_op

// ibv_qp_init_attr_ex in the core's terms. Which optional fields are present is recorded by the
// has_* members (from comp_mask).
struct QpInitAttributes {
  QpType type = QpType::kRc;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  QpCaps cap;
  bool sq_sig_all = false;
  bool has_xrcd = false;
  Xrcd* xrcd = nullptr;  // XRC_RECV: its domain (IBV_QP_INIT_ATTR_XRCD)
  bool has_create_flags = false;
  uint32_t create_flags = 0;
  bool has_max_tso_header = false;
  uint16_t max_tso_header = 0;
  bool has_rwq_ind_table = false;
  bool has_rx_hash = false;
  bool has_send_ops_flags = false;
  uint64_t send_ops_flags = 0;
  uint32_t source_qpn = 0;
  // IBV_QP_INIT_ATTR_IND_TABLE / RX_HASH: an RSS RAW_PACKET QP (core/raw_qp.h).
  RwqIndTable* ind_table = nullptr;
  uint8_t rx_hash_function = 0;
  std::vector<uint8_t> rx_hash_key;
  uint64_t rx_hash_fields_mask = 0;
  // mlx5dv_create_qp(3) only (core/dc.h): the DC role and mlx5dv_qp_init_attr.create_flags.
  DcInit dc;
  bool has_mlx5_create_flags = false;
  uint32_t mlx5_create_flags = 0;
};

class Qp : private transport::RequesterHost, private transport::RendezvousIssuer {
 public:
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }

  // Checks every field (ibv_create_qp_ex(3)) and allocates a host-wide QP number. `attr.cap` is
  // updated to the actual capabilities (>= the request; receive caps are 0 with an SRQ).
  static Result<std::unique_ptr<Qp>> Create(Context& context, QpInitAttributes& attr);
  ~Qp();

  uint32_t qp_num() const { return qpn_; }
  QpType type() const { return init_.type; }
  DcRole dc_role() const { return init_.dc.role; }
  const QpInitAttributes& init() const { return init_; }
  QpState state() const;

  // ibv_modify_qp: checks the whole request, then applies it; nothing changes on failure.
  Status Modify(const QpAttributes& attr, uint32_t mask);
  // ibv_query_qp: the current attributes (every one that was set) and the state.
  QpAttributes Query() const;

  // The receive queue senders take WQEs from: the QP's own, or its SRQ's (none for XRC_RECV,
  // whose messages land on the XRC SRQ each names).
  RecvQueue& recv_queue() const { return init_.srq ? init_.srq->queue() : *rq_; }
  bool has_recv_queue() const { return init_.srq != nullptr || rq_ != nullptr; }
  // Its own receive queue, whose receive completions its recv CQ notes as polled
  // (Cq::NotePolledReceive); null with an SRQ, for a raw packet QP or without one.
  RecvQueue* own_recv_queue() const { return init_.srq == nullptr && raw_ == nullptr ? rq_.get() : nullptr; }
  // The shared endpoint peers read (owner's view).
  QpEndpoint& endpoint() const;

  // The data path (qp_data.cc). ibv_post_send of one WR: a refusal leaves it unposted.
  Status PostSend(const transport::SendWr& wr);
  // ibv_post_send of a SEND, RDMA WRITE, READ or atomic with one SGE on the requester's lane
  // (transport::Requester::PostOnLane); false: not taken, nothing done -- PostSend decides.
  bool PostOnLane(const transport::LaneWr& wr);
  // mlx5dv_dci_stream_id_reset(3): a DCI stream in error serves again.
  Status ResetDciStream(uint16_t stream);
  // mlx5dv_qp_cancel_posted_send_wrs(3): the send WRs of `wr_id` not started become NOPs; the
  // QP must be in SQD. How many.
  Result<uint32_t> CancelPostedSends(uint64_t wr_id);
  // The end of one ibv_post_send list: a raw QP sends the frames it built in one batch.
  void FlushPosted() {
    if (raw_) FlushRaw();
  }
  // ibv_post_recv of one WR (QPs without an SRQ).
  Status PostRecv(uint64_t wr_id, const transport::RecvSge* sge, uint32_t num_sge);

  // Applies an error the requester or a remote initiator flagged since the last verb: ERR and
  // the flushes (called by the QP's verbs and when one of its CQs is polled). Nothing is
  // pending nearly always: then it is a few loads, inline (every post makes this check).
  void ApplyPendingError() {
    if (sig_drained_.load(std::memory_order_relaxed) || requester_error_.load(std::memory_order_relaxed) ||
        send_queue_error_.load(std::memory_order_relaxed) || init_.type == QpType::kXrcRecv ||
        endpoint_->remote_error.load(std::memory_order_relaxed) != 0)
      ApplyPendingErrorNow();
  }

  // ibv_attach_mcast(3) / ibv_detach_mcast(3): UD QPs only; ibv_destroy_qp refuses while any
  // attachment remains.
  Status AttachMcast(const Gid& mgid, uint16_t mlid);
  Status DetachMcast(const Gid& mgid);
  Status CheckDestroy() const;

  // IBV_QPT_RAW_PACKET: the Ethernet side (core/raw_qp.h); null for other types.
  RawQp* raw() const { return raw_.get(); }

 private:
  friend class RawQp;
  // ApplyPendingError once something may be pending (the loads again, in order).
  void ApplyPendingErrorNow();
  void FlushRaw();
  // The state as last published, without applying pending errors (the raw receive thread).
  QpState state_now() const { return static_cast<QpState>(state_.load(std::memory_order_acquire)); }
  // A receive completion of this QP's own (raw frames).
  void PushReceive(const transport::Completion& c);
  Qp(Context& context, const QpInitAttributes& init, uint32_t slot, std::unique_ptr<RecvQueue> rq,
     fabric::SharedRef endpoint);
  void EnterReset();
  // XRC_SEND: a destination this fabric can reach (core/xrc_qp.cc).
  Status CheckXrcPath(const QpAttributes& a, uint32_t mask);
  // The wire responder's packet sequence starts again at `psn` (ibv_modify_qp rq_psn, RESET).
  void RestartWireReceive(uint32_t psn);
  // Writes what peers need of the current attributes into the endpoint (under mu_).
  void PublishEndpoint();
  // The requester's view of the attributes (under mu_).
  transport::RequesterConfig RequesterConfigOf() const;
  // `av`'s GIDs and GRH fields as the requester sends them; whether its dgid is this host's.
  bool AddressingOf(const AddressVector& av, transport::Addressing* out) const;
  // Takes the requester's automatic path migrations into the attributes (under mu_).
  void FoldPathMigrationsLocked();
  // Moves the QP to ERR (under mu_): flushes both queues (IBA 10.3.1, 10.8.3.1).
  void EnterErrorLocked();
  // transport::RequesterHost
  void Complete(const transport::Completion& c) override;
  void EnterError() override;
  void EnterSendQueueError() override;
  void PathMigrated() override;
  void SendQueueDrained() override;
  // A stop of signature pipelining reported since: RTS -> SQD (under mu_).
  void FoldSendQueueDrainLocked();
  // transport::RendezvousIssuer (core/qp_rendezvous.cc): an RC QP on a TM SRQ READs a RoCE
  // peer's rendezvous buffer from its own send queue.
  bool CanIssueRendezvous() const override;
  bool IssueRendezvous(const transport::RendezvousRead& read) override;
  bool IssuesRendezvous() const;

  Context& context_;
  QpInitAttributes init_;
  const uint32_t slot_;
  const uint32_t qpn_;
  std::unique_ptr<RecvQueue> rq_;  // null with an SRQ
  fabric::SharedRef endpoint_ref_;
  QpEndpoint* const endpoint_;  // endpoint_ref_ in this process (an arena block never moves)
  mutable std::mutex mu_;
  QpAttributes attr_;
  std::atomic<uint32_t> state_{static_cast<uint32_t>(QpState::kReset)};  // attr_.qp_state, lock-free
  std::atomic<bool> requester_error_{false};
  std::atomic<bool> send_queue_error_{false};  // UC/UD: SQE pending (EnterSendQueueError)
  // Automatic path migrations: those the requester made, and those taken into attr_ (under mu_).
  std::atomic<uint32_t> path_migrations_{0};
  uint32_t migrations_seen_ = 0;
  std::atomic<bool> sig_drained_{false};  // signature pipelining stopped the SQ (SendQueueDrained)
  // How the requester reaches destinations: this host's QPs, and the others.
  std::unique_ptr<transport::Link> host_link_;
  std::unique_ptr<transport::Link> wire_link_;
  std::unique_ptr<transport::Requester> sq_;
  UseCount mcast_groups_;
  std::unique_ptr<RawQp> raw_;
  std::unique_ptr<Cq> own_cq_;  // an RSS QP created without CQs completes nothing: a CQ of its own
  void* user_handle_ = nullptr;
  std::shared_ptr<XrcdHold> xrcd_hold_;  // XRC_RECV: its domain lives as long as it does
  std::atomic<uint32_t> xrc_seen_errors_{0};  // XRC_RECV: the endpoint's xrc_errors last reported
};

// Copies ibv_modify_qp's attributes named by `mask` from `a` into `s` (already checked).
// `step` is what CheckModify found the request does to the path migration state.
void ApplyModify(QpAttributes& s, const QpAttributes& a, uint32_t mask, MigrationStep step = MigrationStep::kNone);

// The QP number of host table slot `slot` (QPs 0 and 1 are reserved for SMI and GSI, and small
// numbers are avoided so they are never mistaken for them).
inline uint32_t QpnOfSlot(uint32_t slot) { return slot + 0x100; }

}  // namespace softverbs::core
