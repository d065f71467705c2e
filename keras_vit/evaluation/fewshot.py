"""Few-shot linear evaluation of frozen representations (paper Section 4.1).

As big_vision's fewshot_lsr evaluator: the pre-logits features of a frozen
model (or another layer's, `probe_model`) of each data set's training and
test splits, extracted once; for each shot count and seed, the linear
probe of `linear_probe` (ridge regression to +-1 targets in closed form)
on `shots` examples per class; accuracy on the test split.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import keras
import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit import config as config_lib
from keras_vit import layers as vit_layers
from keras_vit.data import checks as data_checks
from keras_vit.data import folder_classes, sources, vtab
from keras_vit.data import pipeline as input_pipeline
from keras_vit.derived import features_model, intermediate_model
from keras_vit.errors import UsageError
from keras_vit.evaluation.linear_probe import evaluate_features
from keras_vit.model import architecture_of
from keras_vit.progress import EVERY_S, Progress, Rate


# ------------------------------------------------------------- features
def extract_features(
    feature_model: keras.Model,
    inp: ml_collections.ConfigDict,
    run: input_pipeline.RunInput,
    split: str,
    batch_size: int,
    strategy: Optional[tf.distribute.Strategy] = None,
    every_s: float = EVERY_S,
) -> Tuple[np.ndarray, np.ndarray]:
    """Features and labels of one split (padding removed).

    Args:
        feature_model: keras.Model. Images -> features.
        inp: ConfigDict. A `config.input` section: the data source and its
            evaluation preprocessing (pp.eval_resize_size).
        run: input_pipeline.RunInput. The model's input size.
        split: str.
        batch_size: int. Global batch.
        strategy: tf.distribute.Strategy or None.
        every_s: float. Seconds between progress lines (batch, %,
            elapsed, time left, images/s); 0: none.

    Returns:
        (features (N, D) float32, labels (N,) int32).
    """
    strategy = strategy or tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: input_pipeline.eval_dataset(
            inp, run, split, batch_size, ctx
        )
    )

    # One host holds every replica's outputs; several workers (or TPU
    # hosts) need an all-gather. Only then is a collective launched: a
    # gather next to other collectives of another type and dtype is fragile
    # in processes that create several strategies.
    extended = strategy.extended
    multi_worker = getattr(extended, "_in_multi_worker_mode", lambda: False)()

    @tf.function(autograph=False)  # no branch on a tensor to rewrite
    def step(images, labels, mask):
        def replica(images, labels, mask):
            return tf.cast(feature_model(images, training=False),
                           tf.float32), labels, mask

        out = strategy.run(replica, args=(images, labels, mask))
        if multi_worker:
            return [strategy.gather(t, axis=0) for t in out]
        return [
            tf.concat(strategy.experimental_local_results(t), axis=0)
            for t in out
        ]

    total = sources.num_split_examples(inp, split)
    batches = -(-total // batch_size) if total else None
    feats, labels = [], []
    rate = Rate(batches, "batch", every_s, images=batch_size)
    rate.update(0)
    for i, (images, y, mask) in enumerate(dataset, start=1):
        f, y, mask = (t.numpy() for t in step(images, y, mask))
        keep = mask > 0
        feats.append(f[keep])
        labels.append(y[keep])
        line = rate.update(i)
        if line:
            logging.info("features of %s: %s", split, line)
    if not feats:
        raise UsageError(f"Split {split!r} of {inp.dataset} is empty.")
    feats = np.concatenate(feats)
    _check_finite(feats, split, inp.dataset)
    return feats, np.concatenate(labels).astype(np.int32)


def _check_finite(feats: np.ndarray, split: str, dataset: str) -> None:
    """Refuses features holding NaN or inf: the probe's standardisation
    would make every weight NaN and every prediction class 0, a score
    that is only that class's share."""
    bad = int(np.count_nonzero(~np.isfinite(feats).all(axis=1)))
    if bad:
        raise UsageError(
            f"The model gives features that are not finite (NaN or inf) "
            f"for {bad} of the {len(feats)} images of {split!r} of "
            f"{dataset}: a linear probe on them would measure nothing. Its "
            "weights hold NaN or inf, or its activations overflow: probe "
            "a checkpoint whose training loss was finite (an earlier one), "
            "or a model trained in float32.")


# ------------------------------------------------------------ evaluator
@dataclasses.dataclass
class FewShotData:
    """One few-shot data set: a data source and its two splits."""

    name: str
    dataset: str
    train_split: str
    test_split: str
    data_dir: Optional[str] = None
    # Manual downloads (config.input.manual_dir); None: <data_dir>/...
    manual_dir: Optional[str] = None  # .../downloads/manual
    skip_bad_images: bool = False  # an image folder's (config.input's)
    evaluator: str = "fewshot"  # its evaluator's name in config.evals
    # The features read (config.input's): a TFDS image and class label.
    image_key: str = "image"
    label_key: str = "label"

    def input(self, resize_size) -> ml_collections.ConfigDict:
        """The `config.input` section that reads this data set, resized to
        `resize_size` (both sides, as big_vision's few-shot evaluator
        resizes) before the central crop (None: resized only)."""
        return config_lib.complete(dict(
            dataset=self.dataset,
            data_dir=self.data_dir,
            manual_dir=self.manual_dir, skip_bad_images=self.skip_bad_images,
            image_key=self.image_key, label_key=self.label_key,
            pp=dict(eval_resize_size=resize_size),
        ), "input")


# Few-shot data TFDS cannot download (builder name -> the files its pool
# and test split need in the manual directory, and their source).
MANUAL_DATA = {
    "imagenet2012": (("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar"),
                     "https://image-net.org/ (the ILSVRC 2012 training and "
                     "validation images)"),
}


def _ready(datasets, resize_size, download, in_turn, not_run, progress):
    """(data, its config.input section, its DatasetInfo) of each data set
    that can be read once prepared (`sources.prepared_or_skipped`), every
    split checked before any feature is extracted (a wrong one in the last
    data set is said before hours of the first one's features)."""
    ready = []
    for data in datasets:
        inp = data.input(resize_size)
        if not sources.prepared_or_skipped(
                functools.partial(_prepare, data, download), data.name,
                f"few-shot {data.name}", in_turn, not_run, progress):
            continue
        info = sources.dataset_info(inp)
        for field in ("train_split", "test_split"):
            sources.check_split(inp, getattr(data, field), "config.evals."
                                f"{data.evaluator}.datasets.{data.name}."
                                f"{field}", dict(info.num_examples))
        folder_classes.check_probe_classes(inp, data.train_split,
                                           data.test_split)
        ready.append((data, inp, info))
    return ready


def run(  # noqa: PLR0913 (its options, by keyword)
    model: keras.Model,
    evaluator,
    datasets: Sequence[FewShotData],
    *,
    image_size=224,
    resize_size: Optional[int] = 256,
    strategy: Optional[tf.distribute.Strategy] = None,
    download: bool = True,
    every_s: float = EVERY_S,
    in_turn: Optional[Callable] = None,
    on_result: Optional[Callable] = None,
) -> Tuple[Dict[str, Mapping], Dict[str, str]]:
    """Few-shot linear accuracy of `model`'s frozen representation.

    Args:
        model: keras.Model. A keras_vit classifier or features model, built
            at `image_size`.
        evaluator: a few-shot evaluator (a `config.evals` entry of type
            "fewshot", or a dict of its fields; the rest take their
            defaults): shots and seeds (shot counts and random draws per
            shot count), l2_reg, batch_size (feature extraction, all
            replicas), layer and layer_norm (which representation to probe,
            `probe_model`: None, the pre-logits one; an encoder block
            index, that block's class token, mean patch token with "gap"
            pooling).
        datasets: FewShotData list.
        image_size, resize_size: preprocessing: resize to resize_size, take
            the central image_size crop (resize_size None: resize only).
        strategy: tf.distribute.Strategy or None.
        download: bool. Download and prepare missing TFDS data.
        every_s: float. Seconds between progress lines of the feature
            extraction (`config.log.every_seconds`); 0: none.
        in_turn: (prepare, name) -> None: runs a data set's download and
            preparation in the cluster's turn (the chief's first,
            `training.distribute.prepare_in_turn`); None: at once.
        on_result: (results, not_run) -> None, called after each data set
            with what is done so far (the command writes its reports, so
            that a run stopped later keeps them).

    Returns:
        (results, not_run): {data set name: {str(shots): {"mean",
        "per_seed"}}} and {data set name: why it was not run} for data
        that is missing (e.g. a manual download).
    """
    opts = config_lib.complete_evaluator(evaluator, "fewshot",
                                         where="few-shot evaluator")
    feature_model = probe_model(model, opts.layer, bool(opts.layer_norm))
    run_input = input_pipeline.RunInput(image_size=image_size)
    batch_size = int(opts.batch_size or 256)
    results, not_run = {}, {}
    progress = Progress(len(datasets))
    ready = _ready(datasets, resize_size, download, in_turn, not_run,
                   progress)
    for data, inp, info in ready:
        logging.info("few-shot data set %s: %s (%d classes)%s.",
                     progress.start(), data.name, info.num_classes,
                     progress.eta())
        extract = functools.partial(extract_features, feature_model, inp,
                                    run_input, batch_size=batch_size,
                                    strategy=strategy, every_s=every_s)
        with data_checks.explained_errors(inp, [  # bad files named
                ("few-shot", data.train_split), ("few-shot", data.test_split)]):
            results[data.name] = _score(data.name, extract, data, opts,
                                        info.num_classes)
        progress.finish()
        if on_result is not None:
            on_result(results, not_run)
    return results, not_run


def _score(name: str, extract: Callable, data: FewShotData, opts,
           num_classes: int) -> Dict[str, Mapping]:
    """The few-shot accuracies of one data set, from the features that
    `extract(split)` gives of its two splits (logged)."""
    start = time.time()
    train, test = extract(split=data.train_split), extract(
        split=data.test_split)
    scores = evaluate_features(train, test, num_classes, tuple(opts.shots),
                               tuple(opts.seeds), float(opts.l2_reg))
    logging.info(
        "few-shot %s (%d train, %d test features, %.0fs): %s", name,
        len(train[1]), len(test[1]), time.time() - start,
        ", ".join(f"{k}-shot {100 * v['mean']:.2f}%"
                  for k, v in scores.items()))
    return scores


def probe_model(
    model: keras.Model, layer: Optional[int] = None, norm: bool = True
) -> keras.Model:
    """Images to the features a few-shot probe reads.

    Args:
        model: keras.Model. A keras_vit classifier or features model.
        layer: int or None. None: the pre-logits representation
            (`features_model`). An encoder block index (negative from the
            end): the output of that block, pooled as the model pools its
            last one (the class token, or the mean patch token with "gap"),
            from one pass that stops at that block.
        norm: bool. With `layer`: apply the encoder's final LayerNorm first,
            as the model does to its last block (so the last block with
            `norm` gives the pooled representation before any pre-logits
            layer).

    Returns:
        keras.Model. Images to (batch, width) features.
    """
    arch = architecture_of(model)
    if layer is None:
        return features_model(model) if arch.num_classes else model
    tokens = intermediate_model(model, int(layer), norm=norm)
    pooled = vit_layers.TokenPooling(arch.pooling, name="probe_pooling")(
        tokens.outputs[0])
    return keras.Model(tokens.input, pooled,
                       name=f"{model.name}_block{int(layer)}")


def _prepare(data: FewShotData, download: bool) -> None:
    if data.dataset in (sources.DIGITS, sources.FOLDER):
        return
    builder = sources.named_builder(data.dataset, data.data_dir,
                                    "few-shot data set")
    files, url = MANUAL_DATA.get(builder.name, ((), ""))
    vtab.prepare_builder(builder, data.name, data.data_dir, download,
                         data.manual_dir, files, url)
