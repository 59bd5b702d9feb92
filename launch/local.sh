#!/usr/bin/env bash
# Local multi-process launcher: see launch/local.py for what it does.
#   launch/local.sh --num_processes=2 --devices_per_process=4 -- python -m recipes.train ...
exec "${PYTHON:-python3}" "$(dirname "$0")/local.py" "$@"
