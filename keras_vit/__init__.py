"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in Keras 3.

The package is layered; each layer imports only the ones below it
(setup.cfg's import contracts, checked by tests/test_architecture.py):

    keras_vit/*.py         the model core: portable Keras 3 (`keras.ops`
                           only; runs on the TensorFlow and JAX backends),
                           `Architecture` (what a model is), the config
                           schema (a tree of sections, one per component:
                           config_schema.py) and masked patch prediction
    keras_vit/storage/     atomic file writes and the run directory
                           (workdir), local or gs://
    keras_vit/checkpoint/  pre-trained weights: file formats (formats/),
                           Hugging Face / timm folders and keras-hub
                           presets (hub/), the released
                           checkpoints (zoo/), and `load_model(source)`:
                           any source to a model (a path, hf://ORG/NAME, a
                           released model's name: `list_models()`), each
                           source describing itself as an `Architecture`
    keras_vit/data/        tf.data input: TFDS, image folders, the digits,
                           preprocessing, VTAB task definitions, data checks
    keras_vit/scoring/     the losses and the evaluation step that training
                           and evaluation share
    keras_vit/training/    the trainer, strategies, resume, the training
                           state's checkpoints
    keras_vit/evaluation/  accuracy, few-shot, VTAB-1k runs and reports
    keras_vit/export/      SavedModel for TF Serving, LiteRT
    keras_vit/analysis/    attention maps and the paper's Section 4.5 figures
    keras_vit/commands/    the command lines

`import keras_vit` loads the model core only (and in a command's process
not even that: a command loads Keras when its work needs a model, so that
its --help and its refusals of bad input come at once). The checkpoint
and export functions named at the end of `__all__` load on first use
(`_LAZY`): they use TensorFlow, except `list_models` (a table) and
`load_npz` and `save_npz` of local files (NumPy).
"""

from typing import TYPE_CHECKING

# First, before Keras loads TensorFlow: a keras-vit-* console script holds
# back TensorFlow's start-up notices (keras_vit.quiet_start).
from keras_vit import errors, lean_imports, quiet_start

# A command's process leaves out what Keras and TensorFlow import only for
# features no command uses (keras_vit.lean_imports).
if quiet_start.is_command():
    lean_imports.install()

# A command (a keras-vit-* console script, `python -m
# keras_vit.commands.NAME`, train.py, evaluate.py) loads the model core,
# hence Keras and TensorFlow, on first use (`_CORE`, as `_LAZY`): its
# flags, its --help and the refusals of what the user gave come at once.
# In a Python session or a user's program, TensorFlow's start-up notices
# are held back while the model core loads it (quiet_start.library_import).
if not quiet_start.is_command():
    with quiet_start.library_import():
        from keras_vit.architecture import Architecture
        from keras_vit.attention import MultiHeadSelfAttention
        from keras_vit.derived import (
            attention_model,
            features_model,
            input_image_size,
            intermediate_model,
            model_stride,
            with_dynamic_image_size,
        )
        from keras_vit.droppath import DropPath
        from keras_vit.embedding import (
            ClassToken,
            PatchEmbedding,
            PositionEmbedding,
            SinCosPositionEmbedding,
        )
        from keras_vit.layers import Encoder, EncoderBlock, TokenPooling
        from keras_vit.model import (
            VARIANTS,
            Numerics,
            VisionTransformer,
            create_model,
            decode_variant,
        )
        from keras_vit.resnet import ResNetStem

    # A repository script (scripts/, benchmarks/) prints from here on.
    quiet_start.script_ready()

from keras_vit.version import __version__  # noqa: E402

if TYPE_CHECKING:
    # What `_LAZY` loads on first use, for type checkers and for the import
    # contracts (setup.cfg lists these imports as loaded lazily).
    from keras_vit.checkpoint.formats.npz import LoadReport
    from keras_vit.checkpoint.loader import load_model
    from keras_vit.checkpoint.posemb import resize_position_embedding
    from keras_vit.checkpoint.resolution import rebuild_at_resolution
    from keras_vit.checkpoint.sources import Source
    from keras_vit.checkpoint.weights import load_npz, save_npz
    from keras_vit.checkpoint.zoo.catalog import list_models
    from keras_vit.export.saved_model import export_model

# Name -> defining module, imported on first access (module __getattr__).
_LAZY = {
    "load_npz": "keras_vit.checkpoint.weights",
    "save_npz": "keras_vit.checkpoint.weights",
    "LoadReport": "keras_vit.checkpoint.formats.npz",
    "rebuild_at_resolution": "keras_vit.checkpoint.resolution",
    "resize_position_embedding": "keras_vit.checkpoint.posemb",
    "Source": "keras_vit.checkpoint.sources",
    "load_model": "keras_vit.checkpoint.loader",
    "list_models": "keras_vit.checkpoint.zoo.catalog",
    "export_model": "keras_vit.export.saved_model",
}

__all__ = [
    "Architecture",
    "ClassToken",
    "DropPath",
    "Encoder",
    "EncoderBlock",
    "MultiHeadSelfAttention",
    "Numerics",
    "PatchEmbedding",
    "PositionEmbedding",
    "ResNetStem",
    "SinCosPositionEmbedding",
    "TokenPooling",
    "VARIANTS",
    "VisionTransformer",
    "attention_model",
    "create_model",
    "decode_variant",
    "features_model",
    "input_image_size",
    "intermediate_model",
    "model_stride",
    "with_dynamic_image_size",
    *_LAZY,
]


# The model core's names, imported above except in a command's process.
_CORE = {
    **dict.fromkeys(["Architecture"], "keras_vit.architecture"),
    **dict.fromkeys(["MultiHeadSelfAttention"], "keras_vit.attention"),
    **dict.fromkeys([
        "attention_model", "features_model", "input_image_size",
        "intermediate_model", "model_stride", "with_dynamic_image_size",
    ], "keras_vit.derived"),
    **dict.fromkeys(["DropPath"], "keras_vit.droppath"),
    **dict.fromkeys([
        "ClassToken", "PatchEmbedding", "PositionEmbedding",
        "SinCosPositionEmbedding",
    ], "keras_vit.embedding"),
    **dict.fromkeys(["Encoder", "EncoderBlock", "TokenPooling"],
                    "keras_vit.layers"),
    **dict.fromkeys([
        "VARIANTS", "Numerics", "VisionTransformer", "create_model",
        "decode_variant",
    ], "keras_vit.model"),
    **dict.fromkeys(["ResNetStem"], "keras_vit.resnet"),
}


# The subpackages a user reaches as attributes (`keras_vit.analysis.
# attention_rollout` after `import keras_vit`), imported on first access.
_SUBPACKAGES = ("analysis", "checkpoint", "data", "evaluation", "export",
                "scoring", "storage", "training")


def __getattr__(name):
    module = _LAZY.get(name) or _CORE.get(name)
    if module is not None:
        with quiet_start.library_import():
            return getattr(errors.import_module(module), name)
    if name in _SUBPACKAGES:
        with quiet_start.library_import():
            return errors.import_module(f"keras_vit.{name}")
    raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
