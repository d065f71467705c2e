"""The paper's analysis figures of a model in one call (`run_analysis`),
on the images of `keras_vit.analysis.inputs`.

`run_analysis` writes attention_rollout.png, mean_attention_distance.png,
position_embedding_similarity.png, patch_embedding_pca.png and, last,
analysis.json (the numbers behind them) into an output folder (local or
gs://), removing the files of an earlier analysis there that it does not
write; `keras-vit-analysis` (keras_vit/commands/analysis.py) is its
command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit.analysis import core, extract, mpp_figure, plots
from keras_vit.derived import is_features_model
from keras_vit.errors import UsageError
from keras_vit.scoring import scores as vit_scores
from keras_vit.storage import atomic, leftovers
from keras_vit.storage.atomic import atomic_write

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


def _predictions(model: keras.Model, outputs: np.ndarray,
                 scores: str) -> List[Dict]:
    if is_features_model(model):
        return [{} for _ in outputs]  # a features model: no classes
    probs = vit_scores.probabilities_np(outputs, scores)
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
    more_figures: Optional[Dict[str, Tuple[str, Callable]]] = None,
    on_batch: Optional[Callable[[int, int], None]] = None,
    learned_positions: Optional[Tuple[np.ndarray, Tuple[int, int]]] = None,
    scores: str = "softmax",
    model_facts: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Computes the four analyses, writes the PNGs and, last, analysis.json.

    The figures are drawn into a hidden folder inside `output_dir`, then
    moved in together, Ctrl-C and SIGTERM held: an earlier analysis there
    stays whole until replaced. The figures of OUTPUTS this run does not
    draw (a hybrid's patch_embedding_pca.png) go then; analysis.json
    comes last, so a present one describes the figures beside it.

    Args:
        model: keras.Model. A keras_vit Vision Transformer.
        images: float32 (n, height, width, 3) in [-1, 1], or the
            `ImageFiles` of `load_images`. Model inputs.
        output_dir: str. Created if missing; an earlier analysis's files
            are replaced, a user's of their names refused.
        names: sequence of str or None. One name per image.
        batch_size: int. Images per forward pass.
        max_rollout_images: int. Images drawn in the rollout figure.
        num_components: int. Principal components of the patch filters.
        class_names: sequence of str or None. One per class: titles and
            analysis.json name the predicted class instead of its index.
        more_figures: dict or None. Figures drawn after the four, listed
            in analysis.json: {key: (file name, draw)}, `draw(folder)`
            writing the file into `folder` and returning its section of
            analysis.json (an MPP run's mpp_predictions.png).
        on_batch: None, or called after each batch of the forward pass
            with the images done and their number (a command's progress).
        learned_positions: (table (T, D), (rows, cols)) or None. The
            position embeddings as learned, at their own grid, where
            `model`'s are resized from them: their similarity is drawn.
        scores: str. "softmax" or "sigmoid": each image's probability.
        model_facts: dict or None. analysis.json's "source": the model's.

    Returns:
        dict. The content of analysis.json.
    """
    plots.require_matplotlib()  # before the forward pass, not after it
    check_replaceable(output_dir)
    more = dict(more_figures or {})
    names = _checked_names(model, len(images), names, class_names)
    stats = extract.attention_stats(model, images, batch_size=batch_size,
                                    on_batch=on_batch)
    staging = _staging(output_dir)
    out = {key: os.path.join(staging, f) for key, f in FIGURES.items()}
    if not _has_rgb_filters(model):
        del out["patch_embedding_pca"]
    try:
        data = _draw(model, images, stats, out, names=names,
                     max_rollout_images=max_rollout_images,
                     num_components=num_components,
                     labels=(class_names, scores))
        data["position_embedding_similarity"] = _similarity_figure(
            model, stats.layout, out["position_embedding_similarity"],
            learned_positions)
        for key, (file, draw) in more.items():
            data[key] = draw(staging)
            data["figures"][key] = file
        data["source"] = dict(model_facts or {})  # ({}: not said)
        _publish(staging, output_dir, list(data["figures"].values()),
                 # Compact: the similarity matrix alone has N * N numbers.
                 json.dumps(data, separators=(",", ":")))
    finally:
        if atomic.exists(staging):
            tf.io.gfile.rmtree(staging)
    return data


def _checked_names(model: keras.Model, count: int,
                   names: Optional[Sequence[str]],
                   class_names: Optional[Sequence[str]]) -> List[str]:
    """The images' `names` ("image 0", ... where None). Refuses `names`
    that are not one per image, and `class_names` that are not one per
    class of `model`'s head (or given to a model without one), before
    anything runs."""
    names = [f"image {i}" for i in range(count)] if names is None else list(
        names)
    if len(names) != count:
        raise UsageError(f"names: {len(names)} given for {count} images; "
                         "give one name per image (or none).")
    if class_names is None:
        return names
    if is_features_model(model):
        raise UsageError("class_names: the model has no classification "
                         "head to name the classes of; leave them out.")
    width = int(model.output_shape[-1])
    if len(class_names) != width:
        raise UsageError(
            f"class_names: {len(class_names)} given for the model's {width} "
            "classes; give one name per class, in the head's order.")
    return names


def _publish(staging: str, output_dir: str, files: Sequence[str],
             json_text: str) -> None:
    """Moves the figures `files` drawn in `staging` into `output_dir`
    (the earlier analysis's stale files removed), then writes
    analysis.json, with Ctrl-C and SIGTERM held until all is there."""
    with atomic.signals_deferred() as written:
        remove_stale(output_dir, files)
        for name in files:
            tf.io.gfile.rename(os.path.join(staging, name),
                               os.path.join(output_dir, name), overwrite=True)
        atomic_write(os.path.join(output_dir, JSON_NAME), json_text)
        written.append(os.path.join(output_dir, JSON_NAME))


# The folder `analyse` draws the figures in: .<host>-<pid>.tmp-<hex>.analysis
# (The temporary name's own writer after its hex: `atomic.temporary_name`;
# names of earlier versions end at the hex.)
_STAGING = re.compile(rf"\.{leftovers.WRITER}\.tmp-[0-9a-f]{{12}}"
                      r"(?:-[A-Za-z0-9._]+-\d+)?\.analysis")


def _staging(output_dir: str) -> str:
    """A fresh folder to draw in, inside `output_dir`: hidden (an output
    folder inside an image folder does not read it), and named after
    this process, so that a later run removes it if this one is killed
    (those that killed runs left are removed first)."""
    leftovers.remove_killed(output_dir, _STAGING,
                            "the figures of an analysis")
    return atomic.temporary_name(
        os.path.join(output_dir, f".{leftovers.writer()}.analysis"))


def check_replaceable(output_dir: str) -> None:
    """Refuses, before any work, an `output_dir` holding a file of OUTPUTS
    that no earlier analysis wrote there (no analysis.json of one is
    there, nor does the PNG say it is one, `plots.MADE_BY`): a user's own
    file of that name is not replaced."""
    there = [n for n in OUTPUTS if atomic.exists(os.path.join(output_dir, n))]
    if not there:
        return
    ours = set()
    if JSON_NAME in there:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            with tf.io.gfile.GFile(os.path.join(output_dir, JSON_NAME)) as f:
                held = json.load(f)
            figures = held.get("figures") if isinstance(held, dict) else None
            if isinstance(figures, dict):  # an analysis's folder: all of
                ours = set(OUTPUTS)  # its names (an earlier version's too)
    foreign = [n for n in there if n not in ours
               and not plots.drawn_here(os.path.join(output_dir, n))]
    if foreign:
        them = "it" if len(foreign) == 1 else "them"
        raise UsageError(
            f"{output_dir} holds {', '.join(foreign)}, which no earlier "
            f"keras-vit-analysis wrote there (no {JSON_NAME} of one lists "
            f"{them}): not replaced; move {them} away, or pass another "
            "--output_dir.")


def remove_stale(output_dir: str, keep: Sequence[str]) -> None:
    """Removes analysis.json and each file of OUTPUTS not in `keep` (the
    file names a run is about to write) from `output_dir`."""
    for name in OUTPUTS:
        path = os.path.join(output_dir, name)
        if (name == JSON_NAME or name not in keep) and atomic.exists(path):
            tf.io.gfile.remove(path)


def _draw(model: keras.Model, images, stats, out: Dict[str, str], *,
          names: List[str], max_rollout_images: int, num_components: int,
          labels: Tuple[Optional[Sequence[str]], str]) -> Dict[str, Any]:
    """Draws the figures of `out` (key: path); the content of
    analysis.json. `labels`: the class names (or None) and the scores
    ("softmax" or "sigmoid") of the predictions."""
    class_names, scores = labels
    layout = stats.layout
    predictions = _predictions(model, stats.outputs, scores)
    plots.plot_attention_rollout(
        images,
        stats.rollout_maps,
        out["attention_rollout"],
        titles=_titles(names, predictions, class_names),
        max_images=max_rollout_images,
        class_token=bool(layout.num_prefix_tokens),
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


def _similarity_figure(model: keras.Model, layout, path: str,
                       learned=None) -> Dict[str, Any]:
    """Draws the position embeddings' similarity (of `learned`: (table,
    grid), where given); its section of analysis.json."""
    table, grid = learned or (extract.position_embeddings(model),
                              layout.grid)
    similarity = core.position_embedding_similarity(
        table, layout.num_prefix_tokens)
    title = f"{model.name}: position embedding similarity"
    if learned is not None:
        title += f"\n(as learned, {grid[0]}x{grid[1]}; resized for the rest)"
    plots.plot_position_similarity(similarity, grid, path, title=title)
    section = {
        "matrix": _rounded(similarity),
        "grid": list(grid),
        "note": "cosine similarity, class token excluded, row-major",
    }
    if learned is not None:
        section["note"] += (
            "; the table as learned, at its own grid (the model analysed "
            f"at {layout.grid[0]}x{layout.grid[1]} resizes it)")
    return section


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
    if len(components) < num_components:
        logging.warning(
            "%d principal components asked for; the patch filters, "
            "centred on their mean, span %d directions: drew those.",
            num_components, len(components))
    plots.plot_patch_embedding_pca(components, explained, path)
    return {"explained_variance_ratio": _rounded(explained, 6)}
