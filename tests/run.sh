#!/usr/bin/env bash
# The whole test suite on a fresh machine: a venv with gpuprep and its test extras, the Docker
# engine and base image for the container tests, then pytest. Idempotent: re-running reuses all.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GPUPREP_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
"$VENV/bin/pip" install -q -e '.[test]'
# PyTorch's CPU build for the burn-in tests (2.13.0 is served from local disk on our machines).
"$VENV/bin/python" -c 'import torch' 2>/dev/null || "$VENV/bin/pip" install -q 'torch==2.13.0'

# A real browser for the HTML report tests (Debian's chromium), when this machine lets us install it.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || echo "chromium not installed: HTML tests will skip" >&2
fi

# Debian's PostgreSQL server for the results-store tests (each test starts a throwaway cluster of its own on
# 127.0.0.1; the packaged cluster is never started).
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || echo "postgresql not installed: its store tests will skip" >&2
fi

if [ "${GPUPREP_SKIP_DOCKER:-0}" != "1" ]; then
  bash .ci/docker-setup.sh
  export GPUPREP_REQUIRE_DOCKER=1   # container tests must run here, not skip
fi

# Two workers, each test file whole in one (a file's containers and module fixtures are its own; their names are
# unique across files): the container tests wait on systemd and Ansible more than they compute. -n 0 runs serially.
# The longest files start first (conftest.LONGEST_FILES), in that order rather than xdist's by test count.
# The slowest tests are listed at the end, so a suite that grows past its time budget shows where.
exec "$VENV/bin/python" -m pytest -q -n "${GPUPREP_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  --durations=25 "$@"
