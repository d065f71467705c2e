"""Pre-trained weights in and out of keras_vit models (TensorFlow only for
remote paths and run directories):

- `loader`: `load_model(source)`, the one function that turns any source
  (a training run's workdir, a `.keras` file, an official or AugReg `.npz`,
  a Hugging Face / timm folder, `hf://ORG/NAME`, a released checkpoint's
  name) into a model; `resolve` makes a source string local; `initialise`
  for training, `write_backbone` and `transfer_model_config` for
  fine-tuning;
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
