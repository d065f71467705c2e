"""Every AugReg checkpoint loads through the normal loader: names parsed,
the model read from the name and from the arrays, disagreements named.

The files cannot be downloaded here: the small ones are built with the
official layout (tests/test_augreg_checkpoints.official_shapes, written
from the layout of the released files independently of the model code),
the large ones are checked by their shapes alone."""

import numpy as np
import pytest

import keras_vit
from keras_vit.checkpoint import loader, weights
from keras_vit.checkpoint.formats import npz_layout
from keras_vit.checkpoint.zoo import augreg
from keras_vit.errors import UsageError
from keras_vit.model import architecture_of

NAMES = {
    "Ti/16": "Ti_16", "S/16": "S_16", "S/32": "S_32", "B/16": "B_16",
    "B/32": "B_32", "B/8": "B_8", "L/16": "L_16", "R+Ti/16": "R_Ti_16",
    "R26+S/32": "R26_S_32", "R50+L/32": "R50_L_32",
}
PRE = "{}-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
FINE = PRE + "--imagenet2012-steps_20k-lr_0.01-res_384"
SIZES = {  # width, depth, heads, mlp
    "Ti": (192, 12, 3, 768), "S": (384, 12, 6, 1536),
    "B": (768, 12, 12, 3072), "L": (1024, 24, 16, 4096),
}
HYBRID = {"R+Ti/16": ((), 8), "R26+S/32": ((2, 2, 2, 2), 1),
          "R50+L/32": ((3, 4, 6, 3), 1)}


def official_shapes(variant, num_classes, image_size):
    """Key -> shape of a released file (checkpoint_format.md layout)."""
    width, depth, heads, mlp = SIZES[variant.split("+")[-1].split("/")[0]]
    stages, patch = HYBRID.get(variant, (None, int(variant.split("/")[1])))
    shapes, channels, stride = {}, 3, patch
    if stages is not None:
        shapes["conv_root/kernel"] = (7, 7, 3, 64)
        # GroupNorm parameters: (1, 1, 1, C) in the released hybrids.
        shapes["gn_root/scale"] = shapes["gn_root/bias"] = (1, 1, 1, 64)
        channels, stride = 64, 4 * patch
        for s, units in enumerate(stages):
            out = 256 * 2 ** s
            for u in range(units):
                pre = f"block{s + 1}/unit{u + 1}/"
                mid = out // 4
                cin = channels if u == 0 else out
                shapes[pre + "conv1/kernel"] = (1, 1, cin, mid)
                shapes[pre + "conv2/kernel"] = (3, 3, mid, mid)
                shapes[pre + "conv3/kernel"] = (1, 1, mid, out)
                names = ["gn1", "gn2", "gn3"]
                if u == 0:
                    shapes[pre + "conv_proj/kernel"] = (1, 1, cin, out)
                    names.append("gn_proj")
                for n in names:
                    c = out if n in ("gn3", "gn_proj") else mid
                    shapes[pre + n + "/scale"] = (1, 1, 1, c)
                    shapes[pre + n + "/bias"] = (1, 1, 1, c)
            channels = out
            stride = 4 * 2 ** s * patch
    grid = image_size // stride
    shapes["embedding/kernel"] = (patch, patch, channels, width)
    shapes["embedding/bias"] = (width,)
    shapes["cls"] = (1, 1, width)
    shapes["Transformer/posembed_input/pos_embedding"] = (
        1, grid * grid + 1, width)
    for i in range(depth):
        pre = f"Transformer/encoderblock_{i}/"
        att = pre + "MultiHeadDotProductAttention_1/"
        for n in ("LayerNorm_0", "LayerNorm_2"):
            shapes[f"{pre}{n}/scale"] = shapes[f"{pre}{n}/bias"] = (width,)
        for n in ("query", "key", "value"):
            shapes[f"{att}{n}/kernel"] = (width, heads, width // heads)
            shapes[f"{att}{n}/bias"] = (heads, width // heads)
        shapes[att + "out/kernel"] = (heads, width // heads, width)
        shapes[att + "out/bias"] = (width,)
        shapes[pre + "MlpBlock_3/Dense_0/kernel"] = (width, mlp)
        shapes[pre + "MlpBlock_3/Dense_0/bias"] = (mlp,)
        shapes[pre + "MlpBlock_3/Dense_1/kernel"] = (mlp, width)
        shapes[pre + "MlpBlock_3/Dense_1/bias"] = (width,)
    shapes["Transformer/encoder_norm/scale"] = (width,)
    shapes["Transformer/encoder_norm/bias"] = (width,)
    shapes["head/kernel"] = (width, num_classes)
    shapes["head/bias"] = (num_classes,)
    return shapes


def test_names_parse():
    name = augreg.parse_name(
        "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
        "--imagenet2012-steps_20k-lr_0.03-res_384"
    )
    assert name == augreg.AugRegName(
        model="S_16", variant="S/16", dataset="i21k", epochs=300, lr=0.001,
        aug="light1", weight_decay=0.03, dropout=0.0, stochastic_depth=0.0,
        adapt_dataset="imagenet2012", adapt_steps=20_000, adapt_lr=0.03,
        adapt_resolution=384,
    )
    assert name.fine_tuned and name.image_size == 384
    assert name.num_classes == 1000
    pre = augreg.parse_name(
        "gs://vit_models/augreg/R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03"
        "-do_0.0-sd_0.0.npz"
    )
    assert (pre.variant, pre.image_size, pre.num_classes) == (
        "R+Ti/16", 224, 21843)
    assert not pre.fine_tuned and pre.aug == "none"
    i1k = augreg.parse_name(
        "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1.npz")
    assert (i1k.dataset, i1k.dropout, i1k.stochastic_depth) == (
        "i1k", 0.1, 0.1)
    assert augreg.parse_name("ViT-B_16.npz") is None
    assert augreg.parse_name("X_16-i21k-300ep-lr_0.001-aug_none-wd_0.03"
                             "-do_0.0-sd_0.0") is None
    assert augreg.url("B_8-x") == "gs://vit_models/augreg/B_8-x.npz"


def test_every_augreg_model_name_is_a_variant():
    for variant, model in NAMES.items():
        for template in (PRE, FINE):
            name = augreg.parse_name(template.format(model))
            assert name.variant == variant
            assert variant in keras_vit.VARIANTS


def test_index_csv_rows():
    text = (
        "name,ds,epochs,lr,aug,wd,do,sd,best_val,final_val,final_test,"
        "adapt_ds,adapt_lr,adapt_steps,adapt_res,adapt_final_val,"
        "adapt_final_test,filename,adapt_filename\n"
        "Ti/16,i21k,300,0.001,light1,0.03,0.0,0.0,0.1,0.1,0.1,imagenet2012,"
        "0.03,20000,384,0.78,0.78,"
        + PRE.format("Ti_16").replace("medium1", "light1") + ","
        + FINE.format("Ti_16").replace("medium1", "light1") + "\n"
        "R+Ti/16,i21k,300,0.001,none,0.03,0.0,0.0,0.1,0.1,0.1,cifar100,"
        "0.01,10000,224,0.9,0.9," + PRE.format("R_Ti_16") + ","
        + PRE.format("R_Ti_16") + "--cifar100-steps_10k-lr_0.01-res_224\n"
    )
    names = augreg.names_in_index(text)
    assert [(n.variant, n.adapt_dataset) for n in names] == [
        ("Ti/16", None), ("Ti/16", "imagenet2012"), ("R+Ti/16", None),
        ("R+Ti/16", "cifar100"),
    ]
    assert names[3].adapt_steps == 10_000 and names[3].image_size == 224


@pytest.mark.parametrize("variant", list(NAMES))
def test_every_augreg_model_is_read_from_name_and_arrays(variant):
    """The pre-trained (224) and fine-tuned (384) files of each model:
    their shapes describe the variant, which the name confirms; the
    loader builds it."""
    for template, classes, size in ((PRE, 21843, 224), (FINE, 1000, 384)):
        shapes = official_shapes(variant, classes, size)
        info = npz_layout.describe_arrays(shapes)
        info["resnet_width"] = 1
        assert info["variant"] == variant
        name = augreg.parse_name(template.format(NAMES[variant]))
        augreg.check_name("f.npz", name, info)  # no error
        assert name.image_size == size


def _write(tmp_path, model, name):
    path = str(tmp_path / f"{name}.npz")
    weights.save_npz(model, path)
    return path


@pytest.mark.parametrize("variant,size", [
    ("Ti/16", 224),
    pytest.param("R+Ti/16", 64, marks=pytest.mark.slow),
    pytest.param("S/32", 64, marks=pytest.mark.slow),
])
def test_small_augreg_files_load_end_to_end(tmp_path, variant, size):
    """Files in the official layout (written by save_npz, whose layout
    the shapes-only test above pins down) load with no --variant, at the
    resolution their name says, with the same logits."""
    model = keras_vit.create_model(variant, num_classes=10,
                                   image_size=size, head_zero_init=False)
    arrays = weights.model_arrays(model)
    assert {k: v.shape for k, v in arrays.items()} == official_shapes(
        variant, 10, size)
    template = PRE if size == 224 else (
        PRE + f"--cifar100-steps_2k-lr_0.01-res_{size}")
    path = _write(tmp_path, model, template.format(NAMES[variant]))
    loaded = loader.load_model(loader.NpzSource(path))
    assert loaded.input_shape[1:3] == (size, size)
    assert keras_vit.decode_variant(variant)  # the name's variant
    x = np.random.default_rng(0).uniform(-1, 1, (2, size, size, 3))
    x = x.astype("float32")
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)),
                               atol=1e-5)
    info = loader.describe_source(loader.NpzSource(path))
    assert info.variant == variant and info.image_size == (size, size)
    # --variant agreeing with the name is accepted.
    loader.load_model(loader.NpzSource(path, variant=variant))


def test_a_release_without_its_position_table_is_refused(tmp_path):
    """Every AugReg release learns its position table: a file of that name
    without it (damaged, or another file) is refused by name, not loaded
    with fixed sin-cos positions; a file of another name loads so (as
    save_npz writes a sin-cos model), said in the log."""
    model = keras_vit.create_model("Ti/16", num_classes=10, image_size=32)
    arrays = weights.model_arrays(model)
    del arrays["Transformer/posembed_input/pos_embedding"]
    named = str(tmp_path / (PRE.format(NAMES["Ti/16"]) + ".npz"))
    other = str(tmp_path / "mine.npz")
    for path in (named, other):
        np.savez(path, **arrays)
    with pytest.raises(UsageError, match=(
            "holds no Transformer/posembed_input/pos_embedding, which every "
            "AugReg release holds")):
        loader.load_model(loader.NpzSource(named))
    loaded = loader.load_model(loader.NpzSource(other))
    assert architecture_of(loaded).posemb == "sincos2d"


def test_name_and_arrays_disagreeing_names_both(tmp_path):
    model = keras_vit.create_model("R+Ti/16", num_classes=10, image_size=64)
    wrong_name = _write(tmp_path, model, PRE.format("Ti_16"))
    with pytest.raises(ValueError) as error:
        loader.load_model(loader.NpzSource(wrong_name))
    text = str(error.value)
    assert "Ti/16" in text and "R+Ti/16" in text and "patch_size" in text
    right = _write(tmp_path, model, PRE.format("R_Ti_16"))
    with pytest.raises(ValueError) as error:
        loader.load_model(loader.NpzSource(right, variant="Ti/16"))
    text = str(error.value)
    assert "`variant`=Ti/16" in text and "R+Ti/16" in text
    # A file not named like AugReg's: the arrays alone, --variant checks.
    plain = _write(tmp_path, model, "my_model")
    with pytest.raises(ValueError, match="not a Ti/16 checkpoint"):
        loader.load_model(loader.NpzSource(plain, variant="Ti/16"))
    assert loader.load_model(loader.NpzSource(plain),
                             image_size=64).name == "vit_R_Ti_16"
