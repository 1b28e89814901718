# Thin wrapper: variables with ?= defaults, each target one command.
PYTHON ?= python3

.PHONY: test
test:
	bash scripts/test.sh
