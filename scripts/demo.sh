#!/usr/bin/env bash
# The main job: install, start the embedded service (SQLite, local artifacts, one worker
# subprocess) and walk through an upgrade campaign on tiny models. Extra arguments go to
# `recycle demo` (e.g. --real, --url http://host:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/recycle demo "$@"
