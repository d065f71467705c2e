"""What an exported ViT's SavedModel holds (`Servable`), and its writing.

`keras_vit.export.graph` builds the endpoints; this module traces each one
once and writes them with the model's variables.
"""

from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf


class Servable:
    """What the SavedModel holds: the model's variables and each endpoint's
    graph, traced once.

    Not `keras.export.ExportArchive`: it traces each endpoint to list its
    variables, and `tf.saved_model.save` traces every `tf.function` it
    holds again (the save context is part of the trace key). Tracing the
    request-decoding graphs is most of an export's time, so the endpoints
    are held here as concrete functions, which the writer keeps as they
    are. `variables`, `trainable_variables` and `non_trainable_variables`
    are what a reloaded model lists, as in an archive's.
    """

    def __init__(self, model: keras.Model, endpoints: dict,
                 on_bytes: Sequence[str]):
        """`endpoints`: name -> function of one batch: of encoded images
        (a string vector) for the names in `on_bytes`, of float32 pixels
        (batch, height, width, 3) for the others."""
        bytes_spec = tf.TensorSpec([None], tf.string, name="image_bytes")
        pixels_spec = tf.TensorSpec([None, None, None, 3], tf.float32,
                                    name="images")
        self.signatures = {
            name: tf.function(function, autograph=False).get_concrete_function(
                bytes_spec if name in on_bytes else pixels_spec)
            for name, function in endpoints.items()
        }
        self._root = root = tf.__internal__.tracking.AutoTrackable()
        root.variables = list(model.weights)
        root.trainable_variables = list(model.trainable_weights)
        root.non_trainable_variables = list(model.non_trainable_weights)
        for name, function in self.signatures.items():
            setattr(root, name, function)
        # The tf.Variables the graphs read, saved as such: a server loads
        # the SavedModel into a session that restores them by these.
        used = {id(v): v for f in self.signatures.values()
                for v in f.variables}
        root._all_variables = list(used.values())

    def write_out(self, path: str) -> None:
        """Writes the SavedModel to `path`, every endpoint a signature."""
        tf.saved_model.save(self._root, path, signatures=self.signatures)
