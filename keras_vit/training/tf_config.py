"""TF_CONFIG, the cluster of a multi-worker run and this task's place in
it, read before TensorFlow's resolver reads it: what is malformed, or
would form no cluster (each worker waiting until connect_timeout_s),
comes as one line that names the fix."""

from __future__ import annotations

import json
import os
from typing import Dict, List

from absl import logging

from keras_vit.errors import SetupError, UsageError


def check() -> bool:
    """A readable error for a malformed TF_CONFIG (TensorFlow's own is a
    JSON traceback deep inside the resolver). False without TF_CONFIG."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        logging.warning(
            "MultiWorkerMirroredStrategy without TF_CONFIG: training on this "
            "host only. Set TF_CONFIG to the cluster and this task's place "
            "in it on every worker."
        )
        return False
    try:
        spec = json.loads(raw)
        workers = (spec["cluster"].get("chief", [])
                   + spec["cluster"].get("worker", []))
        task = spec["task"]
        task["type"], int(task["index"])
        if not workers:
            raise KeyError("no chief or worker task")
        for address in workers:
            host, _, port = address.rpartition(":")
            if not host or not 0 < int(port) < 65536:
                raise UsageError(f"{address!r} is not host:port")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise SetupError(
            "TF_CONFIG must be JSON like {\"cluster\": {\"worker\": "
            "[\"host1:port\", \"host2:port\"]}, \"task\": {\"type\": "
            f"\"worker\", \"index\": 0}}}}; got {raw!r} ({e!r})."
        ) from None
    _check_cluster_jobs(spec["cluster"], workers)
    if task["type"] not in ("chief", "worker"):
        raise SetupError(
            f"TF_CONFIG's task is of type {task['type']!r}: training runs "
            "on the chief and the workers. On an evaluator, evaluate the "
            "run with keras-vit-evaluate --model=<workdir> (no "
            "--strategy=multiworker).")
    logging.info(
        "MultiWorkerMirroredStrategy: %d workers, this is %s %s.",
        len(workers), task["type"], task["index"],
    )
    return True


def _check_cluster_jobs(jobs: Dict, workers: List[str]) -> None:
    """Refuses what would form no cluster, each worker waiting until
    connect_timeout_s: a job MultiWorkerMirroredStrategy has no place for
    (a parameter server's "ps"), and an address named twice."""
    other = sorted(j for j in set(jobs) - {"chief", "worker", "evaluator"}
                   if jobs[j])  # an empty list: no task, as TensorFlow reads it
    twice = sorted({a for a in workers if workers.count(a) > 1})
    if other:
        raise SetupError(
            f"TF_CONFIG's cluster has a {other[0]!r} job: "
            "--strategy=multiworker trains on the chief and the workers "
            "alone (no parameter servers): leave it out of TF_CONFIG.")
    if twice:
        raise SetupError(
            f"TF_CONFIG's cluster names {twice[0]} for two tasks: give "
            "each chief and worker an address of its own.")
