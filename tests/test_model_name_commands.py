"""The names a user types, through the commands' entry points (fast tier)
and the console scripts (subprocesses, slow tier), offline, with a
$KERAS_VIT_CACHE of their own: every released size has a
short name (`ViT-Ti_16` is AugReg's Ti/16), the fine-tuning recipe starts
every variant from a released file, and a path never becomes a download:
a missing `ViT-B_16.npz` says so and names the download to ask for,
while a mirror that holds the file shows that nothing was fetched."""

import contextlib
import importlib
import io
import os
import subprocess

import numpy as np
import pytest

from keras_vit import VARIANTS
from keras_vit.checkpoint.zoo import catalog
from keras_vit.configs import finetune
from keras_vit.errors import UsageError
from tests.console import script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUGREG_TI16 = "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
# A command that reaches a download when it should not fails the test
# instead of waiting on the network.
TIMEOUT_S = 120




@pytest.fixture(params=["in_process", pytest.param(
    "console_script", marks=pytest.mark.slow)])
def user(request, tmp_path, monkeypatch):
    """An offline user's environment: an empty model cache, a mirror of
    the bucket that holds imagenet21k/ViT-B_16.npz (a download from it
    would succeed, so a fetch shows up in the cache), a working folder
    without any .npz. Each test runs the commands' entry points in this
    process (fast tier) and as console scripts (slow tier)."""
    mirror = tmp_path / "mirror" / "imagenet21k"
    mirror.mkdir(parents=True)
    np.savez(mirror / "ViT-B_16.npz", x=np.zeros(1))
    (tmp_path / "work").mkdir()
    env = dict(PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
               KERAS_VIT_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf"),
               KERAS_VIT_MODELS_BASE_URL=str(tmp_path / "mirror"))
    monkeypatch.delenv("KERAS_VIT_OFFLINE", raising=False)
    return dict(env=env, cwd=str(tmp_path / "work"), mode=request.param,
                cache=str(tmp_path / "cache"), monkeypatch=monkeypatch)


def _run(user, name, args, env):
    """(exit status, stderr) of keras-vit-`name` with `args`."""
    if user["mode"] == "console_script":
        result = subprocess.run(
            script(name) + list(args), capture_output=True, text=True,
            cwd=user["cwd"], env=dict(os.environ, **user["env"], **env),
            timeout=TIMEOUT_S)
        return result.returncode, result.stderr
    patch = user["monkeypatch"]
    for key, value in dict(user["env"], **env).items():
        if key != "PYTHONPATH":
            patch.setenv(key, value)
    patch.chdir(user["cwd"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = importlib.import_module(f"keras_vit.commands.{name}").main(
            [f"keras-vit-{name}", *args])
    return status, err.getvalue()


def error_line(user, name, *args, **env):
    """The one line keras-vit-`name` printed when it refused (status 1, no
    traceback), in bounded time."""
    status, stderr = _run(user, name, args, env)
    assert status == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines()
             if line.startswith(f"keras-vit-{name}: error: ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def cached_files(user):
    return [os.path.join(d, f) for d, _, files in os.walk(user["cache"])
            for f in files]


@pytest.mark.parametrize("model", ["ViT-B_16.npz", "./ViT-B_16.npz"])
def test_a_missing_npz_is_a_path_never_a_download(user, model):
    # The file name is in three of the bucket's folders: each is named.
    line = error_line(user, "convert", f"--model={model}",
                      "--output=out.keras")
    assert line == (
        f"keras-vit-convert: error: {model}: no such local file (a path is "
        "never downloaded). To download a released file of that name, give "
        "its name: ViT-B_16 (imagenet21k/ViT-B_16), "
        "imagenet21k+imagenet2012/ViT-B_16 or sam/ViT-B_16.")
    assert cached_files(user) == []  # the mirror's file was not fetched
    # A path that names the folder too: that file alone.
    line = error_line(user, "convert", "--model=imagenet21k+imagenet2012/"
                      "ViT-B_16.npz", "--output=out.keras")
    assert line.endswith(
        "To download the released imagenet21k+imagenet2012/ViT-B_16, give "
        "its name: imagenet21k+imagenet2012/ViT-B_16.")
    line = error_line(user, "convert", "--model=/x/sam/ViT-B_16.npz",
                      "--output=out.keras")
    assert line.endswith("To download the released sam/ViT-B_16, give its "
                         "name: sam/ViT-B_16.")


def test_a_hugging_face_model_the_network_cannot_reach_names_the_way_round(
        tmp_path):
    """keras-vit-predict --model=hf://ORG/NAME online, without a network
    (an endpoint nothing answers) and not cached: the fix names the
    download where there is a network and the model's folder as the
    source."""
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
               HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9")
    for name in ("HF_HUB_OFFLINE", "KERAS_VIT_OFFLINE", "HF_HUB_CACHE"):
        env.pop(name, None)
    result = subprocess.run(
        script("predict") + [
            "--model=hf://google/vit-base-patch16-224@main", "cat.jpg"],
        capture_output=True, text=True, cwd=str(tmp_path), env=env,
        timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines()
             if line.startswith("keras-vit-predict: error: ")]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].endswith(
        "could not be downloaded: check the network connection and run "
        "again; without network here, download it where there is one (`hf "
        "download google/vit-base-patch16-224 --revision main --local-dir "
        "DIR`) and give DIR, the model's folder, instead.")


def test_a_missing_path_of_no_released_name_says_no_such_file(user):
    line = error_line(user, "convert", "--model=./missing.npz",
                      "--output=out.keras")
    assert line.startswith("keras-vit-convert: error: ./missing.npz: no "
                           "such file or folder")
    assert cached_files(user) == []


def test_every_released_size_has_a_short_name(user):
    """ViT-Ti_16 is AugReg's recommended Ti/16 (offline: the one line names
    that file and how to download it)."""
    line = error_line(user, "convert", "--model=ViT-Ti_16",
                      "--output=out.keras", KERAS_VIT_OFFLINE="1")
    assert line.startswith(f"keras-vit-convert: error: {AUGREG_TI16} is not "
                           "in the cache"), line
    assert "unset KERAS_VIT_OFFLINE to download it" in line
    for variant in VARIANTS:
        info = catalog.lookup(catalog.short_name(variant))
        assert info is not None and info.variant == variant, variant


def test_a_mistyped_augreg_name_says_there_is_no_such_file(user):
    """A name shaped like AugReg's that the mirror has no file for (aug_
    medium for aug_medium1) says so and names the closest released
    names, not "connect to the network"; nothing is cached."""
    typo = "augreg/B_16-i21k-300ep-lr_0.001-aug_medium-wd_0.1-do_0.0-sd_0.0"
    line = error_line(user, "convert", f"--model={typo}",
                      "--output=out.keras")
    assert line.startswith(f"keras-vit-convert: error: {typo}: there is no "
                           "such file at "), line
    assert "Did you mean: augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-" in (
        line)
    assert "connect to the network" not in line
    assert [f for f in cached_files(user) if not f.endswith(".lock")] == []
    # A folder under augreg/ is no release's name (its files are at the
    # top): read as the path it is.
    nested = "augreg/sub/" + typo[len("augreg/"):]
    assert catalog.lookup(nested) is None


@pytest.mark.parametrize("text, first", [
    ("augreg/B-16", "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-"
     "do_0.0-sd_0.0"),
    ("augreg/vit_r26_s32", "augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light1-"
     "wd_0.1-do_0.0-sd_0.0"),
    ("augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--"
     "imagenet2012-steps_20k-lr_0.01-res_385", "augreg/B_16-i21k-300ep-"
     "lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-"
     "lr_0.03-res_384"),
    ("ViT-B16", "ViT-B_16"),
])
def test_a_mistyped_name_gets_the_closest_names(text, first):
    """An augreg/ name is matched against AugReg's names alone, and one
    too far from every listed name against its model's recommended
    file (the sweep's names are too many to list)."""
    close = catalog.suggestions(text)
    assert close[0] == first, close
    assert all(n.startswith("augreg/") for n in close) == (
        text.startswith("augreg/"))


def test_convert_checks_its_output_before_any_download(user, tmp_path):
    """--output must end with .keras: said before the mirror's file is
    fetched; a leading ~ in --output is the home folder."""
    line = error_line(user, "convert", "--model=ViT-B_16", "--output=o.h5")
    assert line == ("keras-vit-convert: error: --output 'o.h5' must end "
                    "with .keras (Keras's format).")
    assert cached_files(user) == []
    home = tmp_path / "home"
    home.mkdir()
    (home / "m.keras").write_text("a file of the user's")
    line = error_line(user, "convert", "--model=ViT-B_16",
                      "--output=~/m.keras", HOME=str(home))
    assert line.startswith(f"keras-vit-convert: error: {home}/m.keras "
                           "already exists: pass --overwrite"), line
    assert not os.path.exists(os.path.join(user["cwd"], "~"))


def test_flags_a_download_cannot_take_are_refused_before_it(user):
    """--no_ema with a released name, --variant or --posemb_grid with a
    hf:// model: refused before anything is fetched (the mirror's file
    would be downloaded first, and a large one takes minutes)."""
    line = error_line(user, "predict", "--model=ViT-B_16", "--no_ema",
                      "photo.jpg")
    assert line == (
        "keras-vit-predict: error: --no_ema goes with a training workdir "
        "only; ViT-B_16 is an .npz file, which holds one set of weights: "
        "leave --no_ema out.")
    assert cached_files(user) == []
    for flag in ("--variant=B/16", "--posemb_grid=14x14"):
        line = error_line(user, "convert", "--model=hf://google/vit-x",
                          flag, "--output=o.keras")
        assert line == (
            f"keras-vit-convert: error: {flag.split('=')[0]} goes "
            "with an .npz model only; hf://google/vit-x is a Hugging Face, "
            "timm or keras-hub model, which records its own architecture."
        ), line


def test_a_size_given_as_a_model_says_what_it_is(user):
    line = error_line(user, "predict", "--model=Ti/16", "photo.jpg")
    assert line == (
        "keras-vit-predict: error: Ti/16 is a size, not a model with "
        "weights; the released pre-trained Ti/16 is ViT-Ti_16 "
        "(keras-vit-train --model=Ti/16 trains one from scratch).")


def test_the_finetune_recipe_starts_ti16_from_a_released_file(user):
    """finetune:variant=Ti/16 starts from AugReg's Ti/16, which the catalog
    lists, not from gs://vit_models/imagenet21k/ViT-Ti_16.npz, which was
    never released (offline: the one line names the file)."""
    line = error_line(
        user, "train", "--config=finetune:dataset=cifar10,variant=Ti/16",
        "--workdir=run", KERAS_VIT_OFFLINE="1")
    assert f"error: {AUGREG_TI16} is not in the cache" in line, line
    assert not os.path.exists(os.path.join(user["cwd"], "run"))


@pytest.mark.parametrize("variant", catalog.pretrained_variants())
def test_the_finetune_recipe_default_is_a_listed_file(variant):
    init = finetune.get_config(f"variant={variant}").init.model
    info = catalog.lookup(init)
    assert info is not None and info.variant == variant, init
    assert "--" not in info.name  # pre-trained, not fine-tuned


def test_the_finetune_recipe_refuses_a_variant_never_released():
    with pytest.raises(UsageError, match=r"No released pre-trained "
                       r"checkpoint of variant 'Ti/8'.* Ti/16; or give "
                       r"init=SOURCE"):
        finetune.get_config("variant=Ti/8")
