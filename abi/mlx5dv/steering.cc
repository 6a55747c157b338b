// mlx5dv packet steering: flow matchers/actions, steering anchors, and direct rule (mlx5dv_dr_*).
// These program an mlx5 NIC's flow tables, which softverbs0 does not have: they refuse with
// EOPNOTSUPP -- except mlx5dv_create_flow_action_esp, ibv_create_flow_action_esp(3) with mlx5
// flags, which ends in the ESP flow actions of raw packet QPs (docs/raw-packet.md).
#include <string>

#include "abi/common/errno_convention.h"
#include "abi/mlx5dv/refuse.h"

// --- flow API ------------------------------------------------------------------------------------

// mlx5dv_create_flow_matcher(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_create_flow_matcher, struct mlx5dv_flow_matcher, struct ibv_context*,
             struct mlx5dv_flow_matcher_attr*)
// No man page; a destructor, so "0 or the value of errno" like the rest of mlx5dv.
SV_MLX5_ERRNO(mlx5dv_destroy_flow_matcher, struct mlx5dv_flow_matcher*)

// mlx5dv_create_flow(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_create_flow, struct ibv_flow, struct mlx5dv_flow_matcher*,
             struct mlx5dv_flow_match_parameters*, size_t, struct mlx5dv_flow_action_attr[])

// mlx5dv_flow_action_esp(3): "identical to ibv_create_flow_action_esp verb, but allows mlx5
// specific flags"; NULL + errno. providers/mlx5/verbs.c _mlx5dv_create_flow_action_esp refuses
// comp_mask bits beyond MLX5DV_FLOW_ACTION_ESP_MASK_FLAGS and action_flags beyond
// REQUIRE_METADATA with EOPNOTSUPP. REQUIRE_METADATA asks that every packet of the offload carry
// mlx5's FPGA IPsec metadata (an L2 header of ethertype 0x8CE4, 6 bytes, the original
// ethertype): softverbs does not insert or strip it, so it is refused (EOPNOTSUPP).
// support: mlx5dv_create_flow_action_esp | implemented | as ibv_create_flow_action_esp (inline AES-GCM on raw packet QP rules); comp_mask beyond MASK_FLAGS, unknown action_flags and REQUIRE_METADATA (its 0x8CE4 metadata header is not modelled) EOPNOTSUPP
SV_EXPORT struct ibv_flow_action* mlx5dv_create_flow_action_esp(struct ibv_context* ctx,
                                                                struct ibv_flow_action_esp_attr* esp,
                                                                struct mlx5dv_flow_action_esp* mlx5_attr) {
  using softverbs::Invalid;
  using softverbs::NotSupported;
  using softverbs::abi::ReturnNull;
  constexpr const char* kVerb = "mlx5dv_create_flow_action_esp";
  if (ctx == nullptr) return ReturnNull<ibv_flow_action>(kVerb, "context NULL", Invalid("ctx is NULL"));
  const std::string object = ibv_get_device_name(ctx->device);
  // rdma-core dereferences mlx5_attr unchecked; NULL is refused here rather than crashing.
  if (mlx5_attr == nullptr) return ReturnNull<ibv_flow_action>(kVerb, object, Invalid("mlx5_attr is NULL"));
  if (mlx5_attr->comp_mask & ~uint64_t{MLX5DV_FLOW_ACTION_ESP_MASK_FLAGS})
    return ReturnNull<ibv_flow_action>(kVerb, object,
                                       NotSupported("comp_mask bits beyond MLX5DV_FLOW_ACTION_ESP_MASK_FLAGS"));
  if (mlx5_attr->comp_mask & MLX5DV_FLOW_ACTION_ESP_MASK_FLAGS) {
    if (mlx5_attr->action_flags & ~uint32_t{MLX5DV_FLOW_ACTION_FLAGS_REQUIRE_METADATA})
      return ReturnNull<ibv_flow_action>(kVerb, object,
                                         NotSupported("action_flags beyond MLX5DV_FLOW_ACTION_FLAGS_REQUIRE_METADATA"));
    if (mlx5_attr->action_flags & MLX5DV_FLOW_ACTION_FLAGS_REQUIRE_METADATA)
      return ReturnNull<ibv_flow_action>(
          kVerb, object,
          NotSupported("MLX5DV_FLOW_ACTION_FLAGS_REQUIRE_METADATA: the metadata header (ethertype 0x8CE4) of mlx5's "
                       "FPGA IPsec is not inserted or stripped by softverbs0"));
  }
  return ibv_create_flow_action_esp(ctx, esp);
}

// mlx5dv_create_flow_action_modify_header(3) / _packet_reformat(3): "on error NULL will be
// returned and errno will be set".
SV_MLX5_NULL(mlx5dv_create_flow_action_modify_header, struct ibv_flow_action, struct ibv_context*,
             size_t, uint64_t[], enum mlx5_ib_uapi_flow_table_type)
SV_MLX5_NULL(mlx5dv_create_flow_action_packet_reformat, struct ibv_flow_action, struct ibv_context*,
             size_t, void*, enum mlx5_ib_uapi_flow_action_packet_reformat_type,
             enum mlx5_ib_uapi_flow_table_type)

// mlx5dv_create_steering_anchor(3): NULL + errno; destroy "returns 0 on success and errno value".
SV_MLX5_NULL(mlx5dv_create_steering_anchor, struct mlx5dv_steering_anchor, struct ibv_context*,
             struct mlx5dv_steering_anchor_attr*)
SV_MLX5_ERRNO(mlx5dv_destroy_steering_anchor, struct mlx5dv_steering_anchor*)

// --- direct rule (mlx5dv_dr_flow(3)) ------------------------------------------------------------
// "The create API calls will return a pointer ... on failure, NULL will be returned and errno
// will be set. The destroy API calls will returns 0 on success, or the value of errno".

SV_MLX5_NULL(mlx5dv_dr_domain_create, struct mlx5dv_dr_domain, struct ibv_context*,
             enum mlx5dv_dr_domain_type)
SV_MLX5_ERRNO(mlx5dv_dr_domain_sync, struct mlx5dv_dr_domain*, uint32_t)
SV_MLX5_ERRNO(mlx5dv_dr_domain_destroy, struct mlx5dv_dr_domain*)
SV_MLX5_VOID(mlx5dv_dr_domain_set_reclaim_device_memory, struct mlx5dv_dr_domain*, bool)
SV_MLX5_VOID(mlx5dv_dr_domain_allow_duplicate_rules, struct mlx5dv_dr_domain*, bool)

SV_MLX5_NULL(mlx5dv_dr_table_create, struct mlx5dv_dr_table, struct mlx5dv_dr_domain*, uint32_t)
SV_MLX5_ERRNO(mlx5dv_dr_table_destroy, struct mlx5dv_dr_table*)

SV_MLX5_NULL(mlx5dv_dr_matcher_create, struct mlx5dv_dr_matcher, struct mlx5dv_dr_table*, uint16_t,
             uint8_t, struct mlx5dv_flow_match_parameters*)
SV_MLX5_ERRNO(mlx5dv_dr_matcher_destroy, struct mlx5dv_dr_matcher*)
SV_MLX5_ERRNO(mlx5dv_dr_matcher_set_layout, struct mlx5dv_dr_matcher*,
              struct mlx5dv_dr_matcher_layout*)

SV_MLX5_NULL(mlx5dv_dr_rule_create, struct mlx5dv_dr_rule, struct mlx5dv_dr_matcher*,
             struct mlx5dv_flow_match_parameters*, size_t, struct mlx5dv_dr_action*[])
SV_MLX5_ERRNO(mlx5dv_dr_rule_destroy, struct mlx5dv_dr_rule*)

// Actions. drop/tag/pop_vlan/default_miss need no device in rdma-core, but an action is only
// usable in a rule of a domain, which cannot exist here; refusing them all keeps one story.
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_ibv_qp, struct mlx5dv_dr_action, struct ibv_qp*)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_table, struct mlx5dv_dr_action, struct mlx5dv_dr_table*)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_root_table, struct mlx5dv_dr_action,
             struct mlx5dv_dr_table*, uint16_t)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_vport, struct mlx5dv_dr_action, struct mlx5dv_dr_domain*,
             uint32_t)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_ib_port, struct mlx5dv_dr_action,
             struct mlx5dv_dr_domain*, uint32_t)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_devx_tir, struct mlx5dv_dr_action,
             struct mlx5dv_devx_obj*)
SV_MLX5_NULL(mlx5dv_dr_action_create_dest_array, struct mlx5dv_dr_action, struct mlx5dv_dr_domain*,
             size_t, struct mlx5dv_dr_action_dest_attr*[])
SV_MLX5_NULL(mlx5dv_dr_action_create_drop, struct mlx5dv_dr_action, void)
SV_MLX5_NULL(mlx5dv_dr_action_create_default_miss, struct mlx5dv_dr_action, void)
SV_MLX5_NULL(mlx5dv_dr_action_create_tag, struct mlx5dv_dr_action, uint32_t)
SV_MLX5_NULL(mlx5dv_dr_action_create_flow_counter, struct mlx5dv_dr_action,
             struct mlx5dv_devx_obj*, uint32_t)
SV_MLX5_NULL(mlx5dv_dr_action_create_flow_meter, struct mlx5dv_dr_action,
             struct mlx5dv_dr_flow_meter_attr*)
SV_MLX5_ERRNO(mlx5dv_dr_action_modify_flow_meter, struct mlx5dv_dr_action*,
              struct mlx5dv_dr_flow_meter_attr*, __be64)
SV_MLX5_NULL(mlx5dv_dr_action_create_flow_sampler, struct mlx5dv_dr_action,
             struct mlx5dv_dr_flow_sampler_attr*)
SV_MLX5_NULL(mlx5dv_dr_action_create_modify_header, struct mlx5dv_dr_action,
             struct mlx5dv_dr_domain*, uint32_t, size_t, __be64[])
SV_MLX5_NULL(mlx5dv_dr_action_create_packet_reformat, struct mlx5dv_dr_action,
             struct mlx5dv_dr_domain*, uint32_t, enum mlx5_ib_uapi_flow_action_packet_reformat_type,
             size_t, void*)
SV_MLX5_NULL(mlx5dv_dr_action_create_pop_vlan, struct mlx5dv_dr_action, void)
SV_MLX5_NULL(mlx5dv_dr_action_create_push_vlan, struct mlx5dv_dr_action, struct mlx5dv_dr_domain*,
             __be32)
SV_MLX5_NULL(mlx5dv_dr_action_create_aso, struct mlx5dv_dr_action, struct mlx5dv_dr_domain*,
             struct mlx5dv_devx_obj*, uint32_t, uint32_t, uint8_t)
SV_MLX5_ERRNO(mlx5dv_dr_action_modify_aso, struct mlx5dv_dr_action*, uint32_t, uint32_t, uint8_t)
SV_MLX5_ERRNO(mlx5dv_dr_action_destroy, struct mlx5dv_dr_action*)

SV_MLX5_ERRNO(mlx5dv_dr_aso_other_domain_link, struct mlx5dv_devx_obj*, struct mlx5dv_dr_domain*,
              struct mlx5dv_dr_domain*, uint32_t, uint8_t)
SV_MLX5_ERRNO(mlx5dv_dr_aso_other_domain_unlink, struct mlx5dv_devx_obj*, struct mlx5dv_dr_domain*)

// mlx5dv_dump_dr_domain(3): "returns 0 on success, or the value of errno on failure".
SV_MLX5_ERRNO(mlx5dv_dump_dr_domain, FILE*, struct mlx5dv_dr_domain*)
SV_MLX5_ERRNO(mlx5dv_dump_dr_table, FILE*, struct mlx5dv_dr_table*)
SV_MLX5_ERRNO(mlx5dv_dump_dr_matcher, FILE*, struct mlx5dv_dr_matcher*)
SV_MLX5_ERRNO(mlx5dv_dump_dr_rule, FILE*, struct mlx5dv_dr_rule*)
