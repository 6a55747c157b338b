// ESP flow actions: ibv_create_flow_action_esp(3), ibv_modify_flow_action_esp,
// ibv_destroy_flow_action. struct ibv_flow_action_esp_attr and the structures it points to are
// converted here; the rules (uverbs' and mlx5's, with their errnos) are core/flow_action.cc. A
// rule names the action with IBV_FLOW_SPEC_ACTION_HANDLE (flow.cc). Create returns NULL and
// errno; modify and destroy return an errno.
#include <atomic>
#include <cstring>
#include <memory>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/ops.h"
#include "core/flow_action.h"

namespace softverbs::abi {
namespace {

struct SvFlowAction {
  ibv_flow_action action;
  uint32_t number = 0;  // for log lines
  std::unique_ptr<core::FlowActionEsp> core;
};

SvFlowAction* ToSvAction(ibv_flow_action* a) { return reinterpret_cast<SvFlowAction*>(a); }

std::string ActionName(ibv_flow_action* a) { return ObjectName("flow_action", ToSvAction(a)->number); }

// The bytes past a structure the kernel knows must be zero (uverbs: EOPNOTSUPP otherwise).
bool TailClear(const void* p, size_t len, size_t known) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = known; i < len; ++i)
    if (b[i] != 0) return false;
  return true;
}

Status ToParams(const ibv_flow_action_esp_attr& attr, core::EspActionParams* p) {
  // mlx5_create_flow_action_esp / _modify_: comp_mask bits past IBV_FLOW_ACTION_ESP_MASK_ESN.
  if (attr.comp_mask & ~uint32_t(IBV_FLOW_ACTION_ESP_MASK_ESN))
    return NotSupported("comp_mask has bits other than IBV_FLOW_ACTION_ESP_MASK_ESN");
  if (attr.esp_attr != nullptr) {
    const ib_uverbs_flow_action_esp& e = *attr.esp_attr;
    p->has_attrs = true;
    p->spi = e.spi, p->seq = e.seq, p->tfc_pad = e.tfc_pad, p->flags = e.flags, p->hard_limit_pkts = e.hard_limit_pkts;
  }
  if (attr.keymat_ptr != nullptr) {
    p->has_keymat = true;
    p->keymat_proto = attr.keymat_proto;
    if (attr.keymat_proto == IBV_FLOW_ACTION_ESP_KEYMAT_AES_GCM) {
      ib_uverbs_flow_action_esp_keymat_aes_gcm k;
      if (attr.keymat_len < sizeof k)
        return Invalid("keymat_len " + std::to_string(attr.keymat_len) + " is below the AES-GCM keymat's " +
                       std::to_string(sizeof k) + " bytes");
      if (!TailClear(attr.keymat_ptr, attr.keymat_len, sizeof k))
        return NotSupported("the keymat has non-zero bytes past struct ib_uverbs_flow_action_esp_keymat_aes_gcm");
      memcpy(&k, attr.keymat_ptr, sizeof k);
      p->iv_algo = k.iv_algo, p->icv_len = k.icv_len, p->key_len = k.key_len;
      memcpy(p->key, k.aes_key, sizeof p->key);
      memcpy(p->salt, &k.salt, 4);  // as they lie in memory (the kernel copies the bytes)
      memcpy(p->iv, &k.iv, 8);
    }
  }
  if (attr.replay_ptr != nullptr) {
    p->has_replay = true;
    p->replay_proto = attr.replay_proto;
  }
  p->has_encap = attr.esp_encap != nullptr;
  p->has_esn = (attr.comp_mask & IBV_FLOW_ACTION_ESP_MASK_ESN) != 0;
  p->esn = attr.esn;
  return Status::Ok();
}

}  // namespace

core::FlowActionEsp* CoreOf(ibv_flow_action* action) {
  return action == nullptr ? nullptr : ToSvAction(action)->core.get();
}

ibv_flow_action* CreateFlowActionEsp(ibv_context* context, ibv_flow_action_esp_attr* attr) {
  static std::atomic<uint32_t> next_number{1};
  const char* verb = "ibv_create_flow_action_esp";
  if (attr == nullptr) return ReturnNull<ibv_flow_action>(verb, context->device->name, Invalid("attr is NULL"));
  core::EspActionParams params;
  if (Status s = ToParams(*attr, &params); !s.ok()) return ReturnNull<ibv_flow_action>(verb, context->device->name, s);
  auto core = core::FlowActionEsp::Create(params);
  if (!core.ok()) return ReturnNull<ibv_flow_action>(verb, context->device->name, core.status());
  auto* a = new (std::nothrow) SvFlowAction{};
  if (a == nullptr) return ReturnNull<ibv_flow_action>(verb, context->device->name, NoMemory("out of memory"));
  a->action.context = context;
  a->number = next_number.fetch_add(1, std::memory_order_relaxed);
  a->core = std::move(core.value());
  return &a->action;
}

int ModifyFlowActionEsp(ibv_flow_action* action, ibv_flow_action_esp_attr* attr) {
  const char* verb = "ibv_modify_flow_action_esp";
  if (attr == nullptr) return ReturnErrno(verb, ActionName(action), Invalid("attr is NULL"));
  core::EspActionParams params;
  Status s = ToParams(*attr, &params);
  if (s.ok()) s = ToSvAction(action)->core->Modify(params);
  return s.ok() ? 0 : ReturnErrno(verb, ActionName(action), s);
}

int DestroyFlowAction(ibv_flow_action* action) {
  // The kernel counts the flows using an action (uverbs_free_flow_action: EBUSY while any does).
  if (ToSvAction(action)->core->flows().count() > 0)
    return ReturnErrno("ibv_destroy_flow_action", ActionName(action),
                       Busy("a flow uses the action: destroy the flow first"));
  delete ToSvAction(action);
  return 0;
}

}  // namespace softverbs::abi
