"""Whether this TensorFlow build XLA-compiles on the CPU.

tensorflow-tpu 2.20.0 does not: a `jit_compile=True` function fails there
with "could not find registered transfer manager for platform Host"
(seen in .ci/run's TPU-build step). The tests that compile on the CPU
skip on such a build, with that reason; TensorFlow's own build, the rest
of CI's, runs them.
"""

import functools

import pytest
import tensorflow as tf


@functools.lru_cache(maxsize=None)
def available() -> bool:
    try:
        tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0))
        return True
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
            tf.errors.UnimplementedError, tf.errors.InternalError):
        return False


needed = pytest.mark.skipif(
    not available(),
    reason=f"this TensorFlow build ({tf.__version__}, e.g. tensorflow-tpu) "
    "has no XLA for the CPU; TensorFlow's own build runs these tests",
)
