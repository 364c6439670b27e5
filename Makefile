# Two commands do all the set-up on a fresh machine:
#   make demo   -> creates .venv, installs the kit, runs `kit demo` on the embedded tiny default
#   make test   -> creates .venv, installs the kit with test extras, runs `make lint` (ruff, mypy), then the test suite
# torch is pinned to the CPU build that these machines carry on local disk (2.13.0);
# a plain `torch` requirement would pull a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CPU)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

.PHONY: demo test test-fast lint lab lab-copies lab-serve chromium gpu-wheels general-text medium-bundle size
# The demo's working data, runs and report go under demo-out/ (ignored), so the committed evidence
# in runs/ and reports/ is never touched; `kit demo` from the repository root refreshes that evidence.
# SOURCE: the pinned public conversation source (default: the repository's data/alpaca_5000.json,
# see data/SOURCE.md); its sha256 is checked against the contracts before anything runs.
SOURCE ?= data/alpaca_5000.json
demo: $(VENV)/.installed
	$(VENV)/bin/kit demo --out demo-out --runs-dir demo-out/runs --reports-dir demo-out/reports --public-source $(SOURCE)

# The report test opens the rendered HTML in headless Chromium (Debian's package).
chromium:
	@[ -x /usr/bin/chromium ] || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# The suite on two pytest-xdist workers: these machines have 2 cores and the kit pins torch to one thread
# per process, so one process leaves a core idle. Each file runs whole on one worker (--dist loadfile: a
# module's fixtures are built once, a file writing a fixed path under build/ never races itself); files
# are handed out in the order the workers collect them (--no-loadscope-reorder), which tests/conftest.py
# starts with the longest files (tests/support/schedule.py). TEST_WORKERS=N for another count.
TEST_WORKERS ?= 2
test: $(VENV)/.installed chromium lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# The unit tier without the tests marked slow (tests/support/tiers.py: tiny models, no notebook executed, no
# committed evidence read; the engine against the oracle at 1 and 2 workers included), the same way: the loop
# while changing kit/. No Chromium: the report tests read the evidence.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "unit and not slow" tests

# What the repository weighs (tracked files by folder) and what a GPU host call carries (tracked files +
# build/gpu-wheels + build/bundle) against the device tool's 64,000,000 bytes (docs/gpu-hosts.md, "Sizes").
size:
	python3 tools/repo_size.py

# JupyterLab on copies of notebooks/ (README, "Notebooks in JupyterLab"): installs the `lab` extra into the venv,
# then serves; the kit is importable in its kernels (the venv's editable install, and PYTHONPATH for a venv that
# points at another checkout). As root (containers) Jupyter refuses to start without --allow-root.
# LAB_FLAGS: more options for `jupyter lab`, e.g. LAB_FLAGS="--no-browser --port 8890".
# Lab rewrites a notebook it opens (cell ids, the kernel's metadata, its Python version) within minutes, unasked:
# it serves LAB_DIR (ignored by git, beside notebooks/ so `../data/...` still resolves), where `lab-copies` copies
# each committed notebook that has no copy yet; a copy already there is kept (your work), never overwritten. The
# committed notebooks, inputs of the committed runs, are never opened, so `git status` stays clean.
LAB_FLAGS ?=
LAB_DIR ?= lab
lab: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[lab]'
	@$(MAKE) --no-print-directory lab-serve
lab-copies:
	@mkdir -p $(LAB_DIR); for nb in notebooks/*.ipynb; do copy="$(LAB_DIR)/$${nb#notebooks/}"; \
		if [ ! -e "$$copy" ]; then cp "$$nb" "$$copy"; elif ! cmp -s "$$nb" "$$copy"; then \
		echo "make lab: kept $$copy, which differs from $$nb (delete it to start again from the committed one)"; fi; done
lab-serve: lab-copies
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m jupyterlab --ServerApp.root_dir=$(LAB_DIR) \
		$$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_FLAGS)

# ruff over kit/ and tests/, then mypy over kit/ (pyproject.toml, [tool.mypy]: the files, Python 3.11, the cache
# under build/) and again as the GPU hosts' Python 3.12 reads it: a misspelt field of a declared record format fails
# here, before any test runs. About 50 CPU seconds each on a cold cache, a few seconds once it is filled.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check kit tests
	$(PY) -m mypy
	$(PY) -m mypy --python-version 3.12 --cache-dir build/mypy-cache-3.12

# The notebook runtime (papermill, nbconvert, ipykernel and what they need beyond the GPU image) as
# wheels for the GPU hosts' Python, which have no package index: build/gpu-wheels/ (ignored), with
# manifest.json and SHA256SUMS. Carry that folder with the device tool and install it there with
# `python3 tools/gpu_wheels.py install TARGET` (docs/gpu-hosts.md). Needs an index here.
# GPU_WHEELS_FLAGS=--without-fallbacks leaves the host-role wheels behind too (docs/gpu-hosts.md, "Sizes").
GPU_PYTHON ?= 3.12
GPU_WHEELS_FLAGS ?=
gpu-wheels: $(VENV)/.installed
	$(PY) tools/gpu_wheels.py build --python-version $(GPU_PYTHON) --out build/gpu-wheels $(GPU_WHEELS_FLAGS)

# this checkout's last commit as a shallow bare repository, carried to a GPU host whose copy of .git is
# stale, so that the records made there name real commits (campaigns/medium_campaign.sh; docs/gpu-hosts.md,
# "The medium campaign"). Shallow: the whole history as a bundle (23 MB) no longer fit beside the working
# tree and the wheels in one call's 64 MiB; one commit's objects are 16 MB.
# The last commit, without its files (the device copy's working tree carries them): its commit object, its
# tree listing and its id, from which campaigns/medium_campaign.sh `sync` rebuilds that very commit on the host.
medium-bundle:
	rm -rf build/bundle && mkdir -p build/bundle
	git cat-file commit HEAD >build/bundle/commit
	git ls-tree -r -z HEAD >build/bundle/tree
	git rev-parse HEAD >build/bundle/commit.sha

# Re-derive data/python3.11-doc.jsonl.xz (the small seed's general text, data/SOURCE.md) from Debian's
# package and check both pinned digests (package file and extracted text) against kit/data/general_text.py.
GENERAL_TEXT_DEB := python3.11-doc_3.11.2-6+deb12u9_all.deb
general-text: $(VENV)/.installed
	@mkdir -p build/general-text
	@[ -f build/general-text/$(GENERAL_TEXT_DEB) ] || (cd build/general-text && apt-get download python3.11-doc=3.11.2-6+deb12u9)
	$(PY) -m kit.data.general_text build/general-text/$(GENERAL_TEXT_DEB) build/general-text/python3.11-doc.jsonl.xz
	$(PY) -c "import json,hashlib,lzma; from kit.data import general_text as g; \
	d=open('build/general-text/$(GENERAL_TEXT_DEB)','rb').read(); x=open('build/general-text/python3.11-doc.jsonl.xz','rb').read(); \
	got={'package':hashlib.sha256(d).hexdigest(),'text':hashlib.sha256(lzma.decompress(x)).hexdigest(),'xz':hashlib.sha256(x).hexdigest()}; \
	want={'package':g.PACKAGE_SHA256,'text':g.TEXT_SHA256,'xz':g.TEXT_XZ_SHA256}; print(json.dumps(got,indent=1)); \
	assert got==want, ('digest mismatch', got, want); \
	assert open('data/python3.11-doc.jsonl.xz','rb').read()==x, 'data/python3.11-doc.jsonl.xz differs from the re-derived file'; print('general text re-derived: identical')"
