#!/usr/bin/env bash
# On a lent GPU machine: move the CIFAR-10 parts that this call carried (.gpu_data/*.npz, one or two per call: the
# working tree that travels is capped at 64 MiB) into a folder outside the checkout, where they stay while the
# machine is warm. Prints which of the six files (train_0..4, test) are there, so the last call knows it can train.
#   here:  bash benchmarks/gpu/stage_cifar10.sh --prepare train_0   (copies one part into .gpu_data/)
#   there: bash benchmarks/gpu/stage_cifar10.sh                     (moves the carried part into $DATA)
set -euo pipefail
DATA="${ARBIBENCH_GPU_DATA:-/root/arbibench-data}"
if [ "${1:-}" = "--prepare" ]; then
    shift
    grep -qx '/.gpu_data/' .git/info/exclude 2>/dev/null || echo '/.gpu_data/' >> .git/info/exclude
    rm -rf .gpu_data && mkdir -p .gpu_data
    for part in "$@"; do cp "../shared/data/cifar10/$part.npz" .gpu_data/; done
    ls -l .gpu_data
    exit 0
fi
mkdir -p "$DATA/cifar10"
if compgen -G ".gpu_data/*.npz" >/dev/null; then cp .gpu_data/*.npz "$DATA/cifar10/"; fi
missing=0
for part in train_0 train_1 train_2 train_3 train_4 test; do
    if [ -f "$DATA/cifar10/$part.npz" ]; then echo "have $part"; else echo "missing $part"; missing=1; fi
done
exit $missing
