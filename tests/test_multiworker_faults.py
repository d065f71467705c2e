"""Multi-worker and TPU runs as real processes on 127.0.0.1: set-up
failures and waits (one line each, bounded), a worker killed mid-run (the
other stops, naming it; the same command resumes), a clean end (no
traceback, no "crashed" line), and SIGTERM during training (every worker
saves at the same step; identical weights after the resume).

The processes are train.py itself (tests/cluster_harness.py) except for the
preemption test, whose workers record every file they write. Every wait is
bounded, so a hang fails here instead of hanging the suite.
"""

import datetime
import http.server
import json
import os
import re
import signal
import socket
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.training import state
from tests import cluster_harness as harness
from tests import fake_tfds
from tests.reliability_cases import check_says, covers

ROOT = harness.ROOT
# The C++ lines TensorFlow logs at ERROR level when a peer dies are its
# own; what the program prints is one line starting with this.
ERROR = "keras-vit-train: error: "


def _error_line(text: str) -> str:
    """The one `keras-vit-train: error: ...` line of a process's output."""
    lines = [line for line in text.splitlines() if line.startswith(ERROR)]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def patch_on_import(module: str, function: str, body: str) -> str:
    """A sitecustomize that replaces `module`.`function`, as the module
    loads (nothing imported early), by `patched(original, *args,
    **kwargs)`, whose indented `body` is given."""
    return f"MODULE, FUNCTION = {module!r}, {function!r}\n" + """
import importlib.abc, importlib.util, sys, time


def patched(original, *args, **kwargs):
""" + body + """


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            original = getattr(module, FUNCTION)
            setattr(module, FUNCTION,
                    lambda *args, **kwargs: patched(original, *args, **kwargs))

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
"""


def _no_traceback(text: str) -> None:
    for bad in ("Traceback", "Exception in thread"):
        assert bad not in text, text[-3000:]


# ---------------------------------------------------------- set-up
@pytest.mark.slow
@covers("worker_never_comes", "sigterm_while_waiting", "tpu_absent",
        "tpu_local_absent", "tpu_unreachable", "tpu_name_off_cloud",
        "bad_tf_config", "port_in_use", "cluster_host_alone")
def test_setup_failures_and_waits_end_in_one_line(tmp_path):
    """Nine train.py processes at once, none of which starts training."""
    alone = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    waiting = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    taken = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    closed = harness.free_ports(1)[0]
    cluster_of_two = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    no_tpu = dict.fromkeys(("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_CONFIG",
                            "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS"))
    holder = socket.socket()
    holder.bind(("127.0.0.1", int(taken[0].rsplit(":", 1)[1])))
    holder.listen()

    def start(case, hosts=None, args=(), **env):
        env = {**no_tpu, **env}
        return harness.train(
            str(tmp_path / case), str(tmp_path / f"{case}.log"), 50, hosts,
            0, args, **env,
        )

    procs = {
        "worker_never_comes": start(
            "worker_never_comes", alone,
            ["--config.trainer.connect_timeout_s=10"]),
        "sigterm_while_waiting": start("sigterm_while_waiting", waiting),
        "tpu_absent": start("tpu_absent", args=["--strategy=tpu"]),
        "tpu_local_absent": start(
            "tpu_local_absent", args=["--strategy=tpu", "--tpu=local"]),
        "tpu_unreachable": start(
            "tpu_unreachable",
            args=["--strategy=tpu", f"--tpu=grpc://localhost:{closed}"]),
        # The metadata server is a closed loopback port (harness.env).
        "tpu_name_off_cloud": start(
            "tpu_name_off_cloud", args=["--strategy=tpu", "--tpu=my-tpu"]),
        "bad_tf_config": start("bad_tf_config", TF_CONFIG="{not json"),
        "port_in_use": start("port_in_use", taken),
        "cluster_host_alone": start("cluster_host_alone", cluster_of_two,
                                    ["--strategy=auto"]),
    }
    try:
        ordered = list(procs.values())
        which = ordered.index(procs["sigterm_while_waiting"])
        harness.wait_for(ordered, "Waiting for the workers of TF_CONFIG",
                         which)
        sent = harness.sigterm(procs["sigterm_while_waiting"])
        started = harness.wait_for(
            ordered, "MultiWorkerMirroredStrategy: 2 workers",
            ordered.index(procs["worker_never_comes"]))
        codes = dict(zip(procs, harness.wait_all(ordered, timeout=300)))
    finally:
        holder.close()
    for case, proc in procs.items():
        text = proc.text()
        expected = 143 if case == "sigterm_while_waiting" else 1
        assert codes[case] == expected, (case, text[-3000:])
        _no_traceback(text)
        check_says(case, _error_line(text))
        # Nothing started: no workdir.
        assert not os.path.exists(tmp_path / case), case
    # Bounded, with room for a machine loaded by other work.
    assert procs["sigterm_while_waiting"].ended - sent < 45
    never = procs["worker_never_comes"]
    assert never.ended - never.started >= 10
    assert never.ended - started < 40
    assert alone[1] in _error_line(never.text())
    assert re.search(r"Waiting for the workers of TF_CONFIG: worker 1 "
                     rf"\({re.escape(alone[1])}\) not up after \d+ s",
                     never.text())
    assert taken[0] in _error_line(procs["port_in_use"].text())


# ------------------------------------------------ lost worker, clean end
@pytest.mark.slow
@covers("worker_killed", "multiworker_clean_finish",
        "multiworker_finished_disagree")
def test_killed_worker_stops_the_other_and_the_restart_ends_cleanly(
    tmp_path,
):
    steps = 200
    args = ["--config.checkpoints.every_steps=20"]
    workdir = str(tmp_path / "run")
    ckpt_dir = os.path.join(workdir, "checkpoints")
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]

    def start(tag, **env):
        return [harness.train(workdir, str(tmp_path / f"{tag}{i}.log"),
                              steps, hosts, i, args, **env)
                for i in range(2)]

    first = start("first")
    harness.wait_for(first, rf"step 60/{steps}", 0)
    killed = time.time()
    first[1].kill()
    codes = harness.wait_all(first, timeout=120)
    assert codes == [1, -signal.SIGKILL]
    survivor = first[0].text()
    _no_traceback(survivor)
    line = _error_line(survivor)
    check_says("worker_killed", line)
    assert hosts[1] in line
    latest = tf.train.latest_checkpoint(ckpt_dir)
    step = int(re.search(r"at step (\d+):", line)[1])
    assert line.endswith(f"resume from {latest}.")
    assert 60 <= int(latest.rsplit("-", 1)[1]) <= step < steps
    assert first[0].ended - killed < 60
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))

    # A checkpoint folder that worker 1 might have left behind.
    scratch = state.scratch_dir(workdir, "worker1")
    os.makedirs(scratch, exist_ok=True)
    open(os.path.join(scratch, "ckpt-1.index"), "w").close()

    second = start("second")
    finals = [harness.wait_for(second, "Final test metrics", i)
              for i in range(2)]
    assert harness.wait_all(second, timeout=180) == [0, 0]
    resume = int(latest.rsplit("-", 1)[1])
    for proc, final in zip(second, finals):
        text = proc.text()
        _no_traceback(text)
        for bad in ("The tasks have crashed", "unhealthy"):
            assert bad not in text, text[-3000:]
        assert f"Resumed from {latest} at step {resume}" in text
        check_says("multiworker_clean_finish", text)
        assert proc.ended - final < 30
        # TensorFlow's lines once each (absl's format alone), without the
        # ones each trace repeats; progress from the first call on.
        assert "INFO:tensorflow:" not in text
        assert "Collective all_reduce tensors" not in text
        assert "(first call: with tracing and compilation)" in text
    assert "Training curves: " in second[0].text()
    assert f"Removing {scratch}, left by an earlier run." in second[1].text()
    assert not os.path.exists(scratch)
    with open(os.path.join(workdir, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["steps"] == steps
    assert metrics["steps_this_run"] == steps - resume

    # The finished run started again without its curves: the chief draws
    # them after the workers part, slowly on purpose (longer than the
    # coordination service's heartbeat timeout), and worker 1 waits for
    # it at the exit barrier instead of being reported crashed.
    os.remove(os.path.join(workdir, "training_curves.png"))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(patch_on_import(
        "keras_vit.analysis.curves", "draw_curves",
        "    time.sleep(15)\n    return original(*args, **kwargs)"))
    third = start("third", PYTHONPATH=f"{site}{os.pathsep}{ROOT}")
    assert harness.wait_all(third, timeout=180) == [0, 0]
    for proc in third:
        text = proc.text()
        _no_traceback(text)
        for bad in ("The tasks have crashed", "unhealthy",
                    "did not leave together"):
            assert bad not in text, text[-3000:]
        assert "The run in" in text and "has finished" in text
    # Worker 1 left after the chief's drawing (absl's local time of the
    # chief's line against the end of worker 1's process).
    drawn = re.search(r"^I(\d{4} [\d:.]+) .*Training curves: ",
                      third[0].text(), re.MULTILINE)
    assert drawn, third[0].text()[-3000:]
    left = datetime.datetime.fromtimestamp(third[1].ended)
    when = datetime.datetime.strptime(f"{left.year}{drawn[1]}",
                                      "%Y%m%d %H:%M:%S.%f")
    assert left >= when, (left, when)

    # Worker 1 does not find the run finished (its read of metrics.json
    # fails, as on a broken mount): every worker refuses alike in one line,
    # rather than one training alone while the other leaves.
    # Where worker 1's read raises instead (its checkpoint list cannot be
    # listed), the vote still comes first: no worker waits in it for one
    # that left.
    for tag, body, says in (
            ("fourth", "    return None", None),
            ("fifth", "    raise PermissionError(13, 'Permission denied', "
             "'checkpoints')", "1 of 2 workers could not read the run in")):
        (site / "sitecustomize.py").write_text(patch_on_import(
            "keras_vit.storage.workdir", "finished_run", body))
        procs = [harness.train(workdir, str(tmp_path / f"{tag}{i}.log"),
                               steps, hosts, i, args,
                               **({"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
                                  if i else {}))
                 for i in range(2)]
        assert harness.wait_all(procs, timeout=120) == [1, 1], tag
        for proc in procs:
            text = proc.text()
            _no_traceback(text)
            line = _error_line(text)
            if says is None:
                check_says("multiworker_finished_disagree", line)
            else:
                assert says in line and "run the same command on every " \
                    "worker again" in line, line
        lines = [_error_line(proc.text()) for proc in procs]
        if says is None:  # one line, the same on every worker
            assert lines[0] == lines[1], lines
    assert "(their logs say why)" in lines[0], lines
    assert "(this one: [Errno 13] Permission denied" in lines[1], lines


# -------------------------------------------------------------- SIGTERM
WORKER = r'''
import json, os, sys
root, workdir, out, steps = sys.argv[1:5]
sys.path[:0] = [root, os.path.join(root, "configs")]
import digits
import numpy as np
import tensorflow as tf
from absl import logging
from keras_vit.training import distribute
from keras_vit.training import train_lib
from keras_vit.storage import workdir as wd
from keras_vit.commands import runner

logging.set_verbosity(logging.INFO)
# Record every file and summary writer this worker creates, and the model.
written, built = [], []
atomic_write, file_writer = wd.atomic_write, tf.summary.create_file_writer
build_run = train_lib.build_run


def record_write(path, data):
    written.append(path)
    return atomic_write(path, data)


def record_writer(path, **kwargs):
    written.append(path)
    return file_writer(path, **kwargs)


def record_model(*args, **kwargs):
    model, optimizer = build_run(*args, **kwargs)
    built.append(model)
    return model, optimizer


wd.atomic_write, tf.summary.create_file_writer = record_write, record_writer
train_lib.build_run = record_model
strategy = distribute.create_strategy("multiworker")
c = digits.get_config()
c.model.image_size, c.input.pp.resize_size = 16, 18
c.model.update(hidden_size=16, mlp_dim=16, num_layers=1, num_heads=2)
c.trainer.update(total_steps=int(steps), steps_per_loop=2, jit_compile=False)
c.input.batch_size = 16
c.log.every_steps, c.evals.test.every_steps = 2, 0
c.checkpoints.every_steps = 0
c.schedule.warmup_steps = 0
metrics = train_lib.train_and_evaluate(c, workdir, strategy)
np.savez(out, *[v.numpy() for v in built[0].weights])
print("RESULT " + json.dumps(dict(metrics=metrics, written=written)))
if metrics.get("preempted"):  # as keras-vit-train ends such a run
    sys.exit(runner.PREEMPTED_EXIT_CODE)
'''


def _start_workers(tmp_path, workdir, tag, steps):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    return [
        harness.Process(
            [sys.executable, str(script), ROOT, workdir,
             str(tmp_path / f"weights{i}.npz"), str(steps)],
            str(tmp_path / f"{tag}{i}.log"),
            harness.env(harness.tf_config(hosts, i)),
        )
        for i in range(2)
    ]


@pytest.mark.slow
@covers("multiworker_sigterm")
def test_two_workers_preempted_resume_with_identical_weights(tmp_path):
    """Worker 1 gets SIGTERM: PreemptionCheckpointHandler has both workers
    save at the same step and exit with 42; the same command on both
    resumes from the chief's checkpoint; the workers end with identical
    weights; only the chief writes files."""
    steps = 120
    workdir = str(tmp_path / "run")
    procs = _start_workers(tmp_path, workdir, "first", steps)
    harness.wait_for(procs, rf"step \d+/{steps}", 1)
    sent = harness.sigterm(procs[1])
    codes = harness.wait_all(procs)
    texts = [p.text() for p in procs]
    assert codes == [42, 42], texts[1][-3000:]
    for proc, text in zip(procs, texts):
        _no_traceback(text)
        check_says("multiworker_sigterm", text)
        assert proc.ended - sent < 60
    assert "PreemptionCheckpointHandler saves" in texts[0]
    ckpt = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
    stop = int(ckpt.rsplit("-", 1)[1])
    assert 0 < stop < steps
    assert f"Stopped at step {stop}:" in texts[0]
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))

    procs = _start_workers(tmp_path, workdir, "second", steps)
    assert harness.wait_all(procs) == [0, 0]
    results = []
    for proc in procs:
        text = proc.text()
        _no_traceback(text)
        assert f"Resumed from {ckpt} at step {stop}" in text
        results.append(json.loads(text.split("RESULT ", 1)[1].splitlines()[0]))
    for result in results:
        assert result["metrics"]["steps"] == steps
        assert result["metrics"]["steps_this_run"] == steps - stop
    assert (results[0]["metrics"]["test_accuracy"]
            == results[1]["metrics"]["test_accuracy"])
    assert results[0]["metrics"]["test_examples"] == 360
    names = [os.path.relpath(p, workdir) for p in results[0]["written"]]
    assert {"config.json", "train", "eval", "metrics.json"} <= set(names)
    assert "labels.txt" not in names  # the run's own, kept on resume
    assert os.path.exists(os.path.join(workdir, "labels.txt"))
    assert results[1]["written"] == []  # the other worker writes nothing
    assert not os.path.exists(state.scratch_dir(workdir, "worker1"))
    weights = [np.load(tmp_path / f"weights{i}.npz") for i in range(2)]
    assert len(weights[0].files) == 20
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])
    assert sorted(os.listdir(workdir)) == [
        "checkpoints", "config.json", "eval", "history.csv", "labels.txt",
        "metrics.json", "train",
    ]


# ------------------------------------------------ a TFDS data set to prepare
@pytest.fixture(scope="module")
def dtd_archive(tmp_path_factory):
    folder = tmp_path_factory.mktemp("www")
    return folder, fake_tfds.write_dtd_archive(folder)


def _dtd_env(tmp_path, url):
    """What a worker's environment adds to download DTD from `url` (the
    loopback server): tests/fake_tfds.py's sitecustomize first on its
    path, no proxy for 127.0.0.1, offline otherwise."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(fake_tfds.SITECUSTOMIZE)
    return fake_tfds.loopback_env(
        {fake_tfds.URL_ENV: url, "HF_HUB_OFFLINE": "1",
         "KERAS_VIT_OFFLINE": "1", "PYTHONPATH": ROOT}, site)


def _dtd_workers(tmp_path, url, tag):
    """Two workers of one cluster that train on DTD, downloaded from `url`
    into the data directory they share."""
    args = ["--config.input.dataset=dtd", "--config.evals.test.split=test",
            f"--config.input.data_dir={tmp_path / 'tfds'}"]
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    return [harness.train(str(tmp_path / f"{tag}_run"),
                          str(tmp_path / f"{tag}{i}.log"), 2, hosts, i, args,
                          **_dtd_env(tmp_path, url))
            for i in range(2)]


@pytest.mark.slow
@covers("multiworker_tfds_prepare")
def test_the_chief_alone_downloads_and_prepares_a_data_set(dtd_archive,
                                                           tmp_path):
    """DTD, not prepared in the data directory the two workers share: the
    chief downloads it (one request) and prepares it while the other waits
    for its word, then reads it; both finish. (Each preparing it at once
    into one folder fails both.)"""
    folder, counts = dtd_archive
    with fake_tfds.serve(folder) as (url, requests):
        workers = _dtd_workers(tmp_path, url, "shared")
        codes = harness.wait_all(workers, timeout=600)
        assert codes == [0, 0], "\n".join(w.text()[-3000:] for w in workers)
        assert requests == ["/" + fake_tfds.ARCHIVE]
    chief, other = (w.text() for w in workers)
    check_says("multiworker_tfds_prepare", chief)
    assert "TFDS downloads and prepares it" not in other
    _no_traceback(chief + other)
    with open(tmp_path / "shared_run" / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["steps"] == 2
    assert metrics["test_examples"] == counts["test1"]


def _evaluate_workers(tmp_path, url, tag, args):
    """Two keras-vit-evaluate workers (evaluate.py, as train.py in
    cluster_harness) of one cluster, that download DTD from `url`."""
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    return [harness.Process(
        [sys.executable, os.path.join(ROOT, "evaluate.py"), *args,
         f"--output_dir={tmp_path / f'{tag}_out{i}'}",
         "--strategy=multiworker"],
        str(tmp_path / f"{tag}{i}.log"),
        harness.env(harness.tf_config(hosts, i),
                    **_dtd_env(tmp_path, url)))
        for i in range(2)]


@pytest.mark.slow
@covers("multiworker_evaluate_prepare")
def test_evaluation_prepares_the_data_on_the_chief_first(dtd_archive,
                                                         tmp_path):
    """keras-vit-evaluate on two workers: --mode=eval on DTD (not prepared
    in the shared data directory) downloads it once, on the chief, and
    both workers score its test split; --mode=fewshot whose download fails
    on the chief skips the set on both workers alike (each then ends with
    status 1: no set produced a result), the other naming the chief."""
    from keras_vit import create_model
    from keras_vit.checkpoint import weights

    folder, counts = dtd_archive
    npz = str(tmp_path / "dtd47.npz")
    weights.save_npz(create_model(
        None, num_classes=47, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16), npz)
    with fake_tfds.serve(folder) as (url, requests):
        workers = _evaluate_workers(tmp_path, url, "eval", [
            "--mode=eval", f"--model={npz}", "--dataset=dtd",
            "--split=test", "--batch_size=16",
            f"--data_dir={tmp_path / 'tfds'}"])
        codes = harness.wait_all(workers, timeout=600)
        assert codes == [0, 0], "\n".join(w.text()[-3000:] for w in workers)
        assert requests == ["/" + fake_tfds.ARCHIVE]
    for worker in workers:  # they leave together: none reported crashed
        for bad in ("Failed to send RPC to coordination service",
                    "The tasks have crashed"):
            assert bad not in worker.text(), worker.text()[-3000:]
    assert "TFDS downloads and prepares it" in workers[0].text()
    assert "TFDS downloads and prepares it" not in workers[1].text()
    with open(tmp_path / "eval_out0" / "eval_dtd_test_dtd47.npz.json") as f:
        assert json.load(f)["num_examples"] == counts["test1"]

    empty = tmp_path / "www"
    empty.mkdir()
    with fake_tfds.serve(empty) as (url, _):
        workers = _evaluate_workers(tmp_path, url, "fewshot", [
            "--mode=fewshot", "--config=fewshot:dtd", f"--model={npz}",
            "--config.model.image_size=16",
            "--config.input.pp.eval_resize_size=16",
            f"--config.input.data_dir={tmp_path / 'tfds_fewshot'}"])
        codes = harness.wait_all(workers, timeout=600)
    assert codes == [1, 1], "\n".join(w.text()[-3000:] for w in workers)
    chief, other = (
        [line for line in w.text().splitlines()
         if line.startswith("keras-vit-evaluate: error: ")] for w in workers)
    assert len(chief) == len(other) == 1
    assert "no few-shot data set produced a result (dtd: " in chief[0]
    assert "preparing dtd failed" in chief[0]
    check_says("multiworker_evaluate_prepare", other[0])
    _no_traceback(workers[0].text() + workers[1].text())


@pytest.mark.slow
@covers("multiworker_folder_not_shared")
def test_workers_without_one_shared_folder_stop_before_they_start(
        tmp_path):
    """Each worker with a folder of its own under the path they name (a
    local disk on every host): two keras-vit-train workers, and two
    keras-vit-evaluate --mode=vtab workers, all four at once. Every worker
    stops with the same line (status 1) before it reads or writes a run
    (resumed on one worker and started again on the other, the workers
    would part), and the chief's check file is gone."""
    from keras_vit import create_model
    from keras_vit.checkpoint import weights

    npz = str(tmp_path / "backbone.npz")
    weights.save_npz(create_model(
        None, num_classes=10, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16), npz)
    for i in range(2):  # each host's folder, as one path on two disks
        (tmp_path / f"host{i}" / "run").mkdir(parents=True)
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    train = [harness.train(str(tmp_path / f"host{i}" / "run"),
                           str(tmp_path / f"train{i}.log"), 2, hosts, i)
             for i in range(2)]
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    vtab = [harness.Process(
        [sys.executable, os.path.join(ROOT, "evaluate.py"), "--mode=vtab",
         "--config=" + os.path.join(ROOT, "configs", "vtab.py"),
         f"--model={npz}", f"--output_dir={tmp_path / f'host{i}' / 'vtab'}",
         "--strategy=multiworker"],
        str(tmp_path / f"vtab{i}.log"), harness.env(harness.tf_config(
            hosts, i))) for i in range(2)]
    codes = harness.wait_all(train + vtab, timeout=300)
    assert codes == [1, 1, 1, 1], "\n".join(w.text()[-3000:]
                                             for w in train + vtab)
    for workers, command, what in ((train, "keras-vit-train", "workdir"),
                                   (vtab, "keras-vit-evaluate",
                                    "output folder")):
        lines = [[line for line in w.text().splitlines()
                  if line.startswith(f"{command}: error: ")]
                 for w in workers]
        assert [len(x) for x in lines] == [1, 1], lines
        check_says("multiworker_folder_not_shared", lines[1][0])
        assert f"writes into the {what} " in lines[0][0]
        assert lines[0][0].replace("host0", "host1") == lines[1][0]
        _no_traceback(workers[0].text() + workers[1].text())
    for i in range(2):
        assert sorted(os.listdir(tmp_path / f"host{i}" / "run")) == []
        assert not any(n.startswith(".keras_vit_shared") for n in
                       os.listdir(tmp_path / f"host{i}" / "vtab"))


class _Held(http.server.BaseHTTPRequestHandler):
    """Answers no request until the test lets it go (a download that
    hangs), then 404."""

    release = threading.Event()

    def log_message(self, *args):
        del args

    def do_GET(self):  # noqa: N802  (the handler's name)
        self.release.wait(120)
        self.send_error(404)


@pytest.mark.slow
@covers("multiworker_tfds_chief_fails", "multiworker_tfds_chief_lost")
def test_a_chief_that_cannot_prepare_the_data_stops_every_worker(tmp_path):
    """The chief's download fails (404): it stops with its reason, and the
    other worker, which waited, with the same reason naming the chief.
    Then a chief killed while it downloads: the waiting worker, which says
    that it waits, stops in one line naming it."""
    empty = tmp_path / "www"
    empty.mkdir()
    with fake_tfds.serve(empty) as (url, _):
        workers = _dtd_workers(tmp_path, url, "missing")
        codes = harness.wait_all(workers, timeout=300)
    assert codes == [1, 1], "\n".join(w.text()[-3000:] for w in workers)
    chief, other = (_error_line(w.text()) for w in workers)
    assert "preparing dtd failed" in chief
    check_says("multiworker_tfds_chief_fails", other)
    assert "preparing dtd failed" in other
    _no_traceback(workers[0].text() + workers[1].text())

    _Held.release.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        workers = _dtd_workers(
            tmp_path, f"http://{host}:{port}/{fake_tfds.ARCHIVE}", "lost")
        harness.wait_for(workers, "Waiting .* for the chief", 1,
                         timeout=300)
        killed = time.time()
        workers[0].kill()
        codes = harness.wait_all(workers, timeout=120)
    finally:
        _Held.release.set()
        server.shutdown()
        server.server_close()
    assert codes == [-signal.SIGKILL, 1], workers[1].text()[-3000:]
    assert workers[1].ended - killed < 60
    text = workers[1].text()
    check_says("multiworker_tfds_chief_lost", _error_line(text))
    _no_traceback(text)


@pytest.mark.slow
@covers("multiworker_other_settings")
def test_workers_with_other_settings_stop_before_they_train(tmp_path):
    """Two workers of one cluster, one with another learning rate: every
    worker stops alike, with one line naming the section, before a step
    (they trained other weights into one checkpoint without a word); the
    data's folder may differ (a copy on each host)."""
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    workdir = str(tmp_path / "run")
    workers = [harness.train(workdir, str(tmp_path / f"w{i}.log"), 20,
                             hosts, i, args)
               for i, args in enumerate((
                   [], ["--config.schedule.lr=0.003",
                        f"--config.input.data_dir={tmp_path / 'copy'}"]))]
    codes = harness.wait_all(workers, timeout=300)
    assert codes == [1, 1], "\n".join(w.text()[-3000:] for w in workers)
    lines = [[line for line in w.text().splitlines()
              if line.startswith(ERROR)] for w in workers]
    assert [len(x) for x in lines] == [1, 1], lines
    assert lines[0] == lines[1]
    assert lines[0][0] == (
        f"{ERROR}The 2 workers run with other settings: their "
        "--config.schedule settings differ (their command lines, or their "
        "copies of "
        "the data, from which a run counted in epochs counts its steps): "
        "run the same command, with the same data, on every worker.")
    check_says("multiworker_other_settings", lines[0][0])
    _no_traceback(workers[0].text() + workers[1].text())
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))


@pytest.mark.slow
@covers("multiworker_chief_fails_at_end")
def test_a_chief_that_fails_at_the_end_stops_the_others_unfinished(
        tmp_path):
    """The chief's metrics.json write fails (a full disk) after the final
    evaluation: the chief names the disk, the other worker says the run
    is not finished (it said its work was complete, status 0)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(patch_on_import(
        "keras_vit.storage.workdir", "write_json",
        "    if str(args[0]).endswith('metrics.json'):\n"
        "        raise OSError(28, 'No space left on device', args[0])\n"
        "    return original(*args, **kwargs)"))
    hosts = [f"127.0.0.1:{p}" for p in harness.free_ports(2)]
    workdir = str(tmp_path / "run")
    workers = [harness.train(
        workdir, str(tmp_path / f"w{i}.log"), 4, hosts, i,
        **({} if i else {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}))
        for i in range(2)]
    codes = harness.wait_all(workers, timeout=300)
    assert codes == [1, 1], "\n".join(w.text()[-3000:] for w in workers)
    chief, other = (_error_line(w.text()) for w in workers)
    assert "No space left on device" in chief or "disk is full" in chief
    check_says("multiworker_chief_fails_at_end", other)
    _no_traceback(workers[0].text() + workers[1].text())
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))
