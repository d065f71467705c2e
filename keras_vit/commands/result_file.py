"""keras-vit-evaluate --mode=eval's results file: another model's (or
another data folder's, split's, resize's, size's, weights') is never
overwritten, checked before the evaluation and again as it is written
(an evaluation into the same folder may have finished meanwhile)."""

from __future__ import annotations

import os
from typing import Dict, Optional

from absl import logging

from keras_vit.errors import UsageError, one_line
from keras_vit.storage import atomic
from keras_vit.storage import workdir as wd

_HELD_FACTS = (("split", "split"), ("resize_size", "resize size"),
               ("keep_aspect", "resize (--keep_aspect)"),
               ("use_ema", "choice of EMA weights (--no_ema)"),
               ("image_size", "image size"))


# What every results file holds (null where not known): a JSON object
# without it is someone else's.
_RESULT_KEYS = frozenset(("model_location",))


def check(path: str, location: str,
          data_dir: Optional[str],
          facts: Optional[Dict] = None) -> None:
    """Refuses to overwrite `path` when it holds the results of another
    model (`location`) or another data folder (`data_dir`; both as
    `atomic.absolute` gives them), or with `facts` (this evaluation's
    record) of another split, resize, image size or weights (EMA or
    not): the file names carry the model's file name only (two runs
    called `run` share one), and no result is overwritten by another. A
    file in the model's own folder (a run's) naming a folder of its name
    that is gone is its own, written before the run moved."""
    if not atomic.exists(path):
        return
    try:
        held = wd.read_json(path)
    except (ValueError, UnicodeDecodeError) as error:  # (ours: atomic)
        held = f"not JSON ({one_line(error)})"
    if isinstance(held, dict) and not _RESULT_KEYS <= set(held):
        held = f"no {', '.join(sorted(_RESULT_KEYS - set(held)))}"
    if not isinstance(held, dict):  # someone's file, or one cut short
        raise UsageError(
            f"{path} is no results file of this command "
            f"({held if isinstance(held, str) else 'not a JSON object'}), "
            "and is not overwritten: move it away, or pass --name=NAME "
            "(the file is named by it) or another --output_dir.")
    facts = facts or {}
    # A field the file holds (its resize None included) must agree; the
    # model and data folder where the file names them.
    # A run's own results in its own folder are its, where the folder
    # they name is gone (the run moved) and had its name.
    before = held.get("model_location")
    own = (os.path.dirname(atomic.absolute(path)) == location
           and isinstance(before, str) and "://" not in before
           and os.path.basename(before) == os.path.basename(location)
           and not os.path.exists(before))
    checks = [("data_dir", data_dir, "data folder")] + [
        (field, facts[field], what) for field, what in _HELD_FACTS
        if field in facts and field in held]
    if not own:
        checks.insert(0, ("model_location", location, "model"))
    for field, want, what in checks:
        had = held.get(field, want)
        # A model or data folder the file does not name (null) is no
        # other one; a fact it holds, null included, must agree.
        named = had is not None or field not in ("model_location",
                                                 "data_dir")
        if had != want and named:
            raise UsageError(
                f"{path} holds the results of another {what} ({had}, now "
                f"{want}): pass --name=NAME (the file is named by it) or "
                "another --output_dir, so that they are not overwritten.")


def write(path: str, text: str, facts: Dict) -> None:
    """Publishes the results at `path`, checked again first: another
    evaluation into the folder may have written there since this one
    began (another model's file is refused, never replaced; one made as
    this is published is not replaced unchecked)."""
    def again():
        check(path, facts["model_location"], facts["data_dir"], facts)
    again()
    try:
        atomic.atomic_write(path, text, replace=atomic.exists(path))
    except FileExistsError:
        again()
        atomic.atomic_write(path, text)
    logging.info("Wrote %s", path)
