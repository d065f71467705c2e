"""Official ViT checkpoints (.npz) in and out of keras_vit models.

The official files (`gs://vit_models/imagenet21k/ViT-B_16.npz`, ...) are
zip archives of arrays keyed by "/"-joined Flax parameter paths: `load_npz`
maps them onto a model, `save_npz` writes one back in the same layout
(each variable's name: `keras_vit.checkpoint.formats.npz_mapping`):

- query/key/value kernels (D, heads, head_dim) are joined into the model's
  fused (D, 3D) `qkv` kernel as [q | k | v]; the output kernel
  (heads, head_dim, D) becomes (D, D);
- LayerNorm `scale`/`bias` are Keras's `gamma`/`beta`;
- the position embedding is resized (bilinear, the official "align corners"
  convention) when the model's patch grid differs from the file's;
- the head is kept when the class count matches, otherwise dropped and
  zero-initialised, as the paper does for transfer.

Training checkpoints (`opt/target/`) and big_vision files (`params/`,
`MultiHeadDotProductAttention_0`, stacked scan blocks, no class-token slot
in the position table) are converted to the official layout first. NumPy
alone, except for gs:// paths (`tf.io.gfile`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import keras
import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.lazy import shape_of
from keras_vit.checkpoint.formats.npz import (
    POSEMB,
    Arrays,
    Grid,
    LoadReport,
    Shape,
    read_npz,
    write_npz,
)
from keras_vit.checkpoint.formats.npz_layout import (
    architecture_hint,
    normalize_layout,
)
from keras_vit.checkpoint.formats.npz_mapping import (
    Param,
    check_recordable,
    model_arrays,
    model_grid,
    model_params,
)
from keras_vit.checkpoint.posemb import (
    as_grid,
    check_grid_holds,
    check_grid_said,
    resize_position_embedding,
    square_grid,
)
from keras_vit.errors import UsageError

__all__ = ["load_arrays", "load_npz", "model_arrays", "model_grid",
           "save_npz"]

HEAD_KEYS = ("head/kernel", "head/bias")
PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")


# ---------------------------------------------------------------- loading


def load_npz(
    model: keras.Model,
    path: Union[str, os.PathLike],
    *,
    strict: bool = True,
    keep_pre_logits: bool = False,
    posemb_grid: Optional[Grid] = None,
) -> LoadReport:
    """Loads an official ViT .npz checkpoint into a keras_vit model.

    Args:
        model: keras.Model. Built by `keras_vit.create_model`.
        path: str or path. Local path or gs:// URL of the .npz file.
        strict: bool. Raise if any parameter is missing, unexpected or
            mis-shaped (all are listed). Non-strict loads what fits and
            reports the rest in the returned `LoadReport`.
        keep_pre_logits: bool. When the head is dropped (other class
            count), still load the file's pre-logits layer into the model's
            (the model needs `representation_size`).
        posemb_grid: (rows, cols) or None. The file's patch grid, needed
            only when it is not square.

    Returns:
        A `LoadReport`. The model is changed only if nothing is wrong (in
        strict mode).

    Raises:
        ValueError: unreadable file, or (strict) any mismatch.
    """
    arrays = read_npz(path)
    arrays, layout, ignored = normalize_layout(arrays, str(path))
    return load_arrays(
        model,
        arrays,
        strict=strict,
        keep_pre_logits=keep_pre_logits,
        posemb_grid=posemb_grid,
        source=str(path),
        layout=layout,
        ignored=ignored,
    )


def load_arrays(
    model: keras.Model,
    arrays: Arrays,
    *,
    strict: bool = True,
    keep_pre_logits: bool = False,
    posemb_grid: Optional[Grid] = None,
    source: str = "<arrays>",
    layout: str = "official",
    ignored: Sequence[Tuple[str, Shape, str]] = (),
) -> LoadReport:
    """Like `load_npz`, from a dict of arrays in the official layout."""
    report = LoadReport(path=source, layout=layout, dropped=list(ignored))
    params = model_params(model)
    shapes = {k: shape_of(arrays, k) for k in arrays}
    # An array is inflated when first used (`read_npz` reads lazily): one
    # the model has no place for never is.
    arrays = _OnDemand(arrays)
    expected = _expected(params)
    model_shapes = {k: s for k, (_, s) in expected.items()}
    original_shapes = dict(shapes)
    loading = _Loading(report, arrays, shapes, expected)
    _fit_head(loading, keep_pre_logits)
    _fit_position_embedding(loading, model_grid(model),
                            as_grid(posemb_grid))
    _compare(loading, original_shapes)
    if not report.ok or (report.hints and strict):
        hint = architecture_hint(original_shapes, model_shapes)
        if hint:
            report.hints.insert(0, hint)
        if strict:
            raise UsageError(
                f"Checkpoint {source} does not fit the model {model.name!r}"
                f":\n{report.problems()}\n" + "\n".join(report.hints) +
                "\nPass `strict`=False to load what fits and get a report.")
    _assign(model, params, arrays, report)
    return report


class _OnDemand(collections.UserDict):
    """A changeable copy of a mapping of arrays whose values are looked up
    in the original when first read (then kept)."""

    _PENDING = object()

    def __init__(self, source: Mapping[str, np.ndarray]):
        super().__init__()
        self._source = source
        self.data = dict.fromkeys(source, self._PENDING)

    def __getitem__(self, key: str) -> np.ndarray:
        value = self.data[key]
        if value is self._PENDING:
            value = self.data[key] = self._source[key]
        return value


@dataclasses.dataclass
class _Loading:
    """A load in progress: its report, the file's arrays and their shapes
    (both changed as the head is dropped and the position embedding
    resized), and key -> (param, shape) of what the model expects."""

    report: LoadReport
    arrays: Dict[str, np.ndarray]
    shapes: Dict[str, Shape]
    expected: Dict[str, Tuple[Param, Shape]]

    def drop(self, keys: Sequence[str], reason: str) -> None:
        """Drops the file's arrays of `keys` for `reason`, in the report."""
        for key in keys:
            if key in self.arrays:
                self.report.dropped.append(
                    (key, self.shapes.pop(key), reason))
                del self.arrays[key]


def _expected(params: Sequence[Param]) -> Dict[str, Tuple[Param, Shape]]:
    """key -> (param, shape in the file) of every array the model takes."""
    expected: Dict[str, Tuple[Param, Shape]] = {}
    for param in params:
        for key, shape in param.file_shapes().items():
            expected[key] = (param, shape)
    return expected


def _malformed_head(shapes: Dict[str, Shape]) -> Optional[str]:
    """Why the file's head arrays do not fit each other or the features
    they read (None where they do, or where the file has no head)."""
    kernel, bias = shapes.get(HEAD_KEYS[0]), shapes.get(HEAD_KEYS[1])
    if kernel is None and bias is None:
        return None
    if kernel is None or bias is None:
        present, absent = ((HEAD_KEYS[0], HEAD_KEYS[1]) if bias is None
                           else (HEAD_KEYS[1], HEAD_KEYS[0]))
        return f"it has {present} but no {absent}"
    if len(kernel) != 2 or len(bias) != 1 or kernel[1] != bias[0]:
        return (f"its {HEAD_KEYS[0]} {kernel} and {HEAD_KEYS[1]} {bias} "
                "disagree on the class count")
    pre = shapes.get(PRE_LOGITS_KEYS[0])  # the encoder's width: its cls
    width = next((shape[-1] for shape in (pre, shapes.get("cls"), shapes.get(
        "Transformer/encoder_norm/scale")) if shape), None)
    if width is not None and kernel[0] != width:
        return (f"its {HEAD_KEYS[0]} {kernel} takes {kernel[0]} features "
                f"but the {'pre-logits layer' if pre else 'encoder'} gives "
                f"{width}")
    return None


def _fit_head(loading: _Loading, keep_pre_logits: bool) -> None:
    """Keeps the file's head only if it fits the model's exactly; else
    drops it (and, unless kept, its pre-logits) and says why. A head that
    does not fit its own file is named (`_malformed_head`): strict loads
    refuse it."""
    expected, report = loading.expected, loading.report
    malformed = _malformed_head(loading.shapes)
    if malformed:
        report.hints.append(
            f"The file's classification head is malformed: {malformed}. "
            "The file is damaged or was edited; download it again.")
    model_head = {k: expected[k][1] for k in HEAD_KEYS if k in expected}
    model_pre = PRE_LOGITS_KEYS[0] in expected
    file_pre = PRE_LOGITS_KEYS[0] in loading.arrays
    if model_pre and not file_pre:
        report.hints.append(
            "The model has a pre_logits layer but the checkpoint has none: "
            "leave out `representation_size`.")
    file_head = loading.shapes.get(HEAD_KEYS[0])
    if file_pre and not model_pre and model_head and file_head and (
            file_head[-1] == model_head[HEAD_KEYS[0]][-1]):
        report.hints.append(  # its own class count: its head, on them
            "The checkpoint's head reads its pre-logits layer, which the "
            "model lacks: build it with `representation_size`="
            f"{loading.shapes[PRE_LOGITS_KEYS[0]][-1]}.")
    if all(loading.shapes.get(k) == model_head.get(k) for k in HEAD_KEYS
           ) and (model_head or model_pre == file_pre):
        return  # the same head, or none in either (features models alike)
    kernel = model_head.get(HEAD_KEYS[0], ())
    other = "class count" if (file_head or ())[-1:] != kernel[-1:] else (
        "width of the features it reads")
    reason = (f"the model's head is {kernel} (another {other}); it starts "
              "at zero, as for transfer in the paper" if model_head
              else "the model has no head (num_classes=0)")
    loading.drop(HEAD_KEYS, reason)
    for key in HEAD_KEYS:
        expected.pop(key, None)
    report.head_initialized = bool(model_head)
    if file_pre and not (keep_pre_logits and model_pre):
        loading.drop(PRE_LOGITS_KEYS, (
            "dropped with the head, as for transfer in the paper"
            if not keep_pre_logits
            else "the model has no pre_logits layer"
        ))
    if model_pre and file_pre and not keep_pre_logits:
        report.hints.append(
            "The model has a pre_logits layer but the checkpoint's "
            "pre-logits are not loaded: pass `keep_pre_logits`=True, or "
            "leave out `representation_size`."
        )


def _fit_position_embedding(loading: _Loading, new_grid: Grid,
                            posemb_grid: Optional[Grid]) -> None:
    """Resizes the file's position embedding to the model's grid
    `new_grid` if the file's (`posemb_grid`, or its own shape) differs."""
    arrays, shapes, report = loading.arrays, loading.shapes, loading.report
    if POSEMB not in arrays or POSEMB not in loading.expected:
        return
    found, want = shapes[POSEMB], loading.expected[POSEMB][1]
    regrid = posemb_grid is not None and tuple(posemb_grid) != new_grid
    same_width = len(found) == 3 and found[0] == 1 and found[2] == want[2]
    prefix = int("cls" in loading.expected)
    if same_width and prefix == int("cls" in arrays):
        check_grid_holds(found[1] - prefix, posemb_grid, report.path)
    if same_width and found == want:
        check_grid_said(found[1] - prefix, new_grid, posemb_grid,
                        report.path)
    if not ((found != want or regrid) and same_width):
        return
    if prefix != int("cls" in arrays):
        report.hints.append(
            f"The file's pooling is {'gap' if prefix else 'token'}, the "
            f"model's `pooling`={'token' if prefix else 'gap'}: build the "
            "model with the file's pooling.")
        return
    try:
        arrays[POSEMB] = resize_position_embedding(
            arrays[POSEMB], new_grid, posemb_grid, prefix
        )
    except ValueError as error:
        report.hints.append(str(error))
    else:
        shapes[POSEMB] = arrays[POSEMB].shape
        old = posemb_grid or square_grid(found[1] - prefix)
        report.posemb_resized = (tuple(old), new_grid)


def _compare(loading: _Loading, original_shapes: Dict[str, Shape]) -> None:
    """Reports what the model expects and the file lacks or shapes
    otherwise, and what the file has and the model does not take."""
    report, shapes = loading.report, loading.shapes
    for key, (param, shape) in loading.expected.items():
        if key not in shapes:
            report.missing.append((key, shape))
        elif not param.accepts(shape, shapes[key]):
            report.mismatched.append((key, shape, original_shapes[key]))
    report.unexpected = [
        (k, s) for k, s in shapes.items() if k not in loading.expected
    ]


def check_finite(value, name: str, source: str) -> None:
    """Refuses a float array that holds NaN or an infinity (a checkpoint
    saved from a run that diverged, or damaged): every answer of the model
    would be NaN."""
    value = np.asarray(value)
    if value.dtype.kind not in "fc":
        return
    count = int(value.size - np.count_nonzero(np.isfinite(value)))
    if count:
        raise UsageError(
            f"{source}: {name} holds {count:,} NaN or infinite value(s) of "
            f"{value.size:,}: the checkpoint was saved from a run that "
            "diverged, or is damaged. Use another checkpoint (of a training "
            "run, its workdir: the newest checkpoint with finite weights "
            "is loaded).")


def _assign(model: keras.Model, params: Sequence[Param], arrays: Arrays,
            report: LoadReport) -> None:
    """Assigns every param whose arrays fit, and zeroes a dropped head;
    every array is checked to be finite before any is assigned (a NaN in
    the head leaves the model as it was)."""
    bad = {k for k, *_ in report.missing + report.mismatched}
    todo = [param for param in params
            if not any(k in bad or k not in arrays for k in param.keys)]
    for param in todo:  # `arrays` keeps what it inflated
        for key in param.keys:  # (a file's, cast to ints: refused)
            untrusted.check_float_parameter(np.asarray(arrays[key]).dtype,
                                            report.path, key)
            check_finite(arrays[key], key, report.path)
    for param in todo:
        value = param.from_file([arrays[k] for k in param.keys])
        dtype = keras.backend.standardize_dtype(param.variable.dtype)
        param.variable.assign(np.asarray(value).astype(dtype))
        report.loaded.extend(param.keys)
    if report.head_initialized:  # a zero kernel (the paper's transfer),
        head = model.get_layer("head")  # the bias its head_bias_init
        head.kernel.assign(np.zeros(head.kernel.shape, "float32"))
        head.bias.assign(head.bias_initializer(head.bias.shape, "float32"))


# ----------------------------------------------------------------- saving


def save_npz(model: keras.Model, path: Union[str, os.PathLike]) -> None:
    """Writes the model in the official .npz layout, atomically.

    The file loads into the official code and back into keras_vit: unfused
    (D, heads, head_dim) query/key/value, LayerNorm `scale`/`bias`, the
    hybrid stem's keys, every array float32 (a bfloat16 model's too).
    Written to a temporary name and renamed, so a crash or a refusal
    never leaves a partial file at `path`.

    Raises:
        UsageError: `path` does not end in .npz (numpy would write another
            name), or the model computes in a way the layout cannot record
            (non-official `numerics`, a pre-logits activation other than
            tanh, a quantized layer, a parameter that is not float): the
            file would load as another model. Save a .keras file
            (`model.save`) for such a model.
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):  # numpy's test, case and all
        stem = path[:-4] if path.lower().endswith(".npz") else path
        raise UsageError(f"save_npz writes an .npz file: name it "
                         f"{stem}.npz.")
    check_recordable(model, path)
    write_npz(path, model_arrays(model))
