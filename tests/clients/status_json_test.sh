#!/usr/bin/env bash
# `softverbs status --json` and the readable status against two processes holding QPs in known
# states (status_json_check.py, status_holder.py). Usage: status_json_test.sh <build dir>
set -u
build=${1:?build dir}
export LD_LIBRARY_PATH="$build/lib"
exec timeout 120 /usr/bin/python3 "$(dirname "$0")/status_json_check.py" "$build"
