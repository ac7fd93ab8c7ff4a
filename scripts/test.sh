#!/usr/bin/env bash
# The whole test suite: install (with test extras), find or start PostgreSQL and Redis, run pytest.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/services.sh
scripts/browser.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
