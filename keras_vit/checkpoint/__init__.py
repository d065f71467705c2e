"""Pre-trained weights in and out of keras_vit models (TensorFlow only for
remote paths and run directories):

- `resolve`: the one resolver, any model string (a released checkpoint's
  name, `hf://ORG/NAME`, a training run's workdir, a `.keras` file, an
  official or AugReg `.npz`, a Hugging Face / timm folder, an export) made
  a local source once; `sources`, `npz_source`: the kinds of source behind
  one interface;
- `loader`: `load_model(source)` (the model) and `load_report(source)`
  (with what was mapped), `initialise` for training, `write_backbone` and
  `transfer_model_config` for fine-tuning;
- `catalog`: the released checkpoints' names (`list_models`); `cache`:
  downloads them, and Hugging Face models, once, into a local cache;
- `npz`: reading, writing and describing official .npz arrays;
- `weights`: the mapping between a model and the official layout
  (`load_npz`, `save_npz`, `model_arrays`);
- `posemb`: position-embedding resizing; `resolution`: a model rebuilt at
  another input size;
- `augreg`: the AugReg checkpoints' names, index and recipes;
- `hub`, `hub_model`, `hub_config`, `hub_timm`, `timm_registry`,
  `torch_pickle`: Hugging Face and timm weights (safetensors, or PyTorch
  files read with `torch.load(weights_only=True)` or a bounds-checked
  reader);
- `workdir`: what a training run leaves in its workdir;
- `atomic`: atomic file writes (local or gs://), used by every layer;
- `convert`: a source saved as a `.keras` file (keras-vit-convert).

The training state's checkpoints (optimizer, step, input position) are
`keras_vit.training.state`.
"""
