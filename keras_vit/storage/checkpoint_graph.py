"""A training checkpoint's weights for a model of any Keras backend.

`tf.train.Checkpoint` restores into TensorFlow objects only, so a model
built under the JAX backend cannot be handed to it. This module reads a
run's checkpoint the way TensorFlow's restore resolves it: by the object
graph the file stores (`_CHECKPOINTABLE_OBJECT_GRAPH`), walked from the
root by the names the run's `tf.train.Checkpoint(model=..., optimizer=...)`
gave, each variable's value taken from the checkpoint key the graph names
for it. A Keras 3 run saves the model's weights through its optimizer:
`optimizer/_trainable_variables/<i>` (the model's trainable variables, in
order) and `optimizer/_variables/<j>` (the optimizer's own: the step,
the EMA averages, the moments), which this assigns by position, as
TensorFlow's restore does. A file holding any other variable is refused
by name rather than loaded in part.

Written by hand because TensorFlow offers no reader of a checkpoint into
objects that are not TensorFlow's; the graph itself is TensorFlow's own
protocol buffer.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from keras_vit.errors import UsageError

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE = "VARIABLE_VALUE"
# Variables a run's checkpoint holds that no model or optimizer keeps.
BOOKKEEPING = ("save_counter/.ATTRIBUTES/VARIABLE_VALUE",)


def _graph(reader) -> trackable_object_graph_pb2.TrackableObjectGraph:
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(GRAPH_KEY))
    return graph


def _child(graph, node_id: int, name: str, path: str) -> int:
    for child in graph.nodes[node_id].children:
        if child.local_name == name:
            return child.node_id
    raise UsageError(
        f"{path}: its object graph has no {name!r}, so it was not written "
        "by a training run of this version; load it under "
        "KERAS_BACKEND=tensorflow.")


def _value_key(graph, node_id: int) -> str:
    for attribute in graph.nodes[node_id].attributes:
        if attribute.name == VALUE:
            return attribute.checkpoint_key
    raise UsageError(f"Node {node_id} of the checkpoint's graph holds no "
                     "variable: load it under KERAS_BACKEND=tensorflow.")


def _listed(graph, node_id: int) -> List[str]:
    """The value keys of a list node's children "0", "1", ... in order."""
    children = {c.local_name: c.node_id for c in graph.nodes[node_id].children}
    keys = []
    while str(len(keys)) in children:
        keys.append(_value_key(graph, children[str(len(keys))]))
    return keys


def _assign(reader, pairs, path: str, what: str) -> None:
    for variable, key in pairs:
        value = reader.get_tensor(key)
        if tuple(value.shape) != tuple(variable.shape):
            raise UsageError(
                f"{path}: {what} {key} has shape {tuple(value.shape)}, the "
                f"model's {getattr(variable, 'path', variable.name)} "
                f"{tuple(variable.shape)}: load it under "
                "KERAS_BACKEND=tensorflow.")
        variable.assign(np.asarray(value, dtype=variable.dtype))


def read_into(path: str, model, optimizer) -> None:
    """Assigns the checkpoint `path`'s values to `model`'s trainable
    variables and `optimizer`'s variables (built for them).

    Raises:
        UsageError: the file holds other variables than a training run of
            this model saves, or another number or shape of them.
        tf.errors.OpError, IndexError: a damaged file (as for
            `tf.train.Checkpoint.read`).
    """
    reader = tf.train.load_checkpoint(path)
    graph = _graph(reader)
    optimizer_id = _child(graph, 0, "optimizer", path)
    lists: Dict[str, List[str]] = {
        name: _listed(graph, _child(graph, optimizer_id, name, path))
        for name in ("_trainable_variables", "_variables")}
    owned = {"_trainable_variables": list(model.trainable_variables),
             "_variables": list(optimizer.variables)}
    for name, keys in lists.items():
        if len(keys) != len(owned[name]):
            raise UsageError(
                f"{path}: optimizer/{name} lists {len(keys)} variables, the "
                f"model built from its config.json {len(owned[name])}: load "
                "it under KERAS_BACKEND=tensorflow.")
    every = {a.checkpoint_key for node in graph.nodes
             for a in node.attributes if a.name == VALUE}
    other = sorted(every.difference(*lists.values(), BOOKKEEPING))
    if other:
        raise UsageError(
            f"{path}: holds {len(other)} variable(s) no training run of "
            f"this model saves (e.g. {other[0]}): load it under "
            "KERAS_BACKEND=tensorflow.")
    for name, keys in lists.items():
        _assign(reader, zip(owned[name], keys), path, name)
