# make help — the two set-up commands on a fresh machine are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help install demo test test-fast test-latest lock lint bench gpu-check report clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

EXTRAS := dev,lm,garg,hf,kernels

$(STAMP): pyproject.toml constraints.txt lock.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -c lock.txt $$($(PYTHON) scripts/torch_index.py) -e '.[$(EXTRAS)]'
	$(PY) scripts/lock.py check
	touch $(STAMP)

install: $(STAMP)  ## create .venv at exactly lock.txt's versions: the package with the dev, lm, garg, hf and kernels extras; torch's CPU build where no NVIDIA driver is found (scripts/torch_index.py)

lock:  ## regenerate lock.txt (uv's universal resolution of pyproject.toml + constraints.txt, every supported Python)
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet -c constraints.txt uv
	$(PYTHON) scripts/lock.py compile --uv .venv-lock/bin/uv

test-latest:  ## the suite in .venv-latest with the newest versions pyproject.toml allows (not the lock): drift seen before it bites
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade -c constraints.txt $$($(PYTHON) scripts/torch_index.py) -e '.[$(EXTRAS)]'
	.venv-latest/bin/python scripts/lock.py diff
	SSA_LATEST=1 .venv-latest/bin/python -m pytest -q -n auto --dist worksteal -p no:randomly

demo: $(STAMP)  ## train the default small model on CPU (a few minutes) and write its heat map
	$(PY) train.py device=cpu

test: $(STAMP)  ## the full test suite (what CI runs): every core (pytest-xdist), random order (pytest-randomly)
	@seed=$$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); echo "random order: rerun it with --randomly-seed=$$seed"; \
	$(PY) -m pytest -q -n auto --dist worksteal --durations=30 --randomly-seed=$$seed  # the 30 slowest tests are listed: keep the suite inside its 10-minute budget

test-fast: $(STAMP)  ## the development loop (under 3 minutes on 2 cores): the suite without the tests marked slow
	$(PY) -m pytest -q -n auto --dist worksteal -m "not slow"

lint: $(STAMP)  ## ruff
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: $(STAMP)  ## speed table: ours vs HF GPT2Model, softmax vs SSA, % of matmul peak (scripts/bench.py)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) scripts/bench.py

gpu-check: $(STAMP)  ## on a CUDA machine: CUDA tests, bench --device cuda, a short paper-size run -> docs/results/gpu_check_<date>.md (skips without a GPU)
	$(PY) scripts/gpu_check.py

report: $(STAMP)  ## the scorer report: saturation table, base functions, cost (outputs/scorer_report/)
	$(PY) scripts/scorer_report.py

clean:  ## remove the virtual environments and caches (keeps outputs/)
	rm -rf $(VENV) .venv-latest .venv-lock .pytest_cache .ruff_cache *.egg-info
