# Thin wrapper around build.py: variables with ?= defaults, each target one command.
#   make image CUDA=12.4 [TORCH=2.6] [PYTHON=3.12] [ARCHS='8.0;9.0'] [APEX_REF=<sha>] [EXTRAS=xentropy] [GCC=11]
#   make image CELL=cu130 [TARGET=runtime-devel] [BASE=auto|nvidia|local] [VERIFY=auto|none|require]
#   offline inputs: APEX_SRC=<apex checkout> (no GitHub), EXTRA_CA=<pem> (a TLS proxy), WHEELHOUSE=<dir>
#   NETWORK_CHECK=no: skip image's first probe of what the build fetches (the Apex git host, indexes, bases)
# PYTHON is the image's Python version (a cell key); PY is the interpreter that runs build.py.
# Exit status: make's own is 2 whenever build.py fails; build.py's code (1/2/3) is the N in
# "make: *** [...] Error N" (run `python3 build.py ...` directly, `make -n` prints it, to get it as $?).
PY ?= python3

CUDA ?=
TORCH ?=
PYTHON ?=
ARCHS ?=
APEX_REF ?=
EXTRAS ?=
GCC ?=
PLATFORM ?=
CELL ?=
TARGET ?= runtime
IMAGE ?=
# which bases (auto: NVIDIA's when pullable, else the local Debian base), verify mode, offline inputs
BASE ?=
VERIFY ?=
APEX_SRC ?=
EXTRA_CA ?=
WHEELHOUSE ?=
NETWORK_CHECK ?=
# make clean-images DRY_RUN=1: list what would be removed
DRY_RUN ?=
# make mutation MUTATION_JOBS=N: each module's mutants over N copies of the tree (a machine with N cores)
MUTATION_JOBS ?=
# make publish: the index folder it writes, and build.py wheel's --flags (default: the core flags)
OUT ?= site
APEX_FLAGS ?=
# make image APEX_INDEX=URL: the stack's verified wheel from that index instead of compiling Apex
APEX_INDEX ?=
# base images: from the command line or the environment (make imports both), passed as --base-devel/--base-runtime
BASE_DEVEL_IMAGE ?=
BASE_RUNTIME_IMAGE ?=

# The one quoting rule: a variable reaches its program as ONE literal argument, never as shell or make
# text. $(value V) is V exactly as given (a '$' in it is not expanded by make), and q single-quotes it
# for sh with each ' written as '\'' , so a ', $, backtick or ; in CUDA=... is just a character. A line
# break would split the recipe into two shell commands: make stops instead. The variables are not
# exported, since make expands a command-line variable it exports ($(shell ...) would run).
VARIABLES := PY CUDA TORCH PYTHON ARCHS APEX_REF EXTRAS GCC PLATFORM CELL TARGET IMAGE BASE_DEVEL_IMAGE BASE_RUNTIME_IMAGE \
             BASE VERIFY APEX_SRC EXTRA_CA WHEELHOUSE NETWORK_CHECK DRY_RUN MUTATION_JOBS OUT APEX_FLAGS APEX_INDEX
unexport $(VARIABLES)
define newline


endef
q = $(if $(findstring $(newline),$(value $(1))),$(error $(1) holds a line break; pass it on one line))'$(subst ','\'',$(value $(1)))'
# `--opt 'VALUE'` when variable $(2) is set, else nothing (matrix.toml's [defaults] fill the rest)
opt = $(if $(value $(2)),$(1) $(call q,$(2)))
BUILD = $(call q,PY) build.py

CELL_OPTS = $(call opt,--cell,CELL) $(call opt,--cuda,CUDA) $(call opt,--torch,TORCH) \
            $(call opt,--python,PYTHON) $(call opt,--archs,ARCHS) $(call opt,--apex-ref,APEX_REF) \
            $(call opt,--extras,EXTRAS) $(call opt,--gcc,GCC) $(call opt,--platform,PLATFORM) \
            $(call opt,--base-devel,BASE_DEVEL_IMAGE) $(call opt,--base-runtime,BASE_RUNTIME_IMAGE)
FILTER_OPTS = $(call opt,--cell,CELL) $(call opt,--cuda,CUDA) $(call opt,--torch,TORCH)
BUILD_OPTS = $(call opt,--base,BASE) $(call opt,--apex-src,APEX_SRC) $(call opt,--extra-ca,EXTRA_CA) \
             $(call opt,--wheelhouse,WHEELHOUSE)

.PHONY: image clean-images matrix verify report plan validate facts-check lint test test-all zipapp mutation coverage \
        publish

image:
	$(BUILD) image $(CELL_OPTS) --target $(call q,TARGET) $(BUILD_OPTS) $(call opt,--verify,VERIFY) \
	  $(call opt,--apex-index,APEX_INDEX) $(if $(filter no,$(value NETWORK_CHECK)),--no-network-check)

# the publish workflow here, one command: wheel (PY's torch) -> check -> tag -> index in OUT -> a fresh venv
# with that torch -> apex-verify install from the served index (docs/wheels.md#one-local-command)
#   make publish OUT=site APEX_SRC=<apex checkout> [APEX_FLAGS=APEX_CPP_EXT] [ARCHS=9.0] [PY=<torch venv python>]
publish:
	$(BUILD) release $(call opt,--apex-src,APEX_SRC) --out $(call q,OUT) $(call opt,--flags,APEX_FLAGS) \
	  $(call opt,--archs,ARCHS)

# what make image leaves: the project's images, its local bases, the BuildKit cache its builds made
clean-images:
	$(BUILD) clean $(if $(value DRY_RUN),--dry-run)

matrix:
	$(BUILD) matrix $(FILTER_OPTS) $(BUILD_OPTS) $(call opt,--verify,VERIFY)

# make verify IMAGE=<tag>  (or CUDA=12.4 ...: the tag `make image` with the same variables made, on either route)
verify:
	$(BUILD) verify $(if $(value IMAGE),$(call q,IMAGE),$(CELL_OPTS) $(call opt,--base,BASE))

report:
	$(BUILD) report

# verify as one file for any image or node: python out/verify.pyz [verify's flags]
zipapp:
	$(BUILD) zipapp --out out/verify.pyz

plan:
	$(BUILD) plan $(CELL_OPTS) --target $(call q,TARGET) $(BUILD_OPTS)

validate:
	$(BUILD) validate

# the compatibility facts against PyPI: exit 1 on drift, 3 without network
facts-check:
	$(BUILD) facts check

lint:
	$(call q,PY) -m ruff check .
	$(call q,PY) -m ruff format --check .
	$(call q,PY) -m mypy   # the files and settings: [tool.mypy] in pyproject.toml
	hadolint --failure-threshold warning docker/Dockerfile   # info-level hints do not fail the build

# the unit tier: no root, no Docker engine, a few minutes (scripts/test.sh says what each tier needs)
test:
	PY=$(call q,PY) TIER=unit bash scripts/test.sh

# every tier CI runs but the image builds: unit, its slow tests, and the engine tiers (needs root: it
# installs and starts a Docker engine when none answers)
test-all:
	PY=$(call q,PY) TIER=all bash scripts/test.sh

# does the suite still catch broken rules? cosmic-ray over the deciding modules (tests/mutation/modules.toml,
# result in reports/mutation/cosmic-ray.md), then the hand-kept mutations of the modules it does not cover
# (tests/mutation/mutations.toml, reports/mutation/last-run.md)
mutation:
	PY=$(call q,PY) MUTATION=1 TIER=unit bash scripts/test.sh $(call opt,--jobs,MUTATION_JOBS)

# the unit tier under coverage, per package (the figures in docs/testing.md)
coverage:
	PY=$(call q,PY) COVERAGE=1 TIER=unit PYTEST_MARKERS='not gpu and not docker and not faults and not apex_image' \
	  bash scripts/test.sh -q
