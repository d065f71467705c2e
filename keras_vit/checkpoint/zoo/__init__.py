"""The released checkpoints: `catalog` (their names, `list_models`),
`cache` (each downloaded once into $KERAS_VIT_CACHE, Hugging Face models
into theirs), `release` (the check that a file is the release its name
says) and `augreg` (the AugReg checkpoints' names, index and recipes)."""
