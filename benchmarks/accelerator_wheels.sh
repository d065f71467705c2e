#!/usr/bin/env bash
# Downloads into .whl/ (ignored by git) the wheels that
# benchmarks/accelerator.sh installs on a GPU machine that has JAX but no
# TensorFlow, no Keras and no network, for its Python (3.12 by default):
#
#     bash benchmarks/accelerator_wheels.sh [PYTHON_VERSION]
#
# Keras and keras-hub at the versions this checkout is tested with,
# ml-collections, and the needs of those that such a JAX image lacks
# (namex, optree; keras-hub's kagglehub and tensorflow-text are not needed
# to build its ViT). absl-py, numpy, rich, h5py, ml-dtypes, packaging,
# PyYAML, regex, tokenizers and sentencepiece are expected there beside
# JAX. Run where pip reaches the package index, from the repository root.
set -eu -o pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
python=${PYTHON:-python3}
wheels=(keras==3.15.1 keras-hub==0.32.0 ml-collections==1.1.0
        namex==0.1.0 optree==0.20.0)
# Into a new folder first: a failed download leaves the old wheels.
rm -rf .whl.new
"$python" -m pip download --no-deps --only-binary=:all: \
    --python-version "$version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl.new "${wheels[@]}"
rm -rf .whl
mv .whl.new .whl
echo
echo "$(ls .whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1))."
echo "On the GPU machine, with .whl/ copied beside the checkout, from the"
echo "repository root:"
echo "    bash benchmarks/accelerator.sh \"\$OUT\"   # or no argument:"
echo "                                            # benchmarks/results/gpu"
echo "then bring the output folder's files to benchmarks/results/gpu/ here"
echo "and run: python scripts/results_tables.py"
