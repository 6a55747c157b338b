// The librdmacm objects softverbs hands out: rdma-core's public structs first, the cm/ object
// behind them. Only abi/rdmacm sees both.
#pragma once

#include <rdma/rdma_cma.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "cm/channel.h"
#include "cm/id.h"

namespace softverbs::abi::rdmacm {

// The refusal of a verb given something that is not one of our identifiers.
inline constexpr const char* kNotOurs = "id is NULL or not an rdma_cm_id of softverbs";

struct CmChannel {
  rdma_event_channel pub{};  // first: the application's pointer is this struct's address
  std::unique_ptr<cm::Channel> core;
};

class CmQp;  // qp.cc

struct CmId {
  rdma_cm_id pub{};  // first
  cm::Id* core = nullptr;
  CmChannel* channel = nullptr;
  bool sync = false;         // created with a NULL channel: each verb waits for its own event
  bool owns_channel = false; // the private channel of a synchronous identifier
  std::unique_ptr<CmQp> qp;
  bool cm_made_cqs = false;  // send_cq/recv_cq (and their channels) were created by rdma_create_qp
  ibv_sa_path_rec path{};
  rdma_cm_event* sync_event = nullptr;  // synchronous mode: the last event (rdma_get_request...)
  // rdma_create_ep(3) on a passive address: the QP every rdma_get_request identifier gets.
  bool ep_qp = false;
  ibv_qp_init_attr ep_qp_attr{};
  ibv_pd* ep_pd = nullptr;
  // ECE as rdma-core's librdmacm keeps it (cma.c struct cma_id_private): local_ece is what this
  // side sends (rdma_set_local_ece(3), or the QP's own from ibv_query_ece when rdma_create_qp
  // made it); remote_ece the peer's, from its REQ / REP (rdma_get_remote_ece(3)).
  ibv_ece local_ece{};
  ibv_ece remote_ece{};
};

struct CmEvent {
  rdma_cm_event pub{};  // first
  std::vector<uint8_t> private_data;
};

// Live objects: the verbs refuse pointers softverbs never returned (EINVAL + a log line).
void Register(CmId* id);
void Unregister(CmId* id);
CmId* Lookup(rdma_cm_id* id);
void Register(CmChannel* channel);
void Unregister(CmChannel* channel);
CmChannel* Lookup(rdma_event_channel* channel);
void Register(CmEvent* event);
bool Unregister(CmEvent* event);

// softverbs0 as the CM sees it: its context (opened once, kept while the library is loaded, as
// rdma_get_devices(3) says), the default PD (rdma_create_qp(3): "One default protection domain
// is allocated per RDMA device") and the port's GID table.
Result<ibv_context*> DeviceContext();
Result<ibv_pd*> DefaultPd();
Result<cm::DeviceView> DeviceView();
// The device's limits on RDMA READ/atomic resources (ibv_query_device).
uint8_t MaxResponderResources();
uint8_t MaxInitiatorDepth();

// Makes cm::Agent this process's QP1 handler and gives it the wire to send on (mad_agent.cc);
// again after the host's addresses changed. Called by DeviceView().
void AttachMadAgent(ibv_context* context);

// Fills id->pub.route, verbs, port_num from the core identifier's state.
void SyncPublicFields(CmId* id);

std::string IdName(const rdma_cm_id* id);

}  // namespace softverbs::abi::rdmacm
