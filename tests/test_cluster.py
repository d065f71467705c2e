"""The pieces of a multi-worker run's process life, in one process: waiting
for the workers of TF_CONFIG (timeout, SIGTERM, a taken port), TensorFlow's
set-up guarded at the C level (in a subprocess), naming a lost worker from
TensorFlow's own error texts, who writes checkpoints, and the command
line's logging and --cpu_devices. Every address is a 127.0.0.1 one.

The same behaviour with real worker processes:
tests/test_multiworker_faults.py.
"""

import json
import logging as std_logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf
from absl import logging as absl_logging

from keras_vit import create_model, quiet_start
from keras_vit.commands import runner as cli_flags
from keras_vit.data import sources, vtab
from keras_vit.errors import UsageError
from keras_vit.training import cluster, data_turn, distribute, state
from tests.strategies import two_cpu_mirrored

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _absl_info():
    """These tests read absl's INFO lines: whatever verbosity an earlier
    in-process command line left behind, log at INFO here."""
    previous = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    yield
    absl_logging.set_verbosity(previous)


def _ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def three_workers(monkeypatch):
    """TF_CONFIG of three workers on closed 127.0.0.1 ports; this is 0."""
    hosts = [f"127.0.0.1:{p}" for p in _ports(3)]
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": hosts},
        "task": {"type": "worker", "index": 0},
    }))
    return hosts


def _listen(address):
    host, port = address.rsplit(":", 1)
    s = socket.socket()
    s.bind((host, int(port)))
    s.listen()
    return s


# ------------------------------------------------------ waiting for peers
def test_waits_until_every_worker_answers(three_workers):
    peers = [_listen(a) for a in three_workers[1:]]
    try:
        start = time.monotonic()
        cluster.wait_for_workers(timeout_s=30)
        assert time.monotonic() - start < 5
    finally:
        for p in peers:
            p.close()
    # Its own port is free again for TensorFlow's server.
    _listen(three_workers[0]).close()


def test_a_worker_that_never_comes_is_named_after_the_timeout(
    three_workers, monkeypatch, caplog
):
    monkeypatch.setattr(cluster, "FIRST_LOG_S", 0.1)
    monkeypatch.setattr(cluster, "LOG_EVERY_S", 0.3)
    peer = _listen(three_workers[1])  # worker 1 is up, worker 2 never
    try:
        start = time.monotonic()
        with caplog.at_level(std_logging.INFO):
            with pytest.raises(cluster.SetupError) as info:
                cluster.wait_for_workers(timeout_s=1.0)
        waited = time.monotonic() - start
    finally:
        peer.close()
    assert 1.0 <= waited < 5
    assert str(info.value) == (
        f"worker 2 ({three_workers[2]}) of TF_CONFIG did not come up within "
        "1 s (config.trainer.connect_timeout_s): start the same command on "
        "every worker of TF_CONFIG, check that their addresses are reachable "
        "from here, or raise config.trainer.connect_timeout_s."
    )
    assert info.value.exit_code == 1
    waiting = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("Waiting for the workers")]
    assert len(waiting) >= 2  # periodic
    assert f"worker 2 ({three_workers[2]}) not up after" in waiting[0]
    assert "worker 1" not in waiting[0]


def test_sigterm_ends_the_wait(three_workers):
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    start = time.monotonic()
    with pytest.raises(cluster.SetupError) as info:
        cluster.wait_for_workers(timeout_s=60)
    assert time.monotonic() - start < 5
    assert info.value.exit_code == 143 == cluster.TERMINATED_EXIT_CODE
    assert str(info.value).startswith(
        "SIGTERM while waiting for the workers of TF_CONFIG (worker 1 ("
    )
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_taken_port_is_one_line(three_workers):
    holder = _listen(three_workers[0])
    try:
        with pytest.raises(cluster.SetupError) as info:
            cluster.wait_for_workers(timeout_s=5)
    finally:
        holder.close()
    port = three_workers[0].rsplit(":", 1)[1]
    assert str(info.value) == (
        f"Port {port} of this worker (worker 0 ({three_workers[0]}), from "
        "TF_CONFIG) is in use (Address already in use): stop the process "
        "that holds it (an earlier run still alive?) or give this worker a "
        "free port in TF_CONFIG on every worker."
    )


GUARDED = r'''
import re, sys, time
sys.path.insert(0, sys.argv[1])
from keras_vit.training import cluster
print("calling", flush=True)
# A C call that holds Python's global lock (catastrophic backtracking), as
# TensorFlow's cluster set-up does: no Python handler or thread runs.
cluster.run_guarded(lambda: re.match(r"(a+)+$", "a" * 64 + "b"),
                    float(sys.argv[2]))
'''


@pytest.mark.slow
def test_guarded_setup_ends_on_time_and_on_sigterm(tmp_path):
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    timed = subprocess.Popen([sys.executable, str(script), ROOT, "2"],
                             stdout=subprocess.PIPE, env=env)
    termed = subprocess.Popen([sys.executable, str(script), ROOT, "0"],
                              stdout=subprocess.PIPE, env=env)
    try:
        for proc in (timed, termed):
            assert proc.stdout.readline() == b"calling\n"
        time.sleep(0.5)
        sent = time.monotonic()
        termed.send_signal(signal.SIGTERM)
        assert termed.wait(timeout=30) == -signal.SIGTERM
        assert time.monotonic() - sent < 5
        assert timed.wait(timeout=60) == 1  # faulthandler's exit status
    finally:
        for proc in (timed, termed):
            proc.kill()
            proc.wait()


# --------------------------------------------- a data set, chief first
class _Store:
    """The coordination service's key-value store as TensorFlow's eager
    context answers: a get times out (DeadlineExceededError) until the key
    is set (after `ready_after` gets, the chief sets it to `word`), and a
    gone chief is UnavailableError."""

    def __init__(self, word=None, ready_after=0, gone=False):
        self.values, self.gets = {}, []
        self.word, self.ready_after, self.gone = word, ready_after, gone

    def set_config_key_value(self, key, value):
        assert key not in self.values  # the service refuses a second set
        self.values[key] = value

    def get_config_key_value(self, key, timeout_in_ms):
        self.gets.append((key, timeout_in_ms))
        if self.gone:
            raise tf.errors.UnavailableError(
                None, None, "failed to connect to all addresses")
        if len(self.gets) > self.ready_after and self.word is not None:
            self.values.setdefault(key, self.word)
        if key not in self.values:
            raise tf.errors.DeadlineExceededError(
                None, None, f"GetKeyValue() timed out with key: {key}")
        return self.values[key]


def _prepare(log, result="prepared"):
    def prepare():
        log.append("prepare")
        return result
    return prepare


@pytest.fixture(autouse=True)
def _no_word_said(monkeypatch):
    """Each test's chief has given no word yet (data_turn remembers the
    data sets it has, per process)."""
    monkeypatch.setattr(data_turn, "_said", set())


def test_tensorflow_has_the_key_value_store_data_turn_uses():
    """The coordination service's store has no public API: data_turn calls
    the eager context's methods (TF 2.21); a TensorFlow without them fails
    here."""
    import inspect

    context = data_turn.tf_context.context()
    assert callable(context.set_config_key_value)
    assert list(inspect.signature(
        context.get_config_key_value).parameters) == ["key", "timeout_in_ms"]


def test_outside_a_cluster_the_data_is_prepared_at_once():
    log, store = [], _Store()
    assert data_turn.chief_first(_prepare(log), "dtd", multi_worker=False,
                               chief=False, store=store) == "prepared"
    assert log == ["prepare"] and store.values == {} and store.gets == []


def test_the_chief_prepares_then_says_so():
    log, store = [], _Store()
    assert data_turn.chief_first(_prepare(log), "dtd", multi_worker=True,
                               chief=True, store=store) == "prepared"
    assert log == ["prepare"] and store.gets == []
    assert store.values == {"keras_vit/prepared/dtd": "done"}
    # Its word is given once per data set (a VTAB task's training run
    # prepares it again); another data set has a key of its own.
    data_turn.chief_first(_prepare(log), "dtd", multi_worker=True,
                          chief=True, store=store)
    data_turn.chief_first(_prepare(log), "cifar10", multi_worker=True,
                          chief=True, store=store)
    assert log == ["prepare"] * 3
    assert store.values == {"keras_vit/prepared/dtd": "done",
                            "keras_vit/prepared/cifar10": "done"}


def test_a_worker_that_cannot_follow_the_chief_stops_instead_of_skipping(
        three_workers):
    """The chief prepared the data; this worker cannot (its own data_dir,
    downloads off): a one-line UsageError naming the fix, never the
    DataUnavailableError that would have it skip the set alone."""
    def unavailable():
        raise vtab.DataUnavailableError(
            "dtd: dtd is not prepared in /local/tfds.")

    with pytest.raises(UsageError) as raised:
        data_turn.chief_first(unavailable, "dtd", multi_worker=True,
                              chief=False, store=_Store(word="done"))
    assert str(raised.value) == (
        f"The chief (worker 0 ({three_workers[0]})) prepared dtd but this "
        "worker cannot read or prepare it (dtd: dtd is not prepared in "
        "/local/tfds.): share config.input.data_dir between the workers "
        "(e.g. gs://), or prepare dtd on every worker first.")


def test_a_worker_waits_for_the_chiefs_word_then_prepares(three_workers,
                                                          caplog):
    log, now = [], [0.0]
    store = _Store(word="done", ready_after=3)

    def clock():
        now[0] += 4.0  # each poll's wait
        return now[0]

    with caplog.at_level("INFO"):
        assert data_turn.chief_first(
            _prepare(log), "dtd", multi_worker=True, chief=False,
            store=store, poll_s=2.5, clock=clock) == "prepared"
    assert log == ["prepare"]  # after the word, not before
    assert len(store.gets) == 4 and store.gets[0][1] == 2500
    waits = [r.getMessage() for r in caplog.records
             if "Waiting" in r.getMessage()]
    assert waits and all(
        f"for the chief (worker 0 ({three_workers[0]})) to download and "
        "prepare dtd (config.input.download)" in w for w in waits)


@pytest.mark.parametrize("error", [
    vtab.DataUnavailableError("dtd (DTD): preparing dtd failed "
                              "(ConnectionError: no route)."),
    UsageError("Unknown dataset 'dtdd': use 'digits', 'folder' or a TFDS "
               "name."),
    # A long reason comes whole: its fix is at the end.
    vtab.DataUnavailableError("retinopathy needs a manual download: " +
                              "x" * 400 + " (or run `tfds build`)."),
    tf.errors.PermissionDeniedError(None, None, "gs://b/tfds: denied"),
])
def test_the_chiefs_failure_stops_every_worker_with_its_reason(
        three_workers, error):
    """The chief raises its own error and says so; a waiting worker raises
    the same kind (a VTAB task or few-shot set is then skipped on every
    worker alike) with the chief's reason, and prepares nothing."""
    store, log = _Store(), []

    def failing():
        raise error

    with pytest.raises(type(error)):
        data_turn.chief_first(failing, "dtd", multi_worker=True, chief=True,
                            store=store)
    [word] = store.values.values()
    passed_on = type(error) if isinstance(
        error, (vtab.DataUnavailableError, UsageError)) else UsageError
    with pytest.raises(passed_on) as raised:
        data_turn.chief_first(_prepare(log), "dtd", multi_worker=True,
                              chief=False, store=_Store(word=word))
    reason = str(error) if passed_on is type(error) else (
        f"{type(error).__name__}: {error}")
    assert str(raised.value) == (
        f"The chief (worker 0 ({three_workers[0]})) could not prepare dtd: "
        f"{reason}")
    assert log == []


def test_a_chief_gone_before_its_word_is_one_line(three_workers):
    log = []
    with pytest.raises(cluster.SetupError) as raised:
        data_turn.chief_first(_prepare(log), "dtd", multi_worker=True,
                            chief=False, store=_Store(gone=True))
    assert str(raised.value).startswith(
        f"The chief (worker 0 ({three_workers[0]})) stopped while it "
        "prepared dtd, before this worker could read it: see the chief's "
        "log")
    assert log == []


def test_the_run_prepares_tfds_data_in_the_clusters_turn(monkeypatch):
    """prepare_input (train_and_evaluate's set-up, keras-vit-evaluate's
    eval mode), in a multi-worker run on a TFDS name, hands the data's
    preparation to data_turn.chief_first; on the digits, and in a
    one-worker run, nothing is handed."""
    from keras_vit import config as config_lib

    turns = []
    monkeypatch.setattr(distribute, "is_multi_worker", lambda s: True)
    monkeypatch.setattr(distribute, "is_chief", lambda s: False)
    monkeypatch.setattr(data_turn, "chief_first", lambda prepare, name, **kw:
                        turns.append((prepare.func, name, kw)))
    inp = config_lib.base_config().input
    inp.dataset = "dtd"
    distribute.prepare_input(inp, None)
    assert turns == [(sources.prepare, "dtd",
                      {"multi_worker": True, "chief": False})]
    inp.dataset = "digits"
    distribute.prepare_input(inp, None)
    monkeypatch.setattr(distribute, "is_multi_worker", lambda s: False)
    inp.dataset = "dtd"
    distribute.prepare_input(inp, None)
    assert len(turns) == 1


# ------------------------------------------------------------ lost peers
@pytest.mark.parametrize("error,lost", [
    # The survivor of worker 1, in a collective (TF 2.21's text).
    (tf.errors.UnavailableError(
        None, None, "recvmsg:Connection reset by peer\nAdditional GRPC "
        "error information from remote target /job:worker/replica:0/task:1 "
        "while calling /tensorflow.WorkerService/RecvBuf:"), [1]),
    # The coordination service's missing heartbeats.
    (tf.errors.UnavailableError(
        None, None, "Collective ops is aborted by: Error reported from "
        "/job:worker/task:2: The following tasks are unhealthy (stopped "
        "sending heartbeats):\n/job:worker/replica:0/task:2\n"
        "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the "
        "task logs for an earlier error."), [2, 1]),
    # The leader (worker 0, here another task's view) is gone.
    (tf.errors.UnavailableError(
        None, None, "Failed to send RPC to coordination service. Either "
        "the leader task was preempted/died/restarted unexpectedly"), [0]),
])
def test_the_lost_worker_is_named_from_tensorflows_error(
    monkeypatch, error, lost
):
    hosts = [f"127.0.0.1:{p}" for p in _ports(3)]
    me = 0 if lost != [0] else 1
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": hosts},
        "task": {"type": "worker", "index": me},
    }))
    assert cluster.is_peer_loss(error)
    assert [t.index for t in cluster.lost_workers(error)] == lost
    assert [t.address for t in cluster.lost_workers(error)] == [
        hosts[i] for i in lost]


def test_without_a_name_the_workers_that_stopped_answering(three_workers):
    up = _listen(three_workers[2])
    try:
        error = tf.errors.AbortedError(None, None, "Collective aborted")
        lost = cluster.lost_workers(error)
        message = cluster.lost_worker_message(
            error, 120, "/run/checkpoints/ckpt-100")
    finally:
        up.close()
    assert [t.index for t in lost] == [1]
    assert message == (
        f"Lost worker 1 ({three_workers[1]}) at step 120: it stopped "
        "responding (killed, crashed or preempted without notice), so this "
        "worker stops too. Restart all 3 workers with the same command to "
        "resume from /run/checkpoints/ckpt-100."
    )
    assert cluster.lost_worker_message(error, 3, None).endswith(
        "Restart all 3 workers with the same command to start again (no "
        "checkpoint was complete yet).")


def test_other_errors_are_not_a_lost_peer():
    assert not cluster.is_peer_loss(
        tf.errors.InvalidArgumentError(None, None, "Label out of range"))
    assert not cluster.is_peer_loss(ValueError("Socket closed"))
    assert cluster.is_peer_loss(
        tf.errors.InternalError(None, None, "RPC failed: Socket closed"))


# ------------------------------------------------------------ checkpoints
def _checkpoint():
    model = create_model(None, num_classes=3, image_size=16, patch_size=8,
                         hidden_size=16, num_layers=1, num_heads=2,
                         mlp_dim=16)
    step = tf.Variable(0, dtype=tf.int64)
    return model, tf.train.Checkpoint(model=model, step=step), step


def test_the_chief_writes_the_run_and_other_workers_nothing(tmp_path):
    model, ckpt, step = _checkpoint()
    ckpt_dir = str(tmp_path / "run" / "checkpoints")
    scratch = state.scratch_dir(str(tmp_path / "run"), "worker1")
    assert os.path.dirname(scratch) == os.path.realpath(
        os.path.dirname(scratch))
    assert not state.saving_needs_every_worker(model.variables)
    chief = state.CheckpointWriter(
        ckpt, ckpt_dir, state.scratch_dir(str(tmp_path / "run"),
                                                "worker0"),
        chief=True, save_here=False, keep=2, step_counter=step)
    other = state.CheckpointWriter(
        ckpt, ckpt_dir, scratch, chief=False, save_here=False, keep=2,
        step_counter=step)
    for n in (10, 20, 30):
        assert chief.save(n) == os.path.join(ckpt_dir, f"ckpt-{n}")
        assert other.save(n) is None
    assert not os.path.exists(scratch)  # never written
    assert other.latest() == chief.latest() == os.path.join(ckpt_dir,
                                                            "ckpt-30")
    assert sorted(tf.train.get_checkpoint_state(
        ckpt_dir).all_model_checkpoint_paths) == [
        os.path.join(ckpt_dir, f"ckpt-{n}") for n in (20, 30)]


def test_a_worker_that_must_save_keeps_nothing(tmp_path, caplog):
    _, ckpt, step = _checkpoint()
    run = str(tmp_path / "run")
    scratch = state.scratch_dir(run, "worker1")
    # What a crash left behind.
    os.makedirs(scratch, exist_ok=True)
    with open(os.path.join(scratch, "ckpt-5.index"), "w") as f:
        f.write("stale")
    with caplog.at_level(std_logging.INFO):
        writer = state.CheckpointWriter(
            ckpt, os.path.join(run, "checkpoints"), scratch, chief=False,
            save_here=True, keep=3, step_counter=step)
    assert not os.path.exists(scratch)
    assert f"Removing {scratch}, left by an earlier run." in caplog.text
    saved = []
    real_save = writer.manager.save
    writer.manager.save = lambda **kw: saved.append(
        sorted(os.listdir(scratch)) if real_save(**kw) else None)
    assert writer.save(7) is None
    assert "ckpt-7.index" in saved[0]  # written (for the all-reduce) ...
    assert not os.path.exists(scratch)  # ... and gone at once
    writer.close()
    assert not os.path.exists(os.path.join(run, "checkpoints"))


def test_sync_on_read_variables_need_every_worker():
    with two_cpu_mirrored().scope():
        summed = tf.Variable(
            0.0, synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM)
        mirrored = tf.Variable(0.0)
    assert state.saving_needs_every_worker([mirrored, summed])
    assert not state.saving_needs_every_worker([mirrored])


def test_scratch_folders_are_per_run_and_task():
    a = state.scratch_dir("gs://b/run1", "worker1")
    assert a == state.scratch_dir("gs://b/run1", "worker1")
    assert a != state.scratch_dir("gs://b/run2", "worker1")
    assert a != state.scratch_dir("gs://b/run1", "worker2")


# --------------------------------------------------------- command line
def test_tensorflow_lines_come_once_without_trace_chatter(monkeypatch):
    logger = std_logging.getLogger("tensorflow")
    monkeypatch.setattr(logger, "handlers", [std_logging.StreamHandler()])
    monkeypatch.setattr(logger, "filters", [])
    cli_flags.setup_logging(verbose=False)
    assert logger.handlers == [] and logger.propagate

    def passes(level, text):
        record = logger.makeRecord("tensorflow", level, __file__, 1, text,
                                   (), None)
        return logger.filter(record)

    assert not passes(std_logging.INFO, "Collective all_reduce tensors: 1 "
                      "all_reduces, num_devices = 1, group_size = 2")
    # A strategy's set-up and its preemption watchers: the commands say
    # the replicas and workers themselves.
    assert not passes(std_logging.INFO, "Enabled multi-worker collective "
                      "ops with available devices: ['/job:worker/0']")
    assert not passes(std_logging.INFO, "Start watcher for peer's signal.")
    assert passes(std_logging.INFO, "Another TensorFlow line")
    assert passes(std_logging.WARNING, "Collective all_reduce tensors: x")
    monkeypatch.setattr(logger, "filters", [])
    cli_flags.setup_logging(verbose=True)
    assert passes(std_logging.INFO, "Collective all_reduce tensors: 1")
    cli_flags.setup_logging(verbose=False)


def test_cpu_devices_mirror_over_logical_cpus():
    tf.constant(1.0)  # the devices are initialised (conftest: 2 CPUs)
    strategy = distribute.create_strategy("mirrored", cpu_devices=2)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2
    with pytest.raises(cluster.SetupError, match=(
            r"`cpu_devices`=3: TensorFlow's devices are already set up \(2 "
            r"CPU device\(s\)\)")):
        distribute.create_strategy("mirrored", cpu_devices=3)
    with pytest.raises(cluster.SetupError, match=(
            "`cpu_devices`=2 splits the CPU for MirroredStrategy: use it "
            r"with `strategy`=mirrored \(or auto\), not `strategy`=cpu")):
        distribute.create_strategy("cpu", cpu_devices=2)


def test_tensorflow_start_up_notices_are_held_back(capfd):
    cpu_only = not os.path.exists("/proc/driver/nvidia/version")
    lines = [
        "WARNING: All log messages before absl::InitializeLog() is called "
        "are written to STDERR\n",
        "I0000 00:00:1795427554.183339   25576 port.cc:153] oneDNN custom "
        "operations are on. You may see slightly different numerical "
        "results.\n",
        "I0000 00:00:1795427554.183610   25576 cudart_stub.cc:31] Could not "
        "find cuda drivers on your machine, GPU will not be used.\n",
        "E0000 00:00:1795427558.506720   25576 cuda_platform.cc:52] failed "
        "call to cuInit: INTERNAL: CUDA error: UNKNOWN ERROR (303)\n",
        "W0000 00:00:1795427558.506720   25576 other.cc:1] kept as it is\n",
    ]
    capfd.readouterr()
    with quiet_start.quiet_tensorflow_start(argv=[]):
        for line in lines:
            os.write(2, line.encode())
    err = capfd.readouterr().err
    expected = lines[4:] if cpu_only else lines[2:]
    assert err == "".join(expected)
    with quiet_start.quiet_tensorflow_start(argv=["train.py", "--verbose"]):
        os.write(2, lines[1].encode())
    assert capfd.readouterr().err == lines[1]


def test_only_the_repositorys_scripts_count_as_its_scripts(tmp_path):
    here = os.path.join(ROOT, "benchmarks", "throughput.py")
    assert quiet_start.is_repository_script([here, "--help"])
    assert quiet_start.is_repository_script(
        [os.path.join(ROOT, "scripts", "results_tables.py")])
    for argv in ([str(tmp_path / "scripts" / "x.py")],
                 [os.path.join(ROOT, "train.py")],
                 [os.path.join(ROOT, "tests", "tiny.py")],
                 ["keras-vit-train"], []):
        assert not quiet_start.is_repository_script(argv), argv


_IMPORT_NOTICES = ("oneDNN custom operations", "cpu_feature_guard",
                   "absl::InitializeLog", "cudart_stub")


@pytest.mark.parametrize("script", [
    "benchmarks/throughput.py", "benchmarks/loop_overhead.py",
    "scripts/posemb_resize_comparison.py",
    "scripts/make_legacy_keras_fixtures.py",  # --help writes nothing
])
def test_the_repositorys_scripts_start_without_tensorflows_notices(script):
    """A benchmark or script run as documented (`python benchmarks/
    throughput.py ...`) prints its own output only: TensorFlow's start-up
    notices are held back while `import keras_vit` loads it; --verbose
    keeps them."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    quiet = subprocess.run([sys.executable, script, "--help"], cwd=ROOT,
                           env=env, capture_output=True, text=True,
                           timeout=300)
    # Its help (absl's --help exits with status 1, argparse's with 0).
    assert quiet.stdout.strip() and quiet.returncode in (0, 1), (
        quiet.stderr[-3000:])
    for notice in _IMPORT_NOTICES:
        assert notice not in quiet.stderr, quiet.stderr[-3000:]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_import_keras_vit_in_python_holds_back_tensorflows_notices(backend):
    """`import keras_vit` in a user's program (and, on the JAX backend,
    the first checkpoint function, which loads TensorFlow) prints none of
    TensorFlow's start-up notices; TF_CPP_MIN_LOG_LEVEL is not set to a
    command's 2, and what the program writes to stderr still comes."""
    code = ("import os, sys, keras_vit; keras_vit.load_model; "
            "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), "
            "'tensorflow' in sys.modules); "
            "print('mine', file=sys.stderr)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", KERAS_BACKEND=backend)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # (Keras itself sets 1 when it loads TensorFlow; a command's 2 is not
    # forced on a user's program.)
    level, loaded = result.stdout.split()
    assert level in ("None", "1") and loaded == "True", result.stdout
    assert result.stderr.strip().splitlines() == ["mine"], result.stderr
    loud = subprocess.run([sys.executable, "-c", code, "--verbose"],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert any(n in loud.stderr for n in _IMPORT_NOTICES), loud.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_one_line_errors_and_the_traceback_with_verbose(capsys, verbose):
    try:
        raise tf.errors.UnavailableError(None, None, "Socket closed")
    except tf.errors.UnavailableError as cause:
        try:
            raise cluster.SetupError("Lost worker 1 at step 5") from cause
        except cluster.SetupError as error:
            lost = error
    assert cli_flags.report(lost, "keras-vit-train", verbose) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "keras-vit-train: error: Lost worker 1 at step 5")
    assert ("Traceback" in err) is verbose
    assert ("UnavailableError: Socket closed" in err) is verbose
    assert cli_flags.report(cluster.SetupError("stopped", 143),
                            "keras-vit-train", False) == 143
