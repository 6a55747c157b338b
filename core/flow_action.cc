#include "core/flow_action.h"

#include <string>

namespace softverbs::core {
namespace {

constexpr uint32_t kKeymatAesGcm = 0;  // IBV_FLOW_ACTION_ESP_KEYMAT_AES_GCM
constexpr uint32_t kIvAlgoSeq = 0;     // IBV_FLOW_ACTION_IV_ALGO_SEQ
constexpr uint32_t kReplayNone = 0, kReplayBmp = 1;

// The kernel's uverbs layer (uverbs_std_types_flow_action.c, parse_flow_action_esp), before
// any driver: flag bits past ESN_NEW_WINDOW, unknown enum ids → EOPNOTSUPP; an AES-GCM keymat
// with a key not 16/24/32 bytes or an ICV not 8/12/16 bytes → EINVAL; replay NONE on create →
// EINVAL.
Status CheckUverbs(const EspActionParams& p, bool modify) {
  if (p.flags & ~((esp_flag::kEsnNewWindow << 1) - 1))
    return NotSupported("esp_attr->flags has bits past IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ESN_NEW_WINDOW");
  if (p.has_keymat) {
    if (p.keymat_proto != kKeymatAesGcm)
      return NotSupported("keymat_proto " + std::to_string(p.keymat_proto) + " is not IBV_FLOW_ACTION_ESP_KEYMAT_AES_GCM");
    if (p.iv_algo > kIvAlgoSeq) return NotSupported("iv_algo " + std::to_string(p.iv_algo) + " is not IBV_FLOW_ACTION_IV_ALGO_SEQ");
    if (p.key_len != 16 && p.key_len != 24 && p.key_len != 32)
      return Invalid("key_len " + std::to_string(p.key_len) + " is not an AES key length (16, 24 or 32 bytes)");
    if (p.icv_len != 8 && p.icv_len != 12 && p.icv_len != 16)
      return Invalid("icv_len " + std::to_string(p.icv_len) + " is not an AES-GCM ICV length (8, 12 or 16 bytes)");
  }
  if (p.has_replay) {
    if (p.replay_proto > kReplayBmp) return NotSupported("replay_proto " + std::to_string(p.replay_proto) + " is not known");
    if (p.replay_proto == kReplayNone && !modify)
      return Invalid("replay_proto IBV_FLOW_ACTION_ESP_REPLAY_NONE is for modify only (leave replay_ptr NULL on create)");
  }
  return Status::Ok();
}

// What mlx5 leaves to the program in inline crypto mode (mlx5_ib_create_flow_action_esp).
Status CheckInlineCrypto(const EspActionParams& p, const char* verb_rule) {
  if (p.has_replay) return NotSupported(std::string("a replay window is not offered (") + verb_rule + ")");
  if (p.has_encap) return NotSupported(std::string("encapsulation (esp_encap) is not offered (") + verb_rule + ")");
  if (p.spi || p.seq || p.tfc_pad || p.hard_limit_pkts)
    return NotSupported(std::string("spi, seq, tfc_pad and hard_limit_pkts must be 0: the program writes the ESP "
                                    "header itself (inline crypto, ") + verb_rule + ")");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<FlowActionEsp>> FlowActionEsp::Create(const EspActionParams& p) {
  // uverbs: esp_attr and the keymat are mandatory attributes.
  if (!p.has_attrs) return Invalid("esp_attr is NULL (a mandatory attribute)");
  if (!p.has_keymat) return Invalid("keymat_ptr is NULL (a mandatory attribute)");
  SV_RETURN_IF_ERROR(CheckUverbs(p, false));
  SV_RETURN_IF_ERROR(CheckInlineCrypto(p, "as mlx5"));
  if (p.flags & ~esp_flag::kEncrypt)
    return NotSupported("flags other than IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT (full offload, transport mode, "
                        "ESN new window) are not offered on create, as mlx5");
  if (p.icv_len != 16) return NotSupported("icv_len " + std::to_string(p.icv_len) + ": only a 16-byte ICV, as mlx5");
  if (p.key_len == 24) return NotSupported("a 24-byte (AES-192) key: AES-128 and AES-256 only, as mlx5");
  transport::raw::EspSa::Keymat keymat;
  keymat.key.assign(p.key, p.key + p.key_len);
  std::copy(p.salt, p.salt + 4, keymat.salt);
  std::copy(p.iv, p.iv + 8, keymat.iv);
  auto sa = std::make_shared<transport::raw::EspSa>(std::move(keymat), (p.flags & esp_flag::kEncrypt) != 0,
                                                    p.has_esn, p.esn);
  return std::unique_ptr<FlowActionEsp>(new FlowActionEsp(std::move(sa), p.has_esn));
}

Status FlowActionEsp::Modify(const EspActionParams& p) {
  SV_RETURN_IF_ERROR(CheckUverbs(p, true));
  // mlx5_ib_modify_flow_action_esp: "We can only change the ESN".
  if (p.has_keymat) return NotSupported("the keymat cannot change (mlx5 modifies the ESN only)");
  SV_RETURN_IF_ERROR(CheckInlineCrypto(p, "mlx5 modifies the ESN only"));
  if (p.flags & ~esp_flag::kEsnNewWindow)
    return NotSupported("only IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ESN_NEW_WINDOW may be set by modify, as mlx5");
  if (!esn_ && (p.has_esn || (p.flags & esp_flag::kEsnNewWindow)))
    return Invalid("the action was created without an ESN (IBV_FLOW_ACTION_ESP_MASK_ESN), so none can be set now");
  // As mlx5: the ESN takes the value given (0 when the mask has no ESN).
  sa_->SetEsnHigh(p.has_esn ? p.esn : 0);
  return Status::Ok();
}

}  // namespace softverbs::core
