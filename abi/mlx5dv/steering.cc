// mlx5dv packet steering: flow matchers/actions, steering anchors, and direct rule (mlx5dv_dr_*).
// These program an mlx5 NIC's flow tables; softverbs0 steers no Ethernet packets, so every one
// refuses with EOPNOTSUPP.
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

// No man page; a constructor, so NULL + errno like ibv_create_flow_action_esp(3).
SV_MLX5_NULL(mlx5dv_create_flow_action_esp, struct ibv_flow_action, struct ibv_context*,
             struct ibv_flow_action_esp_attr*, struct mlx5dv_flow_action_esp*)

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
