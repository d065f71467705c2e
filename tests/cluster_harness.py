"""Real `train.py` worker processes on 127.0.0.1, for the multi-worker
tests (tests/test_multiworker_faults.py) and the exit-time benchmark
(benchmarks/multiworker_exit.py).

Every address they contact is a loopback one: the workers of TF_CONFIG
listen on free 127.0.0.1 ports, and the Google Cloud metadata server that
TensorFlow's PreemptionCheckpointHandler asks for (is this Google Cloud?)
is pointed at a closed 127.0.0.1 port, so the answer is an immediate no.
Every wait is bounded: a hang fails fast instead of hanging the suite.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN_ARGS = [
    "--config=" + os.path.join(ROOT, "configs", "digits.py"),
    "--config.model.image_size=16", "--config.input.pp.resize_size=18",
    "--config.model.num_layers=1", "--config.model.hidden_size=16",
    "--config.model.mlp_dim=16", "--config.model.num_heads=2",
    "--config.trainer.steps_per_loop=2", "--config.log.every_steps=10",
    "--config.evals.test.every_steps=0", "--config.input.batch_size=16",
    "--config.trainer.jit_compile=False", "--config.schedule.warmup_steps=0",
    "--strategy=multiworker",
]


def free_ports(n: int) -> List[int]:
    """`n` distinct ports that are free on 127.0.0.1 now."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def env(tf_config: Optional[dict] = None, **extra) -> dict:
    """The environment of a worker: no GPU, quiet C++ logs, this checkout,
    the metadata server on a closed loopback port; `extra` on top (None
    removes a variable)."""
    closed = f"127.0.0.1:{free_ports(1)[0]}"
    out = dict(os.environ)
    out.update(
        CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT,
        GCE_METADATA_IP=closed, GCE_METADATA_HOST=closed,
    )
    out.pop("TF_CONFIG", None)
    if tf_config is not None:
        out["TF_CONFIG"] = json.dumps(tf_config)
    for name, value in extra.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def tf_config(hosts: Sequence[str], index: int) -> dict:
    return {"cluster": {"worker": list(hosts)},
            "task": {"type": "worker", "index": index}}


class Process:
    """A train.py process whose output goes to a log file; a thread records
    when it ends."""

    def __init__(self, argv, log: str, environ: dict):
        self.log = log
        self.started = time.time()
        self.ended = None
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=environ,
                cwd=ROOT,
            )
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        self.proc.wait()
        self.ended = time.time()

    def text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()

    def poll(self) -> Optional[int]:
        """The exit code once the end is recorded, else None."""
        return self.proc.returncode if self.ended is not None else None

    def signal(self, sig) -> float:
        """Sends `sig`; returns when."""
        now = time.time()
        self.proc.send_signal(sig)
        return now

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def train(workdir: str, log: str, steps: int, hosts=None, index=0,
          args: Sequence[str] = (), **extra_env) -> Process:
    """Starts worker `index` of `hosts` (None: no TF_CONFIG)."""
    argv = [sys.executable, os.path.join(ROOT, "train.py"), *TRAIN_ARGS,
            f"--config.trainer.total_steps={steps}", f"--workdir={workdir}",
            *args]
    config = tf_config(hosts, index) if hosts else None
    return Process(argv, log, env(config, **extra_env))


def cluster(tmp, workdir: str, tag: str, steps: int, args=(),
            workers: int = 2) -> List[Process]:
    """`workers` train.py workers of one TF_CONFIG cluster."""
    hosts = [f"127.0.0.1:{p}" for p in free_ports(workers)]
    return [
        train(workdir, os.path.join(str(tmp), f"{tag}{i}.log"), steps,
              hosts, i, args)
        for i in range(workers)
    ]


def wait_for(procs: Sequence[Process], pattern: str, which: int = 0,
             timeout: float = 240) -> float:
    """Waits until the log of procs[which] matches `pattern`; returns when
    it first did (to the 0.05 s of the polling)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(pattern, procs[which].text()):
            return time.time()
        if procs[which].poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(
        f"{pattern!r} not seen in {procs[which].log}:\n"
        f"{procs[which].text()[-3000:]}"
    )


def wait_all(procs: Sequence[Process], timeout: float = 240) -> List[int]:
    """Exit codes of `procs`; any still running after `timeout` seconds is
    killed and the wait fails."""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                return codes
            time.sleep(0.05)
        raise AssertionError(
            "still running after %.0f s: %s" % (
                timeout, [p.log for p in procs if p.poll() is None])
        )
    finally:
        for p in procs:
            p.kill()


def sigterm(proc: Process) -> float:
    return proc.signal(signal.SIGTERM)


def checkpoint_steps(workdir: str) -> List[int]:
    """Steps of the complete checkpoints the workdir's state file lists."""
    state = os.path.join(workdir, "checkpoints", "checkpoint")
    if not os.path.exists(state):
        return []
    with open(state) as f:
        return [int(s) for s in re.findall(
            r'^all_model_checkpoint_paths: ".*ckpt-(\d+)"', f.read(),
            re.MULTILINE)]
