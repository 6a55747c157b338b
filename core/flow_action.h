// ESP flow actions (ibv_create_flow_action_esp(3), ibv_modify_flow_action_esp,
// ibv_destroy_flow_action): the checks the kernel's uverbs layer and mlx5 make, in their order and
// with their errnos, and the security association a rule's IBV_FLOW_SPEC_ACTION_HANDLE names
// (transport/raw/esp.h does the crypto). mlx5 offers inline crypto only: AES-GCM keymat, 16-byte
// ICV, IV algorithm SEQ, flags ENCRYPT (or none: decrypt) and ESN; no SPI, sequence number,
// TFC padding, hard limit, replay window or encapsulation in the action (the program builds the
// ESP packet itself) -- those are EOPNOTSUPP there, and here.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/pd.h"
#include "transport/raw/esp.h"

namespace softverbs::core {

// enum ib_uverbs_flow_action_esp_flags
namespace esp_flag {
inline constexpr uint32_t kFullOffload = 1u << 0;
inline constexpr uint32_t kTransport = 1u << 1;
inline constexpr uint32_t kEncrypt = 1u << 2;
inline constexpr uint32_t kEsnNewWindow = 1u << 3;
}  // namespace esp_flag

// What ibv_flow_action_esp_attr carries, converted by abi/.
struct EspActionParams {
  bool has_attrs = false;  // esp_attr (struct ib_uverbs_flow_action_esp)
  uint32_t spi = 0, seq = 0, tfc_pad = 0, flags = 0;
  uint64_t hard_limit_pkts = 0;
  bool has_keymat = false;
  uint32_t keymat_proto = 0;  // IBV_FLOW_ACTION_ESP_KEYMAT_AES_GCM = 0
  uint32_t iv_algo = 0, icv_len = 0, key_len = 0;
  uint8_t key[32] = {}, salt[4] = {}, iv[8] = {};
  bool has_replay = false;
  uint32_t replay_proto = 0;  // IBV_FLOW_ACTION_ESP_REPLAY_NONE = 0, _BMP = 1
  bool has_encap = false;
  bool has_esn = false;  // comp_mask IBV_FLOW_ACTION_ESP_MASK_ESN
  uint32_t esn = 0;
};

class FlowActionEsp {
 public:
  static Result<std::unique_ptr<FlowActionEsp>> Create(const EspActionParams& params);
  // mlx5 changes only the ESN (and its new-window state) of an action created with one.
  Status Modify(const EspActionParams& params);
  // The kernel counts each flow naming the action (EBUSY to destroy it meanwhile).
  UseCount& flows() { return flows_; }
  bool encrypt() const { return sa_->encrypt(); }
  std::shared_ptr<const transport::raw::EspSa> sa() const { return sa_; }

 private:
  FlowActionEsp(std::shared_ptr<transport::raw::EspSa> sa, bool esn) : sa_(std::move(sa)), esn_(esn) {}
  std::shared_ptr<transport::raw::EspSa> sa_;
  const bool esn_;  // created with an ESN (mlx5: IB_FLOW_ACTION_ESP_FLAGS_ESN_TRIGGERED)
  UseCount flows_;
};

}  // namespace softverbs::core
