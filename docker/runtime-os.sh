#!/usr/bin/env bash
# The OS layer of the runtime images (runtime-base, which runtime and verify-runtime stand on, and
# runtime-slim): the Python the venv was made with, CA certificates and the non-root user; no compilers,
# no pip. The Python must be an apt package of the base's OS, as in the devel stage.
set -euo pipefail
: "${PYTHON_VERSION:?}" "${APP_UID:?}"
apt-get update
apt-get install -y --no-install-recommends "python${PYTHON_VERSION}" ca-certificates
rm -rf /var/lib/apt/lists/*
useradd --create-home --uid "$APP_UID" --shell /bin/bash apex
