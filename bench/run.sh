#!/usr/bin/env bash
# softverbs vs UCX in one command: bench/run.sh [--lib DIR] [--quick] [--help]. See bench/README.md.
# Uses Debian's own python3 (matplotlib from python3-matplotlib); installs nothing.
exec /usr/bin/python3 "$(dirname "$0")/compare.py" "$@"
