"""The AugReg checkpoints ("How to train your ViT?", Steiner et al. 2021):
what their file names say.

The files live in gs://vit_models/augreg/ and are listed in its
index.csv. A pre-trained file is named

    S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz

(model, pre-training data, epochs, learning rate, augmentation, weight
decay, dropout, stochastic depth), and a fine-tuned one adds
`--<dataset>-steps_<n>k-lr_<lr>-res_<resolution>`. The arrays are in the
official layout (`keras_vit.checkpoint.weights`); the name tells the
variant, which `keras_vit.checkpoint.loader` checks against the arrays,
and the resolution a fine-tuned file was trained at, at which it loads.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
from typing import Any, Dict, List, Optional

from keras_vit import variants
from keras_vit.errors import UsageError

BUCKET = "gs://vit_models/augreg"

# Model names in AugReg file names -> keras_vit variants.
MODELS = {
    "Ti_16": "Ti/16",
    "S_16": "S/16",
    "S_32": "S/32",
    "B_16": "B/16",
    "B_32": "B/32",
    "B_8": "B/8",
    "L_16": "L/16",
    "R_Ti_16": "R+Ti/16",
    "R26_S_32": "R26+S/32",
    "R50_L_32": "R50+L/32",
}

# Head widths of the pre-training and fine-tuning data sets whose class
# count is fixed.
NUM_CLASSES = {"i21k": 21843, "i1k": 1000, "imagenet2012": 1000,
               "cifar100": 100, "oxford_iiit_pet": 37, "resisc45": 45}

# What a name's `aug_<setting>` means (AugReg Section 3.3): RandAugment
# (ops N, magnitude M on big_vision's scale) and Mixup's alpha.
AUGMENTATION = {
    "none": dict(randaug=(0, 0), mixup=0.0),
    "light1": dict(randaug=(2, 0), mixup=0.0),
    "light2": dict(randaug=(2, 10), mixup=0.2),
    "medium1": dict(randaug=(2, 15), mixup=0.2),
    "medium2": dict(randaug=(2, 15), mixup=0.5),
    "strong1": dict(randaug=(2, 20), mixup=0.5),
    "strong2": dict(randaug=(2, 20), mixup=0.8),
}



_NUMBER = r"\d+(?:\.\d+)?(?:e-?\d+)?"
_NAME_RE = re.compile(
    rf"^(?P<model>{'|'.join(sorted(MODELS, key=len, reverse=True))})"
    rf"-(?P<dataset>i21k|i1k)-(?P<epochs>\d+)ep-lr_(?P<lr>{_NUMBER})"
    rf"-aug_(?P<aug>[a-z]+\d*)-wd_(?P<wd>{_NUMBER})-do_(?P<do>{_NUMBER})"
    rf"-sd_(?P<sd>{_NUMBER})"
    rf"(?:--(?P<adapt_dataset>[\w./]+?)-steps_(?P<steps>\d+)(?P<k>k?)"
    rf"-lr_(?P<adapt_lr>{_NUMBER})-res_(?P<res>\d+))?$"
)


@dataclasses.dataclass(frozen=True)
class AugRegName:
    """A parsed AugReg file name.

    Attributes:
        model: str. The name's model ("R_Ti_16").
        variant: str. The keras_vit variant ("R+Ti/16").
        dataset: str. Pre-training data: "i21k" or "i1k".
        epochs: int. Pre-training epochs.
        lr, weight_decay, dropout, stochastic_depth: float. Pre-training
            learning rate, weight decay, dropout and stochastic depth.
        aug: str. Augmentation setting ("none", "light1", ..., "strong2").
        adapt_dataset: str or None. The fine-tuning data set.
        adapt_steps: int or None. Fine-tuning steps.
        adapt_lr: float or None. Fine-tuning learning rate.
        adapt_resolution: int or None. Fine-tuning resolution.
    """

    model: str
    variant: str
    dataset: str
    epochs: int
    lr: float
    aug: str
    weight_decay: float
    dropout: float
    stochastic_depth: float
    adapt_dataset: Optional[str] = None
    adapt_steps: Optional[int] = None
    adapt_lr: Optional[float] = None
    adapt_resolution: Optional[int] = None

    @property
    def fine_tuned(self) -> bool:
        return self.adapt_dataset is not None

    @property
    def image_size(self) -> int:
        """int. The resolution the file was last trained at: 224 for
        pre-training, the fine-tuning resolution after it."""
        return self.adapt_resolution or 224

    @property
    def num_classes(self) -> Optional[int]:
        """int or None. The head width, where the data set fixes it."""
        return NUM_CLASSES.get(self.adapt_dataset or self.dataset)


def model_named(text: str) -> Optional[str]:
    """The model of MODELS that `text` starts with, however written
    ("B-16", "vit_b16", "B_16-i21k-300ep" -> "B_16"), or None."""
    wanted = re.sub(r"[^a-z0-9]", "", text.lower()).removeprefix("vit")
    for model in sorted(MODELS, key=len, reverse=True):
        key = re.sub(r"[^a-z0-9]", "", model.lower())
        if wanted.startswith(key) and not wanted[len(key):][:1].isdigit():
            return model
    return None


def parse_name(path: str) -> Optional[AugRegName]:
    """The AugReg name of a file (a path or URL, with or without `.npz`),
    or None when the file is not named like one."""
    name = os.path.basename(str(path).rstrip("/"))
    if name.endswith(".npz"):
        name = name[: -len(".npz")]
    match = _NAME_RE.match(name)
    if not match:
        return None
    g = match.groupdict()
    adapt = g["adapt_dataset"]
    steps = None
    if adapt:
        steps = int(g["steps"]) * (1000 if g["k"] else 1)
    return AugRegName(
        model=g["model"],
        variant=MODELS[g["model"]],
        dataset=g["dataset"],
        epochs=int(g["epochs"]),
        lr=float(g["lr"]),
        aug=g["aug"],
        weight_decay=float(g["wd"]),
        dropout=float(g["do"]),
        stochastic_depth=float(g["sd"]),
        adapt_dataset=adapt,
        adapt_steps=steps,
        adapt_lr=float(g["adapt_lr"]) if adapt else None,
        adapt_resolution=int(g["res"]) if adapt else None,
    )


def names_in_index(text: str) -> List[AugRegName]:
    """Every AugReg file name in the text of an index.csv (any column; the
    index names each run's pre-trained and fine-tuned file), in order,
    each once."""
    seen, names = set(), []
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            name = parse_name(cell.strip())
            if name is not None and name not in seen:
                seen.add(name)
                names.append(name)
    return names


def url(name: str) -> str:
    """The gs:// URL of a file name from the index ('.npz' added)."""
    name = name if name.endswith(".npz") else name + ".npz"
    return f"{BUCKET}/{name}"


def variant_mismatch(variant: str, info: Dict[str, Any]) -> Dict:
    """{field: (file's, variant's)} for each size where the architecture
    `info` (`keras_vit.checkpoint.formats.npz_layout.describe_arrays`)
    differs from `variant`."""
    want = variants.decode_variant(variant).sizes()
    return {k: (info[k], v) for k, v in want.items() if info[k] != v}


def check_name(path: str, name: AugRegName, info: Dict[str, Any],
               variant: Optional[str] = None) -> None:
    """Raises ValueError, naming both, unless an AugReg file's name agrees
    with its arrays (`info`) and with the `variant` asked for."""
    if variant and variant != name.variant:
        raise UsageError(
            f"`variant`={variant} disagrees with the file "
            f"{os.path.basename(path)}, whose AugReg name says "
            f"{name.variant} ({name.model}). Drop `variant` (the name and "
            f"the arrays give the model) or pass `variant`={name.variant}."
        )
    wrong = variant_mismatch(name.variant, info)
    if wrong:
        raise UsageError(
            f"{path}: the AugReg name says {name.variant} "
            f"({name.model}) but the arrays are "
            f"{info['variant'] or 'a custom size'}: "
            f"{ {k: f for k, (f, _) in wrong.items()} } where "
            f"{name.variant} has { {k: v for k, (_, v) in wrong.items()} }."
            " The file was renamed or is another model's: rename it after "
            "its model, or load it under a name that is not an AugReg one."
        )
