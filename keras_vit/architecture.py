"""What a Vision Transformer is: `Architecture`, the one record of a
model's architecture fields (the named variants' sizes are
`keras_vit.variants`, re-exported here).

`VisionTransformer` (keras_vit.model) is built from an `Architecture` and
returns it from `get_config`; a run config's `model` section holds the same
fields (`CONFIG_FIELDS`); the checkpoint readers describe a file with them.
The model's geometry (stride, patch grid, token count) is computed here,
from the record, and nowhere else.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Dict, Mapping, Optional, Tuple

import keras

from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit.errors import NEWER_VERSION, UsageError
from keras_vit.grid import patch_grid, total_stride
from keras_vit.remat import check_remat
from keras_vit.values import (  # noqa: F401  (image_hw: re-exported)
    ImageSize,
    image_hw,
    is_bool,
    whole,
    yes_no,
)
from keras_vit.variants import (  # noqa: F401  (re-exported)
    HYBRID_RESNETS,
    HYBRIDS,
    POSEMBS,
    SHAPE_FIELDS,
    SIZE_FIELDS,
    VARIANTS,
    WIDTHS,
    VariantSpec,
    ViTSize,
    decode_variant,
    variant_of,
)


@dataclasses.dataclass(frozen=True)
class Numerics:
    """How each block computes where weights trained elsewhere differ from
    the official ones (PyTorch: Hugging Face, timm). The defaults are the
    official implementation's.

    Attributes:
        approximate_gelu: bool. The MLP's GELU in the tanh approximation;
            False: the exact erf form, as PyTorch models were trained with.
        layer_norm_epsilon: float. Every LayerNorm's epsilon: 1e-6
            officially, 1e-12 in Hugging Face's ViT.
    """

    approximate_gelu: bool = True
    layer_norm_epsilon: float = vit_layers.LAYER_NORM_EPSILON

    def __post_init__(self):
        try:
            gelu = yes_no(self.approximate_gelu)
            if isinstance(self.layer_norm_epsilon, str) or is_bool(
                    self.layer_norm_epsilon):
                raise ValueError(self.layer_norm_epsilon)
            epsilon = float(self.layer_norm_epsilon)
        except (TypeError, ValueError):
            epsilon = -1.0
        if not 0 < epsilon < math.inf:
            raise UsageError(
                "Numerics(approximate_gelu=True or False, "
                "layer_norm_epsilon > 0), got "
                f"approximate_gelu={self.approximate_gelu!r}, "
                f"layer_norm_epsilon={self.layer_norm_epsilon!r}.")
        object.__setattr__(self, "approximate_gelu", gelu)
        object.__setattr__(self, "layer_norm_epsilon", epsilon)


@dataclasses.dataclass(frozen=True)
class Architecture:
    """Everything that defines a `VisionTransformer`, checked and with the
    variant's sizes filled in. Build one with `Architecture.create` (the
    arguments of `keras_vit.create_model`, which are these fields).

    Attributes:
        patch_size: int. Pixels per patch side (per token side for a
            hybrid's ResNet output, see `stride`).
        hidden_size: int. The token width.
        num_layers: int. Encoder blocks.
        num_heads: int. Attention heads.
        mlp_dim: int. The MLP's hidden width.
        image_size: (height, width). Input resolution; each side must be
            divisible by the patch size (times the ResNet stride for
            hybrids). With `dynamic_image_size`, the resolution whose patch
            grid the position embeddings are kept at.
        num_classes: int. Width of the classification head; 0: no head, a
            features model that outputs the (pre-logits) representation.
        variant: str or None. The `VARIANTS` name whose sizes these are
            (None: sizes of no named variant).
        resnet_layers: tuple of int or None. Bottleneck units per ResNet
            stage: makes a hybrid (overrides a hybrid variant's stages).
        resnet_width: int. ResNet width factor (hybrids only).
        pooling: str. "token" (class token, the paper's default) or "gap"
            (global average of patch tokens, no class token).
        posemb: str. "learn" (the paper's learned table, one row per
            token) or "sincos2d" (fixed 2-D sin-cos embeddings of the patch
            grid, big_vision's; no weights: computed at every input size,
            which `dynamic_image_size` admits).
        representation_size: int or None. Adds the pre-logits layer
            (Dense + tanh) of this width, as at pre-training time.
        pre_logits_activation: str. The pre-logits layer's activation
            ("tanh"; a Hugging Face model's pooler may use another).
        dropout_rate: float. Dropout after the position embedding and after
            every dense layer except the qkv projection.
        attention_dropout_rate: float. Dropout on attention weights.
        stochastic_depth_rate: float. Stochastic depth of the last encoder
            block while training, linear over depth (`keras_vit.droppath`).
        head_zero_init: bool. Zero-initialise the head (the paper's choice
            for transfer); otherwise Xavier-uniform.
        head_bias_init: float. Initial value of every head bias (-10 for
            the released ImageNet-21k models' sigmoid loss,
            google-research/vision_transformer #2).
        all_tokens: bool. With "token" pooling the last encoder block
            computes only the class token, the one token the head reads
            (6.3% fewer FLOPs for B/16, the same outputs). True computes
            every token there, for reading patch features from
            `model.parts.encoder.output`. Same weights.
        dynamic_image_size: bool. Accept images of any height and width
            divisible by the patch size (times the ResNet stride for
            hybrids): the input is (batch, None, None, 3), and every call
            interpolates the position embeddings, kept at the `image_size`
            grid, to the input's grid, as the checkpoint loader does. The
            same weights as with False.
        remat: str. Rematerialisation of the encoder blocks in training
            (`keras_vit.remat`): "none", "block" or "dots" (JAX only). The
            same gradients and weights, less activation memory for more
            compute (benchmarks/memory.py).
        numerics: Numerics. The GELU form and LayerNorm epsilon, for
            weights trained with other ones (PyTorch: exact GELU; Hugging
            Face: epsilon 1e-12). The default is the official numerics.
    """

    patch_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    image_size: Tuple[int, int] = (224, 224)
    num_classes: int = 0
    variant: Optional[str] = None
    resnet_layers: Optional[Tuple[int, ...]] = None
    resnet_width: int = 1
    pooling: str = "token"
    posemb: str = "learn"
    representation_size: Optional[int] = None
    pre_logits_activation: str = "tanh"
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    head_zero_init: bool = True
    head_bias_init: float = 0.0
    all_tokens: bool = False
    dynamic_image_size: bool = False
    remat: str = "none"
    numerics: Numerics = Numerics()

    def __post_init__(self):
        _check(self)

    @classmethod
    def create(cls, variant: Optional[str] = "B/16", **kwargs
               ) -> "Architecture":
        """The architecture of `create_model(variant, **kwargs)`: sizes
        left None come from `variant` (None: all sizes explicit)."""
        sizes = {k: kwargs.pop(k, None) for k in SIZE_FIELDS}
        defaults = decode_variant(variant).sizes() if variant else {}
        missing = [k for k, v in sizes.items() if v is None and not defaults]
        if missing:
            raise UsageError(
                "variant=None needs explicit sizes; missing: "
                f"{', '.join(missing)}."
            )
        sizes = {k: defaults[k] if v is None else v for k, v in sizes.items()}
        if kwargs.get("resnet_layers") is None and defaults:
            kwargs["resnet_layers"] = defaults["resnet_layers"]
        for key in [k for k, v in kwargs.items() if v is None]:
            if key not in ("resnet_layers", "representation_size"):
                del kwargs[key]  # None: the default
        arch = cls(**sizes, **kwargs)
        if variant and variant_of(dataclasses.asdict(arch)) == variant:
            arch = arch.replace(variant=variant)  # not when sizes differ
        return arch

    # ------------------------------------------------------------ geometry
    @property
    def stride(self) -> int:
        """int. Image pixels per token side (`total_stride`)."""
        return total_stride(self.patch_size, self.resnet_layers)

    @property
    def num_prefix_tokens(self) -> int:
        """int. Tokens before the patch tokens: 1 with a class token."""
        return int(self.pooling == "token")

    def grid(self, image_size: Optional[ImageSize] = None) -> Tuple[int, int]:
        """(rows, cols) of the patch grid at `image_size` (None: the
        architecture's), whose sides the stride must divide."""
        what = f"patch size {self.patch_size} (the stride {self.stride})"
        if self.resnet_layers is not None:
            what = f"the total stride {self.stride} (ResNet x patch size)"
        return patch_grid(
            self.image_size if image_size is None else image_size,
            self.stride, what)

    def num_tokens(self, image_size: Optional[ImageSize] = None) -> int:
        """int. The encoder's sequence length at `image_size`."""
        rows, cols = self.grid(image_size)
        return self.num_prefix_tokens + rows * cols

    # ------------------------------------------------------- serialisation
    def to_dict(self) -> Dict[str, Any]:
        """The fields as JSON-ready values (tuples as lists, `numerics` as a
        dict); `from_dict` reads it back."""
        out = dataclasses.asdict(self)
        out["image_size"] = list(self.image_size)
        if self.resnet_layers is not None:
            out["resnet_layers"] = list(self.resnet_layers)
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Architecture":
        """An Architecture from `to_dict`'s output; a field it does not know
        is an error that names it."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(
                f"Unknown architecture fields {unknown}; known: "
                f"{', '.join(sorted(known))} ({NEWER_VERSION})."
            )
        values = dict(values)
        if isinstance(values.get("numerics"), Mapping):
            values["numerics"] = Numerics(**values["numerics"])
        if not values.get("variant"):
            return cls(**values)
        return cls(**dict(values, variant=None))._named()  # (a stale label)

    def replace(self, **changes) -> "Architecture":
        """A copy with `changes`, checked again; a named variant's copy
        named by its new sizes (None for sizes of no variant) where
        `changes` names no variant."""
        if not self.variant or "variant" in changes:
            return dataclasses.replace(self, **changes)
        return dataclasses.replace(self, **changes, variant=None)._named()

    def _named(self) -> "Architecture":
        """A copy whose `variant` is the name of its sizes, as checked."""
        return dataclasses.replace(
            self, variant=variant_of(dataclasses.asdict(self)))


# Architecture fields a run config's `model` section holds; the input size
# and the class count are the config's own `image_size` and `num_classes`,
# all_tokens and dynamic_image_size belong to other uses than training, and
# pre_logits_activation and numerics to weights trained elsewhere.
CONFIG_FIELDS = tuple(
    f.name for f in dataclasses.fields(Architecture)
    if f.name not in ("image_size", "num_classes", "all_tokens",
                      "dynamic_image_size", "pre_logits_activation",
                      "numerics")
)


def _normalised(arch: Architecture) -> Dict[str, Any]:
    """The fields with Python types fixed (ints, floats, tuples)."""
    ints = ("patch_size", "hidden_size", "num_layers", "num_heads",
            "mlp_dim", "num_classes", "resnet_width")
    floats = ("dropout_rate", "attention_dropout_rate",
              "stochastic_depth_rate", "head_bias_init")
    out = {k: _typed(arch, k, whole, "an int") for k in ints}
    out.update({k: _typed(arch, k, float) for k in floats})
    out["image_size"] = image_hw(arch.image_size)
    if arch.resnet_layers is not None:
        out["resnet_layers"] = _typed(
            arch, "resnet_layers", _stages, "ints, e.g. 3,4,9 (R50's stages)")
    if arch.representation_size is not None:
        out["representation_size"] = _typed(arch, "representation_size",
                                             whole, "an int")
    for key in ("head_zero_init", "all_tokens", "dynamic_image_size"):
        out[key] = _typed(arch, key, yes_no, "True or False")
    return out


def _stages(value) -> Tuple[int, ...]:
    if isinstance(value, str):
        raise ValueError(value)  # "111" is no (1, 1, 1)
    if isinstance(value, numbers.Number):
        return (whole(value),)
    return tuple(whole(n) for n in value)


def _typed(arch: Architecture, field: str, kind, what: str = ""):
    """`arch`'s `field` as `kind` (float, or a converter); a value of
    another kind is a UsageError naming the field (and config.model.FIELD,
    where a run config sets it)."""
    value = getattr(arch, field)
    try:
        return kind(value)
    except (TypeError, ValueError):
        what = what or f"a {kind.__name__}"
        raise UsageError(
            f"{_named(field)} must be {what}, got {value!r}.") from None


def _named(field: str) -> str:
    """An Architecture field in a message: `field`, with config.model.FIELD
    where a run config sets it (the commands name their flag)."""
    config = (f" (config.model.{field})" if field in CONFIG_FIELDS
              or field == "num_classes" else "")
    return f"`{field}`{config}"


def _check(arch: Architecture) -> None:
    """Fixes the field types of `arch` in place (a frozen dataclass's
    __post_init__) and raises a UsageError naming the fix for any field
    out of its range."""
    spec = decode_variant(arch.variant).sizes() if arch.variant else {}
    for key, value in _normalised(arch).items():
        object.__setattr__(arch, key, value)
    _check_variant(arch, spec)
    for field in SIZE_FIELDS:
        if getattr(arch, field) <= 0:
            raise UsageError(f"{_named(field)} must be positive, got "
                             f"{getattr(arch, field)}.")
    if arch.hidden_size % arch.num_heads:
        raise UsageError(
            f"{_named('num_heads')} {arch.num_heads} does not divide "
            f"{_named('hidden_size')} {arch.hidden_size}: choose a head "
            "count that divides the width.")
    if arch.num_classes < 0:
        raise UsageError(
            f"`num_classes` must be >= 0 (0: no head), got "
            f"{arch.num_classes}.")
    if arch.representation_size is not None and arch.representation_size <= 0:
        raise UsageError(
            "`representation_size` must be a positive width, got "
            f"{arch.representation_size} (a model without a pre-logits "
            "layer leaves it out).")
    if arch.resnet_layers is not None and arch.resnet_width < 1:
        raise UsageError(
            f"resnet_width must be a positive int, got {arch.resnet_width}.")
    if arch.resnet_layers is None and arch.resnet_width != 1:
        raise UsageError(
            f"resnet_width={arch.resnet_width} is a hybrid's ResNet width, "
            "and this model has no ResNet: set resnet_layers too (e.g. "
            "variant R50+B/16), or leave resnet_width out.")
    for rate in ("dropout_rate", "attention_dropout_rate",
                 "stochastic_depth_rate"):
        vit_embedding.check_rate(rate, getattr(arch, rate))
    if arch.posemb not in POSEMBS:
        raise UsageError(
            f'posemb must be "learn" or "sincos2d", got {arch.posemb!r}.')
    if arch.pooling not in ("token", "gap"):
        raise UsageError(
            f'pooling must be "token" or "gap", got {arch.pooling!r}.')
    if not isinstance(arch.numerics, Numerics):
        raise UsageError("numerics must be a keras_vit.Numerics, got "
                         f"{arch.numerics!r}.")
    check_remat(arch.remat)
    _check_head(arch)
    arch.grid()  # the stride divides the image size


def _check_variant(arch: Architecture, spec: Mapping[str, Any]) -> None:
    """A variant label (its sizes `spec`) that the sizes are not."""
    other = [f"{k} {getattr(arch, k)}, not {v}" for k, v in spec.items()
             if getattr(arch, k) != v]
    if other:
        raise UsageError(
            f"variant={arch.variant!r} names sizes this architecture does "
            f"not have ({'; '.join(other)}): give variant=None with its "
            f"sizes, or {arch.variant}'s.")


def _check_head(arch: Architecture) -> None:
    if not math.isfinite(arch.head_bias_init):  # (every logit would be)
        raise UsageError("head_bias_init must be a finite number, got "
                         f"{arch.head_bias_init}.")
    try:
        keras.activations.get(arch.pre_logits_activation)
    except (ValueError, TypeError):
        raise UsageError(
            f"pre_logits_activation {arch.pre_logits_activation!r} is no "
            "Keras activation: give one's name (e.g. 'tanh', the "
            "official ViT's).") from None
