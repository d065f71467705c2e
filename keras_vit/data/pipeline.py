"""Input pipelines (tf.data, host side). Never builds the model.

Sources (digits, image folders, TFDS, VTAB tasks) are defined in
`keras_vit.data.sources`.

Each pipeline yields (images float32 [-1, 1] (B, H, W, 3), labels int32 (B,))
for training (with Mixup or CutMix, `keras_vit.data.augment`, float32
mixed label vectors (B, classes) instead), and additionally a float32 mask
(B,) for evaluation, where the last batch is padded to a static shape (TPUs
need static shapes) and the padding is masked out of every metric. For
masked patch prediction (`config.objective.mpp.enabled`) the images come as
the MPP model's inputs, a dict with the corruption drawn by
`keras_vit.data.masking`.

Every pipeline takes a run's `config.input` section and a `RunInput`:
what else of the run it needs (the model's input size, the seed, the
head's width, the MPP corruption).

With several input pipelines (one per host or worker, from the strategy's
`tf.distribute.InputContext`), each reads a disjoint, near-equal part of the
split (`tfds.even_splits` for TFDS, every P-th example otherwise), and every
pipeline yields the same number of evaluation batches, so no worker waits
for another at the end of an evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from keras_vit.data import augment, folders, masking, sources, vtab, vtab_labels
from keras_vit.data import checks as data_checks
from keras_vit.data import preprocessing as pp
from keras_vit.data.decoding import as_written
from keras_vit.data.preprocessing import from_config as make_preprocess_fn
from keras_vit.errors import UsageError


def _identity(image: tf.Tensor) -> tf.Tensor:
    return image


@dataclasses.dataclass(frozen=True)
class RunInput:
    """What an input pipeline takes of a run besides its `config.input`.

    Attributes:
        image_size: int or (height, width). The model's input
            (`config.model.image_size`).
        seed: int. `config.seed`: data order and augmentation.
        num_classes: int or None. The head's width
            (`config.model.num_classes`; None: the data source's).
        mpp: ConfigDict or None. `config.objective.mpp` when masked patch
            prediction is on: the images come with their corruption.
        patches: int. Patch tokens per image (masked patch prediction).
    """

    image_size: Any
    seed: int = 0
    num_classes: Optional[int] = None
    mpp: Any = None
    patches: int = 0


@dataclasses.dataclass
class _Shard:
    """This pipeline's part of a split.

    `dataset` yields (raw, label) pairs, where raw is an image or its
    encoded bytes, and `decode` turns raw into a uint8 image: shuffle
    buffers and caches then hold compressed images, decoded only when used.
    `split_size` is the size of the whole split when this part is an exact,
    even partition of it (else None); `largest_part` the size of the
    largest of its parts (every P-th example: ceil(split_size / P); TFDS's
    even parts of a joined split may be larger, each sub-split's remainder
    going to the first parts; None where not known).
    `epochs`: the dataset is endless,
    every example once per epoch, each epoch in an order of its own (it
    needs no shuffle buffer).
    """

    dataset: tf.data.Dataset
    split_size: Optional[int]
    decode: Callable[[tf.Tensor], tf.Tensor] = _identity
    epochs: bool = False
    largest_part: Optional[int] = None


# ---------------------------------------------------------------- sources
def _pipelines(input_context) -> Tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def _shard(inp, run_seed: int, split: str, training: bool, input_context,
           seed: int) -> _Shard:
    """(image uint8 HWC, label int32) pairs of this pipeline's part of
    `split` of `config.input`'s data; training shards also shuffle their
    files or paths (`seed`); `run_seed` draws the examples kept per
    class."""
    count, index = _pipelines(input_context)
    per_class = int(inp.train_examples_per_class) if training else 0
    if per_class:
        sources.check_examples_per_class(inp)
    if inp.dataset == sources.DIGITS and not inp.vtab_task:
        x, y = sources.digits_split(split)
        if per_class:
            keep = sources.examples_per_class(y, per_class, run_seed)
            x, y = x[keep], y[keep]
        ds = tf.data.Dataset.from_tensor_slices(
            (x[index::count, :, :, None], y[index::count])
        )
        return _Shard(ds, len(y), largest_part=-(-len(y) // count))
    if inp.dataset == sources.FOLDER and not inp.vtab_task:
        paths, labels = folders.folder_split(inp.data_dir, split)
        if inp.skip_bad_images:
            paths, labels = data_checks.drop_unreadable(
                inp, split, paths, labels, evaluated=not training)
        if per_class:
            keep = sources.examples_per_class(labels, per_class, run_seed)
            paths, labels = [paths[i] for i in keep], labels[keep]
        size = len(labels)
        paths, labels = paths[index::count], labels[index::count]
        if training and not len(labels):
            raise UsageError(
                f"{inp.data_dir}: {size} training image(s) for {count} input "
                "pipelines leave this one none: add images, or train on "
                "fewer hosts.")
        epochs = training and not inp.cache_train
        if epochs:
            ds = _epochs(paths, labels, seed)
        else:
            # Strings even where this pipeline's part is empty (more
            # evaluation pipelines than images: all padding).
            ds = tf.data.Dataset.from_tensor_slices((
                tf.constant(paths, tf.string), labels))
            if training:  # file order (then cached); paths, not images
                ds = ds.shuffle(len(paths), seed=seed)
        ds = ds.map(
            as_written(lambda path, label: (tf.io.read_file(path), label)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return _Shard(ds, size, pp.decode_image, epochs,
                      largest_part=-(-size // count))
    return _tfds_shard(inp, split, training, input_context, seed)


def _epochs(paths, labels, seed: int) -> tf.data.Dataset:
    """(path, label) of every file once per epoch, endlessly, epoch e in
    the order that (seed, e) draws. Files are read after it, so memory
    holds paths, not a shuffle buffer of images, nor does an iterator's
    checkpoint (its place: the epoch and the index in it, besides the
    batches in flight); a resumed run reads the files as they are then."""
    paths = tf.constant(paths, tf.string)
    labels = tf.constant(labels, tf.int32)

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(tf.size(labels, out_type=tf.int64)),
            seed=tf.stack([tf.constant(seed, tf.int64), e]))
        return tf.data.Dataset.from_tensor_slices(
            (tf.gather(paths, order), tf.gather(labels, order)))

    # Declared endless (flat_map hides it), so that a multi-worker
    # strategy skips its per-step all-reduce on whether data is left.
    endless = tf.data.experimental.assert_cardinality(
        tf.data.INFINITE_CARDINALITY)
    return tf.data.Dataset.range(np.iinfo(np.int64).max).flat_map(
        epoch).apply(endless)


def _tfds_shard(inp, split, training, input_context, seed) -> _Shard:
    import tensorflow_datasets as tfds

    builder = sources.tfds_builder(inp)
    count, index = _pipelines(input_context)
    read_context, largest = None, None
    part = split
    if count > 1:
        try:  # exact, near-equal example ranges; only their files are read
            parts = tfds.even_splits(split, n=count)
            part = parts[index]
            sizes = [sources.tfds_split_size(builder, p) for p in parts]
            largest = None if None in sizes else max(sizes)
        except (ValueError, TypeError, AssertionError):
            part, read_context = split, input_context  # file-level sharding
    read_config = tfds.ReadConfig(
        shuffle_seed=seed, input_context=read_context, skip_prefetch=True
    )
    image_key, label_key = inp.image_key, inp.label_key
    # Encoded uint8 images stay encoded until after the shuffle and cache.
    feature = builder.info.features[image_key]
    encoded = (
        not inp.vtab_task
        and isinstance(feature, tfds.features.Image)
        and feature.np_dtype == np.uint8
    )
    ds = builder.as_dataset(
        split=part,
        shuffle_files=training,
        read_config=read_config,
        decoders=({image_key: tfds.decode.SkipDecoding()} if encoded
                  else vtab_labels.image_decoders(feature, image_key)))

    def to_pair(example):
        return example[image_key], tf.cast(example[label_key], tf.int32)

    if inp.vtab_task:  # the task's image and derived label
        to_pair = vtab.get_task(inp.vtab_task).example_fn
    ds = ds.map(as_written(to_pair), num_parallel_calls=tf.data.AUTOTUNE)
    exact = read_context is None
    return _Shard(
        ds,
        sources.tfds_split_size(builder, split) if exact else None,
        pp.decode_image if encoded else _identity,
        largest_part=largest,
    )


def _check_batch(global_batch: int, input_context) -> int:
    if int(global_batch) <= 0:
        raise UsageError(f"batch_size must be positive, got {global_batch}.")
    replicas = input_context.num_replicas_in_sync if input_context else 1
    if global_batch % replicas:
        raise UsageError(
            f"batch_size {global_batch} is not divisible by the "
            f"{replicas} replicas: use a multiple of {replicas}."
        )
    return global_batch // replicas


def pipeline_seed(seed: int, input_context=None, start_step: int = 0, *,
                  evaluation: bool = False) -> int:
    """The seed of one input pipeline of a run of `seed`: differs between
    pipelines, and between a run and its resumption at `start_step` (when
    the data order is not restored from a checkpoint); an `evaluation`
    pipeline's (its MPP corruption) is apart from every training one's."""
    _, index = _pipelines(input_context)
    entropy = [int(seed), index, int(start_step)] + [1] * evaluation
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)


def train_dataset(
    inp, run: RunInput, global_batch: int, input_context=None, *,
    start_step: int = 0
) -> tf.data.Dataset:
    """Infinite, shuffled, augmented training batches of one replica, of a
    run's `config.input` section.

    `global_batch` is the batch over all replicas for one forward pass; the
    per-replica batch comes from the strategy's `input_context`. Batches keep
    a static shape (drop_remainder=True). `start_step` > 0 (a resumed run
    whose data order was not checkpointed) draws a new data order instead
    of replaying the first steps' examples.
    """
    batch = _check_batch(global_batch, input_context)
    split = inp.train_split
    seed = pipeline_seed(run.seed, input_context, start_step)
    shard = _shard(inp, run.seed, split, True, input_context, seed)
    ds = shard.dataset
    ds = data_checks.check_labels(ds, inp, run.num_classes, run.mpp is None)
    # cache_train: cache the (small) training split only, e.g. VTAB's 1,000
    # examples, without holding a large test split in memory.
    if inp.cache_train:
        ds = ds.cache()
    if not shard.epochs:
        ds = ds.repeat()
        ds = ds.shuffle(inp.shuffle_buffer, seed=seed)
    # Encoded images are decoded by the preprocessing, which decodes a
    # JPEG only inside its Inception crop.
    encoded = shard.decode is not _identity
    # RandAugment draws, as the crops and flips, from (seed, example index)
    # (keras_vit/data/augment.py): hosts and a resumed run that drew a new
    # data order draw their own ops, and the same run repeats them.
    preprocess = make_preprocess_fn(inp.pp, run.image_size, seed,
                                    training=True, encoded=encoded)
    decode = _identity if encoded else shard.decode
    # Stateless augmentation seeded by (seed, example index): reproducible,
    # and the iterator stays serialisable, so checkpoints can hold it.
    ds = ds.enumerate()
    ds = ds.map(
        as_written(lambda index, example: (
            preprocess(
                decode(example[0]), tf.stack([tf.cast(seed, tf.int64), index])
            ),
            example[1],
        )),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    ds = ds.batch(batch, drop_remainder=True)
    mixing = inp.mix.mixup_alpha or inp.mix.cutmix_alpha
    if run.mpp is not None and mixing:
        raise UsageError(
            "Masked patch prediction has no labels to mix: set "
            "config.input.mix.mixup_alpha=0 and "
            "config.input.mix.cutmix_alpha=0 with "
            "config.objective.mpp.enabled=True."
        )
    if run.mpp is not None:  # the model's corruption inputs
        ds = masking.add_corruption(ds, run.mpp, run.patches, seed + 1)
    if mixing:  # labels become (batch, classes) mixed vectors
        mix = augment.mix_batch(
            int(run.num_classes or sources.dataset_info(inp).num_classes),
            float(inp.mix.mixup_alpha), float(inp.mix.cutmix_alpha), seed)
        # Batch i draws its mix (Mixup or CutMix, and the mix) from
        # (seed, i): the same seed draws the same mixes. One batch at a
        # time: a parallel map would hold (and checkpoint) a whole batch
        # per core in flight.
        ds = ds.enumerate().map(
            as_written(lambda index, batch: mix(*batch, index=index))
        )
    if inp.synthetic_data:
        # For benchmarks: one real batch, served again and again from
        # memory, so that the input work drops out of the timings.
        ds = ds.take(1).cache().repeat()
    return ds.prefetch(inp.prefetch)


def is_checkpointable(dataset: tf.data.Dataset) -> bool:
    """Whether an iterator over `dataset` can be saved in a checkpoint: not
    when it draws from Python (generators, py_function), whose state
    tf.data cannot save."""
    policy = tf.data.experimental.ExternalStatePolicy.FAIL
    try:
        dataset._as_serialized_graph(external_state_policy=policy)
    except (tf.errors.FailedPreconditionError, tf.errors.UnimplementedError):
        return False
    return True


def eval_dataset(
    inp, run: RunInput, split: str, global_batch: int, input_context=None,
    *, cache: bool = False,
) -> tf.data.Dataset:
    """One pass over `split` of a run's `config.input` data: (images,
    labels, mask), every batch full-size; `cache` keeps the split in
    memory (an accuracy evaluator's `cache`).

    The last batch is padded with masked-out examples, so shapes stay static
    and every example is counted exactly once. Where the split's size is
    known, every pipeline yields ceil(size / global_batch) batches per
    replica it feeds (all-padding batches where its part runs out).
    """
    batch = _check_batch(global_batch, input_context)
    shard = _shard(inp, run.seed, split, False, input_context, 0)
    ds = data_checks.check_labels(shard.dataset, inp, run.num_classes,
                                  run.mpp is None)
    if cache:
        ds = ds.cache()
    preprocess = make_preprocess_fn(inp.pp, run.image_size, run.seed,
                                    training=False)
    ds = ds.map(
        as_written(lambda raw, label: (preprocess(shard.decode(raw)),
                                       label)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = ds.batch(batch, drop_remainder=False)
    ds = ds.map(as_written(functools.partial(pad_batch, batch_size=batch)))
    if shard.split_size is not None:
        count, _ = _pipelines(input_context)
        replicas = input_context.num_replicas_in_sync if input_context else 1
        # Batches per pipeline: its largest part's, in whole steps of the
        # replicas it feeds, the same on every pipeline.
        per_step = max(replicas // count, 1)
        # Where the parts' sizes are unknown, a bound: each sub-split of a
        # joined split may give the first parts one example more.
        largest = shard.largest_part or (
            -(-shard.split_size // count) + split.count("+"))
        batches = -(-largest // batch)
        steps = -(-batches // per_step)
        h, w = pp.as_hw(run.image_size)
        padding = tf.data.Dataset.from_tensors((
            tf.zeros([batch, h, w, 3], tf.float32),
            tf.zeros([batch], tf.int32),
            tf.zeros([batch], tf.float32),
        )).repeat()
        ds = ds.concatenate(padding).take(steps * per_step)
    if run.mpp is not None:  # the same corruption at every evaluation
        ds = masking.add_corruption(ds, run.mpp, run.patches, pipeline_seed(
            run.seed, input_context, evaluation=True), per_example=True)
    return ds.prefetch(tf.data.AUTOTUNE)


def pad_batch(images, labels, batch_size: int):
    """Pads a (possibly short) batch to `batch_size`; returns a 0/1 mask."""
    n = tf.shape(labels)[0]
    pad = batch_size - n
    images = tf.pad(images, [[0, pad], [0, 0], [0, 0], [0, 0]])
    labels = tf.pad(labels, [[0, pad]])
    mask = tf.pad(tf.ones([n], tf.float32), [[0, pad]])
    images = tf.ensure_shape(images, [batch_size] + images.shape[1:].as_list())
    return (images, tf.ensure_shape(labels, [batch_size]),
            tf.ensure_shape(mask, [batch_size]))
