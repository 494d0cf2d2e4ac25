#!/usr/bin/env bash
# On a lent GPU machine, once stage_cifar10.py receive has assembled the data: the papers' recipes of the given zoo
# models side by side on the GPU, in a piece that ends before the call's limit, with every run folder copied to $OUT
# so the next session (or the next call, on a fresh machine) resumes from it: carry zoo_runs/gpu back as it came.
#   MODELS=resnet20_fp,resnet20_bnn MINUTES=8 EXTRA="--compile" bash benchmarks/gpu/train_zoo.sh
# (EXTRA: what benchmarks/train_epoch_device.py measured faster on that GPU; nothing by default)
set -uo pipefail
DATA="${ARBIBENCH_GPU_DATA:-$HOME/arbibench-data}"
MODELS="${MODELS:-resnet20_bnn,resnet20_xnor,resnet20_dorefa,resnet20_xnorpp}"  # at most 8 (files back)
MINUTES="${MINUTES:-8}"
RUNS="${RUNS:-zoo_runs/gpu}"
DEVICE="${DEVICE:-cuda}"  # DEVICE=cpu OUT=/tmp/out rehearses the call here (an epoch takes minutes on a CPU)
PYTHON="${PYTHON:-python3}"  # there, the python3 that holds torch; here, a venv's (benchmarks/gpu/other_torch.sh)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 ARBIBENCH_DATA="$DATA"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
"$PYTHON" -c "from arbibench.cli import app; app(prog_name='arbibench')" train --models "$MODELS" --recipe paper \
    --device "$DEVICE" --time-limit "$MINUTES" --out "$RUNS" ${EXTRA:-}
status=$?
# what comes back: at most 8 files of 16 MiB each, so one archive per model (weights, optimiser, history, log)
for name in ${MODELS//,/ }; do
    if [ ! -d "$RUNS/$name" ]; then echo "$name: no run folder in $RUNS, nothing to bring back"; continue; fi
    log=(); [ -f "$RUNS/$name.log" ] && log=("$name.log")
    tar -czf "$OUT/$name.tar.gz" -C "$RUNS" "$name" "${log[@]}"
done
echo "train exit status: $status (3: stopped at the time limit, resumable)"
