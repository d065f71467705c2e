"""Caches filled the way a user's would be, without the network: the
Hugging Face cache (HF_HOME/hub, laid out as huggingface_hub lays it out)
and $KERAS_VIT_CACHE (released checkpoints by their bucket path)."""

import hashlib
import os
import shutil

from keras_vit.checkpoint.zoo import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "hub",
                          "hf_vit_classifier")
REVISION = "0123456789abcdef0123456789abcdef01234567"


def fill_hf_cache(root, repo="test-org/tiny-vit", folder=HF_FIXTURE):
    """The Hugging Face cache layout (under `root`, i.e. HF_HOME/hub) of
    `repo` at REVISION holding the files of `folder`: blobs named by their
    hash, snapshot files linking to them, refs/main naming the revision.
    Returns the snapshot folder."""
    base = os.path.join(str(root), "models--" + repo.replace("/", "--"))
    snapshot = os.path.join(base, "snapshots", REVISION)
    os.makedirs(os.path.join(base, "blobs"))
    os.makedirs(snapshot)
    for name in sorted(os.listdir(folder)):
        if name == "reference.npz":
            continue
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        blob = os.path.join(base, "blobs", hashlib.sha256(data).hexdigest())
        with open(blob, "wb") as f:
            f.write(data)
        os.symlink(os.path.relpath(blob, snapshot),
                   os.path.join(snapshot, name))
    os.makedirs(os.path.join(base, "refs"))
    with open(os.path.join(base, "refs", "main"), "w") as f:
        f.write(REVISION)
    return snapshot


def fill_keras_vit_cache(cache_root, npz, bucket_path):
    """Puts the .npz `npz` in the cache at `cache_root` ($KERAS_VIT_CACHE)
    as the released file `bucket_path` ("imagenet21k/ViT-B_16.npz");
    returns the cached path."""
    old = os.environ.get(cache.CACHE_ENV)
    os.environ[cache.CACHE_ENV] = str(cache_root)
    try:
        target = cache.cache_path(bucket_path)
    finally:
        if old is None:
            del os.environ[cache.CACHE_ENV]
        else:
            os.environ[cache.CACHE_ENV] = old
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy(npz, target)
    return target
