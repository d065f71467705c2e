"""The arguments each timm `vision_transformer` / `deit`
architecture name passes to `VisionTransformer` (timm 1.0.31), written by
scripts/make_timm_registry.py: do not edit by hand.

`ARCHITECTURES[name]` is (num_heads, arguments), the arguments beyond the
sizes (patch_size, embed_dim, depth, mlp_ratio), img_size included where
the entrypoint passes one (timm builds that size when model_args give
none); values that are not JSON (a layer class, a partial) are kept as
their names, which keras_vit refuses by name. `distilled: True` marks
DeiT's VisionTransformerDistilled.
"""

TIMM_VERSION = '1.0.31'

_GROUPS = [
    ({
        'act_layer': 'silu',
        'class_token': False,
        'embed_norm_layer': 'RmsNorm(eps=1e-05)',
        'fc_norm': False,
        'global_pool': 'avg',
        'mlp_layer': 'SwiGLU',
        'norm_layer': 'RmsNorm(eps=1e-05)',
        'proj_bias': False,
        'qkv_bias': False,
    }, {
        'aimv2_1b_patch14_224': 16, 'aimv2_1b_patch14_336': 16,
        'aimv2_1b_patch14_448': 16, 'aimv2_3b_patch14_224': 24,
        'aimv2_3b_patch14_336': 24, 'aimv2_3b_patch14_448': 24,
        'aimv2_huge_patch14_224': 12, 'aimv2_huge_patch14_336': 12,
        'aimv2_huge_patch14_448': 12, 'aimv2_large_patch14_224': 8,
        'aimv2_large_patch14_336': 8, 'aimv2_large_patch14_448': 8,
    }),
    ({
        'class_token': True,
        'global_pool': 'avg',
        'norm_layer': 'LayerNorm(eps=1e-05)',
        'scale_attn_norm': True,
        'scale_mlp_norm': True,
    }, {
        'beit3_base_patch16_224': 12, 'beit3_giant_patch14_224': 16,
        'beit3_large_patch16_224': 16,
    }),
    ({
        'class_token': True,
        'global_pool': 'avg',
        'img_size': 336,
        'norm_layer': 'LayerNorm(eps=1e-05)',
        'scale_attn_norm': True,
        'scale_mlp_norm': True,
    }, {
        'beit3_giant_patch14_336': 16,
    }),
    ({'init_values': 1e-06, 'no_embed_class': True}, {
        'deit3_base_patch16_224': 12, 'deit3_base_patch16_384': 12,
        'deit3_huge_patch14_224': 16, 'deit3_large_patch16_224': 16,
        'deit3_large_patch16_384': 16, 'deit3_medium_patch16_224': 8,
        'deit3_small_patch16_224': 6, 'deit3_small_patch16_384': 6,
    }),
    ({'distilled': True}, {
        'deit_base_distilled_patch16_224': 12,
        'deit_base_distilled_patch16_384': 12,
        'deit_small_distilled_patch16_224': 6,
        'deit_tiny_distilled_patch16_224': 3,
    }),
    ({}, {
        'deit_base_patch16_224': 12, 'deit_base_patch16_384': 12,
        'deit_small_patch16_224': 6, 'deit_tiny_patch16_224': 3,
        'vit_base_patch16_224': 12, 'vit_base_patch16_384': 12,
        'vit_base_patch32_224': 12, 'vit_base_patch32_384': 12,
        'vit_base_patch8_224': 12, 'vit_giant_patch14_224': 16,
        'vit_gigantic_patch14_224': 16, 'vit_huge_patch14_224': 16,
        'vit_large_patch14_224': 16, 'vit_large_patch16_224': 16,
        'vit_large_patch16_384': 16, 'vit_large_patch32_224': 16,
        'vit_large_patch32_384': 16, 'vit_small_patch16_224': 6,
        'vit_small_patch16_384': 6, 'vit_small_patch32_224': 6,
        'vit_small_patch32_384': 6, 'vit_small_patch8_224': 6,
        'vit_tiny_patch16_224': 3, 'vit_tiny_patch16_384': 3,
    }),
    ({'global_pool': 'avg'}, {
        'eva_large_patch14_196': 16, 'eva_large_patch14_336': 16,
    }),
    ({'no_embed_class': True}, {
        'flexivit_base': 12, 'flexivit_large': 16, 'flexivit_small': 6,
    }),
    ({'dynamic_img_size': True}, {
        'test_vit': 2,
    }),
    ({
        'class_token': False,
        'dynamic_img_size': True,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'reg_tokens': 1,
    }, {
        'test_vit2': 2,
    }),
    ({
        'class_token': False,
        'global_pool': 'map',
        'init_values': 1e-05,
        'pool_include_prefix': True,
        'reg_tokens': 1,
    }, {
        'test_vit3': 3,
    }),
    ({
        'class_token': False,
        'dynamic_img_size': True,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'norm_layer': 'rmsnorm',
        'reg_tokens': 1,
    }, {
        'test_vit4': 3,
    }),
    ({'init_values': 1e-05}, {
        'vit_base_patch14_dinov2': 12, 'vit_base_patch16_plus_240': 14,
        'vit_base_patch32_plus_256': 14, 'vit_large_patch14_dinov2': 16,
        'vit_small_patch14_dinov2': 6, 'vit_small_patch16_36x1_224': 6,
    }),
    ({'init_values': 1.0, 'no_embed_class': True, 'reg_tokens': 1}, {
        'vit_base_patch14_reg1_tipsv2': 12,
        'vit_large_patch14_reg1_tipsv2': 16,
        'vit_so400m_patch14_reg1_tipsv2': 16,
    }),
    ({'init_values': 1e-05, 'no_embed_class': True, 'reg_tokens': 4}, {
        'vit_base_patch14_reg4_dinov2': 12,
        'vit_large_patch14_reg4_dinov2': 16,
        'vit_small_patch14_reg4_dinov2': 6,
    }),
    ({'block_fn': 'ParallelThingsBlock', 'init_values': 1e-05}, {
        'vit_base_patch16_18x2_224': 12, 'vit_small_patch16_18x2_224': 6,
    }),
    ({'qkv_bias': False}, {
        'vit_base_patch16_224_miil': 12,
    }),
    ({'norm_layer': 'LayerNorm(eps=1e-05)', 'pre_norm': True}, {
        'vit_base_patch16_clip_224': 12, 'vit_base_patch16_clip_384': 12,
        'vit_base_patch16_plus_clip_240': 14, 'vit_base_patch32_clip_224': 12,
        'vit_base_patch32_clip_256': 12, 'vit_base_patch32_clip_384': 12,
        'vit_base_patch32_clip_448': 12, 'vit_betwixt_patch32_clip_224': 10,
        'vit_giant_patch14_clip_224': 16, 'vit_gigantic_patch14_clip_224': 16,
        'vit_gigantic_patch14_clip_378': 16, 'vit_huge_patch14_clip_224': 16,
        'vit_huge_patch14_clip_336': 16, 'vit_huge_patch14_clip_378': 16,
        'vit_large_patch14_clip_224': 16, 'vit_large_patch14_clip_336': 16,
        'vit_medium_patch16_clip_224': 8, 'vit_medium_patch32_clip_224': 8,
        'vit_xsmall_patch16_clip_224': 4,
    }),
    ({
        'act_layer': 'quick_gelu',
        'norm_layer': 'LayerNorm(eps=1e-05)',
        'pre_norm': True,
    }, {
        'vit_base_patch16_clip_quickgelu_224': 12,
        'vit_base_patch32_clip_quickgelu_224': 12,
        'vit_gigantic_patch14_clip_quickgelu_224': 16,
        'vit_huge_patch14_clip_quickgelu_224': 16,
        'vit_huge_patch14_clip_quickgelu_378': 16,
        'vit_large_patch14_clip_quickgelu_224': 16,
        'vit_large_patch14_clip_quickgelu_336': 16,
    }),
    ({'class_token': False, 'fc_norm': False, 'global_pool': 'avg'}, {
        'vit_base_patch16_gap_224': 16, 'vit_base_patch16_siglip_gap_224': 12,
        'vit_base_patch16_siglip_gap_256': 12,
        'vit_base_patch16_siglip_gap_384': 12,
        'vit_base_patch16_siglip_gap_512': 12, 'vit_giant_patch16_gap_224': 16,
        'vit_huge_patch14_gap_224': 16, 'vit_huge_patch16_gap_448': 16,
        'vit_large_patch16_siglip_gap_256': 16,
        'vit_large_patch16_siglip_gap_384': 16,
        'vit_so400m_patch14_siglip_gap_224': 16,
        'vit_so400m_patch14_siglip_gap_378': 16,
        'vit_so400m_patch14_siglip_gap_384': 16,
        'vit_so400m_patch14_siglip_gap_448': 16,
        'vit_so400m_patch14_siglip_gap_896': 16,
    }),
    ({
        'final_norm': False,
        'img_size': 512,
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 7,
    }, {
        'vit_base_patch16_radio_v3': 12, 'vit_large_patch16_radio_v3': 16,
    }),
    ({
        'class_token': False,
        'global_pool': 'avg',
        'no_embed_class': True,
        'reg_tokens': 4,
    }, {
        'vit_base_patch16_reg4_gap_256': 12,
    }),
    ({
        'block_fn': 'ResPostBlock',
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'qkv_bias': False,
    }, {
        'vit_base_patch16_rpn_224': 12,
    }),
    ({'class_token': False, 'global_pool': 'map'}, {
        'vit_base_patch16_siglip_224': 12, 'vit_base_patch16_siglip_256': 12,
        'vit_base_patch16_siglip_384': 12, 'vit_base_patch16_siglip_512': 12,
        'vit_large_patch16_siglip_256': 16, 'vit_large_patch16_siglip_384': 16,
        'vit_so400m_patch14_siglip_224': 16,
        'vit_so400m_patch14_siglip_378': 16,
        'vit_so400m_patch14_siglip_384': 16,
    }),
    ({
        'block_fn': 'ParallelScalingBlock',
        'no_embed_class': True,
        'norm_layer': 'RmsNorm',
        'pre_norm': True,
        'qk_norm': True,
        'qkv_bias': False,
    }, {
        'vit_base_patch16_xp_224': 12, 'vit_huge_patch14_xp_224': 16,
        'vit_large_patch14_xp_224': 16,
    }),
    ({'act_layer': 'gelu_tanh', 'class_token': False, 'global_pool': 'map'}, {
        'vit_base_patch32_siglip_256': 12,
        'vit_giantopt_patch16_siglip_256': 16,
        'vit_giantopt_patch16_siglip_384': 16,
        'vit_large_patch16_siglip_512': 16,
        'vit_so400m_patch16_siglip_256': 16,
        'vit_so400m_patch16_siglip_384': 16,
        'vit_so400m_patch16_siglip_512': 16,
    }),
    ({
        'act_layer': 'gelu_tanh',
        'class_token': False,
        'fc_norm': False,
        'global_pool': 'avg',
    }, {
        'vit_base_patch32_siglip_gap_256': 12,
        'vit_giantopt_patch16_siglip_gap_256': 16,
        'vit_giantopt_patch16_siglip_gap_384': 16,
        'vit_large_patch16_siglip_gap_512': 16,
        'vit_so400m_patch16_siglip_gap_256': 16,
        'vit_so400m_patch16_siglip_gap_384': 16,
        'vit_so400m_patch16_siglip_gap_512': 16,
    }),
    ({
        'class_token': False,
        'fc_norm': False,
        'global_pool': 'avg',
        'init_values': 1e-06,
        'qkv_bias': False,
    }, {
        'vit_betwixt_patch16_gap_256': 10, 'vit_medium_patch16_gap_240': 8,
        'vit_medium_patch16_gap_256': 8, 'vit_medium_patch16_gap_384': 8,
    }),
    ({
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 1,
    }, {
        'vit_betwixt_patch16_reg1_gap_256': 10,
        'vit_little_patch16_reg1_gap_256': 5,
        'vit_medium_patch16_reg1_gap_256': 8,
        'vit_wee_patch16_reg1_gap_256': 4,
    }),
    ({
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 4,
    }, {
        'vit_betwixt_patch16_reg4_gap_256': 10,
        'vit_betwixt_patch16_reg4_gap_384': 10,
        'vit_little_patch16_reg4_gap_256': 5,
        'vit_medium_patch16_reg4_gap_256': 8,
        'vit_mediumd_patch16_reg4_gap_256': 8,
        'vit_mediumd_patch16_reg4_gap_384': 8,
    }),
    ({
        'attn_layer': 'diff',
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 1,
    }, {
        'vit_dlittle_patch16_reg1_gap_256': 5,
        'vit_dwee_patch16_reg1_gap_256': 4,
    }),
    ({
        'block_fn': 'DiffParallelScalingBlock',
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 1,
    }, {
        'vit_dpwee_patch16_reg1_gap_256': 4,
    }),
    ({
        'act_layer': 'SiLU',
        'init_values': 1e-05,
        'mlp_layer': 'GluMlp(act_layer=SiLU, gate_last=False)',
    }, {
        'vit_giant_patch14_dinov2': 24,
    }),
    ({
        'act_layer': 'SiLU',
        'init_values': 1.0,
        'mlp_layer': 'GluMlp(act_layer=SiLU, gate_last=False)',
        'no_embed_class': True,
        'reg_tokens': 1,
    }, {
        'vit_giant_patch14_reg1_tipsv2': 24,
    }),
    ({
        'act_layer': 'SiLU',
        'init_values': 1e-05,
        'mlp_layer': 'GluMlp(act_layer=SiLU, gate_last=False)',
        'no_embed_class': True,
        'reg_tokens': 4,
    }, {
        'vit_giant_patch14_reg4_dinov2': 24,
    }),
    ({
        'final_norm': False,
        'img_size': 512,
        'no_embed_class': True,
        'reg_tokens': 7,
    }, {
        'vit_giant_patch16_radio_v3': 24, 'vit_huge_patch16_radio_v3': 16,
    }),
    ({
        'final_norm': False,
        'img_size': 512,
        'no_embed_class': True,
        'reg_tokens': 9,
    }, {
        'vit_huge_patch16_radio_v4': 16, 'vit_so400m_patch16_radio_v4': 16,
    }),
    ({'dynamic_img_size': True, 'final_norm': False, 'init_values': 0.1}, {
        'vit_intern300m_patch14_448': 16,
    }),
    ({
        'block_fn': 'ParallelScalingBlock',
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'no_embed_class': True,
        'reg_tokens': 1,
    }, {
        'vit_pwee_patch16_reg1_gap_256': 4,
    }),
    ({
        'class_token': False,
        'global_pool': 'avg',
        'init_values': 1e-05,
        'qkv_bias': False,
        'reg_tokens': 1,
    }, {
        'vit_so150m2_patch16_reg1_gap_256': 13,
        'vit_so150m2_patch16_reg1_gap_384': 13,
        'vit_so150m2_patch16_reg1_gap_448': 13,
    }),
    ({
        'class_token': False,
        'fc_norm': False,
        'global_pool': 'avg',
        'reg_tokens': 4,
    }, {
        'vit_so150m_patch16_reg4_gap_256': 14,
        'vit_so150m_patch16_reg4_gap_384': 14,
    }),
    ({'class_token': False, 'global_pool': 'map', 'reg_tokens': 4}, {
        'vit_so150m_patch16_reg4_map_256': 14,
    }),
]

ARCHITECTURES = {
    name: (heads, args)
    for args, names in _GROUPS for name, heads in names.items()
}
