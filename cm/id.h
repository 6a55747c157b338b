// A communication identifier (rdma_create_id(3)) and the CM protocol it speaks: REQ / REP /
// RTU / REJ / DREQ / DREP for connected QPs and SIDR_REQ / SIDR_REP for UD (IBA vol 1 ch. 12),
// one conduit per connection (cm/conduit.h: a socket to a peer of this host, IB CM MADs on QP1
// to another host). Every verb checks the state table (id_state.cc) and its arguments before
// changing anything. All members are guarded by the channel's mutex.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "cm/address.h"
#include "cm/channel.h"
#include "cm/conduit.h"
#include "cm/event.h"
#include "cm/id_state.h"
#include "cm/timer.h"
#include "cm/wire.h"

namespace softverbs::cm {

// What a connected QP's RTR and RTS transitions need (ibv_modify_qp(3)'s RC/UC attributes).
struct ConnectedPath {
  uint32_t dest_qpn = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  Gid dgid{};
  uint8_t sgid_index = 0;
  uint8_t port_num = 1;
  uint8_t path_mtu = 3;
  uint8_t traffic_class = 0;
  uint8_t max_rd_atomic = 0;       // outstanding RDMA READ/atomics this side initiates
  uint8_t max_dest_rd_atomic = 0;  // ... it serves
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t timeout = 14;
  uint8_t min_rnr_timer = 12;
};

// The QP an identifier drives (implemented in abi/rdmacm over ibv_modify_qp).
class QpDriver {
 public:
  virtual ~QpDriver() = default;
  virtual uint32_t qp_num() const = 0;
  virtual Status ToRtrRts(const ConnectedPath& path) = 0;
  virtual Status ToError() = 0;
  // A UD QP joining / leaving a multicast group (ibv_attach_mcast(3)).
  virtual Status Attach(const Gid& mgid) = 0;
  virtual Status Detach(const Gid& mgid) = 0;
  // The peer's REP arrived with `ece`: librdmacm hands it to the QP's provider (ibv_set_ece)
  // before RTR / RTS and may refuse the connection (ucma_process_conn_resp_ece).
  virtual Status TakeResponseEce(const Ece& ece) {
    (void)ece;
    return Status::Ok();
  }
};

// Port spaces (enum rdma_port_space values).
enum class PortSpace : uint16_t { kIpoib = 0x0002, kTcp = 0x0106, kUdp = 0x0111, kIb = 0x013F };

// The default Q_Key of RDMA_PS_UDP identifiers (rdma_cma.h RDMA_UDP_QKEY).
constexpr uint32_t kUdpQkey = 0x01234567;

class MadConduit;
class MadInbox;

class Id : public Source, private Timer::Owner {
 public:
  Id(Channel* channel, PortSpace ps, bool ud);
  ~Id() override;

  // The abi wrapper of this identifier (rdma_cm_id), set once by abi/.
  void* user() const { return user_; }
  void set_user(void* user) { user_ = user; }
  Channel* channel() const { return channel_; }
  Id* listener() const { return listener_; }
  bool ud() const { return ud_; }
  PortSpace port_space() const { return ps_; }
  IdState state() const { return state_; }
  const sockaddr_storage& src() const { return src_; }
  const sockaddr_storage& dst() const { return dst_; }
  bool has_device() const { return has_device_; }
  const DeviceView& device() const { return device_; }
  uint8_t sgid_index() const { return sgid_index_; }
  uint32_t qkey() const { return qkey_; }
  int unacked() const { return unacked_; }
  // The peer's REQ (passive) or REP (active), once received.
  const Message& peer() const { return peer_; }
  void AddUnacked(int n) { unacked_ += n; }

  // Options (rdma_set_option(3)).
  void set_tos(uint8_t tos) { tos_ = tos; }
  void set_ack_timeout(uint8_t timeout) {
    ack_timeout_ = timeout;
    ack_timeout_set_ = true;
  }
  void set_afonly(bool afonly) { afonly_ = afonly; }

  // A QP attached after rdma_join_multicast joins the id's groups too.
  void AttachQp(QpDriver* qp);
  QpDriver* qp() const { return qp_; }

  // The verbs. `device` is softverbs0 as abi/ reads it.
  Status BindAddr(const sockaddr* addr, const DeviceView& device);
  Status ResolveAddr(const sockaddr* src, const sockaddr* dst, const DeviceView& device);
  Status ResolveRoute();
  Status Listen(int backlog, const DeviceView& device);
  Status Connect(const ConnParam& param);
  Status Accept(const ConnParam& param);
  // `reason`: the REJ's (28 rdma_reject, 35 rdma_reject_ece); a UD identifier sends SIDR_REP status 1.
  Status Reject(const std::vector<uint8_t>& private_data, int reason = kRejConsumerDefined);
  Status Establish();
  Status Disconnect();
  Status NotifyCommEstablished();
  // rdma_join_multicast(3) / rdma_leave_multicast(3). A send-only member's QP is not attached.
  Status JoinMulticast(const sockaddr* group, bool send_only, void* context);
  Status LeaveMulticast(const sockaddr* group);
  // Detaches the QP from every group (before the QP goes away); the memberships stay.
  void DetachAll();
  // The path of the connection made or being made (rdma_init_qp_attr(3) for RTR/RTS), once the
  // peer's QP is known.
  Result<ConnectedPath> Path() const;
  // Moves this identifier to another channel (rdma_migrate_id(3)); both channels locked.
  void MoveTo(Channel* channel);
  // Called by destroy with the lock held: leaves the epoll set, closes the socket.
  void Close();

  void OnReadable() override;

  // How long a REQ / REP waits for its answer (tests shorten it).
  void set_timeout_for_testing(int exchange_ms) { exchange_timeout_ms_ = exchange_ms; }
  // The MAD path's retransmission interval, retry count and timewait (tests shorten them).
  void set_mad_timers_for_testing(int retry_ms, int max_retries, int timewait_ms) {
    mad_retry_ms_ = retry_ms;
    mad_max_retries_ = max_retries;
    mad_timewait_ms_ = timewait_ms;
  }
  // Whether this identifier's peer is on another host (its messages are MADs on QP1).
  bool on_wire() const { return on_wire_; }

 private:
  void OnTimeout() override;
  // --- the MAD path (docs/cm.md, "Across hosts") ---
  // A listener's REQs from other hosts (its MadInbox) in the channel's epoll set.
  class InboxWatch : public Source {
   public:
    explicit InboxWatch(Id* id) : id_(id) {}
    void OnReadable() override { id_->OnWireRequests(); }

   private:
    Id* id_;
  };
  Status SendToPeer(const Message& m);
  // Closes the peer's transport: the socket, or the MAD conduit and its comm ID.
  void DropConduit();
  int WatchedFd() const;  // the listening socket, or the conduit's fd; -1 without
  Status WireSource(const sockaddr* dst, const DeviceView& device, sockaddr_storage* source) const;
  Status ConnectOnWire(const Message& m);
  Status ListenOnWire();
  void OnWireRequests();
  // Retransmits the last REQ / REP / DREQ, or waits out an MRA; false when retries ran out.
  bool RetransmitOrWait();
  void StartTimewait();
  void AdoptRequest(const Message& message, std::unique_ptr<Conduit> conduit, MadConduit* mad);
  void ArmTimeout(int milliseconds);
  class PendingRequest;
  Status Check(IdVerb verb) const;
  void Emit(EventType type, int status);
  void EmitConnection(EventType type, int status, const Message& from);
  void OnMessage(const Message& message);
  void OnPeerGone();
  // An established connection ended: DISCONNECTED now, TIMEWAIT_EXIT once its QP's timewait is over.
  void Disconnected();
  void OnListenerReadable();
  void OnRequest(PendingRequest* pending, const Message* request);  // nullptr: drop it
  void StopWatching();
  Status CheckPrivateData(MessageType type, size_t len) const;
  Message Compose(MessageType type) const;
  ConnectedPath PathFrom(uint8_t max_rd_atomic, uint8_t max_dest_rd_atomic, uint8_t retry_cnt,
                         uint8_t rnr_retry) const;

  Channel* channel_;
  void* user_ = nullptr;
  Id* listener_ = nullptr;  // the listener of a passive identifier, until its request is delivered
  bool passive_ = false;
  PortSpace ps_;
  bool ud_;
  IdState state_ = IdState::kIdle;
  sockaddr_storage src_{};
  sockaddr_storage dst_{};
  bool has_device_ = false;
  DeviceView device_;
  uint8_t sgid_index_ = 0;
  uint8_t tos_ = 0;
  uint8_t ack_timeout_ = 14;  // 4.096 us * 2^14 = 67 ms, RDMA_OPTION_ID_ACK_TIMEOUT changes it
  bool afonly_ = false;
  uint32_t psn_ = 0;
  uint32_t qkey_ = kUdpQkey;
  QpDriver* qp_ = nullptr;
  UniqueFd socket_;                    // the bound (listening) service socket
  std::unique_ptr<Conduit> conduit_;   // the connection's messages: SocketConduit or MadConduit
  MadConduit* mad_ = nullptr;          // conduit_ when it is the MAD path
  bool on_wire_ = false;               // the destination is another host's
  uint8_t path_mtu_ = 0;               // the REQ's path MTU (passive, MAD path); 0: the port's
  bool ack_timeout_set_ = false;       // RDMA_OPTION_ID_ACK_TIMEOUT given
  std::unique_ptr<MadInbox> wire_requests_;  // a listener's REQs from other hosts
  std::unique_ptr<InboxWatch> inbox_watch_;
  int retries_ = 0;                    // retransmissions of the MAD awaiting its answer
  bool dreq_pending_ = false;          // our DREQ awaits its DREP
  int mad_retry_ms_ = 0;               // set from cm/agent.h in the constructor
  int mad_max_retries_ = 0;
  int mad_timewait_ms_ = -1;           // -1: cm_convert_to_ms(the QP's ACK timeout)
  bool watched_ = false;
  bool peer_gone_ = false;
  bool in_timewait_ = false;  // DISCONNECTED was reported for a QP; TIMEWAIT_EXIT is due
  Message peer_{};               // the peer's REQ (passive) or REP (active)
  ConnParam local_;              // what this side sent in its REQ / REP
  int unacked_ = 0;
  Timer timer_{this};
  // The kernel's rdma_cm: a REQ or REP is sent CMA_MAX_CM_RETRIES (15) more times, each after
  // CMA_CM_RESPONSE_TIMEOUT (20: 4.096 us * 2^20 = 4.3 s) → about 69 s.
  int exchange_timeout_ms_ = 16 * 4295;
  std::vector<std::unique_ptr<PendingRequest>> pending_;
  struct Membership {
    Gid mgid{};
    bool send_only = false;
    bool attached = false;
  };
  std::vector<Membership> groups_;
};

}  // namespace softverbs::cm
