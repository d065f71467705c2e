"""The file formats weights come in, each read with its bounds checked
before memory is touched: the official `.npz` (`npz`: reading and
writing; `npz_layout`: what its keys and shapes mean; `npz_mapping`: the
official key of each model variable), PyTorch's pickled state dicts
(`torch_pickle`, after the opcode and size checks of `torch_checks`), and
the bounded JSON and file-name readers for the rest of a downloaded model
(`untrusted`)."""
