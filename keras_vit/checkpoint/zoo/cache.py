"""Models by name and by URL, made local: the download cache.

`locate(text)` turns what `keras_vit.load_model` was given into a local
file or folder, or says that `text` is neither a name nor a URL (a path):

- `hf://ORG/NAME` or `hf://ORG/NAME@REVISION`: a Hugging Face model
  repository, downloaded with `huggingface_hub.snapshot_download` into the
  Hugging Face cache (HF_HOME / HF_HUB_CACHE; HF_HUB_OFFLINE=1 uses the
  cache only, as does KERAS_VIT_OFFLINE=1). Only config.json,
  preprocessor_config.json and the weights are fetched: model.safetensors
  (or its shards), else pytorch_model.bin.
- a released checkpoint's name (`keras_vit.checkpoint.zoo.catalog`) or an
  address in gs://vit_models (or the mirror in $KERAS_VIT_MODELS_BASE_URL):
  downloaded (tf.io.gfile; urllib for an http(s) mirror) into
  $KERAS_VIT_CACHE (default
  ~/.cache/keras_vit) under the file's bucket path, e.g.
  ~/.cache/keras_vit/vit_models/imagenet21k/ViT-B_16.npz. A cached file is
  used without any network access; KERAS_VIT_OFFLINE=1 never downloads.

A released checkpoint's file, downloaded or found in the cache, is checked
against what its name implies before it is used (`release.check_release`).
A download that fails the check is not cached; a cached file that fails it
is refused, named, with the fix (delete it to download it again).

A download is checked against the size the remote reports before the copy
(`tf.io.gfile.stat`) and written through `atomic.atomic_write`, so the
cache only ever holds complete files: an interrupted or short download
leaves nothing under the file's name, and the next call downloads it
again. A lock file beside the target keeps two processes from downloading
the same file at once; temporary files an earlier crash left are removed
under that lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import re
import urllib.error
import urllib.request
from typing import Callable, List, Optional, Tuple

import filelock
import huggingface_hub
import tensorflow as tf
from absl import logging
from huggingface_hub import constants as hf_constants
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import (
    GatedRepoError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.zoo import catalog, kaggle, release
from keras_vit.errors import UsageError, one_line
from keras_vit.storage.atomic import atomic_write

CACHE_ENV = "KERAS_VIT_CACHE"
OFFLINE_ENV = "KERAS_VIT_OFFLINE"
HF_PREFIX = "hf://"
CHUNK_BYTES = 16 * 2**20

# The files of a Hugging Face model repository that the hub reader uses.
_HF_FILES = [
    hub.CONFIG_FILE, "preprocessor_config.json", "model.safetensors",
    "model.safetensors.index.json", "model-*-of-*.safetensors",
]
_HF_FALLBACK = ["pytorch_model.bin"]
# hf://ORG/NAME[@REVISION]: the model-repository subset of Hugging Face
# URIs (huggingface_hub's own URI parser exists only in its newest
# releases).
_HF_URI = re.compile(
    r"^hf://(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[^/\s]+))?/?$"
)

# A revision git accepts as a branch, tag or commit name (one path part:
# no '..', not starting or ending with '.', not ending with '.lock').
_REVISION = re.compile(r"^(?!.*\.\.)(?!.*\.lock$)[\w-][\w.-]*(?<!\.)$")
# A commit (immutable, unlike a branch or a tag) named after @.
_COMMIT = re.compile(r"[0-9a-f]{40}")
# Cached beside config.json, the weights whole (shards: the Hub says which).
_SINGLE_FILE = "model.safetensors"


@dataclasses.dataclass(frozen=True)
class Located:
    """A model made local.

    Attributes:
        kind: str. "npz" or "hub" (the `loader.Source` field it fills).
        path: str. The local file or folder.
        image_size: int or None. A released checkpoint's resolution.
    """

    kind: str
    path: str
    image_size: Optional[int] = None


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> str:
    """str. Where released checkpoints are cached: $KERAS_VIT_CACHE, else
    ~/.cache/keras_vit."""
    return os.path.expanduser(
        os.environ.get(CACHE_ENV) or os.path.join("~", ".cache", "keras_vit")
    )


def offline() -> bool:
    """bool. $KERAS_VIT_OFFLINE is set: use cached files only."""
    return _truthy(os.environ.get(OFFLINE_ENV))


def cache_path(bucket_path: str) -> str:
    """The cached copy of a file of the bucket ("imagenet21k/ViT-B_16.npz")."""
    return os.path.join(cache_dir(), "vit_models", *bucket_path.split("/"))


# An HTTP(S) mirror is read with urllib (TensorFlow's file system has no
# http scheme); any other URL (gs://, file://) through tf.io.gfile.
_HTTP = ("http://", "https://")
_HTTP_TIMEOUT_S = 60


def _open_remote(url: str):
    if url.startswith(_HTTP):
        return urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S)
    return tf.io.gfile.GFile(url, "rb")


def _remote_size(url: str) -> int:
    if url.startswith(_HTTP):
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request,
                                    timeout=_HTTP_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise OSError("the server does not say the file's size "
                          "(no Content-Length)")
        return int(length)
    return tf.io.gfile.stat(url).length


def _not_found(error: BaseException) -> bool:
    """Whether `error` says there is no file at the URL (not that the
    network or the file system failed)."""
    if isinstance(error, urllib.error.HTTPError):
        return error.code in (404, 410)
    return isinstance(error, (tf.errors.NotFoundError, FileNotFoundError))


def _no_such_file(label: str, url: str) -> str:
    """The error of a name or address the bucket has no file for: a
    listed release missing from a mirror, or a name to check."""
    if catalog.base_url() != catalog.OFFICIAL_BUCKET and label in {
            m.name for m in catalog.list_models()}:
        return (f"{label}: there is no such file at {url}: the mirror "
                f"{catalog.BASE_URL_ENV} names lacks it. Copy it there, or "
                f"unset {catalog.BASE_URL_ENV} to download it from "
                f"{catalog.OFFICIAL_BUCKET}.")
    close = [n for n in catalog.suggestions(label) if n != label]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (f"{label}: there is no such file at {url}. Check the name "
            f"(`keras_vit.list_models()` lists the released ones; "
            f"{catalog.BASE_URL_ENV} sets the mirror names are read "
            f"from).{hint}")


def _unavailable(label: str, url: str, target: str, reason: str) -> str:
    if offline():
        fix = f"unset {OFFLINE_ENV} to download it"
    else:
        fix = "connect to the network"
        if "not implemented" in reason:  # a TensorFlow without gs://
            fix += (" and add TensorFlow's GCS file system: pip install "
                    "'keras-vision-transformer[gcs]'")
    return (
        f"{label} is not in the cache ({target}) and cannot be downloaded "
        f"from {url}: {reason}. To fix: {fix}, copy the file to {target}, "
        f"or set {catalog.BASE_URL_ENV} to a mirror that has it."
    )


def _download(url: str, target: str, label: str,
              check: Optional[Callable[[str], None]] = None) -> None:
    try:
        size = _remote_size(url)
    except (tf.errors.OpError, OSError) as error:
        if _not_found(error):
            raise UsageError(_no_such_file(label, url)) from None
        raise UsageError(
            _unavailable(label, url, target, one_line(error))) from None
    logging.info("Downloading %s (%.1f MiB) to %s", url, size / 2**20, target)
    copied = 0

    def copy(tmp: str) -> None:
        nonlocal copied
        with open(tmp, "wb") as out, _open_remote(url) as source:
            while copied <= size:
                chunk = source.read(CHUNK_BYTES)
                if not chunk:
                    break
                out.write(chunk)
                copied += len(chunk)
        if copied != size:
            raise UsageError(
                f"The download of {url} gave {copied} bytes where the remote "
                f"file has {size}: nothing was cached. Run again to download "
                "it anew."
            )
        if check is not None:
            check(tmp)

    try:
        atomic_write(target, copy)
    except (tf.errors.OpError, OSError) as error:
        raise UsageError(
            f"The download of {url} stopped after {copied} of {size} bytes "
            f"({one_line(error)}): nothing was cached. Run again to download "
            "it anew."
        ) from error


def _temporary_files(target: str) -> List[str]:
    """Temporary files of `atomic_write` for `target` (`<name>.tmp-*<ext>`)
    that an interrupted process left."""
    root, extension = os.path.splitext(target)
    return glob.glob(glob.escape(root) + ".tmp-*" + glob.escape(extension))


def fetch(url: str, target: str, label: Optional[str] = None,
          info: Optional[catalog.ModelInfo] = None) -> str:
    """The local copy `target` of the remote file `url`, downloaded first
    when the cache lacks it; with `info`, the file (cached or downloaded)
    is checked to be that release (`release.check_release`).

    Raises:
        UsageError: the file is not cached and cannot be downloaded (offline,
            no such file, no network), the download was cut short, or the
            file is not the release `info` names.
    """
    label = label or url

    def check(path: str, cached: Optional[str] = None) -> None:
        if info is not None:
            release.check_release(path, info, cached)

    if os.path.isfile(target):
        check(target, target)
        return target
    if offline():
        raise UsageError(_unavailable(label, url, target,
                                      f"{OFFLINE_ENV} is set"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with filelock.FileLock(target + ".lock"):
        if os.path.isfile(target):  # another process just downloaded it
            check(target, target)
            return target
        for stale in _temporary_files(target):
            os.remove(stale)
        _download(url, target, label, check)
        if info is not None and info.sha256 is not None:
            check(target, target)  # the cached copy's digest, remembered
    return target


def parse_hf_uri(uri: str) -> Tuple[str, Optional[str]]:
    """(ORG/NAME, REVISION or None) of `hf://ORG/NAME[@REVISION]`.

    Raises:
        UsageError: before any cache or network is touched, for a malformed
            URI, or one naming a place outside where it points: a part with
            '..' or a leading '.', or a revision git would not accept as a
            branch, tag or commit name (a trailing '.', a '.lock' ending).
    """
    match = _HF_URI.match(uri.strip())
    if not match:
        raise UsageError(
            f"{uri}: a Hugging Face model is hf://ORG/NAME or "
            "hf://ORG/NAME@REVISION (e.g. hf://google/vit-base-patch16-224)."
        )
    repo, revision = match.group("repo"), match.group("rev")
    parts = repo.split("/") + ([] if revision is None else [revision])
    if any(".." in p or p.startswith(".") for p in parts) or (
            revision is not None and not _REVISION.match(revision)):
        raise UsageError(
            f"{uri}: a Hugging Face repository or revision holds no '..' "
            "and starts with no '.', and a revision (a branch, tag or "
            "commit name, as git allows) ends with no '.' and no '.lock'; "
            "give hf://ORG/NAME or hf://ORG/NAME@REVISION."
        )
    return repo, revision


def hf_snapshot(uri: str) -> str:
    """The local folder of a Hugging Face model `hf://ORG/NAME[@REVISION]`
    (downloaded into the Hugging Face cache when not there yet).

    Raises:
        UsageError: a malformed URI, an unknown or gated repository or
            revision, or a model that is not cached while offline.
    """
    repo, revision = parse_hf_uri(uri)
    hf_offline = bool(hf_constants.HF_HUB_OFFLINE) or _truthy(
        os.environ.get("HF_HUB_OFFLINE"))
    local_only = hf_offline or offline()

    def download(patterns, local=local_only):
        return huggingface_hub.snapshot_download(
            repo, revision=revision, allow_patterns=patterns,
            local_files_only=local,
        )

    def weighed(folder):
        return any(os.path.exists(os.path.join(folder, name))
                   for name in hub.WEIGHT_FILES)

    try:
        folder = None
        if not local_only and revision and _COMMIT.fullmatch(revision):
            # A commit never changes: cached whole, it needs no network.
            with contextlib.suppress(LocalEntryNotFoundError):
                folder = download(_HF_FILES, local=True)
            if folder and not all(os.path.exists(os.path.join(folder, n))
                                  for n in (hub.CONFIG_FILE, _SINGLE_FILE)):
                folder = None
        folder = folder or download(_HF_FILES)
        if not weighed(folder):
            folder = download(_HF_FALLBACK)
    except (GatedRepoError, RepositoryNotFoundError) as error:
        raise UsageError(
            f"{uri}: the Hugging Face Hub has no model {repo} that this "
            "account may read (a typo, a private or a gated repository: "
            f"log in with `hf auth login` if it is yours or you were granted "
            f"access). {type(error).__name__}."
        ) from None
    except RevisionNotFoundError:
        raise UsageError(
            f"{uri}: {repo} has no revision {revision!r}; name a branch, tag "
            "or commit after @."
        ) from None
    except LocalEntryNotFoundError:
        get = f"hf download {repo}" + (f" --revision {revision}"
                                       if revision else "")
        switch = "HF_HUB_OFFLINE" if hf_offline else OFFLINE_ENV
        fix = (f"unset {switch} to download it, or download it where there "
               f"is network (`{get}`) into this cache") if local_only else (
            "check the network connection and run again; without network "
            f"here, download it where there is one (`{get} --local-dir "
            "DIR`) and give DIR, the model's folder, instead")
        raise UsageError(f"{uri} is not (fully) in the Hugging Face cache ("
                         f"{hf_constants.HF_HUB_CACHE}) and could not be "
                         f"downloaded: {fix}.") from None
    except (OSError, ValueError) as error:  # huggingface_hub's own checks
        raise UsageError(
            f"{uri}: the Hugging Face cache or Hub refused it "
            f"({type(error).__name__}: {one_line(error)})."
        ) from None
    # refs/REVISION names the snapshot: it must be one of this
    # repository's, not a path walking out of snapshots/.
    repo_cache = os.path.join(hf_constants.HF_HUB_CACHE,
                              repo_folder_name(repo_id=repo,
                                               repo_type="model"))
    return untrusted.check_snapshot(folder, repo_cache, uri)


def locate(text: str) -> Optional[Located]:
    """What `text` names, made local; None when it is neither a Hugging Face
    URI, a released checkpoint's name nor an address in gs://vit_models
    (a local path or another URL, read where it is: a string ending in
    .npz or with a directory part no released name has is one, existing or
    not, `catalog.is_path`; only a name or an address downloads)."""
    if text.startswith(HF_PREFIX):
        return Located("hub", hf_snapshot(text))
    if catalog.is_kaggle(text):  # keras-hub's presets on Kaggle
        return Located("hub", kaggle.preset_folder(text, offline()))
    text = os.path.expanduser(text)  # "~/ViT-B_16.npz": a local path
    if not catalog.is_download(text):
        return None  # a path ("ViT-B_16.npz"): read where it is, if it is
    info = catalog.lookup(text)
    if info is not None:
        target = cache_path(info.file)
        return Located("npz", fetch(info.url, target, info.name, info),
                       info.image_size)
    # A .npz of the bucket that the catalog does not name: nothing says
    # what it holds, so it is read as it is.
    bucket_path = catalog.bucket_path(text)
    target = cache_path(bucket_path)
    url = f"{catalog.base_url()}/{bucket_path}"
    return Located("npz", fetch(url, target, text))
