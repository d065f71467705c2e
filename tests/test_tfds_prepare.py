"""TensorFlow Datasets prepares a VTAB-1k task on this install, offline:
its own `download_and_prepare` fetches DTD's archive from a loopback HTTP
server (tests/fake_tfds.py), extracts and parses it with the unchanged
builder; then keras-vit-evaluate runs VTAB-1k and few-shot probes on the
prepared data, typed as a user types them, from a training run's workdir
and from a Hugging Face folder (the slow tier).

A dependency that TFDS imports only when it prepares data (and does not
declare) fails here, in CI's new environment, not on a user's first
download.
"""

import io
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import config as config_lib
from keras_vit.data import downloads, preprocessing, vtab
from keras_vit.data import pipeline as input_pipeline
from tests import fake_tfds, model_cache, tiny
from tests.console import script as _script
from tests.reliability_cases import check_says, covers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_import_tfds_needs_to_prepare_data_is_installed():
    """TFDS imports importlib_resources lazily, when a builder finds its
    files; it does not declare it (setup.cfg does)."""
    from tensorflow_datasets.core import dataset_builder

    assert dataset_builder.importlib_resources.abc.Traversable


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    folder = tmp_path_factory.mktemp("www")
    return folder, fake_tfds.write_dtd_archive(folder)


def test_tfds_downloads_and_prepares_a_vtab_task(archive, tmp_path,
                                                 monkeypatch):
    from tensorflow_datasets.image_classification import dtd

    folder, counts = archive
    data_dir = str(tmp_path / "tfds")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with fake_tfds.serve(folder) as (url, requests):
        monkeypatch.setattr(dtd, "_DATA_URL", url)
        vtab.prepare("dtd", data_dir, download=True)
        assert requests == ["/" + fake_tfds.ARCHIVE]
        vtab.prepare("dtd", data_dir, download=True)  # prepared: no fetch
        assert len(requests) == 1
    task = vtab.TASKS["dtd"]
    builder = task.builder(data_dir)
    assert builder.is_prepared()
    assert (builder.name, str(builder.version)) == ("dtd", "3.0.1")
    splits = builder.info.splits
    assert {name: splits[name].num_examples
            for name in ("train", "validation", "test")} == {
        "train": counts["train1"], "validation": counts["val1"],
        "test": counts["test1"]}
    # VTAB-1k's splits of it, through the task's own example mapping.
    for split, size in (("train800", 800), ("val200", 200)):
        data = builder.as_dataset(split=task.split(split)).map(
            task.example_fn)
        labels = [int(label) for _, label in data.as_numpy_iterator()]
        assert len(labels) == size
        assert set(labels) <= set(range(task.num_classes))
    image, _ = next(iter(builder.as_dataset(split="test").map(
        task.example_fn)))
    assert tuple(image.shape) == (16, 16, 3) and image.dtype == "uint8"
    # The input pipeline decodes the task's JPEGs as PIL decodes them (as
    # every other photo): TFDS's own decoding takes the fast DCT.
    import tensorflow_datasets as tfds

    encoded = builder.as_dataset(
        split="test", decoders={"image": tfds.decode.SkipDecoding()})
    pillow = [np.asarray(Image.open(io.BytesIO(e["image"].numpy())))
              for e in encoded.take(16)]
    assert all(p.shape == (16, 16, 3) for p in pillow)
    config = config_lib.complete(dict(
        input=dict(dataset="dtd", vtab_task="dtd", data_dir=data_dir),
        model=dict(image_size=16)))
    images, _, _ = next(iter(input_pipeline.eval_dataset(
        *tiny.pipeline(config), "test", 16)))
    for got, want in zip(images.numpy(), pillow):
        np.testing.assert_array_equal(
            got, preprocessing.preprocess_eval(tf.constant(want), 16).numpy())
    fast = [e["image"].numpy() for e in builder.as_dataset(
        split="test").take(16)]
    assert any((f != p).any() for f, p in zip(fast, pillow))


# ------------------------------------------------------ the commands


def _tfds_said_on_stderr_without_bars(result):
    """What TFDS says while it downloads and prepares a data set: its
    "Downloading and preparing" line on stderr, not among the command's
    results on stdout, and no progress bars when stderr is no terminal
    (a pipe here; a log file)."""
    assert "Downloading and preparing dataset" in result.stderr
    assert "Downloading and preparing" not in result.stdout
    for bar in ("Dl Completed", "Extraction completed", "Dl Size",
                "Generating splits", "examples/s]"):
        assert bar not in result.stderr, result.stderr[-3000:]


# A few steps of the protocol at 32 x 32, every example of DTD's test
# split scored.
TINY_VTAB = [
    "--config.model.image_size=32", "--config.input.batch_size=8",
    "--config.evals.test.batch_size=32", "--config.trainer.total_steps=2",
    "--config.checkpoints.every_steps=0", "--config.log.every_steps=1",
    "--config.trainer.jit_compile=False", "--config.input.shuffle_buffer=8",
]
TINY_FEWSHOT = ["--config.model.image_size=32",
                "--config.input.pp.eval_resize_size=32",
                "--config.input.batch_size=64"]


@pytest.mark.slow
def test_vtab_and_fewshot_commands_on_data_tfds_prepared(archive, tmp_path):
    """The first command downloads and prepares DTD (TFDS, from the
    loopback server) and runs VTAB-1k on it from a training run; the next
    ones read the prepared data: VTAB-1k from a Hugging Face folder, and
    few-shot probes from both. Their stdout holds their results only
    (TFDS's words go to stderr, without its progress bars off a
    terminal)."""
    folder, counts = archive
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(fake_tfds.SITECUSTOMIZE)
    data_dir = str(tmp_path / "tfds")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1",
               KERAS_VIT_OFFLINE="1")
    env = fake_tfds.loopback_env(env, site)

    def run(name, *args):
        return subprocess.run(_script(name) + list(args), env=env,
                              capture_output=True, text=True, timeout=900,
                              cwd=str(tmp_path))

    workdir = str(tmp_path / "run")
    trained = run("train", "--config=digits", f"--workdir={workdir}",
                  "--config.trainer.total_steps=2",
                  "--config.input.batch_size=16",
                  "--config.evals.test.every_steps=0",
                  "--config.checkpoints.every_steps=0",
                  "--config.trainer.jit_compile=False",
                  "--config.schedule.warmup_steps=1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    sources = {"workdir": ["--workdir=" + workdir],
               "hub": ["--model=" + model_cache.HF_FIXTURE]}
    with fake_tfds.serve(folder) as (url, requests):
        env[fake_tfds.URL_ENV] = url
        for kind, model in sources.items():
            out = str(tmp_path / f"vtab_{kind}")
            result = run("evaluate", "--mode=vtab", "--config=vtab",
                         "--tasks=dtd", f"--output_dir={out}", *model,
                         f"--config.input.data_dir={data_dir}", *TINY_VTAB)
            assert result.returncode == 0, result.stderr[-3000:]
            assert "Traceback" not in result.stderr
            assert "VTAB task 1 of 1: DTD" in result.stderr
            with open(os.path.join(out, "results.jsonl")) as f:
                record = json.loads(f.readline())
            assert record["task"] == "dtd"
            assert record["test_examples"] == counts["test1"]
            assert 0.0 <= record["accuracy"] <= 1.0
            for name in ("results.md", "results.csv", "summary.json"):
                assert os.path.exists(os.path.join(out, name)), name
            assert "| DTD |" in result.stdout or "DTD" in result.stdout
            with open(os.path.join(out, "results.md")) as f:
                assert result.stdout == f.read() + "\n"
            if kind == "workdir":  # the download
                _tfds_said_on_stderr_without_bars(result)
        # Downloaded once, by the first command; the rest read the data.
        assert requests == ["/" + fake_tfds.ARCHIVE]
        for kind, model in sources.items():
            out = str(tmp_path / f"fewshot_{kind}")
            result = run("evaluate", "--mode=fewshot", "--config=fewshot:dtd",
                         f"--output_dir={out}", *model,
                         f"--config.input.data_dir={data_dir}", *TINY_FEWSHOT)
            assert result.returncode == 0, result.stderr[-3000:]
            assert "few-shot data set 1 of 1: dtd" in result.stderr
            with open(os.path.join(out, "fewshot.json")) as f:
                done = json.load(f)
            assert set(done["results"]["dtd"]) == {"1", "5", "10", "25"}
            assert done["not_run"] == {}
            with open(os.path.join(out, "fewshot.md")) as f:
                assert result.stdout == f.read() + "\n"
        assert len(requests) == 1
    _slices_past_the_data_are_one_line(run, data_dir, tmp_path,
                                       counts["test1"])


def _slices_past_the_data_are_one_line(run, data_dir, tmp_path, tests):
    """A TFDS slice that reads nothing (past the end of the split, or
    empty) is one line naming the field and the split sizes, before the
    model scores or probes anything (TFDS says it only when reading, in
    a traceback)."""
    model = "--model=" + model_cache.HF_FIXTURE
    data = f"--config.input.data_dir={data_dir}"
    for split in (f"test[{tests + 10}:]", "test[:0]"):
        result = run("evaluate", "--mode=eval", "--dataset=dtd",
                     f"--split={split}", model, f"--data_dir={data_dir}")
        assert result.returncode == 1, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        assert (f"error: --split={split} cannot be used" in result.stderr
                and f"test: {tests} examples" in result.stderr
                ), result.stderr[-2000:]
    field = "--config.evals.fewshot.datasets.dtd.test_split"
    result = run("evaluate", "--mode=fewshot", "--config=fewshot:dtd",
                 f"{field}=test[{tests}:]", model, data,
                 f"--output_dir={tmp_path / 'fewshot_past'}", *TINY_FEWSHOT)
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"error: {field}=test[{tests}:] cannot be used: its slice of " \
        "test holds no example" in result.stderr, result.stderr[-2000:]
    assert "few-shot data set 1 of 1" not in result.stderr  # no features


class _Failing:
    """A TFDS builder that is not prepared and whose download fails."""

    name = "dtd"
    info = type("Info", (), {"full_name": "dtd/3.0.1"})()

    def is_prepared(self):
        return False

    def download_and_prepare(self, **kwargs):
        raise OSError("No space left on device")


class _Offline(_Failing):
    def download_and_prepare(self, **kwargs):
        raise ConnectionError("no route to www.robots.ox.ac.uk")


def test_a_failed_download_names_manual_files_only_where_there_are_some(
        tmp_path, monkeypatch):
    with pytest.raises(vtab.DataUnavailableError) as plain:
        vtab.prepare_builder(_Failing(), "dtd (DTD)", str(tmp_path))
    message = str(plain.value)
    assert "preparing dtd failed (OSError: No space left" in message
    assert "manual" not in message
    (tmp_path / "downloads" / "manual" / "x").mkdir(parents=True)
    with pytest.raises(vtab.DataUnavailableError) as manual:
        vtab.prepare_builder(_Failing(), "resisc45", str(tmp_path),
                             manual_files=("x",))
    assert "Its manual files (x) go into" in str(manual.value)
    # Without a connection: what to do offline, the reason kept.
    monkeypatch.setattr(downloads, "_no_network", [])  # this test's own
    with pytest.raises(vtab.DataUnavailableError) as offline:
        vtab.prepare_builder(_Offline(), "dtd (DTD)", str(tmp_path))
    assert str(offline.value).startswith(
        "dtd (DTD): cannot download from the download server (no route to "
        "www.robots.ox.ac.uk). Without network here, prepare it where "
        "there is one (`tfds build dtd --data_dir=DIR`)")
    # The next data set of the run (another VTAB task) is not tried.
    tried = []
    with pytest.raises(vtab.DataUnavailableError) as next_one:
        failing = _Failing()
        failing.download_and_prepare = lambda **kw: tried.append(1)
        vtab.prepare_builder(failing, "svhn", str(tmp_path))
    assert tried == []
    assert str(next_one.value).startswith(
        "svhn: not downloaded: an earlier download of this run had no "
        "connection (the download server: no route to ")


class _ManualOnly(_Failing):
    """A builder whose data only a manual download gives (as ImageNet)."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = """
        manual_dir should contain two files: a.tar and
        b.tar. Register at the site.
    """
    prepared = False

    def download_and_prepare(self, **kwargs):
        self.prepared = kwargs["download_config"].manual_dir


def test_manual_only_data_names_its_folder_and_tfds_instructions(tmp_path):
    """A data set TFDS prepares only from a manual download (ImageNet),
    typed as a user types it: one line naming the folder, its config
    field and TFDS's instructions, before the run's folder is made; with
    files in the folder, TFDS prepares it from there."""
    data, work = tmp_path / "data", tmp_path / "run"
    result = subprocess.run(
        _script("train") + ["--config=digits", f"--workdir={work}",
                            "--config.input.dataset=imagenet2012",
                            f"--config.input.data_dir={data}"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, KERAS_VIT_OFFLINE="1"))
    assert result.returncode == 1
    manual = data / "downloads" / "manual"
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith(
        f"keras-vit-train: error: imagenet2012 needs a manual download into "
        f"{manual}/ (or the folder --config.input.manual_dir names), which "
        "has no files. TFDS says: manual_dir should contain two files: "
        "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar."), line
    assert f"--manual_dir={manual}`)." in line
    assert "Downloading and preparing" not in result.stderr
    assert not work.exists()
    mine = tmp_path / "mine"
    builder = _ManualOnly()
    with pytest.raises(vtab.DataUnavailableError) as empty:
        vtab.prepare_builder(builder, "dtd", str(data), manual=str(mine))
    assert (f"into {mine}/ (or the folder config.input.manual_dir names), "
            "which has no files. TFDS says: manual_dir should contain two "
            "files: a.tar and b.tar. Register at the site. Then the next "
            "run prepares it") in str(empty.value)
    mine.mkdir()
    (mine / "a.tar").write_bytes(b"")
    vtab.prepare_builder(builder, "dtd", str(data), manual=str(mine))
    assert builder.prepared == str(mine)


def test_progress_counts_and_estimates():
    from keras_vit.progress import Progress, duration

    now = [0.0]
    progress = Progress(4, clock=lambda: now[0])
    progress.skip()
    assert progress.start() == "2 of 4" and progress.eta() == ""
    now[0] = 600.0
    progress.finish()
    assert progress.start() == "3 of 4"
    # One done in 10 minutes; this one and the last left.
    assert progress.eta() == "; 1 done in 10min, about 20min left"
    assert [duration(s) for s in (5, 119, 7199, 9000)] == [
        "5s", "119s", "119min", "2.5h"]


@pytest.mark.slow
def test_a_vtab_run_with_no_result_exits_1_with_the_reasons(tmp_path):
    """No selected task has its data, and nothing may be downloaded: one
    line with each task's reason, the manual download named for the task
    that needs one only, exit status 1; no table of n/a printed or
    written."""
    from keras_vit import create_model
    from keras_vit.checkpoint import weights

    npz = str(tmp_path / "tiny.npz")
    weights.save_npz(create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16), npz)
    result = subprocess.run(
        _script("evaluate") + [
            "--mode=vtab", "--config=vtab", "--tasks=dtd,resisc45",
            f"--model={npz}", f"--output_dir={tmp_path / 'out'}",
            "--config.input.download=False",
            f"--config.input.data_dir={tmp_path / 'empty'}"],
        capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines()
             if line.startswith("keras-vit-evaluate: error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    assert "no VTAB task produced a result (dtd: " in line
    dtd, resisc = line.split("; resisc45: ")
    assert "--config.input.download" in dtd and "manual" not in dtd
    assert "needs a manual download" in resisc
    assert result.stdout == ""
    assert not any((tmp_path / "out" / name).exists() for name in (
        "results.md", "results.csv", "summary.json"))


@pytest.mark.slow
def _child_env(tmp_path):
    """The environment of a command that downloads through the loopback
    server (fake_tfds.SITECUSTOMIZE on its path), offline otherwise."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(fake_tfds.SITECUSTOMIZE)
    return fake_tfds.loopback_env(dict(
        os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1",
        KERAS_VIT_OFFLINE="1"), site)


def test_training_on_a_tfds_name_prepares_it_first(archive, tmp_path):
    """keras-vit-train --config.input.dataset=dtd on a data directory
    without it: TFDS downloads (from the loopback server) and prepares it,
    then the run trains and scores DTD's test split; with
    config.input.download=False, one line names the fix."""
    folder, counts = archive
    env = _child_env(tmp_path)
    args = ["--config=digits", "--config.input.dataset=dtd",
            "--config.evals.test.split=test",
            f"--config.input.data_dir={tmp_path / 'tfds'}",
            "--config.model.image_size=16", "--config.input.pp.resize_size=18",
            "--config.input.batch_size=16", "--config.trainer.total_steps=2",
            "--config.schedule.warmup_steps=1",
            "--config.evals.test.every_steps=0",
            "--config.checkpoints.every_steps=0",
            "--config.trainer.jit_compile=False"]

    def train(name, *extra):
        return subprocess.run(
            _script("train") + args + [f"--workdir={tmp_path / name}",
                                       *extra],
            env=env, capture_output=True, text=True, timeout=900,
            cwd=str(tmp_path))

    refused = train("refused", "--config.input.download=False")
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(
        "keras-vit-train: error: dtd: dtd is not prepared in "), (
        refused.stderr[-3000:])
    with fake_tfds.serve(folder) as (url, requests):
        env[fake_tfds.URL_ENV] = url
        result = train("run")
        assert result.returncode == 0, result.stderr[-3000:]
        assert requests == ["/" + fake_tfds.ARCHIVE]
    assert "TFDS downloads and prepares it" in result.stderr
    _tfds_said_on_stderr_without_bars(result)
    assert result.stdout == ""  # keras-vit-train prints nothing there
    with open(tmp_path / "run" / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["steps"] == 2
    assert metrics["test_examples"] == counts["test1"]


@covers("tfds_download_offline")
@pytest.mark.slow
def test_a_download_without_network_is_said_once_and_names_the_fix(tmp_path):
    """keras-vit-train on a TFDS name whose server does not answer (a
    closed port on 127.0.0.1; TFDS's tries cut to 2): one line says it
    while TFDS tries again, not a warning per try, and the error names
    the host and what to do offline; no workdir is left."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _child_env(tmp_path)
    env[fake_tfds.URL_ENV] = f"http://127.0.0.1:{port}/{fake_tfds.ARCHIVE}"
    env[fake_tfds.RETRIES_ENV] = "2"
    result = subprocess.run(
        _script("train") + [
            "--config=digits", "--config.input.dataset=dtd",
            f"--config.input.data_dir={tmp_path / 'tfds'}",
            "--config.trainer.total_steps=2",
            "--config.schedule.warmup_steps=1",
            f"--workdir={tmp_path / 'run'}"],
        env=env, capture_output=True, text=True, timeout=600,
        cwd=str(tmp_path))
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Retrying (Retry" not in result.stderr
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines()
            if "cannot reach 127.0.0.1" in line]
    assert len(said) == 1, result.stderr[-3000:]
    assert "Connection refused" in said[0] and "Ctrl-C stops" in said[0]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "keras-vit-train: error: dtd: cannot download from 127.0.0.1 "
        "(Connection refused). Without network here, prepare it where "
        "there is one (`tfds build dtd --data_dir=DIR`)"), last
    assert "has no dataset_info.json" not in result.stderr
    assert not (tmp_path / "run").exists()
    check_says("tfds_download_offline", said[0] + "\n" + last)
    # Ctrl-C while TFDS tries again (its own 10 tries): the command ends
    # at once, not when TFDS's download threads give up minutes later.
    del env[fake_tfds.RETRIES_ENV]
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        child = subprocess.Popen(
            _script("train") + [
                "--config=digits", "--config.input.dataset=dtd",
                f"--config.input.data_dir={tmp_path / 'tfds'}",
                f"--workdir={tmp_path / 'run'}"],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
            cwd=str(tmp_path))
        try:
            deadline = time.time() + 300
            while "cannot reach" not in log.read_text():
                assert child.poll() is None and time.time() < deadline, (
                    log.read_text()[-3000:])
                time.sleep(0.5)
            child.send_signal(signal.SIGINT)
            stopped = time.time()
            assert child.wait(timeout=60) == 130
        finally:
            child.kill()
    assert time.time() - stopped < 30
    text = log.read_text()
    assert text.strip().splitlines()[-1] == (
        "keras-vit-train: interrupted: stopped at once (Ctrl-C).")
    assert "Retrying (Retry" not in text and "Traceback" not in text
