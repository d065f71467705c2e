"""Result files of few-shot runs: fewshot.json (every seed's accuracy)
and fewshot.md (mean and standard deviation per data set and shot
count), each written atomically after every data set; and the check that
an output folder holds no other model's results."""

from __future__ import annotations

import json
import math
import os
import shlex
from typing import Mapping

import tensorflow as tf
from absl import logging

from keras_vit.config import named_differences
from keras_vit.errors import UsageError
from keras_vit.storage.atomic import atomic_write


def fewshot_markdown(results: Mapping[str, Mapping], model_name: str) -> str:
    """Few-shot linear accuracy (%) as markdown: a row per data set, a
    column per shot count, mean +- std over the seeds; a cell whose
    poorest class had fewer examples than the shot count says how many."""
    shots = sorted({int(s) for r in results.values() for s in r})
    lines = [
        f"## Few-shot linear accuracy (%): {model_name}",
        "",
        "| Data set | " + " | ".join(f"{s}-shot" for s in shots) + " |",
        "|---|" + "---:|" * len(shots),
    ]
    for name, per_shot in results.items():
        cells = []
        for s in shots:
            entry = per_shot.get(str(s), per_shot.get(s))
            if entry is None:
                cells.append("n/a")
                continue
            accs = [100.0 * a for a in entry["per_seed"]]
            mean = sum(accs) / len(accs)
            std = math.sqrt(sum((a - mean) ** 2 for a in accs) / len(accs))
            fewest = entry.get("fewest_shots")
            cells.append(f"{mean:.2f} ± {std:.2f}" + (
                "" if fewest is None else f" (a class: {fewest} shots)"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


FEWSHOT_JSON = "fewshot.json"
FEWSHOT_MD = "fewshot.md"


def write_fewshot_reports(output_dir: str, model_name: str, results,
                          not_run, *, chief: bool = True, **facts) -> str:
    """Writes fewshot.json (`results`, `not_run` and `facts`: sizes,
    config) and fewshot.md into `output_dir`, each atomically (written
    after each data set, so that a run stopped later keeps them); the
    markdown. A cluster's other workers (`chief` false) write nothing."""
    out = dict(model=model_name, results=results, not_run=not_run, **facts)
    text = fewshot_markdown(results, model_name)
    if not_run:
        text += "\nNot run:\n\n" + "".join(
            f"- {k}: {v}\n" for k, v in not_run.items())
    if chief:
        atomic_write(os.path.join(output_dir, FEWSHOT_JSON),
                     json.dumps(out, indent=2, sort_keys=True) + "\n")
        atomic_write(os.path.join(output_dir, FEWSHOT_MD), text)
    return text


def _recipe(facts: Mapping) -> dict:
    """What makes two runs' accuracies comparable: the sizes, the
    weights (a workdir's EMA ones or not), the few-shot options other
    than the data sets and the batch (a smaller one after running out of
    memory gives the same features), and where the data is read (another
    copy, another TFDS version there, may give other accuracies), as JSON
    holds them (a live config's tuples are the lists of a stored one)."""
    facts = json.loads(json.dumps(dict(facts)))
    recipe = {f"config.evals.fewshot.{k}": v
              for k, v in _evaluator(facts).items()
              if k not in ("datasets", "batch_size")}
    inp = (facts.get("config") or {}).get("input") or {}
    recipe.update({f"config.input.{k}": inp.get(k)
                   for k in ("data_dir", "manual_dir", "image_key",
                             "label_key")})
    recipe.update({"the image size": facts.get("image_size"),
                   "the resize": facts.get("resize_size"),
                   _EMA: facts.get("use_ema"),
                   "the draw of the shots": facts.get("shot_draw")})
    return recipe


# The recipe's entry of the weights probed: a workdir's EMA ones or not.
_EMA = "EMA weights (--no_ema)"


def check_fewshot_folder(output_dir: str, model_name: str, datasets,
                         chief: bool = True, **facts) -> dict:
    """The results to keep of an `output_dir` whose fewshot.json is this
    model's (`facts["model_location"]`): those of data sets this run does
    not probe (`datasets`), with the same recipe. Refuses a fewshot.json
    of another model (rewriting it would lose that model's results), and
    one of another recipe or files holding data sets this run would drop;
    one this run probes whole again is kept apart (`chief`: this process
    writes the files) as fewshot.before-N.json, said in the log."""
    path = os.path.join(output_dir, FEWSHOT_JSON)
    location = facts["model_location"]
    if not tf.io.gfile.exists(path):
        return {}
    try:
        with tf.io.gfile.GFile(path) as f:
            held = json.load(f)
        name = held.get("model")
    except (ValueError, AttributeError, UnicodeDecodeError):
        raise UsageError(
            f"{path} is no few-shot results file of this project (not JSON "
            "of its fields, or cut short): move it away or pass another "
            "--output_dir, so that it is not overwritten.") from None
    where = held.get("model_location")
    if where == location and isinstance(name, str) and name != model_name:
        raise UsageError(
            f"{path} holds the few-shot results of this model ({location!r})"
            f" named {name!r}, not {model_name!r}: pass "
            f"--name={shlex.quote(name)} to add to them, or another "
            "--output_dir.")
    if name != model_name or (where is not None and where != location):
        whose = (f"model {where or name!r}" if isinstance(name, str)
                 else "no model")
        raise UsageError(
            f"{path} holds the few-shot results of {whose}, not of "
            f"{location!r}: pass another --output_dir (or move that "
            "file away), so that they are not overwritten."
        )
    results = held.get("results") or {}
    kept = {k: v for k, v in results.items() if k not in set(datasets)}
    theirs, ours = _recipe(held), _recipe(facts)
    if "use_ema" not in held:  # written before the weights were recorded
        theirs[_EMA] = ours[_EMA]
    files = held.get("model_files", facts.get("model_files"))
    differ = ("its files changed since (their contents)"
              if files != facts.get("model_files") else
              named_differences(theirs, ours, str, repr, where="there"))
    if kept and differ:
        raise UsageError(
            f"{path} holds few-shot results of {', '.join(sorted(kept))} "
            f"of the model at {location!r}, made otherwise ({differ}), "
            "which this run would drop: probe them too (list them in the "
            "config's data sets), or pass another --output_dir.")
    if results and differ and chief:  # all probed again: the old kept
        moved = _set_aside(output_dir)
        logging.warning(
            "%s held few-shot results of %s made otherwise (%s): kept "
            "apart as %s; this run's go in %s.", path,
            ", ".join(sorted(results)), differ, moved, FEWSHOT_JSON)
    return kept


def _set_aside(output_dir: str) -> str:
    """Renames fewshot.json and fewshot.md to the first free
    fewshot.before-N.*; the JSON's new name."""
    n = 1  # free for both (a .md left alone would stop the rename)
    while any(tf.io.gfile.exists(os.path.join(
            output_dir, f"fewshot.before-{n}.{ext}")) for ext in ("json",
                                                                  "md")):
        n += 1
    for name in (FEWSHOT_MD, FEWSHOT_JSON):  # the JSON, which decides, last
        old = os.path.join(output_dir, name)
        if tf.io.gfile.exists(old):
            tf.io.gfile.rename(old, os.path.join(
                output_dir, name.replace(".", f".before-{n}.")))
    return f"fewshot.before-{n}.json"


def probed_before(output_dir: str, datasets, **facts) -> dict:
    """The results fewshot.json in `output_dir` holds of this run's
    `datasets` probed with the same model files, recipe (`_recipe`) and
    data set entry: what a run stopped part way kept, not probed again.
    {} where the model's files are unknown (nothing to compare)."""
    path = os.path.join(output_dir, FEWSHOT_JSON)
    if not facts.get("model_files") or not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        held = json.load(f)  # refused before if it is not (check_...)
    theirs, ours = _recipe(held), _recipe(facts)
    if held.get("model_files") != facts["model_files"] or theirs != ours:
        return {}
    held_sets, our_sets = _datasets(held), _datasets(facts)
    return {k: v for k, v in (held.get("results") or {}).items()
            if k in set(datasets) and k in our_sets
            and held_sets.get(k) == our_sets[k]}


def _datasets(facts: Mapping) -> dict:
    """The few-shot evaluator's data set entries of a run's config."""
    return dict(_evaluator(json.loads(json.dumps(dict(facts))))
                .get("datasets") or {})


def _evaluator(facts: Mapping) -> Mapping:
    """The few-shot evaluator of a run's config, as JSON holds it, picked
    as the run picks it (`config.find_evaluator`): the one named fewshot,
    else the only one; {} without one."""
    evals = (facts.get("config") or {}).get("evals") or {}
    found = [e for e in evals.values()
             if isinstance(e, Mapping) and e.get("type") == "fewshot"]
    named = evals.get("fewshot")
    if isinstance(named, Mapping) and named.get("type") == "fewshot":
        return named
    return found[0] if len(found) == 1 else {}
