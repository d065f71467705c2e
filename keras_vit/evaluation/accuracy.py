"""Plain accuracy: top-1, top-5 and loss of a model on one split, through
the trainer's own distributed evaluation step."""

from __future__ import annotations

import collections
import sys
from typing import Dict, Optional, Sequence

import keras
import tensorflow as tf
from absl import logging

from keras_vit.data import checks as data_checks
from keras_vit.data import folders, sources
from keras_vit.data import pipeline as input_pipeline
from keras_vit.errors import UsageError
from keras_vit.progress import EVERY_S
from keras_vit.scoring import evaluator as evaluator_lib
from keras_vit.scoring.evaluator import Evaluator
from keras_vit.values import name_key


def evaluate_model(  # noqa: PLR0913 (its options, by keyword)
    model,
    inp,
    run: input_pipeline.RunInput,
    split: str,
    batch_size: int,
    strategy=None,
    progress: bool = True,
    every_s: float = EVERY_S,
    loss: str = "softmax_xent",
) -> Dict[str, float]:
    """Top-1, top-5 accuracy and mean loss of `model` on one split.

    Args:
        model: keras.Model. Images in [-1, 1] -> logits.
        inp: ConfigDict. A `config.input` section: the data source and its
            evaluation preprocessing.
        run: input_pipeline.RunInput. The model's input size.
        split: str.
        batch_size: int. Global batch; the last batch is padded and the
            padding masked out.
        strategy: tf.distribute.Strategy or None.
        progress: bool. Show progress: a bar on a terminal, else a line
            (batch, %, elapsed, time left, images/s) every `every_s`
            seconds.
        loss: str. The loss reported: "softmax_xent" or "sigmoid_xent"
            (a run's config.objective.loss).

    Returns:
        {"accuracy", "top5_accuracy", "loss", "num_examples"}.
    """
    strategy = strategy or tf.distribute.get_strategy()
    evaluator = Evaluator(
        model, strategy, num_classes=int(model.output_shape[-1]),
        loss=loss)
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: input_pipeline.eval_dataset(
            inp, run, split, batch_size, ctx
        )
    )
    on_batch = None
    if progress:
        total = sources.num_split_examples(inp, split)
        on_batch = evaluator_lib.progress_callback(
            -(-total // batch_size) if total else None, batch_size,
            f"eval {split}", every_s, bar=sys.stdout.isatty())
    # An image that does not decode: named, with the fix (not the
    # decoder's traceback).
    with data_checks.explained_errors(inp, [("eval", split)]):
        return evaluator.evaluate(dataset, on_batch=on_batch)



def ema_weights(source) -> Optional[bool]:
    """Whether a training workdir `source` gives its EMA (Polyak) weights
    (it kept them and --no_ema is not given); None for other sources,
    whose one set of weights needs no saying."""
    if source.kind != "workdir":
        return None
    return bool(getattr(source, "use_ema", True)
                and source.run_config().trainer.ema_decay)


def in_folder_order(model, class_names: Optional[Sequence[str]], inp):
    """`model`, its logits in the class order of the image folder that
    `inp` reads (labels index the sorted class folder names), when the
    model names its classes (a run's labels.txt, a Hugging Face
    id2label, a names file) and every class folder is one of them, in
    another order or fewer of them (a test folder of some classes: the
    folder's classes come first, in its order, then the model's others,
    so that the model still chooses among all its classes). Folders named
    otherwise (ImageNet's synset folders
    beside a model's words) are scored by index, as sorted folders, said
    in the log; a mix of both is refused, naming folders that match no
    class. Other data sets are scored by index."""
    if inp.dataset != sources.FOLDER or inp.vtab_task:
        return model
    if not class_names:
        logging.info(
            "The model records no class names: the sorted class folders of "
            "%s are scored as its classes 0, 1, ... (%s); "
            "--class_names_file names the model's, in its output order.",
            inp.data_dir, _few(list(folders.folder_index(inp.data_dir)[1])))
        return model
    names = [name_key(n) for n in class_names]  # (é as é, either way)
    width = int(model.output_shape[-1])
    if len(names) != width:
        raise UsageError(
            f"{len(names)} class names for a {width}-class model: give one "
            "name per class, in the model's output order.")
    folder_names = [name_key(n)
                    for n in folders.folder_index(inp.data_dir)[1]]
    twins = sorted({n for n in folder_names if folder_names.count(n) > 1})
    if twins:
        raise UsageError(
            f"Class folders of {inp.data_dir} differ only in how Unicode "
            f"writes their names ({_few(twins)}: one with a composed "
            "accent, one with a combining one): merge each pair.")
    counts = collections.Counter(names)
    ambiguous = sorted(n for n in set(folder_names) if counts[n] > 1)
    if ambiguous:
        raise UsageError(
            f"Class folders of {inp.data_dir} are named as model classes "
            f"whose names repeat ({_few(ambiguous)}): which class each "
            "holds is not known. Give the model's classes names that "
            "differ (one per line in --class_names_file, in its output "
            "order).")
    subset = len(folder_names) < len(names) and set(folder_names) <= set(
        names)
    strangers = [n for n in folder_names if n not in names]
    mixed = 0 < len(strangers) < len(folder_names)
    if folder_names == names or (len(folder_names) != len(names)
                                 and not subset and not mixed):
        return model  # the class counts are compared by the caller
    if len(strangers) == len(folder_names):
        logging.warning(
            "The class folders of %s are not named as the model's classes "
            "(%s, ...): scored by index, the sorted folders as classes 0, "
            "1, ...", inp.data_dir, ", ".join(names[:3]))
        return model
    if strangers:
        raise UsageError(
            f"Some class folders of {inp.data_dir} are the model's classes "
            f"and some are not ({_few(strangers)}): name "
            "every folder as the model's class it holds (one per line in "
            "--class_names_file, in the model's output order).")
    index = {name: i for i, name in enumerate(names)}
    order = [index[n] for n in folder_names]
    taken = set(order)
    order += [i for i in range(width) if i not in taken]
    if subset:
        logging.info("Scoring the %d class folders of %s by name among the "
                     "model's %d classes.", len(folder_names), inp.data_dir,
                     width)
    images = keras.Input(model.input_shape[1:], name="images")
    logits = keras.ops.take(model(images, training=False), order, axis=-1)
    return keras.Model(images, logits, name=model.name)


def _few(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f" and {len(names) - most} more"
                    if len(names) > most else "")
