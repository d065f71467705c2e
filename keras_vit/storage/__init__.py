"""Files that every layer writes or reads (TensorFlow's file system, so
local or gs://): `atomic`, the atomic write (to a temporary name, then
renamed); `workdir`, what a training run leaves in its workdir
(config.json, labels.txt, checkpoints/, metrics.json) and how it is read
back; `checkpoint_list`, the checkpoints a folder holds;
`version_names`, which folder names TF Serving reads as versions.

The lowest layer of the package above the model core: checkpoint
readers, data, training, evaluation and the commands all use it."""
