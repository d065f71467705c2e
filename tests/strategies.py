"""One shared 2-replica MirroredStrategy for the whole test session.

Each MirroredStrategy numbers its collective operations from the same
starting keys; two instances in one process can therefore collide in the
collective executor ("Shape mismatch in the collective instance ..."). The
tests share this one instance instead (two logical CPU devices, configured in
conftest.py).
"""

import functools

import tensorflow as tf


@functools.lru_cache(maxsize=None)
def two_cpu_mirrored() -> tf.distribute.MirroredStrategy:
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
