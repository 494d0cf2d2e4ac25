#!/usr/bin/env bash
# Full-protocol cards on a GPU machine, within a time limit: `arbibench protocol run cifar10` over MODELS (one after
# the other) on the processes backend, WORKERS worker processes sharing the GPU (one process on a ResNet-20 batch of
# 200 may leave it idle between small kernels). Stopped after LIMIT_S seconds at the latest (every committed batch
# stays in the store, so a later run anywhere resumes from it); the store, the cards and the log are packed into
# OUT/results.tgz, the batch times (benchmarks/store_batch_times.py) written to OUT/batch_times.json.
#
#   benchmarks/full_protocol_gpu.sh OUT MODELS [LIMIT_S] [WORKERS]
#   e.g. ARBIBENCH_DATA=.devdata benchmarks/full_protocol_gpu.sh out resnet20_fp_at,resnet20_bireal_at 540 14
# (DEVICE=cpu tries the script itself on a machine without a GPU.)
#
# ATTACKS=autoattack[,apgd_ce...] computes only those attacks' batches (`protocol run --only-attacks`, no card): on a
# GPU shared by many workers AutoAttack's batches run many at once, while a sequential query attack (RayS) gains
# nothing there and holds a worker past the time limit; leave those to the CPU queue.
#
# SEED=zoo_runs/carry/<job>.db.gz[,<job2>.db.gz...] starts from the rows queue jobs have carried (the run resumes
# after them). The new rows of every model come back as OUT/rows.db.gz in the carry format. On the queue's machine,
# `python -m lab queue add-rows rows.db.gz` adds each model's rows to its unfinished job's carried copy (commit them) and
# to the queue's store; a job's run skips every batch they hold (restart a running queue: its run planned at start).
set -u
out=$1
models=$2
limit=${3:-540}
workers=${4:-14}
mkdir -p "$out/run"
if [ -n "${SEED:-}" ]; then
    PYTHONPATH="$PWD" python3 -c "import sys; from pathlib import Path; from lab.queue.carry import merge_rows; \
[print(merge_rows(Path(p), Path(sys.argv[1])), 'seed rows from', p) for p in sys.argv[2:]]" \
        "$out/run/full_protocol.db" ${SEED//,/ } || exit 1
fi
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0), flush=True)"
echo "cores: $(nproc); models: $models; limit: $limit s; workers: $workers; attacks: ${ATTACKS:-all}"
start=$(date +%s)
# SIGTERM ends the driver and its workers at once: the store holds whole batches only (one transaction each)
timeout --signal=TERM --kill-after=5 "$limit" python3 -m arbibench.cli protocol run cifar10 --models "$models" \
    --device "${DEVICE:-cuda}" --store "$out/run/full_protocol.db" --model-info "$out/run/model_info" --backend processes \
    --workers "$workers" --worker-threads 1 ${ATTACKS:+--only-attacks "$ATTACKS"} > "$out/run/protocol.log" 2>&1
echo "protocol run exited with $? after $(($(date +%s) - start)) s"
tail -c 5000 "$out/run/protocol.log"
python3 benchmarks/store_batch_times.py "$out/run/full_protocol.db" --out "$out/batch_times.json" \
    --setting "models=$models" --setting "workers=$workers" --setting "limit_s=$limit" --setting "attacks=${ATTACKS:-all}" \
    --setting "machine=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores"
python3 -c "import sys; from pathlib import Path; from lab.queue.carry import export_rows; \
print(export_rows(Path(sys.argv[1]), (), Path(sys.argv[2])), 'outcome rows in rows.db.gz')" \
    "$out/run/full_protocol.db" "$out/rows.db.gz"
tar czf "$out/results.tgz" -C "$out/run" .
ls -la "$out"
