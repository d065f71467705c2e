"""Hugging Face and timm models: `reader` reads a folder (config.json
beside safetensors or PyTorch weights; sharded indexes, the Hugging Face
cache's layout) into the official layout; `config` and `config_types`
check what its config.json says, field by field, as transformers does;
`processor` reads a transformers preprocessor_config.json (its pixel
normalisation, its resize and crop before evaluation); `timm` reads
timm's `vision_transformer` configs and `timm_registry` its named
models' defaults; `mapping` renames the arrays; `model` builds the
keras_vit model that computes what the library's would."""
