"""The workers of a cluster train with the same settings, checked once
before the first step that needs them all.

Each worker settles its run config on its own: from its command line,
and, for a run counted in epochs, from its own copy of the training data
(its size gives the steps, the warm-up and the periods). Workers that
disagree would wait forever in a collective that only some of them
reach, fail deep inside TensorFlow, or train with other learning rates
into one checkpoint, without a word. Every worker therefore passes a
fingerprint of each section of its config to one all-reduce, and where
they differ every worker stops alike with one line naming the sections.
"""

from __future__ import annotations

import hashlib
import json
from typing import Dict, List

from keras_vit.errors import UsageError
from keras_vit.training import distribute

# Where each worker's copy is: paths that may differ between hosts
# without changing what is trained.
_PER_HOST = {"input": ("data_dir", "manual_dir")}
# A section's fingerprint: _CHUNKS numbers of 8 bits each, summed
# exactly (`sum_over_workers`) for up to 2 ** 16 workers.
_CHUNKS = 4


def check(config, strategy) -> None:
    """A UsageError on every worker of a multi-worker `strategy` alike
    where the workers' `config`s differ (other than in `_PER_HOST`)."""
    if not distribute.is_multi_worker(strategy):
        return
    names, numbers = fingerprint(config.to_dict())
    sums = distribute.sum_over_workers(strategy, numbers + [1.0])
    workers = sums.pop()
    differ = sorted({names[i // _CHUNKS] for i, (total, mine) in
                     enumerate(zip(sums, numbers))
                     if total != mine * workers})
    # Where this worker's numbers are the others' mean (b + c = 2a), it
    # saw no difference: one more vote, so that every worker stops.
    if distribute.any_worker(strategy, bool(differ)):
        raise UsageError(
            f"The {workers:.0f} workers run with other settings: their "
            + (f"{', '.join('config.' + name for name in differ)} settings"
               if differ else "configs")
            + " differ (their command lines, or their copies of the data, "
            "from which a run counted in epochs counts its steps): run the "
            "same command, with the same data, on every worker.")


def fingerprint(config: Dict) -> tuple:
    """(section names, `_CHUNKS` numbers of 8 bits per section): the
    fingerprint of each section of the config dict `config`."""
    names: List[str] = []
    numbers: List[float] = []
    for name in sorted(config):
        section = config[name]
        if isinstance(section, dict) and name in _PER_HOST:
            section = {k: v for k, v in section.items()
                       if k not in _PER_HOST[name]}
        text = json.dumps(section, sort_keys=True, default=repr)
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        names.append(name)
        numbers += [float(byte) for byte in digest[:_CHUNKS]]
    return names, numbers
