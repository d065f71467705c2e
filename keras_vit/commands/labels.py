"""--class_names_file, shared by the commands that name classes (predict,
analysis, export, evaluate): its flag, its lines (a bad file is one line,
before any model is read), and the check that there is one name per class
of the model (`check_class_count`, right after the model loads)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Sequence

from absl import flags, logging

from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError
from keras_vit.storage import atomic, lines
from keras_vit.values import name_key

if TYPE_CHECKING:  # what type checkers and the import contracts read
    from keras_vit.checkpoint import loader
else:  # imported at first use: `--help` loads no Keras or TensorFlow
    loader = lazy_module("keras_vit.checkpoint.loader")


def define_class_names_file(values: flags.FlagValues) -> None:
    flags.DEFINE_string(
        "class_names_file", None, "Class names, one per line, in label "
        "order (default: the model's own, e.g. a workdir's labels.txt or a "
        "Hugging Face config's id2label; else class indices).",
        flag_values=values,
    )


def class_names(values: flags.FlagValues,
                source: loader.Source) -> Optional[list]:
    """--class_names_file's lines, else the names the source records (a
    blank name, or one across lines, is named by its index, with a
    warning: every command names the class alike, and an export's
    labels.txt holds a name a line)."""
    if values.class_names_file:
        given = class_names_file(values)
        try:  # (only to warn: the file stands in for a damaged one)
            own = loader.class_names(source) or []
        except (UsageError, ValueError, OSError):
            own = []
        own, keys = ([name_key(n) for n in names] for names in (own, given))
        if sorted(own) == sorted(keys) and own != keys:  # (é as é)
            i = next(i for i, (a, b) in enumerate(zip(own, keys)) if a != b)
            logging.warning(
                "--class_names_file=%s holds the classes %s records in "
                "another order (class %d: %r there, %r here): the file's "
                "order is taken.", values.class_names_file, source.path, i,
                own[i], given[i])
        return given
    names = loader.class_names(source)
    unfit = [i for i, name in enumerate(names or ())
             if not lines.fits_a_line(name)]
    if unfit:
        logging.warning(
            "%s records a blank or multi-line name for class(es) %s: named "
            "by index here (--class_names_file names them).", source.path,
            ", ".join(map(str, unfit[:10])) + (", ..." if unfit[10:] else ""))
        names = [str(i) if i in unfit else name
                 for i, name in enumerate(names)]
    return names


def class_names_file(values: flags.FlagValues) -> Optional[list]:
    """--class_names_file's lines, or None; a bad file is one line. `~`
    is the home folder (bash expands none after `=`)."""
    given = "class_names_file" in values and values.class_names_file
    if not given:
        return None
    where = f"--class_names_file={given}"
    path = os.path.expanduser(given)
    try:
        names = lines.read_lines(path, where=where)
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not UTF-8 text: give a text file "
                         "with one class name per line.") from None
    except UsageError:  # a blank line, named by its number
        raise
    except Exception as error:  # OSError; tf.errors.OpError (remote)
        if not atomic.exists(path):
            raise UsageError(f"{where} does not exist.") from None
        why = getattr(error, "strerror", None) or " ".join(str(getattr(
            error, "message", error)).replace(f"{path}; ", "").split())
        raise UsageError(f"{where} cannot be read ({why}): give a text "
                         "file with one class name per line.") from None
    if not names:
        raise UsageError(f"{where} holds no class name: give one per line.")
    return names


def check_class_count(values: flags.FlagValues, source: loader.Source,
                      names: Optional[Sequence[str]],
                      num_classes: Optional[int]) -> None:
    """A UsageError when `names` (`class_names`) are not one per class of
    the `num_classes`-class model (None: not known, nothing checked)."""
    if names is None or num_classes is None or len(names) == num_classes:
        return
    if "class_names_file" in values and values.class_names_file:
        raise UsageError(
            f"--class_names_file={values.class_names_file} holds "
            f"{len(names)} class names for a {num_classes}-class model: "
            "give one name per class, one per line, in label order.")
    raise UsageError(
        f"{source.path} records {len(names)} class names for a "
        f"{num_classes}-class model: pass --class_names_file with one name "
        "per class, one per line.")
