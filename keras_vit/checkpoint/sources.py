"""The kinds of local model source, behind one interface.

`keras_vit.checkpoint.resolve.resolve` turns what a user gives (a name, a
URI, a path) into one of these; everything else asks the source itself:
`architecture()` (its `keras_vit.Architecture`: what `build()` builds by
default, at its own resolution), `content()` (the parameters in the
official `.npz` layout, with the position table's patch grid), `build(...)`
(the model and its `LoadReport`: None where nothing was mapped, a workdir
or `.keras` file taken whole), `class_names()`, `run_config()` (a
workdir's) and `scores()` (how its logits are read: "softmax", "sigmoid",
or None where it does not say).

The kinds: `WorkdirSource` (a training run's latest checkpoint),
`KerasSource` (a `.keras` file), `NpzSource` (an official or AugReg
`.npz`; `keras_vit.checkpoint.npz_source`), `HubSource` (a Hugging Face /
timm folder), and the exports `SavedModelSource` and `LiteRTSource` (they
serve predictions; nothing else loads them).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import keras
from absl import logging

from keras_vit import build, legacy, mpp
from keras_vit.architecture import Architecture
from keras_vit.checkpoint import weights
from keras_vit.checkpoint.formats import keras_file
from keras_vit.checkpoint.formats.npz_layout import own_pre_logits
from keras_vit.checkpoint.hub import keras_preset
from keras_vit.checkpoint.hub import model as hub_model
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.resolution import (
    rebuild_at_resolution,
    rebuild_with_head,
)
from keras_vit.errors import UsageError
from keras_vit.model import (
    VisionTransformer,
    _image_hw,
    architecture_of,
    as_vision_transformer,
)
from keras_vit.objectives import loss_scores
from keras_vit.storage import workdir as wd
from keras_vit.storage.version_names import version_folders, version_number

# `build(representation_size=...)`'s default: the source's pre-logits
# layer (None already means "no pre-logits layer").
FROM_SOURCE = "source"


class Content(NamedTuple):
    """A source's parameters in the official layout: `arrays` (str to
    np.ndarray); `grid`, the position table's patch grid (None: a square
    one, read from the table); `layout`, the naming they were read from;
    `ignored`, the file's arrays left out; `pre_logits_activation`, the
    pre-logits layer's activation where there is one and it is known."""

    arrays: Dict[str, Any]
    grid: Optional[Tuple[int, int]]
    layout: str
    ignored: Tuple[str, ...]
    pre_logits_activation: Optional[str]


def require_vit(model: keras.Model, path: str) -> keras.Model:
    """`model` (loaded from `path`) when it is a `VisionTransformer`, else
    one UsageError naming the file and the layer no ViT has (a `.keras`
    file may hold any Keras model, which `load_model` gives back as Keras
    saved it; what reads a ViT's parts or logits refuses it)."""
    try:  # (itself when it is one)
        return as_vision_transformer(model)
    except UsageError as error:
        raise UsageError(f"{path}: {error}") from None


def check_pre_logits(path: str, activation: Optional[str]) -> None:
    """Refuses a pre-logits layer this project's models would run with
    another activation: they build it with tanh (the official ViT's)."""
    if activation not in ("tanh", None):
        raise UsageError(
            f"{path}: its pre-logits layer uses {activation!r}, and a model "
            "built from a config computes tanh there. Fine-tune without the "
            "pre-logits layer (config.init.keep_pre_logits=False, the "
            "paper's transfer), or load the model itself with "
            "keras_vit.load_model."
        )


@dataclasses.dataclass(frozen=True)
class Source:
    """A local model source (see the module doc); `path` is where it is."""

    path: str
    kind = "source"
    # An export: it serves predictions and loads into nothing else.
    export = False

    def describe(self) -> str:
        """str. A short label for reports, e.g. "ViT-B_16.npz"."""
        return os.path.basename(os.path.normpath(self.path))

    def architecture(self) -> Architecture:
        """The `Architecture` of the model `build()` gives (its own
        resolution, head, pooling and numerics)."""
        raise NotImplementedError

    def content(self) -> Content:
        raise NotImplementedError

    def build(self, image_size=None, *, num_classes=None, pooling=None,
              representation_size=FROM_SOURCE, strict=True):
        """(keras.Model, LoadReport or None). The source's model as
        trained (float32), at `image_size` (None: its own); the other
        arguments choose its head and how it is built
        (`keras_vit.load_model`)."""
        raise NotImplementedError

    def class_names(self) -> Optional[List[str]]:
        return None

    def run_config(self):
        """The training run's config (a workdir), else None."""
        return None

    def scores(self) -> Optional[str]:
        """"sigmoid" or "softmax": how the source's logits were trained
        to be read (a workdir's loss; a transformers multi-label head),
        or None where the source does not say."""
        return None

    def library_resize(self):
        """(resize, image size, keep_aspect, crop_pct) of the evaluation
        resize the library that wrote the source applies (resize to it, or
        its shorter side with keep_aspect, then the central crop), or
        None: a timm model's crop_pct (the resize at another size is
        floor(side / crop_pct); None for a transformers processor)."""
        return None


class _SavedKerasModel(Source):
    """A source that holds its model (a workdir, a .keras file)."""

    def _model(self) -> keras.Model:
        raise NotImplementedError

    def build(self, image_size=None, *, num_classes=None, pooling=None,
              representation_size=FROM_SOURCE, strict=True):
        new_head = num_classes is not None or representation_size != FROM_SOURCE
        if pooling is not None or not (strict or new_head):
            raise UsageError(
                f"{self.path}: a saved model keeps the pooling it was "
                "trained with; `pooling` goes with an .npz." if pooling
                else f"{self.path} holds its own model whole, whose arrays "
                "fit it: `strict` chooses how an .npz, a hub model or a new "
                "head (`num_classes`, `representation_size`) is loaded. "
                "Leave it out.")
        model, report = self._model(), None
        if mpp.is_mpp_model(model):  # (its mask token and head are
            model = mpp.encoder_model(model)  # pre-training's alone)
        if new_head:
            model = require_vit(model, self.path)  # (rebuilt once if old)
            if representation_size == FROM_SOURCE:
                representation_size = own_pre_logits(
                    dataclasses.asdict(model.architecture), num_classes)
            model, report = rebuild_with_head(
                model, num_classes, representation_size, self.path, strict)
        if image_size is not None and (
            tuple(model.input_shape[1:3]) != _image_hw(image_size)
        ):
            saved = tuple(model.input_shape[1:3])
            model = rebuild_at_resolution(model, image_size)
            _say_built_at(self.path, saved, model)
        return model, report

    def _vit(self) -> keras.Model:
        """The model, refused by name when it is no ViT."""
        return require_vit(self.build()[0], self.path)

    def architecture(self) -> Architecture:
        return architecture_of(self._vit())

    def content(self) -> Content:
        model = self._vit()
        arch = architecture_of(model)
        activation = arch.representation_size and arch.pre_logits_activation
        return Content(weights.model_arrays(model), weights.model_grid(model),
                       "official", (), activation)


def _say_built_at(path: str, saved, model: keras.Model) -> None:
    """Logs that the model of `path`, saved for `saved` (height, width)
    images, is built for another input size (a flag's value left from
    another model would otherwise change the answers without a word)."""
    built = "x".join(str(side) for side in model.input_shape[1:3])
    if None in saved:
        logging.info("%s takes images of any size; built for %s only.",
                     path, built)
    else:
        table = ("its sin-cos position embeddings computed for the new "
                 "patch grid" if model.architecture.posemb == "sincos2d"
                 else "its position embeddings resized to the new patch "
                 "grid (bilinear)")
        logging.info("%s was saved for %s images; built for %s, %s.", path,
                     "x".join(map(str, saved)), built, table)


@dataclasses.dataclass(frozen=True)
class WorkdirSource(_SavedKerasModel):
    """A training run's workdir: its latest checkpoint, the EMA (Polyak)
    weights when the run kept them and `use_ema`, else the raw ones."""

    use_ema: bool = True
    kind = "workdir"

    def _model(self) -> keras.Model:
        return wd.restore_model(self.path, use_ema=self.use_ema)

    def run_config(self):
        return wd.read_config(self.path)

    def scores(self) -> Optional[str]:
        return loss_scores(self.run_config().objective.loss)

    def class_names(self) -> Optional[List[str]]:
        return wd.read_class_names(self.path)

    def architecture(self) -> Architecture:
        """From the run's config, without building the model: its `model`
        section (an MPP run's model is its encoder, see `build`: no
        head)."""
        config = self.run_config()
        return build.config_architecture(
            config.model, 0 if config.objective.mpp.enabled
            else wd.num_classes(config.model, self.path))


@dataclasses.dataclass(frozen=True)
class KerasSource(_SavedKerasModel):
    """A `.keras` file."""

    kind = "keras"

    def _model(self) -> keras.Model:
        """The file's model: a VisionTransformer (or an MPP model) as
        itself, a ViT saved before the class rebuilt as one (exactly such
        a model: `legacy.foreign_layer`), any other Keras model as Keras
        saved it (`require_vit` refuses it where a ViT is needed)."""
        model = keras_file.read_keras_model(self.path)
        if isinstance(model, VisionTransformer) or mpp.is_mpp_model(model):
            return model
        if not legacy.foreign_layer(model):  # one saved before the class
            return as_vision_transformer(model)
        return model


@dataclasses.dataclass(frozen=True)
class HubSource(Source):
    """A folder (or its weights file) in the Hugging Face layout: Hugging
    Face ViT or timm weights beside config.json
    (`keras_vit.checkpoint.hub.reader`); or a keras-hub ViT preset folder
    (`keras_vit.checkpoint.hub.keras_preset`)."""

    kind = "hub"

    @functools.cached_property
    def _checkpoint(self) -> hub.HubCheckpoint:
        """Read once per source (one command asks several times)."""
        if keras_preset.is_preset(self.path):
            return keras_preset.read_preset(self.path)
        return hub.read_hub(self.path)

    def architecture(self) -> Architecture:
        return hub_model.hub_architecture(self._checkpoint)

    def content(self) -> Content:
        checkpoint = self._checkpoint
        grid = tuple(checkpoint.posemb_grid)  # the stored table's grid
        return Content(checkpoint.arrays, grid, checkpoint.naming, (),
                       checkpoint.pre_logits_activation)

    def arrays_at(self, grid) -> Dict[str, Any]:
        """The arrays with the position table at patch grid `grid`,
        resized the way the library that wrote them resizes it."""
        patch = int(self._checkpoint.arrays["embedding/kernel"].shape[0])
        return hub_model.library_table(self._checkpoint,
                                       [int(g) * patch for g in grid])

    def build(self, image_size=None, *, num_classes=None, pooling=None,
              representation_size=FROM_SOURCE, strict=True):
        if pooling is not None:
            raise UsageError(
                f"{self.path}: a hub model is built with its own pooling; "
                "`pooling` goes with an .npz."
            )
        return hub_model.model_from_hub(
            self._checkpoint, image_size, num_classes, representation_size,
            FROM_SOURCE, strict,
        )

    def class_names(self) -> Optional[List[str]]:
        return self._checkpoint.class_names

    def scores(self) -> Optional[str]:
        if keras_preset.is_preset(self.path):
            return None
        return hub.read_scores(self.path)

    def library_resize(self):
        checkpoint = self._checkpoint
        if checkpoint.eval_resize is None and not checkpoint.eval_keep_aspect:
            return None
        return (checkpoint.eval_resize, tuple(checkpoint.image_size),
                checkpoint.eval_keep_aspect, checkpoint.eval_crop_pct)


class _Export(Source):
    """An exported model: it answers requests (keras-vit-predict), and is
    no model to build, fine-tune or export again."""

    what = "an export"
    export = True

    def _refuse(self, *args, **kwargs):
        raise UsageError(
            f"{self.path} is {self.what}: it serves predictions "
            "(keras-vit-predict) but holds no Keras model to load, "
            "fine-tune, evaluate or export again. Use the model it was "
            "exported from (its training workdir, .keras or .npz file)."
        )

    architecture = content = build = _refuse


@dataclasses.dataclass(frozen=True)
class LiteRTSource(_Export):
    """A LiteRT `.tflite` file written by `keras-vit-export --format=litert`
    (its class names beside it, in `<name>.labels.txt`)."""

    kind = "litert"
    what = "a LiteRT file"

    def class_names(self) -> Optional[List[str]]:
        path = self.path[: -len(".tflite")] + ".labels.txt"
        return wd.read_lines(path) if os.path.exists(path) else None


@dataclasses.dataclass(frozen=True)
class SavedModelSource(_Export):
    """An exported SavedModel (a version folder with saved_model.pb, or a
    TF Serving model folder of numbered versions)."""

    kind = "saved_model"
    what = "an exported SavedModel"

    def version(self) -> str:
        """str. The version folder: `path` itself, else its newest
        version holding a SavedModel, warning of newer version folders
        without one (passed over, as TF Serving cannot load them)."""
        if _holds_graph(self.path):
            return self.path
        newest = saved_model_versions(self.path)[-1]
        passed = [name for v, name in version_folders(os.listdir(self.path))
                  if v > version_number(newest)]
        if passed:
            logging.warning(
                "Reading version folder %s of %s: the newer %s hold(s) no "
                "saved_model.pb (an export that did not finish, or a folder "
                "made by hand).", newest, self.path, ", ".join(passed))
        return os.path.join(self.path, newest)

    def class_names(self) -> Optional[List[str]]:
        path = os.path.join(self.version(), "assets", wd.LABELS)
        return wd.read_lines(path) if os.path.exists(path) else None


def _holds_graph(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "saved_model.pb"))


def saved_model_versions(folder: str) -> List[str]:
    """The version folders of a TF Serving model folder that hold a
    SavedModel, by name, in order of version (a name TF Serving cannot
    read as a number is none: it skips that folder)."""
    if not os.path.isdir(folder):
        return []
    return [name for _, name in version_folders(os.listdir(folder))
            if _holds_graph(os.path.join(folder, name))]


def is_saved_model(path: str) -> bool:
    """Whether `path` is an exported SavedModel (see SavedModelSource)."""
    return os.path.isdir(path) and (
        _holds_graph(path) or bool(saved_model_versions(path)))
