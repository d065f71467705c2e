"""Test set-up: quiet TensorFlow, the TF backend, two logical CPU devices,
and the two test tiers (tests marked `slow` run only with --run_slow).

Two logical CPU devices give a real 2-replica MirroredStrategy on one CPU,
which is how replica code is tested here. They must be configured before
TensorFlow initialises its devices, hence at import time of the conftest.
"""

import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _quiet_start():
    """keras_vit/quiet_start.py, loaded by its path: `import keras_vit`
    would import TensorFlow before the notices are held."""
    path = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "keras_vit", "quiet_start.py")
    spec = importlib.util.spec_from_file_location("_tests_quiet_start", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# TensorFlow's start-up notices (printed whatever TF_CPP_MIN_LOG_LEVEL says)
# held back as the commands hold them: under pytest-xdist a worker's would
# reach the terminal when it exits, after the run's summary.
with _quiet_start().quiet_tensorflow_start([]):
    import tensorflow as tf  # noqa: E402

# Under pytest-xdist (`-n auto`, the README's test line), the workers share
# the machine's cores instead of each starting an op thread pool as wide as
# the machine: on 2 cores, 2 workers of one thread each. (The inter-op pool
# keeps its default: a 2-replica all-reduce needs both replicas' ops at once.)
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _workers > 1:
    _cores = (len(os.sched_getaffinity(0))
              if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    _threads = max(1, _cores // _workers)
    tf.config.threading.set_intra_op_parallelism_threads(_threads)

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0],
        [tf.config.LogicalDeviceConfiguration()] * 2,
    )
except RuntimeError:  # devices already initialised (e.g. re-import)
    pass


# The two test tiers: the hooks live in tests/tiers.py, where
# tests/test_tiers.py runs them on a generated test file.
from tests.tiers import (  # noqa: E402,F401
    pytest_addoption,
    pytest_collection_modifyitems,
)
