"""Pre-trained weights in and out of keras_vit models (TensorFlow only for
remote paths and run directories), laid out by what is read:

- at the top, the way in: `resolve` (the one resolver: any model string,
  a released checkpoint's name, `hf://ORG/NAME`, a training run's
  workdir, a `.keras` file, an official or AugReg `.npz`, a Hugging Face
  / timm folder, an export, made a local source once), `sources` and
  `npz_source` (the kinds of source behind one interface), `loader`
  (`load_model(source)`, `load_report(source)`, `initialise` for training,
  `write_backbone` and `transfer_model_config` for fine-tuning),
  `weights` (a model to and from the official layout: `load_npz`,
  `save_npz`, `model_arrays`), `posemb` (position-embedding resizing) and
  `resolution` (a model rebuilt at another input size);
- `formats/`: the file formats, read with their bounds checked (`npz`,
  `npz_layout`, `npz_mapping`; `torch_pickle` after `torch_checks`;
  `untrusted`, the bounded JSON and file-name readers);
- `hub/`: Hugging Face and timm folders (`reader`, `config`,
  `config_types`, `mapping`, `model`; `timm` and `timm_registry`) and
  keras-hub presets (`keras_preset`, `keras_preset_arrays`,
  `keras_preset_pixels`);
- `zoo/`: the released checkpoints (`catalog`, `cache`, `release`,
  `augreg`) and keras-hub's presets on Kaggle (`kaggle`).

Run directories and the atomic write are `keras_vit.storage`; the training
state's checkpoints (optimizer, step, input position) are
`keras_vit.training.state`.
"""
