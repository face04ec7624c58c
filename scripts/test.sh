#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh) and runs all tests: GoogleTest, pytest
# (including the tutorials executed as notebooks). Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
bash scripts/setup.sh
BUILD=${TESSERA_BUILD_DIR:-$ROOT/build}
export PYTHONPATH="$ROOT/frontend${PYTHONPATH:+:$PYTHONPATH}"
# Tests never touch the user's cache.
export TESSERA_CACHE_DIR="${TESSERA_TEST_CACHE_DIR:-$(mktemp -d /tmp/tessera-test-cache.XXXXXX)}"
echo "[test] GoogleTest"
"$BUILD/tests/cpp/tessera_tests" --gtest_brief=1
echo "[test] pytest"
python3 -m pytest -q -n "${TESSERA_TEST_JOBS:-2}" tests/python
echo "[test] all passed"
