#!/usr/bin/env bash
# The GPU measurement in one command, at most 7.5 minutes by default:
#
#     bash benchmarks/accelerator.sh [--smoke] [--profile] [--inference]
#                                    [--training] [--xla-options]
#                                    [--no-wheels] [OUTPUT_DIR]
#
# On a machine with JAX and a GPU (no TensorFlow, no network needed), from
# the repository root. Installs the wheels of .whl/ (made where pip works by
# benchmarks/accelerator_wheels.sh: Keras, keras-hub, ml-collections and
# their pure-Python needs) into a temporary folder, then runs
# benchmarks/throughput.py under KERAS_BACKEND=jax, bfloat16 mixed
# precision, XLA, training and inference, each in a fresh process
# (--process_per_config: in one process, what was compiled after another
# configuration was cleared ran much slower on a GPU), keras_vit
# interleaved with keras-hub's ViT in each, the bf16 matmul ceiling in the
# same run:
#
#   b16_384_b32_bf16   B/16, 384, batch 32, with keras_vit_one_path
#   b16_224_b128_bf16  B/16, 224, batch 128, with keras_vit_one_path
#   l16_224_b64_bf16   L/16, 224, batch 64
#
# (keras_vit_one_path: keras_vit with its cuDNN fused attention turned
# off, the library's portable path in the same process: what the fused
# attention gains end to end, at 384 and 224.) Each
# run gets a share of the time (--deadline cuts its repeats and skips what
# is left once the share is spent) and is killed if it outlasts what is
# left of the whole budget. Results: OUTPUT_DIR/NAME.json and NAME.md per
# run and accelerator.log (NAME_runN and accelerator_runN.log where the
# folder holds that name already: nothing stored is written over), in
# OUTPUT_DIR (benchmarks/results/gpu unless given); `python
# scripts/results_tables.py` renders the JSON files of
# benchmarks/results/gpu into docs/performance.md.
#
# --profile: instead of the throughput runs, where B/16's training and
# inference steps (224, batch 128, bfloat16) spend their device time,
# keras_vit and keras-hub, each model and mode in a fresh process
# (benchmarks/device_profile.py: kernels by phase and kind, the longest
# ones by name), written as
# device_profile_b16_224_b128_bf16.*; then the attention op alone, the
# portable path (one_path) against cuDNN's fused attention, at 224 (batch
# 128) and 384 (batch 32) (benchmarks/attention_kernels.py,
# attention_kernels_*).
# --inference: instead of the throughput runs (or after --profile's),
# inference as users run it: predict_on_batch against the forward pass
# compiled once and called on inputs already on the device, B/16 at 384,
# batch 32, beside the library's one path (the fused attention against
# it end to end: inference_b16_384_b32_bf16), then at 224, batch 128
# (beside keras-hub's) and 1024 (inference_b16_224_*), each mode in a
# fresh process (the models of a run take turns in it).
# --training: likewise for training: train_on_batch against the step
# compiled once with its state kept on the device (throughput.py's
# train_jit), B/16 at 224, batch 128, beside keras-hub's, each mode in a
# fresh process (training_b16_224_b128_bf16.*), then L/16 at 224, batch
# 64, alone (training_l16_224_b64_bf16.*). With both, in order of need:
# B/16 training, inference at 384 beside the one path, inference at
# batch 128, L/16 training, inference at batch 1024. Each throughput run
# stops its repeats 30 s before its time limit, so that it writes what it
# measured.
# --xla-options: B/16's training step compiled once (train_jit; 224,
# batch 128) under XLA's defaults and under each of XLA_OPTIONS below (set
# as XLA_FLAGS), each in its own process (xla_TAG_b16_224_b128_bf16.*):
# whether XLA fuses more of the elementwise work that the profile found
# around the matmuls (cuBLASLt's bias and GELU epilogues, Triton GEMM
# fusions).
# --smoke: the same runs at tiny sizes (any machine, the CPU too), to check
# the whole path (tests/test_accelerator.py does); without OUTPUT_DIR its
# files go to a new temporary folder.
# --no-wheels: use the installed packages even where .whl/ has wheels.
# Environment: PYTHON (default python3), BUDGET_S (total seconds, default
# 450, 1500 with --smoke; with --profile, --inference, --training or
# --xla-options, no default: each run has its own limit, and BUDGET_S,
# where set, caps them all).
set -u -o pipefail
cd "$(dirname "$0")/.."
smoke=0 wheels=1 profile=0 inference=0 training=0 xla_options=0 outdir=
for arg in "$@"; do
    case $arg in
        --smoke) smoke=1 ;;
        --no-wheels) wheels=0 ;;
        --profile) profile=1 ;;
        --inference) inference=1 ;;
        --training) training=1 ;;
        --xla-options) xla_options=1 ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
                   exit 0 ;;
        -*) echo "accelerator.sh: unknown option $arg (--smoke," \
                 "--profile, --inference, --training, --xla-options," \
                 "--no-wheels," \
                 "OUTPUT_DIR)" >&2
            exit 2 ;;
        *) outdir=$arg ;;
    esac
done
if [ -z "$outdir" ] && [ "$smoke" = 1 ]; then
    outdir=$(mktemp -d)  # tiny sizes: never into the stored results
fi
outdir=${outdir:-benchmarks/results/gpu}
python=${PYTHON:-python3}
# free NAME EXT: NAME, or NAME_runN (the next free N) where OUTPUT_DIR
# holds NAME.EXT already: a stored result or log is never written over.
free() {
    local n=2
    if [ ! -e "$outdir/$1.$2" ]; then echo "$1"; return; fi
    while [ -e "$outdir/${1}_run$n.$2" ]; do n=$((n + 1)); done
    echo "${1}_run$n"
}
# The log is kept in a temporary file until the environment check passes:
# a machine that cannot run the measurement leaves OUTPUT_DIR untouched.
log=$(mktemp)
say() { echo "$*" | tee -a "$log"; }

export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3
path=$PWD
if [ "$wheels" = 1 ] && compgen -G ".whl/*.whl" > /dev/null; then
    site=$(mktemp -d)
    trap 'rm -rf "$site"' EXIT
    say "installing $(ls .whl/*.whl | wc -l) wheels of .whl/ into $site"
    "$python" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target "$site" .whl/*.whl >> "$log" 2>&1 \
        || { say "pip install of .whl/ failed: see $log"; exit 1; }
    path=$site:$path
else
    say "no wheels installed: using the installed packages"
fi
export PYTHONPATH=$path${PYTHONPATH:+:$PYTHONPATH}
SMOKE=$smoke "$python" - >> "$log" 2>&1 <<'PY'
import os, platform, sys
import jax, keras
print("python", platform.python_version(), "jax", jax.__version__,
      "keras", keras.__version__, "devices", jax.devices())
try:
    import keras_hub
    print("keras_hub", keras_hub.__version__)
except ImportError as e:
    print("keras_hub not importable:", e)
if jax.default_backend() == "cpu" and os.environ["SMOKE"] != "1":
    sys.exit("JAX sees no GPU (default backend: cpu): the full sizes would "
             "take hours here; use --smoke to check the path on the CPU.")
PY
rc=$?
if [ "$rc" != 0 ]; then
    say "the environment check failed (exit $rc):"
    tail -n 3 "$log" >&2
    rm -f "$log"
    exit 1
fi
command -v nvidia-smi > /dev/null && nvidia-smi -L >> "$log" 2>&1
mkdir -p "$outdir" || exit 1
held=$log
log=$outdir/$(free accelerator log).log
cat "$held" > "$log" && rm -f "$held"

# run NAME SECONDS SCRIPT ARGS...: one script of benchmarks/, killed after
# SECONDS or what is left of BUDGET_S, whichever is less.
failed=0 written=0
run() {
    local name limit=$2 script=$3 left
    name=$(free "$1" json)
    shift 3
    left=$((${BUDGET_S:-100000} - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    # throughput.py needs room for its 30 s margin below.
    local least=20
    [ "$script" = throughput.py ] && least=40
    if [ "$limit" -lt "$least" ]; then
        say "$name: skipped, ${left}s of the budget left"
        failed=1
        return
    fi
    # throughput.py stops its repeats 30 s before it would be killed, so
    # that it writes what it measured.
    [ "$script" = throughput.py ] && set -- "$@" --deadline $((limit - 30))
    say "$name: starting, killed after ${limit}s"
    timeout --kill-after=5 "$limit" "$python" "benchmarks/$script" "$@" \
        --output "$outdir/$name" > /dev/null 2>> "$log"
    local rc=$?
    say "$name: exit $rc after ${SECONDS}s in all"
    [ -f "$outdir/$name.json" ] && written=$((written + 1))
    [ "$rc" = 0 ] || failed=1
}

# XLA_OPTIONS: TAG=FLAGS, each a run of --xla-options after XLA's
# defaults (TAG "default", no flags).
XLA_OPTIONS=(
    "cublaslt=--xla_gpu_enable_cublaslt=true"
    "triton_gemm_any=--xla_gpu_triton_gemm_any=true"
    "no_triton_gemm=--xla_gpu_enable_triton_gemm=false"
)
if [ "$profile" = 1 ] || [ "$inference" = 1 ] || [ "$training" = 1 ] \
        || [ "$xla_options" = 1 ]; then
    if [ "$smoke" = 1 ]; then
        tiny=(--patch_size 8 --hidden_size 32 --num_layers 1 --num_heads 2
              --mlp_dim 64)
        s224=32 s384=48 b128=2 b64=2 b32=2 b1024=4 classes=(--num_classes 10)
        psteps=(--steps 1 --warmup 1) reps=(--repeats 2 --min_time 0.01)
        timed=(--repeats 2 --steps 1 --matmul_size 64)
    else
        tiny=() s224=224 s384=384 b128=128 b64=64 b32=32 b1024=1024
        classes=()
        psteps=(--steps 5 --warmup 3) reps=(--repeats 5 --min_time 0.3)
        timed=(--repeats 5 --min_time 1 --matmul_size 8192)
    fi
    if [ "$profile" = 1 ]; then
        run device_profile_b16_224_b128_bf16 300 device_profile.py \
            --variant B/16 --dtype bfloat16 --modes train,infer \
            --image_size "$s224" --batch_size "$b128" "${psteps[@]}" \
            "${tiny[@]}" "${classes[@]}"
        for size in "$s224:$b128:224_b128" "$s384:$b32:384_b32"; do
            IFS=: read -r image batch tag <<< "$size"
            run "attention_kernels_b16_$tag" 60 attention_kernels.py \
                --variant B/16 --dtype bfloat16 --image_size "$image" \
                --batch_size "$batch" "${reps[@]}" "${tiny[@]}"
        done
    fi
    # In order of need: B/16 training, the fused attention against the
    # one path in inference at 384, inference at batch 128 (the targets'
    # rows), then L/16 training and inference at batch 1024.
    train() {  # NAME SECONDS VARIANT BATCH [--compare_keras_hub]
        run "$1" "$2" throughput.py --variant "$3" --image_size "$s224" \
            --batch_size "$4" --dtype bfloat16 --xla on \
            --mode train,train_jit --process_per_config --warmup 2 \
            --rewarm 1 --matmul_repeats 2 "${timed[@]}" "${tiny[@]}" \
            "${classes[@]}" "${@:5}"
    }
    infer() {  # NAME SECONDS IMAGE BATCH [--compare_...]
        run "$1" "$2" throughput.py --variant B/16 --image_size "$3" \
            --batch_size "$4" --dtype bfloat16 --xla on \
            --mode infer,infer_jit --process_per_config --warmup 2 \
            --rewarm 1 --matmul_repeats 2 "${timed[@]}" "${tiny[@]}" \
            "${classes[@]}" "${@:5}"
    }
    # train_on_batch against the step compiled once, its state on the
    # device: what Keras's per-call work costs a training step.
    [ "$training" = 1 ] && train training_b16_224_b128_bf16 240 B/16 \
        "$b128" --compare_keras_hub
    # The fused attention against the one path in inference at 384 (the
    # training steps' comparison is in the throughput runs), then
    # predict_on_batch against the compiled forward pass on inputs
    # already on the device, at a serving batch and a large one.
    [ "$inference" = 1 ] && infer inference_b16_384_b32_bf16 150 \
        "$s384" "$b32" --compare_one_path
    [ "$inference" = 1 ] && infer inference_b16_224_b128_bf16 240 \
        "$s224" "$b128" --compare_keras_hub
    # L/16 without keras-hub (its ratio is in the throughput runs).
    [ "$training" = 1 ] && train training_l16_224_b64_bf16 200 L/16 "$b64"
    [ "$inference" = 1 ] && infer inference_b16_224_b1024_bf16 150 \
        "$s224" "$b1024"
    if [ "$xla_options" = 1 ]; then
        for option in "default=" "${XLA_OPTIONS[@]}"; do
            tag=${option%%=*}
            XLA_FLAGS="${option#*=}" run "xla_${tag}_b16_224_b128_bf16" 100 \
                throughput.py --variant B/16 --image_size "$s224" \
                --batch_size "$b128" --dtype bfloat16 --xla on \
                --mode train_jit --process_per_config --warmup 2 \
                --rewarm 1 --matmul_repeats 2 "${timed[@]}" "${tiny[@]}" \
                "${classes[@]}"
        done
    fi
    say "done in ${SECONDS}s: $written result files written in $outdir"
    exit $failed
fi

if [ "$smoke" = 1 ]; then
    total=${BUDGET_S:-1500}
    common=(--patch_size 8 --hidden_size 32 --num_layers 1 --num_heads 2
            --mlp_dim 64 --num_classes 10 --repeats 2 --steps 1 --warmup 1
            --rewarm 0 --matmul_size 64 --matmul_repeats 2)
    small=32 large=48 b128=2 b64=2 b32=2
else
    total=${BUDGET_S:-450}
    common=(--repeats 3 --min_time 1 --warmup 2 --rewarm 1
            --matmul_size 8192 --matmul_repeats 5)
    small=224 large=384 b128=128 b64=64 b32=32
fi
common+=(--dtype bfloat16 --xla on --mode train,infer --compare_keras_hub
         --process_per_config)

# measure NAME SHARE ARGS...: one throughput.py run, its --deadline the
# smaller of SHARE and what is left of the budget less 30 s, killed at
# what is left.
failed=0 written=0
measure() {
    local name share=$2 left soft
    name=$(free "$1" json)
    shift 2
    left=$((total - SECONDS))
    if [ "$left" -lt 40 ]; then
        say "$name: skipped, ${left}s of the ${total}s budget left"
        failed=1
        return
    fi
    soft=$((left - 30 < share ? left - 30 : share))
    say "$name: starting, deadline ${soft}s, killed after ${left}s"
    timeout --kill-after=5 "$left" "$python" benchmarks/throughput.py \
        "${common[@]}" "$@" --deadline "$soft" \
        --output "$outdir/$name" > /dev/null 2>> "$log"
    local rc=$?
    say "$name: exit $rc after $((SECONDS))s in all"
    [ -f "$outdir/$name.json" ] && written=$((written + 1))
    [ "$rc" = 0 ] || failed=1
}

scale=$((total * 100 / 450))  # the shares below are for 450 s
# In order of need: the fused attention against the one path at 384
# (its largest gain, training), the B/16 target, then L/16.
measure b16_384_b32_bf16 $((170 * scale / 100)) --variant B/16 \
    --image_size "$large" --batch_size "$b32" --compare_one_path
measure b16_224_b128_bf16 $((150 * scale / 100)) --variant B/16 \
    --image_size "$small" --batch_size "$b128" --compare_one_path
measure l16_224_b64_bf16 $((130 * scale / 100)) --variant L/16 \
    --image_size "$small" --batch_size "$b64"
say "done in ${SECONDS}s: $written result files written in $outdir"
exit $failed
