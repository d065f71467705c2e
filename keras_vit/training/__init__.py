"""Training: the distributed step and loop (`trainer`), the host loop that
logs, evaluates, checkpoints and handles preemption (`train_lib`), resume
(`resume`), tf.distribute strategies (`distribute`), and the train command
(`cli`).
"""
