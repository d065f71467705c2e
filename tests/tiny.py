"""configs/digits.py shrunk for tests: a 1-layer ViT of width 32 that trains
in seconds. `settings` and `overrides` take dotted field names
("schedule.lr"), or the flat names of earlier versions ("total_steps"),
which go where `keras_vit.config.upgrade` puts them."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digits_base():
    """configs/digits.py as it ships."""
    sys.path.insert(0, os.path.join(ROOT, "configs"))
    try:
        import digits
    finally:
        sys.path.pop(0)
    return digits.get_config()


def set_fields(config, fields):
    """Sets dotted fields ("schedule.lr": 1e-3) of `config`, an earlier
    version's names where they moved; returns it."""
    from keras_vit import config as config_lib

    for key, value in fields.items():
        key = config_lib.moved_path(key) or key
        target = config
        *path, leaf = key.split(".")
        for part in path:
            target = target[part]
        target[leaf] = value
    return config


def digits_config(settings=None, **overrides):
    config = digits_base()
    config.model.hidden_size = 32
    config.model.mlp_dim = 64
    config.model.num_layers = 1
    config.input.batch_size = 32
    config.trainer.jit_compile = False
    return set_fields(config, {**(settings or {}), **overrides})


def write_run(config, workdir, names, seed=7):
    """A workdir as a run leaves it (config, labels, a checkpoint), its
    model built from `config` with `seed`, untrained; returns the model."""
    import keras
    import tensorflow as tf

    from keras_vit import build
    from keras_vit.storage import workdir as workdir_lib

    keras.utils.set_random_seed(seed)
    model, optimizer = build.build_run(config, 10)
    optimizer.build(model.trainable_variables)
    workdir_lib.write_json(os.path.join(workdir, workdir_lib.CONFIG),
                           config.to_dict())
    workdir_lib.write_class_names(workdir, names)
    tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=optimizer),
        os.path.join(workdir, workdir_lib.CHECKPOINTS), max_to_keep=1,
    ).save()
    return model


def train_losses(workdir):
    """The train loss of every TensorBoard summary a run wrote, in order."""
    import tensorflow as tf

    losses = []
    for path in sorted(tf.io.gfile.glob(os.path.join(workdir, "train", "*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                if v.tag == "loss":
                    losses.append(float(tf.make_ndarray(v.tensor)))
    return losses


def pipeline(config):
    """(config.input, RunInput): what the input pipeline takes of a run
    config, as training hands them over."""
    from keras_vit.training import train_lib

    return config.input, train_lib.run_input(config.seed, config.model,
                                             config.objective.mpp)


class StopAfterFirstLoop:
    """Stands in for SIGTERM arriving during the first training loop
    (monkeypatched over `keras_vit.training.loop._Preemption`)."""

    def __enter__(self):
        self.checks = 0
        return self

    def __exit__(self, *exc):
        return False

    @property
    def requested(self):
        self.checks += 1
        return self.checks == 2
