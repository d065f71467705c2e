"""What a masked-patch-prediction model learned, as a picture.

For a few images: the input, its corrupted version (what the encoder was
given, drawn in pixels: [mask] patches flat grey, replaced patches showing
the patch they were replaced by, every corrupted patch outlined), the true
colour targets of the corrupted patches and the model's predictions, each
painted into its patch (cell) over the input. `keras-vit-analysis
--model=MPP_RUN ...` draws it as mpp_predictions.png.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_vit import config as config_lib
from keras_vit import mpp
from keras_vit.analysis import plots
from keras_vit.architecture import image_hw
from keras_vit.build import config_stride
from keras_vit.checkpoint.posemb import resize_position_embedding
from keras_vit.data import masking
from keras_vit.errors import UsageError
from keras_vit.model import architecture_of
from keras_vit.storage import workdir as wd

# Outline colours of the corruption kinds.
_EDGES = {mpp.MASKED: "red", mpp.REPLACED: "deepskyblue", mpp.KEPT: "lime"}


@dataclasses.dataclass
class MppPictures:
    """Images (n, height, width, 3) in [-1, 1] and the numbers behind them.

    Attributes:
        images: the inputs.
        corrupted: the corruption drawn in pixel space.
        targets: the inputs with each corrupted patch (cell) painted in its
            target colour (for "pixels": the input itself).
        predictions: the same with the model's predicted colours (pixels).
        mode, source: int (n, patches), the corruption (`keras_vit.mpp`).
        accuracy: float (n,). Share of each image's corrupted patches
            (cells) whose predicted colour class is right.
    """

    images: np.ndarray
    corrupted: np.ndarray
    targets: np.ndarray
    predictions: np.ndarray
    mode: np.ndarray
    source: np.ndarray
    accuracy: np.ndarray


def _to_patches(images: np.ndarray, size: int) -> np.ndarray:
    n, h, w, c = images.shape
    x = images.reshape(n, h // size, size, w // size, size, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, -1, size, size, c)


def _from_patches(patches: np.ndarray, h: int, w: int) -> np.ndarray:
    n, _, size, _, c = patches.shape
    x = patches.reshape(n, h // size, w // size, size, size, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(n, h, w, c)


def _paint(images, colours, corrupted, stride, grid):
    """`images` with each corrupted patch's cells filled by `colours`
    (n, patches, grid * grid, 3)."""
    h, w = images.shape[1:3]
    cell = stride // grid
    out = _to_patches(images, stride).copy()
    fill = colours.reshape(*colours.shape[:2], grid, 1, grid, 1, 3)
    fill = np.broadcast_to(fill, (*colours.shape[:2], grid, cell, grid, cell,
                                  3))
    fill = fill.reshape(*colours.shape[:2], stride, stride, 3)
    out[corrupted] = fill[corrupted]
    return _from_patches(out, h, w)


# What an MPP model (`keras_vit.mpp.MppModel`) computes, which its
# pictures must read it by.
_MODEL_FIELDS = ("target", "colour_bits", "grid_size")


def predict(
    model: keras.Model,
    images: np.ndarray,
    *,
    seed: int = 0,
    **mpp_options,
) -> MppPictures:
    """Corrupts `images` (noise drawn with `seed`), runs the MPP model and
    paints its predictions.

    Args:
        model: keras.Model. An MPP model (`keras_vit.mpp.create_mpp_model`).
        images: float32 (n, height, width, 3) in [-1, 1].
        seed: int. Seeds the corruption.
        **mpp_options: fields of the run's `config.objective.mpp` (target,
            colour_bits, grid_size, corrupt_rate, mask_fraction,
            random_fraction); target, colour_bits and grid_size default
            to the model's own (one that differs is refused), the others
            to the base config's; an unknown one is an error naming it.
    """
    own = {k: getattr(model, k) for k in _MODEL_FIELDS if hasattr(model, k)}
    if own.get("target") != "colour_grid":
        own.pop("grid_size", None)  # read by colour_grid only
    differ = [f"{k}={mpp_options[k]!r} (the model's: {v!r})"
              for k, v in own.items() if k in mpp_options
              and mpp_options[k] != v]
    if differ:
        raise UsageError(
            f"mpp_figure.predict: {', '.join(differ)}: the model computes "
            "its own; leave them out.")
    opts = config_lib.complete({**own, **mpp_options}, "objective.mpp",
                               where="mpp_figure.predict")
    target, colour_bits = opts.target, opts.colour_bits
    images = np.asarray(images, np.float32)
    arch = architecture_of(model)
    stride = arch.stride
    rows, cols = arch.grid()
    mode, source = _corruption(len(images), rows * cols, opts, seed)
    outputs = np.asarray(model.predict(
        {"images": images, "mpp_mode": mode, "mpp_source": source},
        verbose=0,
    ), np.float32)
    h, w = images.shape[1:3]
    corrupted = mode > mpp.NOT_CORRUPTED
    pieces = _to_patches(images, stride)
    shown = pieces.copy()
    rows = np.arange(len(images))[:, None]
    shown[mode == mpp.REPLACED] = pieces[rows, source][mode == mpp.REPLACED]
    shown[mode == mpp.MASKED] = 0.0  # mid grey
    grid = opts.grid_size if target == "colour_grid" else 1
    true_classes = np.asarray(mpp.colour_targets(
        images, stride, colour_bits, grid))
    if target == "pixels":
        pixels = outputs.reshape(pieces.shape)
        predicted = np.where(corrupted[..., None, None, None],
                             np.clip(pixels, -1, 1), pieces)
        prediction_image = _from_patches(predicted, h, w)
        target_image = images
        classes = np.asarray(mpp.quantise_colours(
            pixels.reshape(*pixels.shape[:2], -1, 3).mean(2), colour_bits)
        )[..., None]
    else:
        logits = outputs.reshape(*outputs.shape[:2], grid * grid, -1)
        classes = logits.argmax(-1)
        prediction_image = _paint(
            images, np.asarray(mpp.colour_centres(classes, colour_bits)),
            corrupted, stride, grid)
        target_image = _paint(
            images, np.asarray(mpp.colour_centres(true_classes,
                                                  colour_bits)),
            corrupted, stride, grid)
    right = (classes == true_classes).mean(-1)
    accuracy = (right * corrupted).sum(-1) / np.maximum(corrupted.sum(-1), 1)
    return MppPictures(images, _from_patches(shown, h, w), target_image,
                       prediction_image, mode, source, accuracy)


def _corruption(num_images: int, patches: int, opts, seed: int):
    """(mode, source), int (num_images, patches): each patch's corruption
    (`keras_vit.mpp`), drawn with `seed` as the run's options say."""
    noise = np.random.default_rng(seed).uniform(
        size=(num_images, patches, 3)
    ).astype(np.float32)
    mode, source = (np.asarray(t) for t in masking.corruption_from_noise(
        tf.constant(noise), opts.corrupt_rate, opts.mask_fraction,
        opts.random_fraction))
    return mode, source


def plot_predictions(
    pictures: MppPictures,
    path: str,
    *,
    stride: int,
    titles: Optional[Sequence[str]] = None,
    max_images: int = 8,
) -> str:
    """One row per image: input, corrupted input (outlines: red [mask],
    blue replaced, green kept), target colours, predicted colours."""
    n = min(len(pictures.images), int(max_images))
    if n < 1:
        raise UsageError("plot_predictions needs at least one image.")
    columns = (("input", pictures.images),
               ("corrupted", pictures.corrupted),
               ("target", pictures.targets),
               ("predicted", pictures.predictions))
    fig = plots._figure(2.2 * len(columns), 2.3 * n + 0.5)  # checks matplotlib
    from matplotlib.patches import Rectangle

    cols = pictures.images.shape[2] // stride
    for i in range(n):
        for j, (name, images) in enumerate(columns):
            ax = fig.add_subplot(n, len(columns), i * len(columns) + j + 1)
            ax.imshow(plots._to_display(images[i]))
            ax.set_axis_off()
            caption = name
            if j == 0 and titles is not None:
                caption = f"{titles[i]}"
            if j == 3:
                caption += f" ({pictures.accuracy[i]:.0%} right)"
            ax.set_title(caption, fontsize=8)
            if j == 1:
                for p, kind in enumerate(pictures.mode[i]):
                    if kind == mpp.NOT_CORRUPTED:
                        continue
                    r, c = divmod(p, cols)
                    ax.add_patch(Rectangle(
                        (c * stride - 0.5, r * stride - 0.5),
                        stride, stride, fill=False,
                        edgecolor=_EDGES[int(kind)], linewidth=1.2))
    fig.suptitle("Masked patch prediction: colours of the corrupted "
                 "patches\n(outlines: red [mask], blue replaced, green kept)",
                 fontsize=9)
    return plots._save(fig, path)


FIGURE = "mpp_predictions.png"


def is_mpp_run(workdir: str) -> bool:
    """Whether the training run of `workdir` is a masked-patch-prediction
    run (`draw_for_run` draws its FIGURE)."""
    return bool(wd.read_config(workdir).objective.mpp.enabled)


def draw_for_run(
    workdir: str,
    images: np.ndarray,
    output_dir: str,
    *,
    titles: Optional[Sequence[str]] = None,
    max_images: int = 8,
    seed: int = 0,
    image_size=None,
    use_ema: bool = True,
) -> Optional[Dict[str, Any]]:
    """Draws FIGURE for the workdir of an MPP run (its latest checkpoint,
    its config.objective.mpp options) into `output_dir`; returns the
    numbers behind it (its section of analysis.json), or None for a run
    that is not an MPP run.

    Args:
        image_size: int, (height, width) or None. The resolution of
            `images`, which the model is rebuilt at (position embeddings
            resized) when it is not the run's; None: the run's.
        use_ema: bool. The run's EMA (Polyak) weights when it kept them,
            else the raw ones (as `WorkdirSource`).
    """
    config = wd.read_config(workdir)
    if not config.objective.mpp.enabled:
        return None
    opts = config.objective.mpp
    model = wd.restore_model(workdir, use_ema=use_ema)
    if image_size is not None:
        model = _at_resolution(model, image_size, opts)
    pictures = predict(
        model, images[:max_images], target=opts.target,
        colour_bits=opts.colour_bits, grid_size=opts.grid_size,
        corrupt_rate=opts.corrupt_rate, mask_fraction=opts.mask_fraction,
        random_fraction=opts.random_fraction, seed=seed,
    )
    plot_predictions(
        pictures, os.path.join(output_dir, FIGURE),
        stride=config_stride(config.model), titles=titles,
        max_images=max_images,
    )
    return _numbers(pictures, titles, opts.target, seed)


def _numbers(pictures: MppPictures, titles, target: str,
             seed: int) -> Dict[str, Any]:
    """The numbers behind FIGURE: per image drawn, its corruption counts
    and the share of its corrupted patches predicted right."""
    images = []
    for i, accuracy in enumerate(pictures.accuracy):
        mode = pictures.mode[i]
        images.append({
            "name": str(titles[i]) if titles is not None else f"image {i}",
            "masked": int((mode == mpp.MASKED).sum()),
            "replaced": int((mode == mpp.REPLACED).sum()),
            "kept": int((mode == mpp.KEPT).sum()),
            "accuracy": round(float(accuracy), 4),
        })
    return {
        "target": target,
        "seed": seed,
        "images": images,
        "mean_accuracy": round(float(np.mean(pictures.accuracy)), 4),
        "note": "accuracy: share of an image's corrupted patches (masked, "
        "replaced or kept) whose predicted colour class is right",
    }


def _at_resolution(model: keras.Model, image_size, opts) -> keras.Model:
    """MPP model `model` at input size `image_size`: the same weights,
    its position embedding resized to the new patch grid."""
    hw = image_hw(image_size)
    arch = architecture_of(model)
    if tuple(arch.image_size) == hw:
        return model
    new = mpp.MppModel(dataclasses.replace(arch, image_size=hw),
                       target=opts.target, colour_bits=opts.colour_bits,
                       grid_size=opts.grid_size, name=model.name)
    old = {layer.name: layer for layer in model.layers}
    for layer in new.layers:
        weights = old[layer.name].get_weights()
        if layer.name == "posembed_input" and weights:
            weights = [resize_position_embedding(
                weights[0], new.architecture.grid(), arch.grid(),
                arch.num_prefix_tokens)]
        layer.set_weights(weights)
    return new
