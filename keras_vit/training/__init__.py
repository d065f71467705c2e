"""Training: the distributed step (`trainer`), the set-up of a run
(`train_lib`) and its host loop that logs, evaluates, checkpoints and
handles preemption (`loop`), resume (`resume`), who writes checkpoints
(`state`), tf.distribute strategies (`distribute`, `tpu`) and the
life of multi-worker processes (`cluster`). The train command lives in
keras_vit.commands.
"""
