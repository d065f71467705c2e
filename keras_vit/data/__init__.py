"""tf.data input: the digits, image folders and TFDS data sets (`pipeline`),
image preprocessing shared with export (`preprocessing`), the VTAB-1k task
definitions (`vtab`) and the checks that turn bad input into clear errors
(`checks`).
"""
