"""The paper's analysis figures of a model in one call (`run_analysis`),
and the images they are computed on (`load_images`, `digits_images`).

`run_analysis` writes attention_rollout.png, mean_attention_distance.png,
position_embedding_similarity.png, patch_embedding_pca.png and, last,
analysis.json (the numbers behind them) into an output folder (local or
gs://), removing the files of an earlier analysis there that it does not
write; `keras-vit-analysis` (keras_vit/commands/analysis.py) is its
command line.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from keras_vit.analysis import core, extract, mpp_figure, plots
from keras_vit.data import checks, folders, image_files, preprocessing
from keras_vit.derived import is_features_model
from keras_vit.errors import UsageError
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write

IMAGE_EXTENSIONS = folders.IMAGE_EXTENSIONS
FIGURES = {
    "attention_rollout": "attention_rollout.png",
    "mean_attention_distance": "mean_attention_distance.png",
    "position_embedding_similarity": "position_embedding_similarity.png",
    "patch_embedding_pca": "patch_embedding_pca.png",
}
JSON_NAME = "analysis.json"
# Every file an analysis writes into its folder: those a run does not
# write are removed as stale (`remove_stale`).
OUTPUTS = (*FIGURES.values(), mpp_figure.FIGURE, JSON_NAME)


def _list_images(paths: Sequence[str]) -> List[Tuple[str, str]]:
    """(file, name) of the images of `paths`: files as given (named by
    their file name), a local folder searched with its sub-folders as
    keras-vit-predict does (class folders included; named by the path
    inside it, so that cat/1.jpg and dog/1.jpg stay apart), a remote one
    (gs://) at its top level."""
    files = []
    for path in paths:
        if tf.io.gfile.isdir(path):
            found = image_files.images_under(path) if "://" not in path \
                else sorted(
                    os.path.join(path, name)
                    for name in tf.io.gfile.listdir(path)
                    if image_files.is_image(name)
                    and not tf.io.gfile.isdir(os.path.join(path, name)))
            if not found:
                raise UsageError(
                    f"No images ({', '.join(IMAGE_EXTENSIONS)}) in folder "
                    f"{path!r} or its sub-folders."
                )
            files.extend((f, os.path.relpath(f, path)) for f in found)
        elif tf.io.gfile.exists(path):
            files.append((path, os.path.basename(path)))
        else:
            raise UsageError(f"Image {path!r} does not exist (or is a "
                             "link to nothing).")
    return files


class ImageFiles:
    """Image files as model input, each read and preprocessed when looked
    up (`images[i]`, `images[a:b]`): a folder of thousands of photos is
    held one batch at a time, not whole.

    Attributes:
        shape: (n, height, width, 3), as an array of them would have.
    """

    def __init__(self, files: Sequence[str], size: Tuple[int, int],
                 resize_size: Optional[int] = None,
                 keep_aspect: bool = False):
        self._files = list(files)
        self._size = tuple(size)
        self._resize = (resize_size, keep_aspect)
        self.shape = (len(self._files),) + self._size + (3,)

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, index):
        if isinstance(index, slice):
            chosen = self._files[index]
            if not chosen:
                return np.zeros((0,) + self.shape[1:], np.float32)
            return np.stack([self._image(f) for f in chosen])
        return self._image(self._files[index])

    def _image(self, file: str) -> np.ndarray:
        return preprocessing.preprocess_eval(
            _decode(file), self._size, *self._resize).numpy()


def _decode(file: str) -> tf.Tensor:
    """A file's pixels (`preprocessing.decode_image`); one UsageError line
    naming the file and the decoder's reason where it cannot be read."""
    try:
        data = tf.io.gfile.GFile(file, "rb").read()
        return preprocessing.decode_image(tf.constant(data))
    except (tf.errors.OpError, ValueError) as error:
        reason = (checks.decode_reason(error)
                  if isinstance(error, (tf.errors.InvalidArgumentError,
                                        ValueError))
                  else " ".join(str(error.message).replace(
                      f"{file}; ", "").split()))
        raise UsageError(
            f"Cannot read {file!r} as an image (JPEG, PNG, GIF, BMP or "
            f"WebP): {reason.rstrip('.')}."
        ) from None


def load_images(
    paths: Sequence[str], size: Tuple[int, int],
    resize_size: Optional[int] = None, keep_aspect: bool = False,
) -> Tuple[ImageFiles, List[str]]:
    """Reads image files (and folders of them) as the model's input.

    Decoded and resized as at evaluation time (`preprocess_eval`: resized
    to `size`, or to `resize_size` (its shorter side with `keep_aspect`)
    and then the central `size` crop), as
    keras-vit-predict and an export's serving_default do. Every file is
    decoded once here, so that one that cannot be read stops the command
    before any figure is computed; the pixels are made again batch by
    batch when used (`ImageFiles`).

    Returns:
        (images, names): `ImageFiles` (n, height, width, 3), float32 in
        [-1, 1] as looked up, and each image's file name.
    """
    files = _list_images(paths)
    for file, _ in files:
        _decode(file)
    return (ImageFiles([f for f, _ in files], size, resize_size,
                       keep_aspect),
            [name for _, name in files])


def digits_images(
    digits: int, size: Tuple[int, int], resize_size: Optional[int] = None,
    keep_aspect: bool = False,
) -> Tuple[np.ndarray, List[str]]:
    """The first `digits` scikit-learn digits as model input (no download).

    The 8 x 8 grey images (values 0..16) are scaled to [0, 255] and go
    through `preprocess_eval`: bilinear upsampling to `size` (or to
    `resize_size`, then the central `size` crop), grey tiled to RGB,
    scaled to [-1, 1].

    Returns:
        (images, names): float32 (digits, height, width, 3) and names such
        as "digit #3 (label 3)".
    """
    from sklearn.datasets import load_digits

    bundled = load_digits()
    if not 1 <= digits <= len(bundled.images):
        raise UsageError(
            f"`digits` must be between 1 and {len(bundled.images)}, got "
            f"{digits}."
        )
    images = [
        preprocessing.preprocess_eval(
            tf.constant(digit[..., None] * (255.0 / 16.0), tf.float32), size,
            resize_size, keep_aspect,
        ).numpy()
        for digit in bundled.images[:digits]
    ]
    names = [
        f"digit #{i} (label {label})"
        for i, label in enumerate(bundled.target[:digits])
    ]
    return np.stack(images), names


def _predictions(model: keras.Model, outputs: np.ndarray) -> List[Dict]:
    if is_features_model(model):
        return [{} for _ in outputs]  # a features model: no classes
    logits = outputs - outputs.max(axis=-1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    return [
        {"predicted_class": int(p.argmax()), "probability": float(p.max())}
        for p in probs
    ]


def _rounded(array: np.ndarray, digits: int = 4) -> list:
    return np.round(np.asarray(array, np.float64), digits).tolist()


def run_analysis(  # noqa: PLR0913 (its options, by keyword)
    model: keras.Model,
    images: np.ndarray,
    output_dir: str,
    *,
    names: Optional[Sequence[str]] = None,
    batch_size: int = 16,
    max_rollout_images: int = 8,
    num_components: int = 28,
    class_names: Optional[Sequence[str]] = None,
    more_figures: Optional[Dict[str, Tuple[str, Callable[[], Any]]]] = None,
) -> Dict[str, Any]:
    """Computes the four analyses, writes the PNGs and, last, analysis.json.

    In a folder used before, analysis.json and the figures of OUTPUTS that
    this run does not draw (a hybrid's patch_embedding_pca.png, another
    run's mpp_predictions.png) are removed after the forward pass, before
    the first figure is written; analysis.json is written last, so a
    present one always describes the figures beside it.

    Args:
        model: keras.Model. A keras_vit Vision Transformer.
        images: float32 (n, height, width, 3) in [-1, 1], or the
            `ImageFiles` of `load_images`. Model inputs.
        output_dir: str. Created if missing; existing files of the same
            names are replaced.
        names: sequence of str or None. One name per image.
        batch_size: int. Images per forward pass.
        max_rollout_images: int. Images drawn in the rollout figure.
        num_components: int. Principal components of the patch filters.
        class_names: sequence of str or None. One per class: titles and
            analysis.json name the predicted class instead of its index.
        more_figures: dict or None. Figures drawn after the four, listed
            in the same analysis.json: {key: (file name, draw)}, `draw()`
            writing that file into `output_dir` and returning its section
            of analysis.json (keras-vit-analysis: an MPP run's
            mpp_predictions.png).

    Returns:
        dict. The content of analysis.json.
    """
    plots.require_matplotlib()  # before the forward pass, not after it
    more = dict(more_figures or {})
    names = (
        list(names)
        if names is not None
        else [f"image {i}" for i in range(len(images))]
    )
    stats = extract.attention_stats(model, images, batch_size=batch_size)
    out = {key: os.path.join(output_dir, f) for key, f in FIGURES.items()}
    if not _has_rgb_filters(model):
        del out["patch_embedding_pca"]
    remove_stale(output_dir, [os.path.basename(p) for p in out.values()]
                 + [file for file, _ in more.values()])
    data = _draw(model, images, stats, out, names=names,
                 max_rollout_images=max_rollout_images,
                 num_components=num_components, class_names=class_names)
    for key, (file, draw) in more.items():
        data[key] = draw()
        data["figures"][key] = file
    # Compact: the similarity matrix alone has N * N numbers.
    atomic_write(
        os.path.join(output_dir, JSON_NAME),
        json.dumps(data, separators=(",", ":")),
    )
    return data


def remove_stale(output_dir: str, keep: Sequence[str]) -> None:
    """Removes analysis.json and each file of OUTPUTS not in `keep` (the
    file names a run is about to write) from `output_dir`."""
    for name in OUTPUTS:
        path = os.path.join(output_dir, name)
        if (name == JSON_NAME or name not in keep) and atomic.exists(path):
            tf.io.gfile.remove(path)


def _draw(model: keras.Model, images, stats, out: Dict[str, str], *,
          names: List[str], max_rollout_images: int, num_components: int,
          class_names) -> Dict[str, Any]:
    """Draws the figures of `out` (key: path); the content of
    analysis.json."""
    layout = stats.layout
    predictions = _predictions(model, stats.outputs)
    plots.plot_attention_rollout(
        images,
        stats.rollout_maps,
        out["attention_rollout"],
        titles=_titles(names, predictions, class_names),
        max_images=max_rollout_images,
    )
    return {
        "model": model.name,
        "layout": {
            "grid": list(layout.grid),
            "patch_pixels": list(layout.patch_pixels),
            "class_token": bool(layout.num_prefix_tokens),
        },
        "images": [
            dict(name=name, rollout_map=_rounded(m, 5), **p)
            for name, m, p in zip(names, stats.rollout_maps, predictions)
        ],
        "rollout_note": (
            "class-token row of the rollout, class column dropped"
            if layout.num_prefix_tokens
            else "no class token: mean over all query rows of the rollout"
        ),
        "mean_attention_distance": _distance_figure(
            model, stats, len(images), out["mean_attention_distance"]),
        "position_embedding_similarity": _similarity_figure(
            model, layout, out["position_embedding_similarity"]),
        "patch_embedding_pca": _pca_figure(
            model, num_components, out.get("patch_embedding_pca")),
        "figures": {k: os.path.basename(v) for k, v in out.items()},
    }


def _titles(names, predictions: List[Dict], class_names) -> List[str]:
    """The rollout figure's titles: each image's name and prediction (its
    class named in `predictions` too, where `class_names` are given)."""
    for p in predictions:
        if p and class_names is not None:
            p["predicted_name"] = str(class_names[p["predicted_class"]])
    return [
        f"{name}\npredicted "
        f"{p.get('predicted_name', p['predicted_class'])} "
        f"({p['probability']:.2f})"
        if p
        else name
        for name, p in zip(names, predictions)
    ]


def _distance_figure(model: keras.Model, stats, num_images: int,
                     path: str) -> Dict[str, Any]:
    """Draws the mean attention distance; its section of analysis.json."""
    uniform = core.uniform_attention_distance(stats.layout)
    plots.plot_mean_attention_distance(
        stats.mean_distance,
        path,
        uniform_distance=uniform,
        title=f"{model.name}: mean attention distance ({num_images} images)",
    )
    return {
        "pixels": _rounded(stats.mean_distance),
        "per_layer_mean": _rounded(stats.mean_distance.mean(axis=1)),
        "uniform_attention_pixels": round(uniform, 4),
        "num_images": num_images,
        "note": "class token excluded as query and key; each query's "
        "weights renormalised over the patch keys",
    }


def _similarity_figure(model: keras.Model, layout,
                       path: str) -> Dict[str, Any]:
    """Draws the position embeddings' similarity; its section of
    analysis.json."""
    similarity = core.position_embedding_similarity(
        extract.position_embeddings(model), layout.num_prefix_tokens
    )
    plots.plot_position_similarity(
        similarity,
        layout.grid,
        path,
        title=f"{model.name}: position embedding similarity",
    )
    return {
        "matrix": _rounded(similarity),
        "note": "cosine similarity, class token excluded, row-major",
    }


def _has_rgb_filters(model: keras.Model) -> bool:
    """Whether the patch embedding's filters are images (RGB patches of
    more than one pixel): a hybrid's embed ResNet feature maps with
    1 x 1 patches."""
    kernel = extract.patch_kernel(model)
    return kernel.shape[2] == 3 and kernel.shape[0] > 1


def _pca_figure(model: keras.Model, num_components: int,
                path: Optional[str]) -> Dict[str, Any]:
    """Draws the patch filters' principal components into `path`; their
    section of analysis.json. None: a hybrid's, skipped."""
    if path is None:
        return {"skipped": "the patch embedding does not act on RGB pixels"}
    components, explained = core.patch_embedding_pca(
        extract.patch_kernel(model), num_components)
    plots.plot_patch_embedding_pca(components, explained, path)
    return {"explained_variance_ratio": _rounded(explained, 6)}
