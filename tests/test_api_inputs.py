"""The Python API's arguments as a caller writes them: values of the wrong
kind (a truthy string for a flag, a fraction for a size, None for a class
count) are refused by name, not coerced into another model; what a file
format cannot record is refused before it is written."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoint import loader, weights
from keras_vit.errors import UsageError
from keras_vit.export import litert
from keras_vit.export.saved_model import export_model

TINY = dict(num_classes=3, image_size=16, patch_size=8, hidden_size=16,
            num_layers=1, num_heads=2, mlp_dim=16)


def tiny(**changes):
    return keras_vit.create_model(None, **{**TINY, **changes})


@pytest.mark.parametrize("changes, says", [
    (dict(num_classes=None), "num_classes=None: give the head's width"),
    (dict(num_classes=True), "`num_classes` (config.model.num_classes) "
     "must be an int, got True"),
    (dict(num_classes=3.7), "must be an int, got 3.7"),
    (dict(patch_size=8.9), "`patch_size` (config.model.patch_size) must be "
     "an int, got 8.9"),
    (dict(patch_size="eight"), "must be an int, got 'eight'"),
    (dict(representation_size=8.5), "`representation_size` "),
    (dict(image_size="32"), "`image_size` must be a whole number of "
     "pixels or (height, width), not a string, got '32'"),
    (dict(image_size=(16.9, 16.2)), "`image_size` must be positive"),
    (dict(dynamic_image_size="False"), "`dynamic_image_size` must be True "
     "or False"),
    (dict(resnet_layers="111"), "`resnet_layers` (config.model."
     "resnet_layers) must be ints"),
    (dict(head_zero_init="False"), "must be True or False, got 'False'"),
])
def test_a_value_of_the_wrong_kind_is_refused_by_name(changes, says):
    with pytest.raises(UsageError) as info:
        tiny(**changes)
    assert says in str(info.value)


def test_whole_numbers_of_any_type_are_taken():
    for size in (16.0, np.int64(16), (np.int32(16), 16.0), np.array(16)):
        assert tiny(image_size=size).architecture.image_size == (16, 16)
    arch = tiny(patch_size=np.int64(8), dynamic_image_size=np.bool_(True),
                num_classes=np.int64(3)).architecture
    assert (arch.patch_size, arch.dynamic_image_size, arch.num_classes) == (
        8, True, 3)
    assert type(arch.patch_size) is int and type(arch.num_classes) is int


def test_numerics_and_intermediates_check_their_arguments():
    with pytest.raises(UsageError, match="layer_norm_epsilon > 0"):
        keras_vit.Numerics(layer_norm_epsilon=-1.0)
    with pytest.raises(UsageError, match="approximate_gelu='no'"):
        keras_vit.Numerics(approximate_gelu="no")
    for epsilon in (float("inf"), True, "1e-6"):
        with pytest.raises(UsageError, match="layer_norm_epsilon > 0"):
            keras_vit.Numerics(layer_norm_epsilon=epsilon)
    model = tiny(num_layers=2)
    # "10" is block 10, not blocks 1 and 0.
    with pytest.raises(UsageError, match="Block 10 does not exist"):
        keras_vit.intermediate_model(model, "10")
    with pytest.raises(UsageError, match="norm='no'"):
        keras_vit.intermediate_model(model, 0, norm="no")
    assert list(keras_vit.intermediate_model(model, np.int64(1)).output) == [
        "block_1"]


def test_list_models_matches_short_names_and_takes_patterns_only():
    assert [m.name for m in keras_vit.list_models("ViT-B_16")] == [
        "imagenet21k/ViT-B_16"]
    with pytest.raises(UsageError, match="takes a shell pattern"):
        keras_vit.list_models(16)


def test_npz_refuses_what_its_layout_cannot_record(tmp_path):
    exact = keras_vit.Numerics(approximate_gelu=False,
                               layer_norm_epsilon=1e-12)
    with pytest.raises(UsageError, match="the .npz layout records arrays "
                       "only, and this model computes with numerics="):
        weights.save_npz(tiny(numerics=exact), str(tmp_path / "n.npz"))
    arch = tiny(representation_size=8).architecture.replace(
        pre_logits_activation="relu")
    relu = keras_vit.VisionTransformer(arch)
    with pytest.raises(UsageError, match="pre_logits_activation='relu'"):
        weights.save_npz(relu, str(tmp_path / "r.npz"))
    # numpy would add .npz to another name: refused, nothing written.
    with pytest.raises(UsageError, match="name it .*nosuffix.npz"):
        weights.save_npz(tiny(), str(tmp_path / "nosuffix"))
    with pytest.raises(UsageError, match=r"name it .*upper\.npz\."):
        weights.save_npz(tiny(), str(tmp_path / "upper.NPZ"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # A string grid, as the command line writes it.
    weights.save_npz(tiny(), str(tmp_path / "ok.npz"))
    for grid in ("2x2", "2", 2.0, np.int64(2), [2, 2]):
        source = loader.NpzSource(str(tmp_path / "ok.npz"), posemb_grid=grid)
        assert source.posemb_grid == (2, 2), grid
    with pytest.raises(UsageError, match="`posemb_grid` must be"):
        loader.NpzSource(str(tmp_path / "ok.npz"), posemb_grid="2by2")


def test_a_saved_model_refuses_npz_build_options(tmp_path):
    path = str(tmp_path / "m.keras")
    tiny().save(path)
    with pytest.raises(UsageError, match="holds its own model whole, whose "
                       "arrays fit it: `strict` chooses how an .npz"):
        keras_vit.load_model(path, strict=False)
    # With a new head, what fits is loaded and the rest reported.
    model = keras_vit.load_model(path, num_classes=3, strict=False)
    assert model.output_shape == (None, 3)


def test_exports_refuse_a_features_model_and_unreadable_warmup(tmp_path):
    with pytest.raises(UsageError, match="A features model .* cannot be "
                       "exported: give it a head first"):
        litert.pixels_model(keras_vit.features_model(tiny()))
    with pytest.raises(UsageError, match="LiteRT export needs a model of "
                       "fixed input size"):
        litert.pixels_model(tiny(posemb="sincos2d", dynamic_image_size=True))
    with pytest.raises(UsageError, match=r"warmup_images\[0\] "
                       r"\(/nope.jpg\) cannot be read"):
        export_model(tiny(), str(tmp_path / "export"),
                     warmup_images=["/nope.jpg"])


def test_a_derived_view_refuses_to_be_saved_and_writes_nothing(tmp_path):
    model = tiny()
    x = np.zeros((1, 16, 16, 3), "float32")
    for view in (keras_vit.attention_model(model),
                 keras_vit.intermediate_model(model, 0)):
        view(x)  # a working model
        with pytest.raises(UsageError, match="is a view of another model"):
            view.save(str(tmp_path / "view.keras"))
    assert list(tmp_path.iterdir()) == []
    # Keras's own door asks for the config: the same line, not Keras's
    # "must override get_config" (Keras has opened the file by then).
    with pytest.raises(UsageError, match="is a view of another model"):
        keras.saving.save_model(view, str(tmp_path / "other.keras"))


def test_a_model_of_sizes_no_variant_has_is_not_named_after_one():
    assert keras_vit.create_model(
        "Ti/16", num_classes=3, image_size=32).name == "vit_Ti_16"
    assert keras_vit.create_model(
        "Ti/16", num_classes=3, image_size=32, num_layers=1).name == "vit"
    assert tiny(name="mine").name == "mine"
