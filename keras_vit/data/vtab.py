"""The 19 VTAB-1k tasks: data sources, splits, labels, groups.

VTAB-1k (Zhai et al. 2019) adapts a pre-trained model to each task from
1,000 labelled examples: 800 for training (`train800`) and 200 for choosing
hyper-parameters (`val200`); the final model is trained on both
(`train800val200`) and scored by top-1 accuracy on `test`. The tasks come in
three groups (Natural, Specialized, Structured); a group's score is the
unweighted mean of its tasks, the VTAB score the mean of all 19.

Every task maps a TFDS example to (uint8 RGB image, int32 label): the
structured tasks derive their labels from annotations (object counts,
distances, positions, poses), exactly as the task_adaptation code does, and
single-channel images are tiled to three channels.

`input_pipeline` reads a task when a config sets `vtab_task`; `prepare`
checks (and if allowed, downloads) a task's data before a run.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import tensorflow as tf
from absl import logging

from keras_vit.data import downloads
from keras_vit.data import vtab_labels as labels
from keras_vit.data.vtab_labels import Example
from keras_vit.errors import UsageError

NATURAL = "natural"
SPECIALIZED = "specialized"
STRUCTURED = "structured"
GROUPS = (NATURAL, SPECIALIZED, STRUCTURED)
GROUP_TITLES = {
    NATURAL: "Natural", SPECIALIZED: "Specialized", STRUCTURED: "Structured"
}
ALL = "all"

TRAIN800 = "train800"
VAL200 = "val200"
TRAIN800VAL200 = "train800val200"
TEST = "test"
SPLITS = (TRAIN800, VAL200, TRAIN800VAL200, TEST)


class DataUnavailableError(RuntimeError):
    """A task's data is not prepared and cannot be prepared now."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One VTAB-1k task.

    Attributes:
        name: str. Registry key (command-line name), e.g. "clevr_count".
        title: str. Column title in the paper's tables, e.g. "Clevr-Count".
        group: str. "natural", "specialized" or "structured".
        tfds_name: str. TFDS builder with version pattern.
        train800, val200, test: str. TFDS split slices.
        num_classes: int.
        label: callable. TFDS example -> int32 label.
        image: callable. TFDS example -> uint8 RGB image.
        manual_files: tuple of str. Paths that must exist in the TFDS
            manual directory before the data can be prepared (empty: the
            data downloads by itself).
        manual_url: str. Where the manual files come from.
        class_names: tuple of str or None. Names of derived labels.
        paper_vit_l16: float. ViT-L/16 (ImageNet-21k) accuracy in % (paper
            Table 9), the reference in reports.
    """

    name: str
    title: str
    group: str
    tfds_name: str
    train800: str
    val200: str
    test: str
    num_classes: int
    label: Callable[[Example], tf.Tensor]
    image: Callable[[Example], tf.Tensor] = labels.rgb_image
    manual_files: Tuple[str, ...] = ()
    manual_url: str = ""
    class_names: Optional[Tuple[str, ...]] = None
    paper_vit_l16: Optional[float] = None

    def split(self, name: str) -> str:
        """TFDS split string of a VTAB split name (or a TFDS split as is)."""
        if name == TRAIN800VAL200:
            return f"{self.train800}+{self.val200}"
        return {TRAIN800: self.train800, VAL200: self.val200,
                TEST: self.test}.get(name, name)

    def example_fn(self, example: Example) -> Tuple[tf.Tensor, tf.Tensor]:
        """TFDS example -> (uint8 RGB image (H, W, 3), int32 label)."""
        image = tf.ensure_shape(self.image(example), [None, None, 3])
        return image, self.label(example)

    def builder(self, data_dir: Optional[str] = None):
        """The task's TFDS builder.

        Falls back to the newest installed version when this TFDS no longer
        knows the pinned one (e.g. oxford_iiit_pet 3.x, replaced by 4.0.0
        with the same images and labels), with a warning.
        """
        import tensorflow_datasets as tfds

        try:
            return tfds.builder(self.tfds_name, data_dir=data_dir)
        except AssertionError as e:
            if "cannot be loaded at version" not in str(e):
                raise
            name = self.tfds_name.split(":")[0]
            logging.warning(
                "%s: this TFDS has no %s; using %s at its current version "
                "(VTAB used the pinned one).", self.name, self.tfds_name, name,
            )
            return tfds.builder(name, data_dir=data_dir)


# The tasks' table, one function per group (the paper's order).
_LABEL = labels.label_from("label")


def _natural_tasks() -> List[Task]:
    lbl = _LABEL
    return [
        Task("caltech101", "Caltech101", NATURAL, "caltech101:3.*.*",
             "train[:800]", "train[2754:2954]", "test", 102, lbl,
             paper_vit_l16=90.8),
        Task("cifar100", "CIFAR-100", NATURAL, "cifar100:3.*.*",
             "train[:800]", "train[45000:45200]", "test", 100, lbl,
             paper_vit_l16=84.1),
        Task("dtd", "DTD", NATURAL, "dtd:3.*.*",
             "train[:800]", "validation[:200]", "test", 47, lbl,
             paper_vit_l16=74.1),
        Task("oxford_flowers102", "Flowers102", NATURAL,
             "oxford_flowers102:2.*.*", "train[:800]", "validation[:200]",
             "test", 102, lbl, paper_vit_l16=99.3),
        Task("oxford_iiit_pet", "Pets", NATURAL, "oxford_iiit_pet:3.*.*",
             "train[:800]", "train[2944:3144]", "test", 37, lbl,
             paper_vit_l16=92.7),
        Task("sun397", "Sun397", NATURAL, "sun397/tfds:4.*.*",
             "train[:800]", "validation[:200]", "test", 397, lbl,
             paper_vit_l16=61.0),
        Task("svhn", "SVHN", NATURAL, "svhn_cropped:3.*.*",
             "train[:800]", "train[65931:66131]", "test", 10, lbl,
             paper_vit_l16=80.9),
    ]


def _specialized_tasks() -> List[Task]:
    lbl = _LABEL
    return [
        Task("patch_camelyon", "Camelyon", SPECIALIZED,
             "patch_camelyon:2.*.*", "train[:800]", "validation[:200]",
             "test", 2, lbl, paper_vit_l16=82.5),
        Task("eurosat", "EuroSAT", SPECIALIZED, "eurosat/rgb:2.*.*",
             "train[:800]", "train[16200:16400]", "train[21600:]", 10, lbl,
             paper_vit_l16=95.6),
        Task("resisc45", "Resisc45", SPECIALIZED, "resisc45:3.*.*",
             "train[:800]", "train[18900:19100]", "train[25200:]", 45, lbl,
             manual_files=("NWPU-RESISC45",),
             manual_url="https://1drv.ms/u/s!AmgKYzARBl5ca3HNaHIlzp_IXjs "
             "(NWPU-RESISC45.rar, extracted)",
             paper_vit_l16=85.2),
        Task("diabetic_retinopathy", "Retinopathy", SPECIALIZED,
             "diabetic_retinopathy_detection/btgraham-300:3.*.*",
             "train[:800]", "validation[:200]", "test", 5, lbl,
             # TFDS's builder also reads a `sample` split from sample/.
             manual_files=("train", "test", "sample", "trainLabels.csv"),
             manual_url="https://www.kaggle.com/c/diabetic-retinopathy-"
             "detection/data (train/, test/ and sample/ unzipped, "
             "trainLabels.csv)",
             paper_vit_l16=75.3),
    ]


def _structured_tasks() -> List[Task]:
    lbl = _LABEL
    return [
        Task("clevr_count", "Clevr-Count", STRUCTURED, "clevr:3.*.*",
             "train[:800]", "train[63000:63200]", "validation", 8,
             labels.clevr_count_label,
             class_names=tuple(f"{n} objects" for n in range(3, 11)),
             paper_vit_l16=70.3),
        Task("clevr_dist", "Clevr-Dist", STRUCTURED, "clevr:3.*.*",
             "train[:800]", "train[63000:63200]", "validation", 6,
             labels.clevr_dist_label,
             class_names=("<=8", "8-8.5", "8.5-9", "9-9.5", "9.5-10", ">10"),
             paper_vit_l16=56.1),
        Task("dmlab", "DMLab", STRUCTURED, "dmlab:2.0.1",
             "train[:800]", "validation[:200]", "test", 6, lbl,
             paper_vit_l16=41.9),
        Task("dsprites_loc", "dSpr-Loc", STRUCTURED, "dsprites:2.*.*",
             "train[:800]", "train[589824:590024]", "train[663552:]", 16,
             labels.binned_label("label_x_position", 32, 16),
             labels.binary_rgb_image,
             paper_vit_l16=74.7),
        Task("dsprites_ori", "dSpr-Ori", STRUCTURED, "dsprites:2.*.*",
             "train[:800]", "train[589824:590024]", "train[663552:]", 16,
             labels.binned_label("label_orientation", 40, 16),
             labels.binary_rgb_image,
             paper_vit_l16=64.9),
        Task("kitti_dist", "KITTI-Dist", STRUCTURED, "kitti:3.1.0",
             "train[:800]", "validation[:200]", "test", 4,
             labels.kitti_dist_label,
             class_names=("<=8m", "8-20m", ">20m", "no vehicle"),
             paper_vit_l16=79.9),
        Task("smallnorb_azim", "sNORB-Azim", STRUCTURED, "smallnorb:2.*.*",
             "train[:800]", "test[:200]", "test[50%:]", 18,
             labels.label_from("label_azimuth"), paper_vit_l16=30.5),
        Task("smallnorb_elev", "sNORB-Elev", STRUCTURED, "smallnorb:2.*.*",
             "train[:800]", "test[:200]", "test[50%:]", 9,
             labels.label_from("label_elevation"), paper_vit_l16=41.7),
    ]


def _tasks() -> List[Task]:
    return _natural_tasks() + _specialized_tasks() + _structured_tasks()


TASKS: Dict[str, Task] = {t.name: t for t in _tasks()}
TASK_NAMES: Tuple[str, ...] = tuple(TASKS)

# Paper Table 9: group means and the 19-task mean, in %.
PAPER_REFERENCE = {
    "ViT-H/14 (JFT)": {NATURAL: 86.69, SPECIALIZED: 87.00,
                       STRUCTURED: 65.03, ALL: 77.63},
    "ViT-L/16 (I21k)": {NATURAL: 83.27, SPECIALIZED: 84.65,
                        STRUCTURED: 57.50, ALL: 72.72},
}


def tasks_in_group(group: str) -> List[Task]:
    return [t for t in TASKS.values() if t.group == group]


def get_task(name: str) -> Task:
    """The task called `name`; a clear error listing the valid names."""
    if isinstance(name, Task):
        return name
    try:
        return TASKS[name]
    except KeyError:
        raise UsageError(_unknown_message([name])) from None


def _unknown_message(names: Sequence[str]) -> str:
    return (
        f"Unknown VTAB task(s) {', '.join(map(repr, names))}. Valid tasks: "
        f"{', '.join(TASK_NAMES)}; groups: {', '.join(GROUPS)}, or 'all'."
    )


def select_tasks(spec: Union[str, Sequence[str], None]) -> List[Task]:
    """Tasks named by `spec`, in the canonical order, without repeats.

    Args:
        spec: str or list of str. Task names and group names ("natural",
            "specialized", "structured", "all"), comma-separated or as a
            list; None or "" means all 19.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if spec is None:
        spec = ALL
    if isinstance(spec, str):
        spec = spec.split(",")
    names = [s.strip().lower() for s in spec if s and s.strip()] or [ALL]
    chosen, unknown = set(), []
    for name in names:
        if name == ALL:
            chosen.update(TASK_NAMES)
        elif name in GROUPS:
            chosen.update(t.name for t in tasks_in_group(name))
        elif name in TASKS:
            chosen.add(name)
        else:
            unknown.append(name)
    if unknown:
        raise UsageError(_unknown_message(unknown))
    return [TASKS[n] for n in TASK_NAMES if n in chosen]


# ---------------------------------------------------------------- data
def manual_dir(data_dir: Optional[str], builder=None) -> str:
    """TFDS's manual-download directory: `<data_dir>/downloads/manual`."""
    root = data_dir
    if not root:
        root = getattr(builder, "data_dir_root", None)
    if not root:
        from tensorflow_datasets.core import constants

        root = os.environ.get("TFDS_DATA_DIR") or constants.DATA_DIR
    return os.path.join(os.path.expanduser(str(root)), "downloads", "manual")


def prepare(
    task: Union[str, Task],
    data_dir: Optional[str] = None,
    download: bool = True,
    manual: Optional[str] = None,
) -> None:
    """Makes sure a task's data can be read, preparing it if allowed.

    Args:
        task: Task or str.
        data_dir: str or None. TFDS data directory (None: TFDS default).
        download: bool. Download and prepare data that is not there yet.
        manual: str or None. Manual-download directory (default
            `<data_dir>/downloads/manual`).

    Raises:
        DataUnavailableError: with what to do (where to put which files, or
            how to prepare the data).
    """
    task = get_task(task)
    prepare_builder(
        task.builder(data_dir), f"{task.name} ({task.title})", data_dir,
        download, manual, task.manual_files, task.manual_url,
    )


def prepare_builder(
    builder,
    label: str,
    data_dir: Optional[str] = None,
    download: bool = True,
    manual: Optional[str] = None,
    manual_files: Sequence[str] = (),
    manual_url: str = "",
) -> None:
    """`prepare` for any TFDS builder (few-shot data sets too).

    Args:
        builder: tfds.core.DatasetBuilder.
        label: str. The data set's name in messages.
        data_dir, download, manual: as for `prepare`.
        manual_files: paths that must be in the manual directory.
        manual_url: str. Where they come from.
    """
    if builder.is_prepared():
        return
    manual = manual or manual_dir(data_dir, builder)
    name = builder.info.full_name.split("/")[0]
    missing = [
        f for f in manual_files
        if not tf.io.gfile.exists(os.path.join(manual, f))
    ]
    why = downloads.manual_words(
        builder, label, manual, missing, manual_files, manual_url,
        lambda: tf.io.gfile.isdir(manual) and bool(
            tf.io.gfile.listdir(manual)))
    if why:
        raise DataUnavailableError(why)
    if not download:
        raise DataUnavailableError(
            f"{label}: {builder.name} is not prepared in "
            f"{data_dir or 'the TFDS data directory'}. Set "
            "config.input.download=True, or run `tfds build "
            f"{name}{f' --data_dir={data_dir}' if data_dir else ''}` first."
        )
    if downloads.no_network():
        raise DataUnavailableError(
            f"{label}: not downloaded: an earlier download of this run had "
            f"no connection ({downloads.no_network()}). "
            f"{downloads.offline_fix(name)}")
    import tensorflow_datasets as tfds

    logging.info("%s is not prepared in %s: TFDS downloads and prepares it "
                 "(config.input.download).", label,
                 data_dir or "the TFDS data directory")
    try:
        with downloads.network_notices(label, name), \
                downloads.tfds_output():
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(
                    manual_dir=manual))
    except Exception as e:  # network, disk, bad manual files: skip it
        # Only a data set that needs manual files hears where they go.
        hint = (f" Its manual files ({', '.join(manual_files)}) go into "
                f"{manual}/." if manual_files else "")
        why = downloads.failure_words(e, name) or (
            f"preparing {builder.name} failed "
            f"({type(e).__name__}: {str(e)[:300]}).")
        raise DataUnavailableError(f"{label}: {why}{hint}") from e
