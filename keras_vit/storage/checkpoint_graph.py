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
TensorFlow's restore does. A file whose model or optimizer holds any
other variable, or one of another shape or kind of dtype (integer,
floating), is refused by name rather than loaded in part; every shape
and dtype is checked against what the file declares before a value is
read.

Written by hand because TensorFlow offers no reader of a checkpoint into
objects that are not TensorFlow's; the graph itself is TensorFlow's own
protocol buffer.
"""

from __future__ import annotations

import contextlib
from typing import Dict, List, Set

import tensorflow as tf
from google.protobuf import message
from tensorflow.core.protobuf import trackable_object_graph_pb2

from keras_vit.errors import UsageError

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE = "VARIABLE_VALUE"
# The objects a run's checkpoint names whose variables a model of it must
# take; the others (save_counter, the input iterator, the checkpointed
# runs of a multi-worker run's preemption handler) are the run's own
# bookkeeping, which TensorFlow's restore into a model and optimizer also
# leaves alone.
OWNERS = ("model", "optimizer")
ELSEWHERE = "load it under KERAS_BACKEND=tensorflow."


@contextlib.contextmanager
def damage_named(what: str):
    """Raises what TensorFlow's checkpoint reader raises, except a bare
    OpError of code UNKNOWN (a cut or garbled .index: "not an sstable";
    a checksum mismatch; a missing data shard), which becomes the
    DataLossError it is, naming `what` was being read."""
    try:
        yield
    except tf.errors.OpError as error:
        if type(error) is not tf.errors.OpError:
            raise
        raise tf.errors.DataLossError(
            None, None, f"{what}: {error.message}") from None


def _damaged(what: str) -> tf.errors.DataLossError:
    return tf.errors.DataLossError(None, None, what)


def _graph(reader) -> trackable_object_graph_pb2.TrackableObjectGraph:
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    try:
        with damage_named("its object graph"):
            graph.ParseFromString(reader.get_tensor(GRAPH_KEY))
    except (message.DecodeError, TypeError) as error:  # as a cut file
        raise _damaged(f"its object graph: {error}") from None
    count = len(graph.nodes)
    for node in graph.nodes:
        if any(not 0 <= child.node_id < count for child in node.children):
            raise _damaged(
                f"its object graph names a node outside its {count} nodes")
    return graph


def _child(graph, node_id: int, name: str, path: str) -> int:
    for child in graph.nodes[node_id].children:
        if child.local_name == name:
            return child.node_id
    raise UsageError(
        f"{path}: its object graph has no {name!r}, so it was not written "
        f"by a training run of this version; {ELSEWHERE}")


def _value_key(graph, node_id: int, path: str) -> str:
    for attribute in graph.nodes[node_id].attributes:
        if attribute.name == VALUE:
            return attribute.checkpoint_key
    raise UsageError(f"{path}: node {node_id} of its object graph holds no "
                     f"variable: {ELSEWHERE}")


def _listed(graph, node_id: int, path: str) -> List[str]:
    """The value keys of a list node's children "0", "1", ... in order."""
    children = {c.local_name: c.node_id for c in graph.nodes[node_id].children}
    keys = []
    while str(len(keys)) in children:
        keys.append(_value_key(graph, children[str(len(keys))], path))
    return keys


def _reachable_keys(graph, roots) -> Set[str]:
    """The value keys of every node reachable from the nodes `roots`."""
    seen, todo, keys = set(roots), list(roots), set()
    while todo:
        node = graph.nodes[todo.pop()]
        keys.update(a.checkpoint_key for a in node.attributes
                    if a.name == VALUE)
        for child in node.children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                todo.append(child.node_id)
    return keys


def _kind(dtype) -> str:
    """A dtype's kind: JAX keeps the optimizer's step as int32 (without
    x64) where TensorFlow wrote int64, so a width alone is no mismatch."""
    dtype = tf.as_dtype(dtype)
    return ("integer" if dtype.is_integer else "floating"
            if dtype.is_floating else dtype.name)


def _check_declared(reader, pairs, path: str) -> None:
    """Refuses, before any value is read, a key the file does not hold
    (damage: its graph names it) or declares with another shape or kind
    of dtype than its variable's."""
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    for variable, key in pairs:
        if key not in dtypes:
            raise _damaged(f"its object graph names {key}, which it lacks")
        want = (tuple(variable.shape), _kind(variable.dtype))
        have = (tuple(shapes[key]), _kind(dtypes[key]))
        if have != want:
            raise UsageError(
                f"{path}: {key} holds {have[1]} {have[0]}, the model's "
                f"{getattr(variable, 'path', variable.name)} {want[1]} "
                f"{want[0]}: {ELSEWHERE}")


def _value(reader, key: str, variable, path: str):
    """The value of `key` in the variable's dtype; refused where it does
    not fit in it (an integer wider than the variable takes)."""
    with damage_named(f"its data ({key})"):
        value = reader.get_tensor(key)
    cast = value.astype(tf.as_dtype(variable.dtype).as_numpy_dtype)
    if _kind(value.dtype) == "integer" and not (cast == value).all():
        raise UsageError(f"{path}: {key} holds values beyond the model's "
                         f"{variable.dtype}: {ELSEWHERE}")
    return cast


def open_reader(path: str):
    """TensorFlow's reader of the checkpoint `path` (its index read), a
    damaged index raised as DataLossError naming it."""
    with damage_named("its index"):
        return tf.train.load_checkpoint(path)


def read_into(path: str, model, optimizer, reader=None) -> None:
    """Assigns the checkpoint `path`'s values to `model`'s trainable
    variables and `optimizer`'s variables (built for them); `reader`: its
    `open_reader`, where the caller has opened it already.

    Raises:
        UsageError: the file holds other variables than a training run of
            this model saves, or another number, shape or kind of dtype
            of them.
        tf.errors.OpError, IndexError: a damaged file (as for
            `tf.train.Checkpoint.read`).
    """
    reader = reader or open_reader(path)
    graph = _graph(reader)
    optimizer_id = _child(graph, 0, "optimizer", path)
    lists: Dict[str, List[str]] = {
        name: _listed(graph, _child(graph, optimizer_id, name, path), path)
        for name in ("_trainable_variables", "_variables")}
    owned = {"_trainable_variables": list(model.trainable_variables),
             "_variables": list(optimizer.variables)}
    for name, keys in lists.items():
        if len(keys) != len(owned[name]):
            raise UsageError(
                f"{path}: optimizer/{name} lists {len(keys)} variables, the "
                f"model built from its config.json {len(owned[name])}: "
                f"{ELSEWHERE}")
    roots = [c.node_id for c in graph.nodes[0].children
             if c.local_name in OWNERS]
    other = sorted(_reachable_keys(graph, roots).difference(*lists.values()))
    if other:
        raise UsageError(
            f"{path}: holds {len(other)} variable(s) no training run of "
            f"this model saves (e.g. {other[0]}): {ELSEWHERE}")
    pairs = [pair for name, keys in lists.items()
             for pair in zip(owned[name], keys)]
    _check_declared(reader, pairs, path)
    for variable, key in pairs:
        variable.assign(_value(reader, key, variable, path))
