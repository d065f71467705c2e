"""Input pipelines (tf.data, host side). Never imports the model.

Sources:
- "digits": the 1,797 real 8 x 8 handwritten digits that scikit-learn ships
  (no download). Fixed split: a stratified shuffle with seed 0 puts 1,437
  images in "train" and 360 in "test".
- Any TFDS dataset by name (`data_dir` may be a gs:// path).
- "folder": an image folder `root/<split>/<class>/*.jpg|png` (TFDS
  ImageFolder).

Each pipeline yields (images float32 [-1, 1] (B, H, W, 3), labels int32 (B,))
for training, and additionally a float32 mask (B,) for evaluation, where the
last batch is padded to a static shape (TPUs need static shapes) and the
padding is masked out of every metric.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf

from keras_vit import preprocessing as pp

DIGITS = "digits"
FOLDER = "folder"


@dataclasses.dataclass
class DatasetInfo:
    """What the trainer needs to know about a data source."""

    num_classes: int
    num_examples: dict  # split -> count (where known)
    class_names: Optional[List[str]] = None


# ----------------------------------------------------------------- sources
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


def _digits_split(split: str):
    arrays = _digits_arrays()
    if split not in arrays:
        raise ValueError(
            f"The digits data has splits 'train' and 'test', got {split!r}."
        )
    return arrays[split]


def dataset_info(config) -> DatasetInfo:
    """Number of classes, split sizes and class names of a data source."""
    if config.get("vtab_task"):
        from keras_vit import vtab

        return vtab.dataset_info(config.vtab_task, config.get("data_dir"))
    name = config.dataset
    if name == DIGITS:
        arrays = _digits_arrays()
        return DatasetInfo(
            num_classes=10,
            num_examples={k: len(v[1]) for k, v in arrays.items()},
            class_names=[str(i) for i in range(10)],
        )
    builder = _tfds_builder(config)
    label = builder.info.features[_label_key(config)]
    num_examples = {
        k: int(v.num_examples) for k, v in builder.info.splits.items()
    }
    names = list(label.names) if hasattr(label, "names") else None
    return DatasetInfo(
        num_classes=int(label.num_classes),
        num_examples=num_examples,
        class_names=names,
    )


def _label_key(config) -> str:
    return config.get("label_key", "label") or "label"


def _tfds_builder(config):
    import tensorflow_datasets as tfds

    if config.get("vtab_task"):
        from keras_vit import vtab

        return vtab.get_task(config.vtab_task).builder(config.get("data_dir"))
    if config.dataset == FOLDER:
        if not config.get("data_dir"):
            raise ValueError(
                "dataset='folder' needs data_dir: the folder that holds "
                "<split>/<class>/*.jpg|png."
            )
        if not tf.io.gfile.isdir(config.data_dir):
            raise ValueError(
                f"Image folder {config.data_dir!r} does not exist: set "
                "--config.data_dir to the folder holding <split>/<class>/."
            )
        return tfds.folder_dataset.ImageFolder(config.data_dir)
    try:
        return tfds.builder(config.dataset, data_dir=config.get("data_dir"))
    except tfds.core.registered.DatasetNotFoundError as e:
        raise ValueError(
            f"Unknown dataset {config.dataset!r}: use 'digits', 'folder' or a "
            f"TFDS name (see tfds.list_builders()). ({e})"
        ) from None


def num_split_examples(config, split: str) -> Optional[int]:
    """Examples in `split` (TFDS slicing such as "train[:800]" included)."""
    if config.dataset == DIGITS:
        return len(_digits_split(split)[1])
    import tensorflow_datasets as tfds

    builder = _tfds_builder(config)
    try:
        return int(builder.info.splits[split].num_examples)
    except (KeyError, ValueError, tfds.core.utils.DatasetNotFoundError):
        return None


def _raw_dataset(
    config, split: str, shuffle_files: bool, input_context=None
) -> tf.data.Dataset:
    """(image uint8 HWC, label int32) pairs of one split, sharded per host."""
    if config.dataset == DIGITS:
        x, y = _digits_split(split)
        ds = tf.data.Dataset.from_tensor_slices((x[..., None], y))
        if input_context and input_context.num_input_pipelines > 1:
            ds = ds.shard(
                input_context.num_input_pipelines,
                input_context.input_pipeline_id,
            )
        return ds
    import tensorflow_datasets as tfds

    builder = _tfds_builder(config)
    read_config = tfds.ReadConfig(
        shuffle_seed=config.get("seed", 0),
        input_context=input_context,
        skip_prefetch=True,
    )
    if config.dataset == FOLDER:
        ds = builder.as_dataset(
            split=split, shuffle_files=shuffle_files, read_config=read_config
        )
    else:
        ds = builder.as_dataset(
            split=split,
            shuffle_files=shuffle_files,
            read_config=read_config,
            decoders=None,
        )
    image_key = config.get("image_key", "image") or "image"
    label_key = _label_key(config)

    def to_pair(example):
        return example[image_key], tf.cast(example[label_key], tf.int32)

    if config.get("vtab_task"):  # the task's image and derived label
        from keras_vit import vtab

        to_pair = vtab.get_task(config.vtab_task).example_fn
    return ds.map(to_pair, num_parallel_calls=tf.data.AUTOTUNE)


# ------------------------------------------------------------ preprocessing
def make_preprocess_fn(config, training: bool) -> Callable:
    """Image preprocessing for a split, from `config.pp`."""
    size = config.image_size
    cfg = config.get("pp", None) or {}
    resize_size = cfg.get("resize_size", None)
    if not training:
        eval_resize = cfg.get("eval_resize_size", None)
        return lambda image, seed=None: pp.preprocess_eval(
            image, size, eval_resize
        )
    kind = cfg.get("train", "finetune")
    flip = bool(cfg.get("flip", True))
    if resize_size is not None:
        small = [
            r < s for r, s in zip(pp.as_hw(resize_size), pp.as_hw(size))
        ]
        if any(small):
            raise ValueError(
                f"pp.resize_size {resize_size} is smaller than image_size "
                f"{size}: the random crop must fit; set pp.resize_size >= "
                "image_size (or None to resize straight to image_size)."
            )
    if kind == "pretrain":
        area = tuple(cfg.get("area_range", (0.05, 1.0)))
        return lambda image, seed=None: pp.preprocess_pretrain(
            image, size, area_range=area, flip=flip, seed=seed
        )
    if kind == "finetune":
        return lambda image, seed=None: pp.preprocess_finetune(
            image, size, resize_size, flip=flip, seed=seed
        )
    if kind == "eval":
        return lambda image, seed=None: pp.preprocess_eval(image, size)
    raise ValueError(
        f"Unknown pp.train {kind!r}: use 'pretrain' (Inception crop + flip), "
        "'finetune' (resize, random crop, flip) or 'eval' (resize only)."
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


def train_dataset(
    config, global_batch: int, input_context=None
) -> tf.data.Dataset:
    """Infinite, shuffled, augmented training batches of one replica.

    `global_batch` is the batch over all replicas for one forward pass; the
    per-replica batch comes from the strategy's `input_context`. Batches keep
    a static shape (drop_remainder=True).
    """
    batch = _check_batch(global_batch, input_context)
    split = config.get("train_split", "train")
    ds = _raw_dataset(config, split, True, input_context)
    # cache_train: cache the (small) training split only, e.g. VTAB's 1,000
    # examples, without holding a large test split in memory.
    if config.get("cache_train", config.get("cache", config.dataset == DIGITS)):
        ds = ds.cache()
    seed = config.get("seed", 0)
    if input_context is not None:
        seed = seed + input_context.input_pipeline_id
    ds = ds.repeat()
    ds = ds.shuffle(config.get("shuffle_buffer", 10_000), seed=seed)
    preprocess = make_preprocess_fn(config, training=True)
    # Stateless augmentation seeded by (seed, example index): reproducible,
    # and the iterator stays serialisable, so checkpoints can hold it.
    ds = ds.enumerate()
    ds = ds.map(
        lambda index, example: (
            preprocess(example[0], tf.stack([tf.cast(seed, tf.int64), index])),
            example[1],
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    ds = ds.batch(batch, drop_remainder=True)
    return ds.prefetch(config.get("prefetch", tf.data.AUTOTUNE))


def eval_dataset(
    config, split: str, global_batch: int, input_context=None
) -> tf.data.Dataset:
    """One pass over `split`: (images, labels, mask), every batch full-size.

    The last batch is padded with masked-out examples, so shapes stay static
    and every example is counted exactly once.
    """
    batch = _check_batch(global_batch, input_context)
    ds = _raw_dataset(config, split, False, input_context)
    if config.get("cache", config.dataset == DIGITS):
        ds = ds.cache()
    preprocess = make_preprocess_fn(config, training=False)
    ds = ds.map(
        lambda image, label: (preprocess(image), label),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    ds = ds.batch(batch, drop_remainder=False)
    return ds.map(functools.partial(pad_batch, batch_size=batch)).prefetch(
        tf.data.AUTOTUNE
    )


def pad_batch(images, labels, batch_size: int):
    """Pads a (possibly short) batch to `batch_size`; returns a 0/1 mask."""
    n = tf.shape(labels)[0]
    pad = batch_size - n
    images = tf.pad(images, [[0, pad], [0, 0], [0, 0], [0, 0]])
    labels = tf.pad(labels, [[0, pad]])
    mask = tf.pad(tf.ones([n], tf.float32), [[0, pad]])
    images = tf.ensure_shape(images, [batch_size] + images.shape[1:].as_list())
    return images, tf.ensure_shape(labels, [batch_size]), mask
