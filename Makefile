# Thin wrapper around build.py: variables with ?= defaults, each target one command.
#   make image CUDA=12.4 [TORCH=2.6] [PYTHON=3.12] [ARCHS='8.0;9.0'] [APEX_REF=<sha>] [EXTRAS=xentropy] [GCC=11]
#   make image CELL=cu130 [TARGET=runtime-devel]
# PYTHON is the image's Python version (a cell key); PY is the interpreter that runs build.py.
PY ?= python3
BUILD := $(PY) build.py

CUDA ?=
TORCH ?=
PYTHON ?=
ARCHS ?=
APEX_REF ?=
EXTRAS ?=
GCC ?=
CELL ?=
TARGET ?= runtime
IMAGE ?=

# Only the variables that are set become options, so matrix.toml's [defaults] fill the rest.
CELL_OPTS = $(if $(CELL),--cell '$(CELL)') $(if $(CUDA),--cuda '$(CUDA)') $(if $(TORCH),--torch '$(TORCH)') \
            $(if $(PYTHON),--python '$(PYTHON)') $(if $(ARCHS),--archs '$(ARCHS)') \
            $(if $(APEX_REF),--apex-ref '$(APEX_REF)') $(if $(EXTRAS),--extras '$(EXTRAS)') $(if $(GCC),--gcc '$(GCC)')
FILTER_OPTS = $(if $(CELL),--cell '$(CELL)') $(if $(CUDA),--cuda '$(CUDA)') $(if $(TORCH),--torch '$(TORCH)')

.PHONY: image matrix verify report plan validate lint test zipapp

image:
	$(BUILD) image $(CELL_OPTS) --target $(TARGET)

matrix:
	$(BUILD) matrix $(FILTER_OPTS)

# make verify IMAGE=<tag>  (or CUDA=12.4 ...: the tag that cell resolves to)
verify:
	$(BUILD) verify $(if $(IMAGE),'$(IMAGE)',$(CELL_OPTS))

report:
	$(BUILD) report

# verify as one file for any image or node: python out/verify.pyz [verify's flags]
zipapp:
	$(BUILD) zipapp --out out/verify.pyz

plan:
	$(BUILD) plan $(CELL_OPTS) --target $(TARGET)

validate:
	$(BUILD) validate

lint:
	$(PY) -m ruff check .
	hadolint --failure-threshold warning docker/Dockerfile   # info-level hints do not fail the build

test:
	bash scripts/test.sh
