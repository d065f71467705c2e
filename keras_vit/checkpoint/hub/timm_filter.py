"""What timm's loader does to a folder's stored weights before its model
takes them, done the same way here: `load_state_dict`'s unwrapping of a
training checkpoint (`checkpoint_entry`: state_dict_ema, model_ema,
state_dict or model, keys cleaned of DDP / torch.compile prefixes) and
`vision_transformer.checkpoint_filter_fn`'s reshaping of a 2-D patch
kernel (`timm_kernel`) and recovery of the stored position grid
(`check_tokens`). Read by `hub_tensors` and `hub`.
"""

from __future__ import annotations

import math

from keras_vit.checkpoint.posemb import square_grid
from keras_vit.errors import UsageError

# timm's load_state_dict (use_ema=True, as create_model's pretrained load
# of a folder calls it) takes the first of these a checkpoint holds
# (the first two only when not None), and its clean_state_dict strips
# these wrappers' prefixes, in this order, from every key.
_TIMM_ENTRIES = ("state_dict_ema", "model_ema", "state_dict", "model")
_TIMM_PREFIXES = ("_orig_mod.", "module.", "_orig_mod.")


def checkpoint_entry(checkpoint):
    """(what was unwrapped, state dict): the state dict timm's loader
    takes from a torch file's object, keys cleaned of DDP /
    torch.compile prefixes; what was unwrapped is '' for a plain state
    dict with clean keys."""
    key = ""
    if isinstance(checkpoint, dict):
        for name in _TIMM_ENTRIES:
            if name in checkpoint and (checkpoint[name] is not None
                                       or name in ("state_dict", "model")):
                key = name
                break
    state = checkpoint[key] if key else checkpoint
    if not isinstance(state, dict):
        return key, state
    cleaned = {}
    for name, value in state.items():
        if isinstance(name, str) and name.startswith(_TIMM_PREFIXES):
            key = key or "a DDP / torch.compile key prefix"
            for prefix in _TIMM_PREFIXES:
                name = name[len(prefix):] if name.startswith(prefix) else name
        cleaned[name] = value
    return key, cleaned


def timm_kernel(tensors, settings, weights_path: str):
    """The patch embedding kernel (out, in, P, P) as timm's checkpoint
    filter makes it: a 2-D (out, in * P * P) one (timm's earliest ViTs)
    reshaped with the config's patch size P; None when stored 4-D."""
    kernel = tensors["patch_embed.proj.weight"]
    if kernel.ndim == 4:
        return None
    patch = settings["patch_size"]
    if kernel.ndim != 2 or not isinstance(patch, int) or (
            kernel.shape[1] != 3 * patch * patch):
        raise UsageError(
            f"{weights_path}: patch_embed.proj.weight has shape "
            f"{tuple(kernel.shape)}, which timm's checkpoint filter cannot "
            f"reshape to its model's (out, 3, {patch}, {patch}) kernel; the "
            "config does not describe these weights."
        )
    return kernel.reshape(kernel.shape[0], 3, patch, patch)


def check_tokens(found, arrays, weights_path: str):
    """The class token and position table the config describes are the
    ones the arrays hold; returns the stored table's patch grid (the
    built one, or the square grid timm resamples from)."""
    has_cls = "cls" in arrays
    if has_cls != (found["pooling"] == "token"):
        raise UsageError(
            f"{weights_path}: config.json pools by "
            f"{'class token' if found['pooling'] == 'token' else 'average'}"
            f" but the weights {'have' if has_cls else 'lack'} a cls_token."
        )
    rows = arrays["Transformer/posembed_input/pos_embedding"].shape[1]
    patch = arrays["embedding/kernel"].shape[0]
    built = tuple(s // patch for s in found["image_size"])
    grid = math.prod(built)
    if has_cls and rows == grid:
        raise UsageError(
            f"{weights_path}: pos_embed has {rows} rows for {grid} patches "
            "and a class token: position embeddings without the class "
            "token (timm no_embed_class=True), which this ViT does not "
            "compute."
        )
    tokens = rows - int(has_cls)
    # The stored grid as timm's checkpoint filter recovers it
    # (get_pretrained_grid_size): the saved img_size or input_size over
    # the patch when that accounts for every row, else a square.
    stored = tuple(s // patch for s in found["stored_size"])
    if math.prod(stored) == tokens:
        return stored
    return square_grid(tokens, (
        f"{weights_path}: pos_embed has {tokens} patch rows, neither "
        f"the {built[0]} x {built[1]} grid timm builds from config.json"
        " nor a square grid timm could resample: the config does not "
        "describe these weights."
    ))
