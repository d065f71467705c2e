"""One training process per run directory (and one VTAB-1k or few-shot
evaluation per output folder).

Two `keras-vit-train` started on one workdir would both resume from its
newest checkpoint and then write the same checkpoints, history and
metrics over each other. The process that trains holds an exclusive
`flock` on the workdir folder itself for as long as it runs: no lock file
is written (nothing to go stale, nothing left in a folder that was
refused), and the kernel lets go of it when the process ends, however it
ends.

Not locked: gs:// and other remote folders (object stores have no locks),
and file systems whose `flock` fails otherwise (some network mounts). A
cluster's chief holds it for the whole cluster (its workers share the
folder).
"""

import contextlib
import errno
import os

from absl import logging

from keras_vit.errors import UsageError

try:  # POSIX; where it is missing, runs are not locked
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


@contextlib.contextmanager
def held(workdir: str, what: str = "training run",
         elsewhere: str = "give this run another folder"):
    """Holds the workdir's lock for the block: `what` runs there (an
    evaluation's output folder too); `elsewhere`, the refusal's fix.

    Raises:
        UsageError: another process holds it (a run of `workdir` still
            going), before the block starts.
    """
    if fcntl is None or "://" in str(workdir):
        yield
        return
    try:
        fd = os.open(workdir, os.O_RDONLY)
    except OSError as error:  # the workdir checks say what is wrong
        logging.debug("%s not locked: %s", workdir, error)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in _BUSY:  # a mount without flock
                logging.debug("%s not locked: %s", workdir, error)
            else:
                raise UsageError(
                    f"Another process is running the {what} in {workdir} "
                    "(it holds the folder's lock): let it end or stop it "
                    f"(the same command then resumes), or {elsewhere}."
                    ) from None
        yield
    finally:
        os.close(fd)  # lets go of the lock
