// The MAD path of one identifier (docs/cm.md, "Across hosts"): its messages leave as
// IB CM MADs (cm/mad.h) through a sender the layer above binds to WireFabric::SendMad, and the
// MADs the host's CM agent finds addressed to it (by comm ID, or the listener's service ID)
// arrive through Deliver(). It keeps what a MAD needs and a Message lacks (comm IDs, TID,
// service ID, the peer's CA GUID and GID: mad::MadContext) and the last REQ/REP/DREQ for the
// retransmission timer; a REQ or REP that comes again is answered here (cm.c cm_dup_req_handler,
// cm_dup_rep_handler): the REP or RTU sent again, or, while the application has not answered
// yet, an MRA (IBA 12.6.6) so that the peer waits instead of running out of retries.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "base/event_fd.h"
#include "cm/conduit.h"
#include "cm/mad.h"

namespace softverbs::cm {

// The service timeout our MRAs announce: the kernel's rdma_cm sets CMA_CM_MRA_SETTING
// (IB_CM_MRA_FLAG_DELAY | 24, about 67 s) for a userspace consumer, whose answer waits on the
// application, and sends it only when the REQ (or REP) comes again unanswered (cm.c
// cm_dup_req_handler / cm_dup_rep_handler in MRA_REQ_SENT / MRA_REP_SENT).
inline constexpr uint8_t kMraServiceTimeout = 24;

// The MRA for the message `mraed` (0 REQ, 1 REP: IBA table 107), with the TID of the exchange.
mad::Mad MraMad(uint64_t tid, uint32_t local_comm_id, uint32_t remote_comm_id, uint8_t mraed);

// Sends one 256-byte MAD from local GID `sgid` to QP1 of `dgid`.
using MadSender = std::function<Status(const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad)>;

// Where an established connection leaves the DREQ to send for it if the process dies
// (transport/wire/last_words.h, reached through the QP1 bridge): `arm` with the connection's
// token (its local comm ID), `disarm` when the connection ends. Empty: nobody keeps it.
struct LastWordsHooks {
  std::function<void(uint64_t token, const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad)> arm;
  std::function<void(uint64_t token)> disarm;
};

class MadConduit : public Conduit {
 public:
  // `context`: the local comm ID and TID (active side: (hi_tid << 32) | comm ID, as cm.c
  // cm_form_tid), the service ID and this host's CA GUID; the rest is learnt from the peer.
  static Result<std::unique_ptr<MadConduit>> Create(MadSender send, const Gid& local_gid, const Gid& remote_gid,
                                                    const mad::MadContext& context, LastWordsHooks last_words = {});
  // An established connection destroyed without a disconnect sends its DREQ, as the kernel's
  // CM does when an identifier is destroyed (cm.c cm_destroy_id, IB_CM_ESTABLISHED).
  ~MadConduit() override;

  Status Send(const Message& message) override;
  Status Receive(Message* message, bool* closed) override;
  int fd() const override { return ready_.fd(); }

  // A MAD the agent found for this identifier, from `sgid`. Any thread. A REQ or REP teaches
  // the peer's comm ID (a passive side also adopts the REQ's TID, which its REP and DREP reuse,
  // as rxe's capture shows); an MRA only records its service timeout. Refused (logged by the
  // caller): a MAD this conduit cannot map (cm/mad.h MessageOfMad).
  Status Deliver(const mad::Mad& mad, const Gid& sgid);
  // Sends the last REQ, REP or DREQ again (IBA 12.7: the CM's retransmission on timeout).

  Status Retransmit();

  mad::MadContext context() const;
  uint32_t local_comm_id() const;
  // The service timeout of the last MRA received (IBA 12.6.6), or -1.
  int mra_service_timeout() const;
  // The same, once: -1 again until the next MRA (the retransmission timer takes it).
  int TakeMraServiceTimeout();

 private:
  MadConduit(MadSender send, const Gid& local_gid, const Gid& remote_gid, const mad::MadContext& context,
             EventFd ready, LastWordsHooks last_words);
  Status SendBytes(std::span<const uint8_t> mad);
  // The connection is established (RTU sent or received): its DREQ is composed now and armed.
  void ArmLocked();
  void DisarmLocked();

  const MadSender send_;
  const Gid local_gid_, remote_gid_;
  mutable std::mutex mu_;
  mad::MadContext context_;         // under mu_
  std::deque<Message> inbox_;       // under mu_
  std::array<uint8_t, mad::kMadBytes> last_{};  // the last REQ / REP / DREQ sent, under mu_
  bool has_last_ = false;
  MessageType last_type_ = MessageType::kReq;
  std::array<uint8_t, mad::kMadBytes> rtu_{};  // the RTU sent, for a REP that comes again
  bool has_rtu_ = false;
  bool req_seen_ = false, rep_seen_ = false;
  bool answered_ = false;  // something was sent since the REQ / REP arrived (no MRA then)
  int mra_timeout_ = -1;
  EventFd ready_;  // readable while inbox_ is not empty
  const LastWordsHooks last_words_;
  bool armed_ = false;  // established, no DREQ / DREP / REJ yet: dreq_ is what ends it
  std::array<uint8_t, mad::kMadBytes> dreq_{};
};

}  // namespace softverbs::cm
