"""Input pipelines (tf.data, host side). Never imports the model.

Sources:
- "digits": the 1,797 real 8 x 8 handwritten digits that scikit-learn ships
  (no download). Fixed split: a stratified shuffle with seed 0 puts 1,437
  images in "train" and 360 in "test".
- Any TFDS dataset by name (`data_dir` may be a gs:// path), with TFDS split
  strings ("train[:98%]").
- "folder": an image folder `data_dir/<split>/<class>/*.jpg|jpeg|png|gif|bmp`
  (the layout of `tfds.folder_dataset.ImageFolder`; class ids are the sorted
  class folder names of all splits). Splits take "train[:90%]" /
  "train[90%:]" / "train[:800]" slices.

Each pipeline yields (images float32 [-1, 1] (B, H, W, 3), labels int32 (B,))
for training, and additionally a float32 mask (B,) for evaluation, where the
last batch is padded to a static shape (TPUs need static shapes) and the
padding is masked out of every metric.

With several input pipelines (one per host or worker, from the strategy's
`tf.distribute.InputContext`), each reads a disjoint, near-equal part of the
split (`tfds.even_splits` for TFDS, every P-th example otherwise), and every
pipeline yields the same number of evaluation batches, so no worker waits
for another at the end of an evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from keras_vit.data import checks as data_checks
from keras_vit.data import preprocessing as pp
from keras_vit.data.preprocessing import from_config as make_preprocess_fn

DIGITS = "digits"
FOLDER = "folder"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")


@dataclasses.dataclass
class DatasetInfo:
    """What the trainer needs to know about a data source."""

    num_classes: int
    num_examples: dict  # split -> count (where known)
    class_names: Optional[List[str]] = None


def _identity(image: tf.Tensor) -> tf.Tensor:
    return image


@dataclasses.dataclass
class _Shard:
    """This pipeline's part of a split.

    `dataset` yields (raw, label) pairs, where raw is an image or its
    encoded bytes, and `decode` turns raw into a uint8 image: shuffle
    buffers and caches then hold compressed images, decoded only when used.
    `split_size` is the size of the whole split when this part is an exact,
    even partition of it (else None).
    """

    dataset: tf.data.Dataset
    split_size: Optional[int]
    decode: Callable[[tf.Tensor], tf.Tensor] = _identity


# ----------------------------------------------------------------- digits
@functools.lru_cache(maxsize=1)
def _digits_arrays():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    # 0..16 grey levels -> uint8 0..255.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=360, random_state=0, stratify=labels
    )
    return {"train": (x_train, y_train), "test": (x_test, y_test)}


def digits_split(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 8, 8), labels int32 (N,)) of "train" or "test",
    slices ("train[:80%]") included."""
    name, bounds = _parse_split(split)
    arrays = _digits_arrays()
    if name not in arrays:
        raise ValueError(
            f"The digits data has splits 'train' and 'test', got {split!r}."
        )
    x, y = arrays[name]
    start, stop = _slice(bounds, len(y), split)
    return x[start:stop], y[start:stop]


# ----------------------------------------------------------- image folder
_SPLIT_RE = re.compile(r"^([^\[\]]+)(?:\[(-?\d*%?):(-?\d*%?)\])?$")


def _parse_split(split: str):
    match = _SPLIT_RE.match(str(split).strip())
    if not match:
        raise ValueError(
            f"Cannot read split {split!r}: use a name, optionally sliced as "
            "'train[:90%]', 'train[90%:]' or 'train[100:200]'."
        )
    return match.group(1), (match.group(2) or "", match.group(3) or "")


def _slice(bounds, n: int, split: str) -> Tuple[int, int]:
    def index(text: str, default: int) -> int:
        if not text:
            return default
        value = (
            round(n * int(text[:-1]) / 100) if text.endswith("%")
            else int(text)
        )
        return min(max(value + n if value < 0 else value, 0), n)

    start, stop = index(bounds[0], 0), index(bounds[1], n)
    if stop <= start:
        raise ValueError(f"Split {split!r} selects no examples (of {n}).")
    return start, stop


@functools.lru_cache(maxsize=8)
def _folder_index(root: str):
    """{split: (paths, labels)}, class names; labels index the sorted class
    folder names over all splits. Files are listed once per process."""
    if not root:
        raise ValueError(
            "dataset='folder' needs data_dir: the folder that holds "
            "<split>/<class>/*.jpg|png."
        )
    if not tf.io.gfile.isdir(root):
        raise ValueError(
            f"Image folder {root!r} does not exist: set --config.data_dir to "
            "the folder holding <split>/<class>/."
        )

    def subdirs(path):
        return sorted(
            d.rstrip("/") for d in tf.io.gfile.listdir(path)
            if tf.io.gfile.isdir(os.path.join(path, d))
        )

    files: Dict[str, List[Tuple[str, str]]] = {}
    for split in subdirs(root):
        for name in subdirs(os.path.join(root, split)):
            folder = os.path.join(root, split, name)
            images = [
                (os.path.join(folder, f), name)
                for f in sorted(tf.io.gfile.listdir(folder))
                if f.lower().endswith(IMAGE_EXTENSIONS)
            ]
            # An empty class folder would silently drop (or never train)
            # its class; hidden ones (.ipynb_checkpoints) are not classes.
            if not images and not name.startswith("."):
                raise ValueError(
                    f"Class folder {folder} has no images "
                    f"({', '.join(IMAGE_EXTENSIONS)}; other files are "
                    "ignored): add images or remove the folder."
                )
            files.setdefault(split, []).extend(images)
    names = sorted({name for pairs in files.values() for _, name in pairs})
    if not names:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found under "
            f"{root}/<split>/<class>/."
        )
    ids = {n: i for i, n in enumerate(names)}
    index = {}
    for split, pairs in files.items():
        # A fixed order that mixes the classes, so that slices such as
        # train[:90%] hold every class.
        order = np.random.default_rng(0).permutation(len(pairs))
        index[split] = (
            [pairs[i][0] for i in order],
            np.array([ids[pairs[i][1]] for i in order], np.int32),
        )
    return index, names


def folder_split(root: str, split: str) -> Tuple[List[str], np.ndarray]:
    """(file paths, labels) of a (sliced) split of an image folder."""
    index, _ = _folder_index(root)
    name, bounds = _parse_split(split)
    if name not in index:
        raise ValueError(
            f"Image folder {root} has no split {name!r} with images; it has "
            f"{sorted(index)}."
        )
    paths, labels = index[name]
    start, stop = _slice(bounds, len(paths), split)
    return paths[start:stop], labels[start:stop]


# ----------------------------------------------------------- dataset info
def dataset_info(config) -> DatasetInfo:
    """Number of classes, split sizes and class names of a data source."""
    if config.vtab_task:
        from keras_vit.data import vtab

        return vtab.dataset_info(config.vtab_task, config.data_dir)
    name = config.dataset
    if name == DIGITS:
        arrays = _digits_arrays()
        return DatasetInfo(
            num_classes=10,
            num_examples={k: len(v[1]) for k, v in arrays.items()},
            class_names=[str(i) for i in range(10)],
        )
    if name == FOLDER:
        index, names = _folder_index(config.data_dir)
        return DatasetInfo(
            num_classes=len(names),
            num_examples={k: len(v[0]) for k, v in index.items()},
            class_names=list(names),
        )
    builder = _tfds_builder(config)
    label = builder.info.features[config.label_key]
    num_examples = {
        k: int(v.num_examples) for k, v in (builder.info.splits or {}).items()
    }
    names = list(label.names) if hasattr(label, "names") else None
    return DatasetInfo(
        num_classes=int(label.num_classes),
        num_examples=num_examples,
        class_names=names,
    )


def _tfds_builder(config):
    import tensorflow_datasets as tfds

    if config.vtab_task:
        from keras_vit.data import vtab

        return vtab.get_task(config.vtab_task).builder(config.data_dir)
    try:
        return tfds.builder(config.dataset, data_dir=config.data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ValueError(
            f"Unknown dataset {config.dataset!r}: use 'digits', 'folder' or a "
            f"TFDS name (see tfds.list_builders()). ({e})"
        ) from None


def _tfds_split_size(builder, split) -> Optional[int]:
    try:
        return int(builder.info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError, AssertionError):
        return None  # not prepared (e.g. mock data) or an unusual split


def num_split_examples(config, split: str) -> Optional[int]:
    """Examples in `split` (slices such as "train[:800]" included)."""
    if config.dataset == DIGITS and not config.vtab_task:
        return len(digits_split(split)[1])
    if config.dataset == FOLDER and not config.vtab_task:
        return len(folder_split(config.data_dir, split)[0])
    return _tfds_split_size(_tfds_builder(config), split)


# ---------------------------------------------------------------- sources
def _pipelines(input_context) -> Tuple[int, int]:
    if input_context is None:
        return 1, 0
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def _shard(config, split: str, training: bool, input_context,
           seed: int) -> _Shard:
    """(image uint8 HWC, label int32) pairs of this pipeline's part of
    `split`; training shards also shuffle their files or paths."""
    count, index = _pipelines(input_context)
    if config.dataset == DIGITS and not config.vtab_task:
        x, y = digits_split(split)
        ds = tf.data.Dataset.from_tensor_slices(
            (x[index::count, :, :, None], y[index::count])
        )
        return _Shard(ds, len(y))
    if config.dataset == FOLDER and not config.vtab_task:
        paths, labels = folder_split(config.data_dir, split)
        if config.skip_bad_images:
            paths, labels = data_checks.drop_unreadable(
                config, split, paths, labels
            )
        ds = tf.data.Dataset.from_tensor_slices(
            (paths[index::count], labels[index::count])
        )
        if training:  # file order; cheap: paths, not images
            ds = ds.shuffle(len(paths[index::count]), seed=seed)
        ds = ds.map(
            lambda path, label: (tf.io.read_file(path), label),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return _Shard(ds, len(labels), pp.decode_image)
    return _tfds_shard(config, split, training, input_context, seed)


def _tfds_shard(config, split, training, input_context, seed) -> _Shard:
    import tensorflow_datasets as tfds

    builder = _tfds_builder(config)
    count, index = _pipelines(input_context)
    read_context = None
    part = split
    if count > 1:
        try:  # exact, near-equal example ranges; only their files are read
            part = tfds.even_splits(split, n=count)[index]
        except (ValueError, TypeError, AssertionError):
            part, read_context = split, input_context  # file-level sharding
    read_config = tfds.ReadConfig(
        shuffle_seed=seed, input_context=read_context, skip_prefetch=True
    )
    image_key, label_key = config.image_key, config.label_key
    # Encoded uint8 images stay encoded until after the shuffle and cache.
    feature = builder.info.features[image_key]
    encoded = (
        not config.vtab_task
        and isinstance(feature, tfds.features.Image)
        and feature.np_dtype == np.uint8
    )
    ds = builder.as_dataset(
        split=part,
        shuffle_files=training,
        read_config=read_config,
        decoders={image_key: tfds.decode.SkipDecoding()} if encoded else None,
    )

    def to_pair(example):
        return example[image_key], tf.cast(example[label_key], tf.int32)

    if config.vtab_task:  # the task's image and derived label
        from keras_vit.data import vtab

        to_pair = vtab.get_task(config.vtab_task).example_fn
    ds = ds.map(to_pair, num_parallel_calls=tf.data.AUTOTUNE)
    exact = read_context is None
    return _Shard(
        ds,
        _tfds_split_size(builder, split) if exact else None,
        pp.decode_image if encoded else _identity,
    )


def _check_batch(global_batch: int, input_context) -> int:
    if int(global_batch) <= 0:
        raise ValueError(f"batch_size must be positive, got {global_batch}.")
    replicas = input_context.num_replicas_in_sync if input_context else 1
    if global_batch % replicas:
        raise ValueError(
            f"batch_size {global_batch} is not divisible by the "
            f"{replicas} replicas: use a multiple of {replicas}."
        )
    return global_batch // replicas


def pipeline_seed(config, input_context=None, start_step: int = 0) -> int:
    """The seed of one input pipeline: differs between pipelines, and
    between a run and its resumption at `start_step` (when the data order
    is not restored from a checkpoint)."""
    _, index = _pipelines(input_context)
    entropy = [int(config.seed), index, int(start_step)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)


def train_dataset(
    config, global_batch: int, input_context=None, *, start_step: int = 0
) -> tf.data.Dataset:
    """Infinite, shuffled, augmented training batches of one replica.

    `global_batch` is the batch over all replicas for one forward pass; the
    per-replica batch comes from the strategy's `input_context`. Batches keep
    a static shape (drop_remainder=True). `start_step` > 0 (a resumed run
    whose data order was not checkpointed) draws a new data order instead
    of replaying the first steps' examples.
    """
    batch = _check_batch(global_batch, input_context)
    split = config.train_split
    seed = pipeline_seed(config, input_context, start_step)
    shard = _shard(config, split, True, input_context, seed)
    ds = shard.dataset
    ds = data_checks.check_labels(ds, config)
    # cache_train: cache the (small) training split only, e.g. VTAB's 1,000
    # examples, without holding a large test split in memory.
    if config.cache_train:
        ds = ds.cache()
    ds = ds.repeat()
    ds = ds.shuffle(config.shuffle_buffer, seed=seed)
    preprocess = make_preprocess_fn(config, training=True)
    decode = shard.decode
    # Stateless augmentation seeded by (seed, example index): reproducible,
    # and the iterator stays serialisable, so checkpoints can hold it.
    ds = ds.enumerate()
    ds = ds.map(
        lambda index, example: (
            preprocess(
                decode(example[0]), tf.stack([tf.cast(seed, tf.int64), index])
            ),
            example[1],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    ds = ds.batch(batch, drop_remainder=True)
    if config.synthetic_data:
        # For benchmarks: one real batch, served again and again from
        # memory, so that the input work drops out of the timings.
        ds = ds.take(1).cache().repeat()
    return ds.prefetch(config.prefetch)


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
    config, split: str, global_batch: int, input_context=None
) -> tf.data.Dataset:
    """One pass over `split`: (images, labels, mask), every batch full-size.

    The last batch is padded with masked-out examples, so shapes stay static
    and every example is counted exactly once. Where the split's size is
    known, every pipeline yields ceil(size / global_batch) batches per
    replica it feeds (all-padding batches where its part runs out).
    """
    batch = _check_batch(global_batch, input_context)
    shard = _shard(config, split, False, input_context, 0)
    ds = data_checks.check_labels(shard.dataset, config)
    if config.cache:
        ds = ds.cache()
    preprocess = make_preprocess_fn(config, training=False)
    ds = ds.map(
        lambda raw, label: (preprocess(shard.decode(raw)), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = ds.batch(batch, drop_remainder=False)
    ds = ds.map(functools.partial(pad_batch, batch_size=batch))
    if shard.split_size is not None:
        count, _ = _pipelines(input_context)
        replicas = input_context.num_replicas_in_sync if input_context else 1
        steps = -(-shard.split_size // global_batch)
        h, w = pp.as_hw(config.image_size)
        padding = tf.data.Dataset.from_tensors((
            tf.zeros([batch, h, w, 3], tf.float32),
            tf.zeros([batch], tf.int32),
            tf.zeros([batch], tf.float32),
        )).repeat()
        ds = ds.concatenate(padding).take(steps * max(replicas // count, 1))
    return ds.prefetch(tf.data.AUTOTUNE)


def pad_batch(images, labels, batch_size: int):
    """Pads a (possibly short) batch to `batch_size`; returns a 0/1 mask."""
    n = tf.shape(labels)[0]
    pad = batch_size - n
    images = tf.pad(images, [[0, pad], [0, 0], [0, 0], [0, 0]])
    labels = tf.pad(labels, [[0, pad]])
    mask = tf.pad(tf.ones([n], tf.float32), [[0, pad]])
    images = tf.ensure_shape(images, [batch_size] + images.shape[1:].as_list())
    return images, tf.ensure_shape(labels, [batch_size]), mask
