// The CM agent's binding to the wire (docs/cm.md, "Across hosts"): cm::Agent sends its MADs
// through libibverbs' QP1 bridge (abi/verbs/qp1_bridge.h) and receives QP1's MADs from it.
#include <cstring>
#include <string>

#include "abi/rdmacm/objects.h"
#include "abi/verbs/qp1_bridge.h"
#include "base/log.h"
#include "cm/agent.h"

namespace softverbs::abi::rdmacm {
namespace {

void RdmacmOnMad(void* /*arg*/, const uint8_t* mad, size_t length, const uint8_t* sgid, const uint8_t* dgid,
                 int forwarded) {
  cm::Gid s, d;
  memcpy(s.data(), sgid, 16);
  memcpy(d.data(), dgid, 16);
  cm::Agent::Get().OnMad({mad, length}, s, d, forwarded != 0);
}

const char* RdmacmReport(void* /*arg*/) {
  thread_local std::string lines;
  lines = cm::Agent::Get().Report();
  return lines.c_str();
}

}  // namespace

void AttachMadAgent(ibv_context* context) {
  const SvQp1Bridge* bridge = sv_private_qp1_bridge();
  if (bridge == nullptr || bridge->size < sizeof(SvQp1Bridge)) return;  // another libibverbs
  if (int err = bridge->attach(context, RdmacmOnMad, nullptr); err != 0) {
    SV_LOG(kWarn, "rdma_cm: no CM on the wire (errno %d): other hosts cannot be reached", err);
    return;
  }
  bridge->set_reporter(RdmacmReport, nullptr);
  if (uint32_t slot = 0; bridge->process_slot(context, &slot) == 0) cm::Agent::Get().SetProcessSlot(slot);
  if (cm::Agent::Get().has_sender()) return;
  // The DREQs of established connections, sent by the wire's guard if this process dies
  // (transport/wire/last_words.h): the kernel's CM sends them when it destroys a dead
  // process's identifiers.
  cm::Agent::Get().SetLastWords(
      {[bridge](uint64_t token, const cm::Gid& sgid, const cm::Gid& dgid, std::span<const uint8_t> mad) {
         bridge->arm_last_words(token, sgid.data(), dgid.data(), mad.data(), mad.size());
       },
       [bridge](uint64_t token) { bridge->disarm_last_words(token); }});
  // MADs that reached this process but belong to another one of the host (docs/cm.md, Dispatch).
  cm::Agent::Get().SetForwarder(
      [context, bridge](uint32_t slot, const cm::Gid& sgid, const cm::Gid& dgid, std::span<const uint8_t> mad) {
        int err = bridge->forward_mad(context, slot, sgid.data(), dgid.data(), mad.data(), mad.size());
        return err == 0 ? Status::Ok() : Status(err, "no other process of this host took the MAD");
      });
  cm::Agent::Get().SetSender([context, bridge](const cm::Gid& sgid, const cm::Gid& dgid, std::span<const uint8_t> mad) {
    int err = bridge->send_mad(context, sgid.data(), dgid.data(), mad.data(), mad.size());
    return err == 0 ? Status::Ok() : Status(err, "the wire refused the MAD (see the log above)");
  });
}

}  // namespace softverbs::abi::rdmacm
