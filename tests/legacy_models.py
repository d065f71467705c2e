"""The models of tests/fixtures/legacy_keras: the `create_model(None, ...)`
arguments each `.keras` file there was written with (by
scripts/make_legacy_keras_fixtures.py, before the `VisionTransformer`
class), which tests/test_vit_class.py expects those files to describe."""

# The sizes every tiny test model shares.
TINY = dict(patch_size=4, hidden_size=16, num_layers=2, num_heads=2,
            mlp_dim=32)

LEGACY_MODELS = {
    # Class token, pre-logits, a head.
    "tiny_token": dict(TINY, num_classes=3, image_size=16,
                       representation_size=8, head_zero_init=False),
    # Global average pooling, rectangular input, a features model.
    "tiny_gap_features": dict(TINY, num_classes=0, image_size=(16, 24),
                              pooling="gap"),
    # A hybrid: the ResNet root only (R+Ti style), stride 4 x patch 2.
    "tiny_hybrid": dict(TINY, num_classes=5, image_size=16, patch_size=2,
                        resnet_layers=(), head_zero_init=False),
    # Position embeddings that took the images too (for their size):
    # fixed sin-cos ones, and learnt ones resized to any input.
    "tiny_sincos": dict(TINY, num_classes=3, image_size=16,
                        posemb="sincos2d", head_zero_init=False),
    "tiny_dynamic": dict(TINY, num_classes=3, image_size=16,
                         dynamic_image_size=True, head_zero_init=False),
}
