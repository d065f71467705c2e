"""Checks that turn bad training data into clear errors (or counted skips).

- Unreadable image files in an image folder (corrupt, truncated, empty):
  with `config.input.skip_bad_images` they are found before training (one
  parallel decoding pass per split), left out, counted and named in the log;
  without it, the decoder's error during training is traced back to the
  files (`explained_errors`), so the message names them and the fix.
- Labels outside [0, num_classes): a silently wrong loss otherwise
  (`tf.one_hot` of an out-of-range label is all zeros).
- Splits that do not exist: found at start-up, not after training (an
  evaluation split sharing the training split's examples: `overlaps`).
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from keras_vit.data import folders, sources
from keras_vit.data import preprocessing as pp
from keras_vit.data.decoding import as_written
from keras_vit.errors import UsageError

LABEL_ERROR = "Label out of range"
# Files named in one message; the rest are counted.
_MAX_NAMED = 10
# (image folder, split) -> files left out by skip_bad_images, this process.
_SKIPPED = {}


# What a graph (a tf.function, a SavedModel) puts around an op's message.
_GRAPH_NOISE = re.compile(r"Graph execution error:|Detected at node |"
                          r"<stack traces unavailable>")
# A tf.debugging assertion's own message: its first [...] (the
# condition and the values follow in more brackets).
_ASSERTED = re.compile(r"assertion failed: \[(.+?)\](?= \[|\s*$)",
                       re.MULTILINE)


# A decoder's message (not a model op's): what a read-ahead image raises.
_IMAGE_ERROR = re.compile(r"image|jpe?g|png|gif|bmp|webp", re.IGNORECASE)


def decode_reason(error: Exception) -> str:
    """The decoder's message without TensorFlow's node and op decorations
    (an OpError's, a graph's too: the assertion's message, not "Graph
    execution error:"), or the error's own text."""
    if not isinstance(error, tf.errors.OpError):
        return str(error)
    message = error.message.strip()
    asserted = _ASSERTED.search(message)
    if asserted:
        return asserted.group(1).strip()
    lines = [line for line in message.splitlines()
             if line.strip() and not line[0].isspace()
             and not _GRAPH_NOISE.match(line)]
    text = (lines or message.splitlines() or [""])[0]
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:.*$", "", text).strip()


def _decode(path: tf.Tensor, keep_size: Optional[int] = None) -> tf.Tensor:
    """The image at `path`, its height; with `keep_size`, refused where the
    keep-aspect resize of its shorter side to `keep_size` would be."""
    shape = tf.shape(pp.decode_image(tf.io.read_file(path)))
    if not keep_size:
        return shape[0]
    with tf.control_dependencies([pp.assert_resizable(
            pp.small_side_size(shape, keep_size))]):
        return tf.identity(shape[0])


def find_unreadable_images(paths: Sequence[str], keep_size=None
                           ) -> List[Tuple[str, str]]:
    """[(path, reason)] for the files in `paths` that do not decode (or,
    with `keep_size`, that the evaluation's keep-aspect resize to it
    refuses: `preprocessing.eval_keep_size`).

    Decodes every file once, in parallel, exactly as training does.
    """
    paths = list(paths)
    if not paths:
        return []
    ds = tf.data.Dataset.from_tensor_slices(paths).enumerate()
    ds = ds.map(as_written(lambda i, path: (i, _decode(path, keep_size))),
                num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    readable = {int(i) for i, _ in ds.as_numpy_iterator()}
    bad = []
    for i, path in enumerate(paths):
        if i in readable:
            continue
        try:  # once more, alone, for the decoder's message
            _decode(tf.constant(path), keep_size)
            reason = "could not be read"
        except tf.errors.OpError as error:
            reason = decode_reason(error)
        bad.append((path, reason))
    return bad


def _listing(bad: Sequence[Tuple[str, str]]) -> str:
    named = "; ".join(f"{p} ({r})" for p, r in bad[:_MAX_NAMED])
    more = len(bad) - _MAX_NAMED
    return named + (f"; and {more} more" if more > 0 else "")


@functools.lru_cache(maxsize=32)
def _unreadable(root: str, split: str, paths: Tuple[str, ...], keep_size):
    bad = find_unreadable_images(paths, keep_size)
    _SKIPPED[(root, split)] = len(bad)
    if bad:
        logging.warning(
            "Skipping %d unreadable image file(s) of split %r in %s "
            "(skip_bad_images is on): %s", len(bad), split, root,
            _listing(bad),
        )
    return frozenset(p for p, _ in bad)


def drop_unreadable(inp, split: str, paths, labels, evaluated=False):
    """`paths`, `labels` of `config.input`'s image folder without the files
    that do not decode, or, `evaluated`, that its evaluation's resize
    refuses (found once per split and process; counted and named in the
    log)."""
    bad = _unreadable(str(inp.data_dir), split, tuple(paths),
                      pp.eval_keep_size(inp) if evaluated else None)
    if not bad:
        return paths, labels
    keep = [i for i, p in enumerate(paths) if p not in bad]
    if not keep:
        raise UsageError(
            f"No readable image in split {split!r} of {inp.data_dir}."
        )
    lost = sorted(set(labels.tolist()) - set(labels[keep].tolist()))
    if lost:  # as an empty class folder: a class never trained or scored
        names = folders.folder_index(inp.data_dir)[1]
        raise UsageError(
            f"Every image of class {', '.join(names[i] for i in lost)} in "
            f"split {split!r} of {inp.data_dir} is unreadable (named in the "
            "log above): replace them, or remove the class folder.")
    return [paths[i] for i in keep], labels[keep]


def skipped_images(inp) -> dict:
    """{split: files left out} of `config.input`'s image folder by
    `skip_bad_images` in this process (splits with none left out are
    not listed), for the results files beside the log's names."""
    root = str(inp.data_dir)
    return {split: n for (where, split), n in sorted(_SKIPPED.items())
            if where == root and n}


def training_examples(inp) -> Optional[int]:
    """`sources.training_examples` of `config.input`, without the files
    that `skip_bad_images` leaves out of an image folder (so that a run
    sized in epochs counts the images it trains on)."""
    if not (inp.skip_bad_images and inp.dataset == sources.FOLDER
            and not inp.vtab_task):
        return sources.training_examples(inp)
    split = folders.resolve_split(inp.data_dir, inp.train_split)
    paths, labels = drop_unreadable(inp, split, *folders.folder_split(
        inp.data_dir, split))  # the split the pipeline reads: found once
    return sources.examples_kept(labels, int(inp.train_examples_per_class))


def _label_bound(inp, num_classes: Optional[int],
                 labelled: bool) -> Optional[int]:
    if not labelled:
        return None  # self-supervised: labels are not used, may be missing
    n = int(num_classes or 0)
    if n:
        return n
    try:
        return int(sources.dataset_info(inp).num_classes)
    except (KeyError, AttributeError, TypeError):
        return None  # a label feature without a class count


def check_labels(ds: tf.data.Dataset, inp, num_classes: Optional[int],
                 labelled: bool = True) -> tf.data.Dataset:
    """Fails the pipeline on a label outside [0, num_classes) (the run's
    `config.model.num_classes`, None: the data source's); unchecked where
    the run uses no labels (`labelled` False: masked patch prediction)."""
    n = _label_bound(inp, num_classes, labelled)
    if n is None:
        return ds
    message = (
        f"{LABEL_ERROR}: the data holds a label outside [0, {n}), the "
        f"model's classes (config.model.num_classes={num_classes}). "
        "Set config.model.num_classes to the number of classes in the "
        "data, or to None to read it from the data source; negative labels "
        "(unlabelled examples) cannot be trained on."
    )

    def check(image, label):
        checks = [
            tf.debugging.assert_less(label, tf.cast(n, label.dtype),
                                     message=message),
            tf.debugging.assert_non_negative(label, message=message),
        ]
        with tf.control_dependencies(checks):
            return image, tf.identity(label)

    return ds.map(as_written(check), num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=True)


def run_splits(inp, evals) -> List[Tuple[str, str]]:
    """(config field, split) of the splits a training run reads: its
    `config.input` training split and its accuracy evaluators' (`evals`)
    final and periodic splits."""
    out = [("input.train_split", inp.train_split)]
    for name, entry in evals.items():
        if entry.type != "accuracy":
            continue
        out.append((f"evals.{name}.split", entry.split))
        if entry.every_steps:
            out.append((f"evals.{name}.val_split",
                        entry.val_split or entry.split))
    return out


def check_splits(inp, splits: Sequence[Tuple[str, str]]) -> None:
    """Raises ValueError at start-up for a split (of `run_splits`) that
    does not exist (the digits data and image folders; TFDS checks its own
    when reading)."""
    if inp.vtab_task or inp.dataset not in (sources.DIGITS, sources.FOLDER):
        return
    for field, split in splits:
        try:
            sources.num_split_examples(inp, split)
        except ValueError as error:
            fix = ("" if field == "input.train_split" else
                   " the training does not read (e.g. config.input."
                   f"train_split={_held_out_pair(inp)} here)")
            raise UsageError(
                f"config.{field}={split!r} cannot be used: "
                f"{str(error).rstrip('.')}; set it to an existing split or "
                f"a slice of one{fix}.") from None


def _held_out_pair(inp) -> str:
    """A training split and a held-out one: an image folder's own held-out
    split (val, test), else slices of the split the training slices, each
    of one example or more (its last tenth, at least one example, held
    out where its size is known)."""
    base = str(inp.train_split).partition("[")[0].strip() or "train"
    if inp.dataset == sources.FOLDER:
        held = [s for s in ("val", "test") if s != base
                and s in folders.folder_index(str(inp.data_dir))[0]]
        if held:
            return f"'{base}' and '{held[0]}'"
    try:
        n = sources.num_split_examples(inp, base)
    except ValueError:
        n = None
    k = max(1, (n or 0) // 10)
    if not n or n < 2:
        return f"'{base}[:90%]' and '{base}[90%:]'"
    return f"'{base}[:{n - k}]' and '{base}[{n - k}:]'"


def explain_input_error(inp, splits: Sequence[Tuple[str, str]],
                        error: Exception, restored: Optional[str] = None
                        ) -> Optional[Exception]:
    """A clear error for a failure inside the input pipeline of a run's
    `config.input` reading `splits` (`run_splits`), or None.

    Label errors keep their own message; for image folders, the splits of
    the run are decoded again to name the files that fail. `restored`: the
    checkpoint whose data iterator the run resumed with, which holds the
    images read ahead before it was saved: a file gone or skipped since
    then fails from there, and only leaving that iterator out resumes.
    """
    text = str(error)
    match = re.search(re.escape(LABEL_ERROR) + r"[^\]]*", text)
    if match:
        # TensorFlow's message quotes the assertion's text (\' for ').
        return UsageError(match.group(0).strip().replace("\\'", "'"))
    if inp.dataset != sources.FOLDER or inp.vtab_task:
        return None
    root = inp.data_dir
    paths = {False: set(), True: set()}  # read by training, evaluated
    for field, split in splits:
        name = re.sub(r"\[.*\]$", "", str(split))
        try:
            paths[field != "input.train_split"].update(
                folders.folder_split(root, name)[0])
        except ValueError:
            continue
    # An evaluated image also fails where its keep-aspect resize refuses it.
    bad = dict(find_unreadable_images(sorted(paths[False])))
    bad.update(find_unreadable_images(sorted(paths[True]),
                                      pp.eval_keep_size(inp)))
    bad = sorted(bad.items())
    held = restored and isinstance(error, tf.errors.InvalidArgumentError) \
        and _IMAGE_ERROR.search(decode_reason(error))
    if held and (not bad or inp.skip_bad_images):
        return UsageError(
            f"An image of folder {root} read ahead before {restored} was "
            "saved cannot be decoded, and that checkpoint's data iterator "
            "holds it (removing the file or skipping bad images does not "
            "reach it): run the same command with "
            "config.checkpoints.iterator=False, which resumes from that "
            "checkpoint with the data order drawn anew from its step.")
    return _undecodable(root, bad, restored) if bad else None


def _undecodable(root: str, bad: Sequence[Tuple[str, str]],
                 restored: Optional[str] = None) -> UsageError:
    """The files `bad` named, and the fix; a run resumed with the data
    iterator of `restored` may meet them read ahead again: that fix too."""
    resumed = (f" Resumed from {restored}, whose data iterator may hold "
               "them read ahead: add config.checkpoints.iterator=False too."
               if restored else "")
    return UsageError(
        f"Cannot decode {len(bad)} image file(s) of image folder {root}: "
        f"{_listing(bad)}. Remove or replace these files, or set "
        "config.input.skip_bad_images=True to skip unreadable images (they "
        f"are counted and named in the log).{resumed}"
    )


def check_evaluation_images(inp, splits: Sequence[Tuple[str, str]]) -> None:
    """An image folder's evaluation splits (of `run_splits`) decoded once
    at start-up (and checked to fit the evaluation's keep-aspect resize),
    so that a bad file there stops the run before it trains,
    not at its first evaluation an epoch later: with
    `config.input.skip_bad_images` the files are left out (counted and
    named in the log, once: the evaluation reuses what was found), else a
    UsageError names them and the fix. The training split is checked as
    it is read (`explained_errors`), or, skipping, when its data set is
    built."""
    if inp.dataset != sources.FOLDER or inp.vtab_task:
        return
    evaluated = dict.fromkeys(split for field, split in splits
                              if field.startswith("evals."))
    paths = {}  # every file once, where the splits overlap
    for split in evaluated:
        files, labels = folders.folder_split(inp.data_dir, split)
        if inp.skip_bad_images:
            drop_unreadable(inp, split, files, labels, evaluated=True)
        else:
            paths.update(dict.fromkeys(files))
    bad = find_unreadable_images(sorted(paths), pp.eval_keep_size(inp))
    if bad:
        raise _undecodable(inp.data_dir, bad)


# What reading a bad file raises in the input pipeline: undecodable bytes
# (InvalidArgument), a broken link (NotFound), a folder with an image's
# name (FailedPrecondition), a file this user may not read.
_READ_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.NotFoundError,
                tf.errors.FailedPreconditionError,
                tf.errors.PermissionDeniedError)


@contextlib.contextmanager
def explained_errors(inp, splits: Sequence[Tuple[str, str]],
                     restored: Optional[str] = None):
    """Re-raises input-pipeline failures as `explain_input_error` does."""
    try:
        yield
    except _READ_ERRORS as error:
        better = explain_input_error(inp, splits, error, restored)
        if better is None:
            raise
        raise better from None
