"""Training: the distributed step (`trainer`, and `mpp_trainer` for masked
patch prediction), the set-up of a run (`train_lib`) and its host loop that
logs, evaluates, checkpoints and handles preemption (`loop`), resume
(`resume`), who writes the training state's checkpoints (`state`),
tf.distribute strategies (`distribute`, `tpu`), the Keras optimizer hook
the distributed step needs (`keras_hooks`) and the life of multi-worker
processes (`cluster`). The losses and the evaluation step are
`keras_vit.scoring`'s; the train command lives in keras_vit.commands.
"""
