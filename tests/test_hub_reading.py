"""A hub folder is read the way the library that wrote it reads it:
transformers' class when config.json names none, its class token, timm's
registry of architecture names, the model_args and pretrained_cfg keys
timm takes, and each library's resize and crop before evaluation
(tests/fixtures/hub, written by transformers 5.24 / timm 1.0.31, edited
here the way a user edits a folder by hand)."""

import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy
from PIL import Image

from keras_vit.checkpoint import loader
from keras_vit.checkpoint.hub import processor as hub_processor
from keras_vit.checkpoint.hub import reader as hub_reader
from keras_vit.checkpoint.hub import timm as hub_timm
from keras_vit.commands import flags as cli
from keras_vit.errors import UsageError
from tests.hub_fixtures import (
    FIXTURES,
    assert_close,
    check_predicts_with_resize,
    run_model,
)
from tests.reliability_cases import check_error, check_says, covers


def _copy(tmp_path, name, tag=""):
    folder = tmp_path / f"{name}{tag}"
    shutil.copytree(os.path.join(FIXTURES, name), folder)
    return folder


def _config(folder, edit):
    """Edits `folder`'s config.json in place with `edit(config)`."""
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _with_processor(tmp_path, tag, **fields):
    folder = _copy(tmp_path, "hf_vit_classifier", tag)
    (folder / "preprocessor_config.json").write_text(json.dumps(fields))
    return str(folder)


def _reference(folder):
    return np.load(os.path.join(folder, "reference.npz"))


# --- transformers: the class config.json names, else AutoModel's ----------

def test_a_source_reads_its_folder_once(monkeypatch):
    """One command asks a hub source for its description, class names,
    arrays, resize and model: the weights file is read and mapped once,
    and the model built from that one reading equals a fresh source's."""
    reads = []
    read = hub_reader.read_hub
    monkeypatch.setattr(hub_reader, "read_hub",
                        lambda path: reads.append(path) or read(path))
    folder = os.path.join(FIXTURES, "hf_vit_classifier")
    source = loader.HubSource(folder)
    loader.describe_source(source)
    loader.class_names(source)
    source.content()
    source.library_resize()
    resized = loader.load_model(source, image_size=48)
    model = loader.load_model(source)  # the reading left as it was read
    assert reads == [folder]
    fresh = loader.load_model(loader.HubSource(folder))
    assert len(reads) == 2
    for got, want in zip(model.weights, fresh.weights):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert resized.input_shape[1:3] == (48, 48)


def test_no_architectures_reads_a_classifier_as_automodel_does(
        tmp_path, caplog):
    # A ViTForImageClassification folder whose file also holds a pooler
    # (transformers' logits in reference.npz), its architectures removed:
    # AutoModelForImageClassification builds a ViTForImageClassification
    # for model_type vit (no pooler), so the class token is classified
    # and the pooler left out, named in the log and the load report.
    caplog.set_level("WARNING", logger="absl")
    folder = _config(_copy(tmp_path, "hf_vit_classifier_stray_pooler"),
                     lambda c: c.pop("architectures"))
    model, report = loader.load_report(loader.HubSource(folder))
    reference = _reference(folder)
    assert_close(run_model(model, reference["pixels"]), reference["logits"])
    assert "pre_logits" not in [layer.name for layer in model.layers]
    assert [key for key, _, _ in report.dropped] == [
        "vit.pooler.dense.bias", "vit.pooler.dense.weight"]
    assert "AutoModelForImageClassification" in str(report)
    assert "names no architectures and its weights hold a classifier" in (
        caplog.text)
    # Named, the class reads the same arrays, and the report is quiet.
    named = _copy(tmp_path, "hf_vit_classifier_stray_pooler", "_named")
    model, report = loader.load_report(loader.HubSource(str(named)))
    assert_close(run_model(model, reference["pixels"]), reference["logits"])
    assert not report.dropped


@covers("hf_no_class_token")
def test_a_transformers_file_without_a_class_token_is_refused(tmp_path):
    # Both ways a file can lack the token: with a position table of the
    # patches only (transformers refuses its size) and with the class
    # token's row still there (transformers would start the token at
    # random).
    for tag, rows in (("patches_only", slice(1, None)),
                      ("token_row_kept", slice(None))):
        folder = _copy(tmp_path, "hf_vit_classifier", tag)
        weights = str(folder / "model.safetensors")
        arrays = safetensors.numpy.load_file(weights)
        del arrays["vit.embeddings.cls_token"]
        table = "vit.embeddings.position_embeddings"
        arrays[table] = np.ascontiguousarray(arrays[table][:, rows])
        safetensors.numpy.save_file(arrays, weights)
        with pytest.raises(UsageError) as info:
            loader.load_model(loader.HubSource(str(folder)))
        assert "\n" not in str(info.value)
        check_error("hf_no_class_token", info.value)


# --- timm: registered names, model_args, pretrained_cfg ---------------------

def _timm(tmp_path, tag, edit, name="timm_vit"):
    return _config(_copy(tmp_path, name, tag), edit)


@covers("timm_unregistered_architecture")
def test_an_unregistered_timm_architecture_is_refused(tmp_path):
    def edit(config):
        config["architecture"] = "vit_large_patch16_newthing_224"
        del config["model_args"]["num_heads"]
    with pytest.raises(UsageError) as info:
        loader.load_model(loader.HubSource(_timm(tmp_path, "", edit)))
    assert "\n" not in str(info.value)
    assert "'vit_large_patch16_newthing_224'" in str(info.value)
    check_error("timm_unregistered_architecture", info.value)


@covers("timm_unknown_model_arg")
def test_a_model_arg_timm_does_not_take_is_refused(tmp_path):
    folder = _timm(tmp_path, "", lambda c: c["model_args"].update(
        attn_pool_num_heads=4))
    with pytest.raises(UsageError) as info:
        loader.load_model(loader.HubSource(folder))
    assert "\n" not in str(info.value)
    check_error("timm_unknown_model_arg", info.value)


@pytest.mark.parametrize("field, value, loads", [
    ("use_naflex", True, False), ("use_naflex", False, True),
    ("features_only", True, False), ("features_only", False, True),
    ("out_indices", [1], True), ("pretrained_strict", False, True),
])
def test_timm_factory_arguments_are_honoured_or_refused(
        tmp_path, field, value, loads):
    # The keys timm's factory takes before VisionTransformer: each listed,
    # and loaded where timm builds the same model, else refused by name.
    assert field in hub_timm.TIMM_FACTORY_ARGS
    folder = _timm(tmp_path, "", lambda c: c["model_args"].update(
        {field: value}))
    if not loads:
        with pytest.raises(UsageError, match=f"model_args.{field}=True"):
            loader.load_model(loader.HubSource(folder))
        return
    reference = _reference(folder)
    model = loader.load_model(loader.HubSource(folder))
    assert_close(run_model(model, reference["pixels"]), reference["logits"])


@covers("timm_unknown_pretrained_cfg_field")
def test_a_pretrained_cfg_key_timm_lacks_is_refused(tmp_path):
    folder = _timm(tmp_path, "", lambda c: c["pretrained_cfg"].update(
        crop_size=224))
    with pytest.raises(UsageError) as info:
        loader.load_model(loader.HubSource(folder))
    assert "\n" not in str(info.value)
    check_error("timm_unknown_pretrained_cfg_field", info.value)


def test_timm_single_dict_config_is_read_as_timm_parses_it():
    # Without pretrained_cfg, timm takes architecture and num_features
    # out, renames labels to label_names and builds its PretrainedCfg from
    # the rest: labels are the class names, a model_args is refused.
    single = {"architecture": "vit_base_patch16_224", "num_features": 768,
              "input_size": [3, 224, 224], "num_classes": 2,
              "labels": ["cat", "dog"], "label_names": ["a", "b"]}
    assert hub_timm.settings(single)["class_names"] == ["cat", "dog"]
    with pytest.raises(UsageError, match="has 'model_args', not a field"):
        hub_timm.settings(dict(single, model_args={"num_heads": 12}))
    with pytest.raises(UsageError, match="pretrained_cfg is null"):
        hub_timm.settings({"architecture": "vit_base_patch16_224",
                           "pretrained_cfg": None})


def _hub_config(architecture, num_features=32, **model_args):
    """A config.json as timm writes one for a hub model (no sizes in
    model_args) for timm_vit's arrays: 32 wide, 8-pixel patches, 4
    heads (model_args, as none of the names registers 4)."""
    def edit(config):
        config["architecture"] = architecture
        config["num_features"] = num_features
        config["model_args"] = dict({"num_heads": 4}, **model_args)
    return edit


def test_timm_patch_size_comes_from_the_architecture_name(tmp_path):
    # Without model_args.patch_size timm builds the name's patch
    # (vit_base_patch8_224: 8, the arrays'), so the folder loads.
    folder = _timm(tmp_path, "", _hub_config("vit_base_patch8_224"))
    reference = _reference(folder)
    model = loader.load_model(loader.HubSource(folder))
    assert_close(run_model(model, reference["pixels"]), reference["logits"])

    def patch(architecture, **args):
        return hub_timm.settings({"architecture": architecture,
                                  "model_args": args, "pretrained_cfg": {}}
                                 )["patch_size"]
    assert patch("vit_base_patch32_224.augreg_in21k") == 32
    assert patch("vit_base_patch32_224_in21k") == 32  # deprecated name
    assert patch("vit_base_patch32_224", patch_size=[8, 8]) == 8  # wins
    assert patch("test_vit") == 16  # no patch in the name: timm's 16


@pytest.mark.parametrize("architecture, features, args, message", [
    # ViT-S's name and num_features beside 32-wide arrays.
    ("vit_small_patch8_224.augreg_in21k_ft_in1k", 384, {},
     r"num_features=384 disagrees with the weights \(32\)"),
    # A patch-16 name beside patch-8 arrays: timm would resample the
    # kernel to 16 and compute at patch 16.
    ("vit_base_patch16_224.augreg_in21k", 32, {},
     r"architecture='vit_base_patch16_224.augreg_in21k' disagrees with "
     r"the weights \(8-pixel patches, where timm builds the name's "
     r"patch16 as model_args gives no patch_size\)"),
    ("vit_base_patch8_224", 32, {"patch_size": 16},
     r"model_args.patch_size=16 disagrees with the weights \(8\)"),
])
def test_timm_sizes_beside_model_args_must_match_the_arrays(
        tmp_path, architecture, features, args, message):
    folder = _timm(tmp_path, "", _hub_config(architecture, features, **args))
    with pytest.raises(UsageError, match=message) as info:
        loader.load_model(loader.HubSource(folder))
    assert "\n" not in str(info.value)
    # model_args' patch_size wins over the name's, as in timm.
    folder = _timm(tmp_path, "_args", _hub_config(
        "vit_base_patch16_224", patch_size=8))
    loader.load_model(loader.HubSource(folder))


def test_a_2d_timm_kernel_is_reshaped_with_the_name_s_patch(tmp_path):
    # timm's checkpoint filter reshapes a 2-D (out, 3 * P * P) kernel
    # with the patch it builds: the name's where model_args gives none.
    def name(architecture):
        def edit(config):
            config["architecture"] = architecture
            del config["model_args"]["patch_size"]
        return edit
    folder = _timm(tmp_path, "", name("vit_small_patch8_224"),
                   "timm_vit_kernel_2d")
    reference = _reference(folder)
    model = loader.load_model(loader.HubSource(folder))
    assert_close(run_model(model, reference["pixels"]), reference["logits"])
    folder = _timm(tmp_path, "_16", name("vit_small_patch16_224"),
                   "timm_vit_kernel_2d")
    with pytest.raises(UsageError, match=r"\(16, 192\), which timm's "
                       r"checkpoint filter cannot reshape to its model's "
                       r"\(out, 3, 16, 16\) kernel"):
        loader.load_model(loader.HubSource(folder))


# --- each library's resize and crop before evaluation -----------------------

@pytest.mark.parametrize("fields, size, resize, says", [
    # facebook/deit-base-patch16-224's file (the older feature extractor
    # form): 256, bicubic, then the central 224.
    (dict(feature_extractor_type="DeiTFeatureExtractor", size=256,
          crop_size=224, do_center_crop=True, resample=3), 224,
     (256, False), "resizes with BICUBIC (resample 3)"),
    # DeiTImageProcessor's own defaults: the same.
    (dict(image_processor_type="DeiTImageProcessor"), 224, (256, False),
     "BICUBIC"),
    (dict(image_processor_type="DeiTImageProcessor", resample=2), 224,
     (256, False), None),
    # google/vit-*: straight to the input.
    (dict(image_processor_type="ViTImageProcessor", size=224,
          resample=2), 224, (None, False), None),
    (dict(image_processor_type="ViTImageProcessorFast",
          size={"height": 384, "width": 384}), 384, (None, False), None),
    # transformers 5 crops where the file says so, ViT's class included.
    (dict(image_processor_type="ViTImageProcessor", size=[256, 256],
          do_center_crop=True, crop_size=[224, 224]), 224, (256, False),
     None),
    (dict(image_processor_type="BeitImageProcessor", resample=2), 224,
     (None, False), None),
    # The short side to 256, the aspect ratio kept, then the central 224:
    # keras_vit's keep_aspect form, nothing to say.
    (dict(image_processor_type="CLIPImageProcessor", size=256,
          resample=2), 224, (256, True), None),
    # CLIP's defaults: the short side to 224 (bicubic), the central 224.
    (dict(image_processor_type="CLIPImageProcessor"), 224, (224, True),
     "BICUBIC"),
    (dict(image_processor_type="BitImageProcessor", resample=2,
          size={"shortest_edge": 40}, crop_size=[32, 32]), 32, (40, True),
     None),
    # ConvNeXT below 384: the short side to int(S / crop_pct), then the
    # central S x S.
    (dict(image_processor_type="ConvNextImageProcessor",
          size={"shortest_edge": 224}), 224, (256, True), "BICUBIC"),
    (dict(image_processor_type="ConvNextImageProcessor", resample=2,
          size={"shortest_edge": 256}, crop_pct=0.9), 256, (284, True),
     None),
    (dict(image_processor_type="ConvNextImageProcessor", resample=2,
          size={"shortest_edge": 384}), 384, (None, False), None),
    # What keras_vit's resizes and crop cannot make: said.
    (dict(image_processor_type="CLIPImageProcessor", size=224,
          resample=2, do_center_crop=False), 224, (None, False),
     "keeps a photo's aspect ratio (size {'shortest_edge': 224})"),
    (dict(image_processor_type="CLIPImageProcessor", resample=2,
          size={"shortest_edge": 200}), 224, (None, False),
     "resizes a photo's shorter side to 200, smaller than its 224 x 224 "
     "crop"),
    (dict(image_processor_type="CLIPImageProcessor", resample=2,
          size={"shortest_edge": 256, "longest_edge": 300}), 224,
     (256, True), "whose longest_edge keras-vit does not apply"),
    (dict(size={"height": 256, "width": 300}, do_center_crop=True,
          crop_size=224), 224, (None, False), "resizes to 256 x 300 before "
     "its central crop"),
    (dict(do_resize=False, do_center_crop=True, crop_size=224), 224,
     (None, False), "crops a photo's central 224 x 224 without resizing "
     "it"),
    (dict(image_processor_type="ViTImageProcessor"), 32, (None, False),
     "makes 224 x 224 images, where the model takes 32 x 32"),
    (dict(size={"height": 200, "width": 200}, do_center_crop=True,
          crop_size=224), 224, (None, False),
     "smaller than its 224 x 224 crop"),
    (dict(size={"max_height": 224, "max_width": 224}), 224, (None, False),
     "resizes by size"),
    (dict(image_processor_type="FooImageProcessor", size=256), 224,
     (None, False), "resize defaults are not known here"),
    (dict(image_processor_type="FooImageProcessor", size=256,
          do_resize=True, do_center_crop=True, crop_size=224), 224,
     (256, False), None),
])
def test_transformers_processor_resize_and_crop(caplog, fields, size,
                                                resize, says):
    # `resize`: (N, keep_aspect), keep_aspect where the processor resizes
    # a photo's shorter side to N before its central crop.
    caplog.set_level("WARNING", logger="absl")
    path = f"{sorted(fields.items())}/preprocessor_config.json"
    assert hub_processor.library_resize(fields, path, (size, size)) == (
        resize)
    said = [r.getMessage() for r in caplog.records if path in
            r.getMessage()]
    if says is None:
        assert not said
    else:
        assert len(said) == 1 and says in said[0], said
        assert "--resize_size=N" in said[0]
    if resize[1] and said:
        # What differs is said, not what keras-vit now does alike.
        assert "aspect ratio (size" not in said[0]
        assert (f"resize a photo's shorter side to {resize[0]} (area, the "
                "aspect ratio kept)") in said[0]
        assert "both sides, bilinear" not in said[0]


def test_a_deit_processor_is_evaluated_with_its_resize_and_crop(
        tmp_path, caplog):
    # DeiT's processor at this 32-pixel model's scale: 36 x 36 bicubic,
    # then the central 32 x 32. keras-vit-predict answers what the model
    # says on that crop (bilinear, the warning says), --resize_size wins;
    # without preprocessor_config.json, straight to the input.
    caplog.set_level("WARNING", logger="absl")
    folder = _with_processor(
        tmp_path, "", image_processor_type="DeiTImageProcessor",
        size={"height": 36, "width": 36}, crop_size={"height": 32,
                                                     "width": 32},
        image_mean=[0.5] * 3, image_std=[0.5] * 3)
    source = loader.resolve(folder)
    assert source.library_resize() == (36, (32, 32), False, None)
    assert cli.source_resize(source) == 36
    assert cli.source_resize(source, 64) == 72  # scaled with --image_size
    assert "resizes with BICUBIC" in caplog.text
    assert loader.resolve(os.path.join(
        FIXTURES, "hf_vit_classifier")).library_resize() is None
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3), np.uint8)
    image = tmp_path / "photo.png"
    Image.fromarray(rgb).save(image)
    check_predicts_with_resize(folder, image, 36, top_k=5)


def test_a_shortest_edge_processor_is_evaluated_keeping_the_aspect(
        tmp_path, caplog):
    # CLIP's form at this 32-pixel model's scale: the short side to 36,
    # the aspect ratio kept, then the central 32 x 32; keras_vit's
    # keep_aspect resize, so nothing is said (bilinear asked).
    caplog.set_level("WARNING", logger="absl")
    folder = _with_processor(
        tmp_path, "", image_processor_type="CLIPImageProcessor",
        size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32},
        resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    source = loader.resolve(folder)
    assert source.library_resize()[:3] == (36, (32, 32), True)
    assert [r for r in caplog.records if folder in r.getMessage()
            and r.levelname == "WARNING"] == []
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3), np.uint8)
    image = tmp_path / "photo.png"
    Image.fromarray(rgb).save(image)
    check_predicts_with_resize(folder, image, 36, top_k=5)


@covers("hf_processor_bad_size")
def test_a_processor_size_transformers_cannot_read_is_refused(tmp_path):
    folder = _with_processor(tmp_path, "", size={"width": 224})
    with pytest.raises(UsageError) as info:
        loader.load_model(loader.HubSource(folder))
    assert "\n" not in str(info.value)
    check_error("hf_processor_bad_size", info.value)


@covers("hf_processor_resize_differs")
def test_a_processor_resize_keras_vit_cannot_make_is_said(tmp_path,
                                                          caplog):
    caplog.set_level("WARNING", logger="absl")
    folder = _with_processor(
        tmp_path, "", image_processor_type="ViTImageProcessor",
        size={"height": 36, "width": 40}, do_center_crop=True, crop_size=32)
    source = loader.resolve(folder)
    reference = _reference(folder)
    model = loader.load_model(source)
    assert_close(run_model(model, reference["pixels"]), reference["logits"])
    assert source.library_resize() is None
    said = [r.getMessage() for r in caplog.records
            if "preprocessor_config.json" in r.getMessage()]
    assert len(said) == 1, said  # once, however often the folder is read
    check_says("hf_processor_resize_differs", said[0])


@pytest.mark.parametrize("crop_mode, keep, says", [
    ("center", True, None), ("squash", False, None),
    ("border", False, "crop_mode 'border' fits a photo's longer side"),
])
def test_timm_crop_mode_is_read(tmp_path, caplog, crop_mode, keep, says):
    # 'center' (timm's default) resizes a photo's shorter side to 35, the
    # aspect ratio kept; 'squash' both sides to 35 x 35.
    caplog.set_level("WARNING", logger="absl")
    folder = _timm(tmp_path, crop_mode, lambda c: c["pretrained_cfg"].update(
        crop_mode=crop_mode))
    assert loader.resolve(folder).library_resize()[:3] == (35, (32, 32), keep)
    said = [r.getMessage() for r in caplog.records if folder in
            r.getMessage()]
    assert said == [] if says is None else (len(said) == 1
                                            and says in said[0])


@pytest.mark.parametrize("crop_pct, crop_mode, size, want", [
    (0.9, "center", (32, 32), (35, True)),
    (0.9, "squash", (32, 32), (35, False)),
    (0.875, "center", (224, 224), (256, True)),
    # A crop_pct of 1: 'center' still keeps the aspect ratio (the shorter
    # side to the input's, then the central crop); 'squash' and 'border'
    # resize to the input.
    (1.0, "center", (32, 32), (32, True)),
    (1.0, "squash", (32, 32), (None, False)),
    (1.0, "border", (32, 32), (None, False)),
    # timm's default branch: a mode it does not name is 'center'.
    (0.9, "other", (32, 32), (35, True)),
    (0.9, "center", (16, 64), (None, False)),
])
def test_timm_eval_resize_keeps_the_aspect_ratio_where_timm_does(
        crop_pct, crop_mode, size, want):
    path = f"{crop_pct}/{crop_mode}/{size}/config.json"
    assert hub_timm.eval_resize(crop_pct, crop_mode, size, path) == want


def test_a_timm_folder_at_another_size_is_resized_by_timms_rule():
    """At another --image_size, timm's resize is floor(side / crop_pct)
    again (timm_vit: crop_pct 0.9, 35 at 32), not its floored 35 scaled
    (52.5 at 48: a pixel off)."""
    source = loader.resolve(os.path.join(FIXTURES, "timm_vit"))
    assert source.library_resize() == (35, (32, 32), True, 0.9)
    assert cli.source_resize(source) == 35
    assert [cli.source_resize(source, n) for n in (48, 64, 384)] == [
        53, 71, 426]


@pytest.mark.parametrize("crop_pct, crop_mode, said", [
    (1.0, "center", True),  # timm keeps a non-square model's aspect
    (1.0, "squash", False),  # resizes to the input, as keras-vit does
    (0.9, "squash", True),   # a non-square resize before the crop
])
def test_what_timm_does_otherwise_is_said(crop_pct, crop_mode, said,
                                          caplog):
    caplog.set_level("WARNING", logger="absl")
    path = f"said/{crop_pct}/{crop_mode}/config.json"
    assert hub_timm.eval_resize(crop_pct, crop_mode, (16, 64), path) == (
        None, False)
    assert (path in caplog.text) is said
    caplog.clear()
    hub_timm.eval_resize(crop_pct, "border", (32, 32), path + "b")
    assert "crop_mode 'border'" in caplog.text  # a crop_pct of 1 too


def test_a_squash_timm_model_is_evaluated_resizing_both_sides(tmp_path):
    folder = _timm(tmp_path, "", lambda c: c["pretrained_cfg"].update(
        crop_mode="squash"))
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3), np.uint8)
    image = tmp_path / "photo.png"
    Image.fromarray(rgb).save(image)
    check_predicts_with_resize(folder, image, 35, top_k=3)


def test_a_non_square_timm_model_with_a_crop_is_said(tmp_path, caplog):
    # timm resizes a 16 x 64 model's photo to 17 x 71 (crop_pct 0.9)
    # before its crop: not square, so resized to the input directly.
    caplog.set_level("WARNING", logger="absl")
    folder = str(_copy(tmp_path, "timm_vit_img_size_args"))
    assert loader.resolve(folder).library_resize() is None
    assert "timm resizes to 17 x 71 (crop_pct 0.9, crop_mode 'center') " \
        "before its central 16 x 64" in caplog.text


# --- an input that is not whole patches: the library's scale ---------------

def _said(caplog, folder):
    return [r.getMessage() for r in caplog.records
            if str(folder) in r.getMessage()]


def test_timm_resizes_for_its_full_input_past_the_whole_patches(
        tmp_path, caplog):
    # Input 35 at patch 8, crop_pct 0.9: timm resizes the shorter side to
    # floor(35 / 0.9) = 38, takes the central 35 x 35, and its patch
    # embedding reads the top-left 32 x 32. keras-vit, built at 32,
    # resizes to 38 too (the same scale) and takes the central 32 x 32, a
    # window it says differs.
    caplog.set_level("WARNING", logger="absl")
    folder = str(_copy(tmp_path, "timm_vit_size_remainder"))
    source = loader.resolve(folder)
    assert source.library_resize()[:3] == (38, (32, 32), True)
    loader.load_model(source)
    said = _said(caplog, folder)
    assert len(said) == 1, said
    assert ("timm makes 35 x 35 images, of which the patch embedding reads "
            "the top-left 32 x 32") in said[0]
    assert ("takes the central 32 x 32 after the library's resize to 38"
            in said[0])
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3), np.uint8)
    image = tmp_path / "photo.png"
    Image.fromarray(rgb).save(image)
    check_predicts_with_resize(folder, image, 38, top_k=3)
    # crop_pct 1, 'squash' (timm's vit_so400m_patch14_siglip_gap_384: 384
    # at patch 14, built at 378): both sides to the full input, not to
    # the whole patches.
    folder = _timm(tmp_path, "squash", lambda c: c["pretrained_cfg"].update(
        crop_pct=1.0, crop_mode="squash"), "timm_vit_size_remainder")
    assert loader.resolve(folder).library_resize()[:3] == (35, (32, 32), False)


@pytest.mark.parametrize("crop_pct, crop_mode, size, built, want", [
    (0.9, "center", (35, 35), (32, 32), (38, True)),
    (0.9, "squash", (35, 35), (32, 32), (38, False)),
    (1.0, "squash", (384, 384), (378, 378), (384, False)),
    (1.0, "center", (384, 384), (378, 378), (384, True)),
    (1.0, "squash", (35, 39), (32, 32), (None, False)),
])
def test_timm_eval_resize_is_planned_for_the_full_input(
        caplog, crop_pct, crop_mode, size, built, want):
    caplog.set_level("WARNING", logger="absl")
    path = f"full/{crop_pct}/{crop_mode}/{size}/config.json"
    assert hub_timm.eval_resize(crop_pct, crop_mode, size, path,
                                built) == want
    said = _said(caplog, path)
    assert len(said) == 1 and (
        f"of which the patch embedding reads the top-left {built[0]} x "
        f"{built[1]}") in said[0], said
    if want[0] is None:
        assert f"resizes a photo to {built[0]} x {built[1]} directly" in (
            said[0])


@pytest.mark.parametrize("fields, want, resized", [
    # ViTImageProcessor to the full 35 x 35: resized to 35, not squeezed
    # to the 32 x 32 the patch embedding reads.
    (dict(size={"height": 35, "width": 35}), (35, False),
     "resize a photo to 35 x 35 (both sides, bilinear) and take the "
     "central 32 x 32"),
    (dict(image_processor_type="DeiTImageProcessor", resample=2,
          size={"height": 40, "width": 40}, crop_size=35), (40, False),
     "resize a photo to 40 x 40 (both sides, bilinear) and take the "
     "central 32 x 32"),
])
def test_transformers_resizes_for_its_full_input_past_the_whole_patches(
        tmp_path, caplog, fields, want, resized):
    # hf_vit_size_remainder: image_size 35, patch 8, built at 32.
    caplog.set_level("WARNING", logger="absl")
    folder = _copy(tmp_path, "hf_vit_size_remainder")
    (folder / "preprocessor_config.json").write_text(json.dumps(
        dict(fields, image_mean=[0.5] * 3, image_std=[0.5] * 3)))
    source = loader.resolve(str(folder))
    assert source.library_resize()[:3] == (want[0], (32, 32), want[1])
    model = loader.load_model(source)
    reference = _reference(folder)
    assert_close(run_model(model, reference["pixels"][:, :32, :32]),
                 reference["logits"])
    said = _said(caplog, folder)
    assert len(said) == 1, said
    assert ("makes 35 x 35 images, of which the patch embedding reads the "
            "top-left 32 x 32") in said[0]
    assert resized in said[0]
    # Whole patches: nothing to say.
    path = "whole/preprocessor_config.json"
    assert hub_processor.library_resize(
        dict(size={"height": 32, "width": 32}), path, (32, 32),
        (32, 32)) == (None, False)
    assert not _said(caplog, path)
