#!/usr/bin/env bash
# The training path's tests under another torch than the project's 2.13.0: the lent GPU machines run their own
# (torch 2.11.0+cu130 on Python 3.12 when last seen, docs/benchmarks/gpu.md), so an API that torch lacks there would
# first show on the machine, in the minutes it is lent. This runs the same tests here, on the CPU, beforehand.
#   bash benchmarks/gpu/other_torch.sh 2.11.0        # a venv in /tmp (about 5 GB: PyPI's torch is the CUDA build)
# Run it from the repository root with ARBIBENCH_DATA set; the package runs from the checkout, uninstalled, as the
# lent machine runs it (benchmarks/gpu/train_zoo.sh).
set -euo pipefail
VERSION="${1:?usage: other_torch.sh TORCH_VERSION (e.g. 2.11.0)}"
VENV="${VENV:-/tmp/arbibench-torch-$VERSION}"
[ -n "${ARBIBENCH_DATA:-}" ] || { echo "set ARBIBENCH_DATA to the folder that holds cifar10/" >&2; exit 2; }
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "torch==$VERSION" numpy safetensors typer rich pillow matplotlib pytest hypothesis
fi
"$VENV/bin/python" -c "import sys, torch; print(f'torch {torch.__version__}, Python {sys.version.split()[0]}')"
PYTHONPATH="$PWD" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_train_device.py \
    tests/test_gpu_staging.py tests/test_train.py tests/test_kd_recipe.py tests/test_at_recipe.py \
    tests/test_bf16_training.py
PYTHONPATH="$PWD" "$VENV/bin/python" benchmarks/train_epoch_device.py --device cpu --synthetic \
    --models resnet20_bnn,resnet20_reactnet --epochs 2 --train-examples 256 --out "$VENV/epochs.json"
