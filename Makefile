# `make demo` and `make test` set everything up on a fresh machine (a .venv in this folder), then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# The real data folder beside the repository, when there is one; otherwise arbibench downloads CIFAR-10.
ARBIBENCH_DATA ?= $(if $(wildcard ../shared/data/cifar10),$(abspath ../shared/data),)
export ARBIBENCH_DATA
DEMO_STORE ?= runs/demo.db

.PHONY: install test lint demo protocol zoo queue site clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# The ray extra too: tests/test_ray_executor.py runs the protocol on a real (loopback-only) Ray cluster.
	$(PY) -m pip install -q -e '.[test,ray]'
	# Test-only: the reference implementation the cross-check tests compare against. --no-deps: its declared
	# dependencies (scipy, requests, torchvision) are not needed by the submodules the tests import.
	$(PY) -m pip install -q --no-deps torchattacks==3.5.1
	# Benchmark-only: AutoAttack's reference implementation (benchmarks/autoattack_reference.py). --no-deps: it
	# imports only torch and numpy.
	$(PY) -m pip install -q --no-deps pyautoattack==0.2.0
	touch $(STAMP)

install: $(STAMP)

# ruff over code, the lab, tests and benchmarks (with a function-length cap); mypy strict on the whole package and the
# lab ([tool.mypy] in pyproject.toml). Part of `make test`, so CI fails on a type error as on a failing test.
lint: $(STAMP)
	$(VENV)/bin/ruff check arbibench lab tests benchmarks
	$(VENV)/bin/mypy

# Tests run one torch thread each (tests/conftest.py), so two pytest-xdist workers keep both cores of the 2-core CI
# machine busy; --dist loadfile keeps each file's module fixtures (trained models, protocol runs) in one worker, and
# --no-loadscope-reorder hands out files in collection order, where tests/conftest.py puts the longest first.
TEST_WORKERS ?= 2
# The machine's queue of long jobs (make queue) is paused while the tests run, so neither measures the other; with no
# queue running, pause and resume only record and drop the holder.
test: lint
	$(PY) -m lab queue pause --holder make-test >/dev/null; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder; status=$$?; \
	$(PY) -m lab queue resume --holder make-test >/dev/null; exit $$status

# The main job, first look: a BNN against its FP twin under three white-box and two black-box attacks on real
# CIFAR-10 test images (the protocol's demo variant, 1.5 minutes on the idle 2-core development machine), with the
# paired verdict; its cards go to runs/demo/model_info. Then the leaderboard site into site/ from the shipped cards (model_info/).
# A second run reads finished batches back from the store.
DEMO_MODELS ?= resnet20_fp,resnet20_reactnet
demo: $(STAMP)
	mkdir -p runs
	$(VENV)/bin/arbibench protocol run cifar10 --demo --models $(DEMO_MODELS) --store $(DEMO_STORE) \
		--model-info runs/demo/model_info
	$(VENV)/bin/arbibench leaderboard build --model-info model_info --out site --format png,svg

# The quick protocol over every shipped CIFAR-10 model (5 minutes for resnet20_fp on the idle 2-core machine, about 40
# for a BNN on one thread beside a training run, 30-50 for an adversarially trained one, whose images survive into
# AutoAttack's later components): the
# shipped model cards in model_info/ and the README tables come from this run.
PROTOCOL_STORE ?= runs/protocol.db
protocol: $(STAMP)
	mkdir -p runs
	$(VENV)/bin/arbibench protocol run cifar10 --quick --models all --store $(PROTOCOL_STORE) --model-info model_info
	$(VENV)/bin/arbibench leaderboard build --model-info model_info --out site --format png,svg

# Trains the ResNet-20 CIFAR-10 zoo on this machine's CPU, one model after the other with 2 threads: first the
# adversarially trained models (--recipe at: resnet20_fp_at, then BNNs distilled from it), then the BNNs of the
# two-step distillation recipe (the shipped resnet20_fp is teacher and starting point). Each run resumes from its last
# finished epoch in $(ZOO_RUNS)/ (commit it to carry an unfinished queue to another machine), then exports checkpoint
# + model card into the package (then pin its sha256: arbibench zoo pin NAME). A model whose card holds its recipe is done.
ZOO_AT_METHODS ?= fp bireal reactnet
ZOO_METHODS ?= bireal irnet reactnet xnorpp bnn xnor dorefa
# kd checkpoints trained before the recipe re-estimated BatchNorm statistics on augmented images get that step
# (arbibench recalibrate; it keeps the shipped weights unless the new statistics are more accurate).
# Continuing them towards the papers' accuracy is the queue's job (`make queue`), with held-out selection.
ZOO_RUNS ?= zoo_runs
CHECKPOINTS = arbibench/models/checkpoints
zoo: $(STAMP)
	for m in $(ZOO_AT_METHODS); do \
		if grep -q '"adversarial": "fgsm_rs"' $(CHECKPOINTS)/resnet20_$${m}_at.json 2>/dev/null; then \
			echo "resnet20_$${m}_at: done"; continue; fi; \
		OMP_NUM_THREADS=2 $(VENV)/bin/arbibench train --arch resnet20 --method $$m --recipe at --out $(ZOO_RUNS) \
			--export || exit 1; \
	done
	for m in $(ZOO_METHODS); do \
		if grep -q '"teacher": "resnet20_fp"' $(CHECKPOINTS)/resnet20_$$m.json 2>/dev/null; then \
			echo "resnet20_$$m: done"; continue; fi; \
		OMP_NUM_THREADS=2 $(VENV)/bin/arbibench train --arch resnet20 --method $$m --recipe kd --out $(ZOO_RUNS) \
			--export || exit 1; \
	done
	for m in $(ZOO_METHODS); do \
		if grep -q '"bn_recalibration_augment": true' $(CHECKPOINTS)/resnet20_$$m.json 2>/dev/null; then continue; fi; \
		OMP_NUM_THREADS=2 $(VENV)/bin/arbibench recalibrate resnet20_$$m --out $(ZOO_RUNS)/recalibrated --export \
			|| exit 1; \
	done

# The machine's one queue of long jobs (zoo_runs/queue.json), run by the lab (lab/, not installed with arbibench):
# trainings with held-out selection (each exported model pinned, its cards regenerated), full-protocol cards. One job
# at a time on 2 threads; one commit per finished job with its outputs, resume copies at most hourly, and a killed
# queue resumes where it stopped. `python -m lab queue status` shows progress; docs/long-jobs.md has the procedure.
queue: $(STAMP)
	mkdir -p logs
	$(PY) -m lab queue run

# The leaderboard site from the protocol runner's model cards (model_info/<dataset>/<threat>/<name>.json).
site: $(STAMP)
	$(VENV)/bin/arbibench leaderboard build --model-info model_info --out site --format png,svg

clean:
	rm -rf $(VENV) runs/demo.db* .pytest_cache .hypothesis
