"""Strategies and preemption: the TPU set-up sequence and its failures
(monkeypatched: no TPU here), strategy names, the chief, and SIGTERM for
real on train.py. Real MultiWorkerMirroredStrategy worker processes:
tests/test_multiworker_faults.py."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.error

import pytest
import tensorflow as tf

from keras_vit import optim
from keras_vit.errors import PREEMPTED_EXIT_CODE
from keras_vit.training import (
    cluster,
    distribute,
    interrupt,
    loop,
    tf_config,
    train_lib,
)
from tests import tiny
from tests.strategies import two_cpu_mirrored

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------- TPU
class _FakeTPU:
    """Records the TPU set-up calls in order."""

    def __init__(self, monkeypatch, fail_resolver=False, fail_init=None):
        self.calls = []
        test = self

        class Resolver:
            def __init__(self, tpu=None):
                if fail_resolver:
                    raise (fail_resolver if isinstance(fail_resolver,
                                                       Exception)
                           else ValueError("Please provide a TPU Name"))
                test.calls.append(("TPUClusterResolver", tpu))
                self.tpu = tpu

        class Strategy:
            def __init__(self, resolver):
                test.calls.append(("TPUStrategy", resolver.tpu))
                self.cluster_resolver = resolver

        def connect(resolver):
            test.calls.append(("connect_to_cluster", resolver.tpu))

        def initialize(resolver):
            if fail_init is not None:
                raise fail_init
            test.calls.append(("initialize_tpu_system", resolver.tpu))

        monkeypatch.setattr(
            tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver
        )
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster",
                            connect)
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system",
                            initialize)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", Strategy)
        self.strategy_class = Strategy


@pytest.mark.parametrize(
    "name,tpu,expected",
    [
        ("tpu", "local", ["TPUClusterResolver", "initialize_tpu_system",
                          "TPUStrategy"]),
        ("tpu", "my-tpu", ["TPUClusterResolver", "connect_to_cluster",
                           "initialize_tpu_system", "TPUStrategy"]),
        ("auto", "my-tpu", ["TPUClusterResolver", "connect_to_cluster",
                            "initialize_tpu_system", "TPUStrategy"]),
        ("tpu", "grpc://127.0.0.1:{port}",
         ["TPUClusterResolver", "connect_to_cluster",
          "initialize_tpu_system", "TPUStrategy"]),
    ],
)
def test_tpu_setup_sequence(monkeypatch, name, tpu, expected):
    fake = _FakeTPU(monkeypatch)
    with socket.socket() as listener:  # a TPU address that answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        tpu = tpu.format(port=listener.getsockname()[1])
        strategy = distribute.create_strategy(name, tpu)
    assert isinstance(strategy, fake.strategy_class)
    assert fake.calls == [(call, tpu) for call in expected]


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("tpu,failure,says", [
    (None, {"fail_resolver": True},
     "`strategy`=tpu found no TPU: no `tpu`, no TPU_NAME and no TPU "
     "attached to this machine. To fix: run on a TPU VM (`tpu`=local), "
     "pass `tpu`=NAME (a Cloud TPU's name) or `tpu`=grpc://HOST:8470, or "
     "run without a TPU: `strategy`=auto or `strategy`=cpu."),
    ("local", {"fail_init": tf.errors.NotFoundError(
        None, None, "TPUs not found in the cluster.")},
     "Cannot initialise this machine's TPU (`tpu`=local: "
     "TPUClusterResolver, then initialize_tpu_system); TensorFlow says: "
     "NotFoundError: TPUs not found in the cluster. Found: "),
    ("my-tpu", {"fail_resolver": urllib.error.URLError(
        ConnectionRefusedError(111, "Connection refused"))},
     "Cannot look up the Cloud TPU `tpu`=my-tpu: its name is resolved "
     "through the Google Cloud metadata server, which does not answer here "
     "(URLError: <urlopen error [Errno 111] Connection refused>). Run on a "
     "Google Cloud VM of the TPU's project and zone, or run on a TPU VM"),
    ("my-tpu", {"fail_resolver": RuntimeError("HttpError 404 not found")},
     "Cannot set up the TPU `tpu`=my-tpu (RuntimeError: HttpError 404 not "
     "found). Check the name and that the TPU is ready, or run on a TPU VM"),
    # No --tpu: the name came from TPU_NAME (the test sets it).
    (None, {"fail_resolver": RuntimeError("HttpError 404 not found")},
     "Cannot set up the TPU TPU_NAME=env-tpu (no `tpu`) (RuntimeError: "
     "HttpError 404 not found). Check the name"),
])
def test_tpu_setup_failures_are_one_line_naming_the_fix(
    monkeypatch, tpu, failure, says
):
    if "TPU_NAME=" in says:
        monkeypatch.setenv("TPU_NAME", "env-tpu")
    _FakeTPU(monkeypatch, **failure)
    with pytest.raises(cluster.SetupError) as info:
        distribute.create_strategy("tpu", tpu)
    assert str(info.value).startswith(says)
    assert "\n" not in str(info.value) and info.value.exit_code == 1


def test_unreachable_tpu_address_fails_before_connecting(monkeypatch):
    fake = _FakeTPU(monkeypatch)
    tpu = f"grpc://localhost:{_closed_port()}"
    with pytest.raises(cluster.SetupError, match=(
        f"Cannot reach the TPU at `tpu`={tpu}: nothing answers at "
        "localhost:")):
        distribute.create_strategy("tpu", tpu)
    assert fake.calls == []


def test_auto_without_tpu_is_the_default_strategy(monkeypatch):
    fake = _FakeTPU(monkeypatch)
    for var in ("TPU_NAME", "TPU_ACCELERATOR_TYPE"):
        monkeypatch.delenv(var, raising=False)
    exists = os.path.exists
    monkeypatch.setattr(  # no TPU device files either
        distribute.os.path, "exists",
        lambda path: False if str(path).startswith("/dev/") else exists(path),
    )
    strategy = distribute.create_strategy("auto", None)
    assert fake.calls == []
    assert strategy is tf.distribute.get_strategy()


def test_auto_finds_a_tpu_from_the_environment(monkeypatch):
    fake = _FakeTPU(monkeypatch)
    monkeypatch.setenv("TPU_NAME", "from-env")
    distribute.create_strategy("auto", None)
    # The resolver reads TPU_NAME itself: it is given tpu=None.
    assert [c for c, _ in fake.calls] == [
        "TPUClusterResolver", "connect_to_cluster",
        "initialize_tpu_system", "TPUStrategy",
    ]
    # On a TPU VM (its TPU devices attached) the TPU is "local".
    monkeypatch.delenv("TPU_NAME")
    exists = os.path.exists
    monkeypatch.setattr(
        distribute.os.path, "exists",
        lambda path: path == "/dev/accel0" or exists(path),
    )
    for name in ("auto", "tpu"):
        fake = _FakeTPU(monkeypatch)
        distribute.create_strategy(name, None)
        assert fake.calls == [("TPUClusterResolver", "local"),
                              ("initialize_tpu_system", "local"),
                              ("TPUStrategy", "local")]
    # A TPU that cannot be reached: fall back instead of failing.
    _FakeTPU(monkeypatch, fail_resolver=True)
    assert (distribute.create_strategy("auto", None)
            is tf.distribute.get_strategy())


def test_only_multi_worker_strategies_get_a_preemption_handler(
        monkeypatch):
    made = []
    monkeypatch.setattr(
        tf.distribute.experimental, "PreemptionCheckpointHandler",
        lambda resolver, manager, termination_config: made.append(
            (resolver, manager, termination_config)) or "h",
    )
    saved = []
    # A TPU VM: TensorFlow's handler does nothing on Google Cloud's TPUs,
    # so none is made; the SIGTERM flag does the work (next test).
    _FakeTPU(monkeypatch)
    tpu = distribute.create_strategy("tpu", "local")
    assert distribute.preemption_handler(tpu, "manager", saved.append) is None
    # One-host strategies have none either.
    assert distribute.preemption_handler(
        tf.distribute.get_strategy(), "manager", saved.append) is None
    assert distribute.preemption_handler(
        two_cpu_mirrored(), "m", saved.append) is None
    # A multi-worker one has one, which saves through the run's own writer,
    # then hands the exit back to the host loop (not TensorFlow's sys.exit).
    monkeypatch.setattr(distribute, "is_multi_worker", lambda s: True)
    monkeypatch.setattr(distribute.cluster, "quiet_watcher_errors",
                        lambda: None)
    worker = types.SimpleNamespace(cluster_resolver="resolver")
    assert distribute.preemption_handler(
        worker, "manager", saved.append) == "h"
    (resolver, manager, config), = made
    assert (resolver, manager) == ("resolver", "manager")
    config.save_fn(checkpoint_number=30)
    assert saved == [30]
    with pytest.raises(distribute.Preempted):
        config.exit_fn()


class _SigtermAfterFirstLoop(interrupt.StopRequest):
    """The real SIGTERM flag; a real SIGTERM reaches this process when the
    host loop first asks, as a TPU VM's maintenance event sends one."""

    @property
    def requested(self):
        if not self._sent:
            self._sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        return self._requested

    @requested.setter
    def requested(self, value):
        self._requested = value
        self._sent = getattr(self, "_sent", False)


def test_tpu_vm_sigterm_saves_stops_and_resumes(tmp_path, monkeypatch,
                                                caplog):
    """A TPU run (the default strategy standing in for TPUStrategy):
    no handler, the log says what saves the checkpoint, and a SIGTERM
    saves at the next step boundary and stops, without the evaluation
    that falls due there (a preemption notice is short); the same call
    resumes."""
    from tests.test_train import digits_config

    monkeypatch.setattr(distribute, "is_tpu", lambda strategy: True)
    monkeypatch.setattr(loop, "_Preemption", _SigtermAfterFirstLoop)
    evaluated = []
    periodic = loop._HostLoop._periodic_evaluations
    monkeypatch.setattr(loop._HostLoop, "_periodic_evaluations",
                        lambda self, due, stop: evaluated.append(
                            self.step) or periodic(self, due, stop))
    config = tiny.set_fields(digits_config(), {
        "trainer.total_steps": 12, "trainer.steps_per_loop": 4,
        "evals.test.every_steps": 4, "checkpoints.every_steps": 0})
    workdir = str(tmp_path / "run")
    with caplog.at_level("INFO", logger="absl"):
        stopped = train_lib.train_and_evaluate(config, workdir)
    assert stopped == {"preempted": True, "step": 4, "signal": "SIGTERM",
                       "saved": True}
    assert evaluated == []
    assert "Preemption: a TPU VM's maintenance event or preemption sends " \
        "SIGTERM" in caplog.text
    assert "Stopped at step 4 after SIGTERM; checkpoint saved" in caplog.text
    assert tf.train.latest_checkpoint(
        os.path.join(workdir, "checkpoints")).endswith("ckpt-4")
    monkeypatch.setattr(loop, "_Preemption", interrupt.StopRequest)
    resumed = train_lib.train_and_evaluate(config, workdir)
    assert resumed["steps"] == 12 and resumed["steps_this_run"] == 8


@pytest.mark.parametrize("name", ["gpu", "TPU", "", "parameter_server"])
def test_unknown_strategy_names_fail_clearly(name):
    with pytest.raises(ValueError, match=r"Unknown `strategy` .* use one of "
                       r"auto, tpu, mirrored, multiworker, cpu"):
        distribute.create_strategy(name)


@pytest.mark.parametrize("tf_config", [
    "{not json", '{"cluster": {}}', '{"cluster": {"worker": ["a:1"]}}',
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}',
])
def test_malformed_tf_config_fails_clearly(monkeypatch, tf_config):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError, match="TF_CONFIG must be JSON like"):
        distribute.create_strategy("multiworker")


@pytest.mark.parametrize("cluster_jobs, says", [
    ({"chief": ["a:1"], "worker": ["b:2"], "ps": ["c:3"]},
     "TF_CONFIG's cluster has a 'ps' job: --strategy=multiworker trains on "
     "the chief and the workers alone (no parameter servers): leave it out "
     "of TF_CONFIG."),
    ({"worker": ["a:1", "a:1"]},
     "TF_CONFIG's cluster names a:1 for two tasks: give each chief and "
     "worker an address of its own."),
    ({"chief": ["a:1"], "worker": ["a:1"]}, "names a:1 for two tasks"),
])
def test_a_tf_config_that_forms_no_cluster_is_refused(
        monkeypatch, cluster_jobs, says):
    """A parameter-server job, or an address given to two tasks, passed
    the check that every address answers, then each worker waited until
    connect_timeout_s and exited with no line."""
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": cluster_jobs, "task": {"type": "worker", "index": 0}}))
    with pytest.raises(cluster.SetupError, match=re.escape(says)):
        distribute.create_strategy("multiworker")


def test_a_cluster_host_with_a_one_host_strategy_is_refused(monkeypatch):
    """A host of a TF_CONFIG cluster started with a one-host strategy
    would train alone and write the shared workdir as its chief: refused,
    naming --strategy=multiworker. An evaluator task may evaluate alone,
    and is refused training and a place among the workers; a chief-only
    cluster forms."""
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["a:1"], "worker": ["b:2"]},
        "task": {"type": "worker", "index": 0}}))
    for strategy in ("auto", "mirrored", "cpu"):
        with pytest.raises(cluster.SetupError, match=(
                "TF_CONFIG names a cluster of 2 tasks, this one its worker, "
                f"and `strategy`={strategy} runs on this host alone: pass "
                "--strategy=multiworker")):
            distribute.create_strategy(strategy)
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["a:1"], "worker": ["b:2"],
                    "evaluator": ["c:3"]},
        "task": {"type": "evaluator", "index": 0}}))
    assert distribute.is_chief(distribute.create_strategy(
        "cpu", training=False))
    with pytest.raises(cluster.SetupError, match="TF_CONFIG's task is of "
                       "type 'evaluator': training runs on the chief"):
        distribute.create_strategy("auto")
    with pytest.raises(cluster.SetupError, match="TF_CONFIG's task is of type "
                       "'evaluator': training runs on the chief and the "
                       "workers. On an evaluator, evaluate the run with "
                       "keras-vit-evaluate"):
        distribute.create_strategy("multiworker")
    # A chief alone: its TF_CONFIG is read (it held no worker list).
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"]},
        "task": {"type": "chief", "index": 0}}))
    assert tf_config.check()


def test_an_evaluation_batch_the_replicas_do_not_split_is_refused_first(
        tmp_path):
    """config.evals.<name>.batch_size must split over the replicas too: on
    two replicas an odd one is named before anything trains (it failed at
    the first evaluation, naming no field), and the workdir is left as it
    was."""
    config = tiny.digits_config(**{"total_steps": 2,
                                   "optimizer.warmup_steps": 0,
                                   "evals.test.batch_size": 15})
    workdir = tmp_path / "run"
    with pytest.raises(train_lib.UsageError, match=(
            r"config.evals.test.batch_size=15 is not divisible by the 2 "
            r"replicas: use a multiple of 2.")):
        train_lib.train_and_evaluate(config, str(workdir),
                                     two_cpu_mirrored())
    assert not workdir.exists()


def test_mirrored_and_cpu_strategies():
    assert isinstance(distribute.create_strategy("mirrored"),
                      tf.distribute.MirroredStrategy)
    cpu = distribute.create_strategy("cpu")
    assert isinstance(cpu, tf.distribute.OneDeviceStrategy)
    assert distribute.is_chief(cpu)


@pytest.mark.parametrize(
    "cluster,task_type,task_id,chief",
    [
        ({}, None, None, True),
        ({"worker": ["a:1", "b:1"]}, "worker", 0, True),
        ({"worker": ["a:1", "b:1"]}, "worker", 1, False),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "chief", 0, True),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "worker", 0, False),
    ],
)
def test_is_chief(cluster, task_type, task_id, chief):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id
    )
    strategy = types.SimpleNamespace(cluster_resolver=resolver)
    assert distribute.is_chief(strategy) is chief


# -------------------------------------------------------------- SIGTERM
def test_stop_request_records_the_signal_and_restores_the_handlers():
    before = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
    told = []
    with interrupt.StopRequest() as flag:
        flag.on_signal = lambda: told.append(1)
        assert flag.installed and not flag.requested
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python handlers run between bytecodes
        assert flag.requested and flag.name == "SIGTERM" and told
    assert [signal.getsignal(s)
            for s in (signal.SIGTERM, signal.SIGINT)] == before


def test_ctrl_c_once_asks_to_stop_twice_stops_at_once():
    # Python's own handler, as in a terminal (a test process started in
    # the background by a shell may have SIGINT ignored instead).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupt.StopRequest() as flag:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert flag.requested and flag.name == "Ctrl-C"
            # A second press (not the same one's echo to the group).
            time.sleep(interrupt.SAME_PRESS_S)
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_flag_leaves_a_preemption_handler_in_charge():
    class Handler(tf.distribute.experimental.PreemptionCheckpointHandler):
        def __init__(self):  # no cluster: only its signal method is used
            self.seen = []

        def __del__(self):
            pass

        def on_sigterm(self, signum, frame):
            self.seen.append(signum)

    handler = Handler()
    previous = signal.signal(signal.SIGTERM, handler.on_sigterm)
    try:
        with interrupt.StopRequest() as flag:
            assert signal.getsignal(signal.SIGTERM) == handler.on_sigterm
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert handler.seen == [signal.SIGTERM] and not flag.requested
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_train_lib_asks_the_handler_between_host_loops(tmp_path,
                                                       monkeypatch):
    from tests.test_train import digits_config

    asked = []
    recorder = types.SimpleNamespace(
        save_checkpoint_if_preempted=lambda **kw: asked.append(kw)
    )
    monkeypatch.setattr(distribute, "preemption_handler",
                        lambda strategy, manager, save: recorder)
    config = digits_config(total_steps=12, steps_per_loop=4,
                           eval_every_steps=0, checkpoint_every_steps=0)
    train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert asked == [{"checkpoint_number": s} for s in (4, 8, 12)]
    # Where an evaluation falls due, asked twice before it (the handler
    # saves at the call after the one that learns of a SIGTERM) and once
    # after.
    asked.clear()
    config = digits_config(total_steps=12, steps_per_loop=4,
                           eval_every_steps=4, checkpoint_every_steps=0)
    train_lib.train_and_evaluate(config, str(tmp_path / "again"))
    assert asked == [{"checkpoint_number": s}
                     for s in (4, 4, 4, 8, 8, 8, 12)]


def _env():
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=ROOT)
    return env


def _wait_for(path, pattern, procs, timeout=180):
    """Waits until the log at `path` matches `pattern`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            if re.search(pattern, f.read()):
                return
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    with open(path) as f:
        raise AssertionError(f"{pattern!r} not seen; log:\n{f.read()[-3000:]}")


def _finish(procs, timeout=240):
    try:
        return [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


TOTAL = 150
TRAIN_PY = [
    os.path.join(ROOT, "train.py"),
    "--config=" + os.path.join(ROOT, "configs", "digits.py"),
    "--config.model.image_size=16", "--config.input.pp.resize_size=18",
    "--config.model.num_layers=1", "--config.model.hidden_size=16",
    "--config.model.mlp_dim=16", "--config.model.num_heads=2",
    f"--config.trainer.total_steps={TOTAL}",
    "--config.trainer.steps_per_loop=2",
    "--config.log.every_steps=2", "--config.evals.test.every_steps=0",
    "--config.checkpoints.every_steps=0", "--config.input.batch_size=16",
    "--config.trainer.jit_compile=False", "--config.schedule.warmup_steps=0",
    "--strategy=auto",
]


@pytest.mark.slow
def test_sigterm_saves_stops_and_the_same_command_resumes(tmp_path):
    workdir = str(tmp_path / "run")
    command = [sys.executable, *TRAIN_PY, f"--workdir={workdir}"]
    logs = [str(tmp_path / "first.log"), str(tmp_path / "second.log")]
    with open(logs[0], "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env=_env())
    _wait_for(logs[0], rf"step \d+/{TOTAL}", [proc])
    proc.send_signal(signal.SIGTERM)
    # A preempted run saves, then exits with the one preemption status.
    assert _finish([proc]) == [PREEMPTED_EXIT_CODE]
    first = open(logs[0]).read()
    stop = int(re.search(r"Stopped at step (\d+) after SIGTERM", first)[1])
    assert 0 < stop < TOTAL
    ckpt_dir = os.path.join(workdir, "checkpoints")
    assert tf.train.latest_checkpoint(ckpt_dir).endswith(f"ckpt-{stop}")
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))

    with open(logs[1], "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env=_env())
    assert _finish([proc]) == [0]
    second = open(logs[1]).read()
    lr = optim.WarmupDecay(1e-3, TOTAL, decay_type="cosine")(stop)
    assert (f"Resumed from {ckpt_dir}/ckpt-{stop} at step {stop} "
            f"(learning rate {float(lr):.3g}); data order restored"
            in second)
    metrics = json.load(open(os.path.join(workdir, "metrics.json")))
    assert metrics["steps"] == TOTAL
    assert metrics["steps_this_run"] == TOTAL - stop
