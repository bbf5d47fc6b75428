#!/usr/bin/env bash
# System packages the test suite uses when available: Open MPI (for the mpirun launch tests and
# the Open MPI benchmark comparison).  Without them those tests skip with a reason; nothing else
# needs them.  Python packages come from the project's own extras (pip install -e ".[test]").
set -u
if command -v mpirun >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup-test-env: installing Open MPI (openmpi-bin libopenmpi-dev)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev) >/dev/null 2>&1 \
        || echo "setup-test-env: could not install Open MPI; the mpirun tests will be skipped" >&2
else
    echo "setup-test-env: Open MPI not found and cannot install it here; the mpirun tests will be skipped" >&2
fi
exit 0
