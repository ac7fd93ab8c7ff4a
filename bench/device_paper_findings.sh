#!/usr/bin/env bash
# The gpu profile of bench/paper_findings.py on a lent GPU machine (no package registry, 64 MiB
# of working tree per call, 10 minutes per command, the machine given back 30 s after a call ends).
#
# What it needs (made here by `python -m bench.pack_device --download`, into the ignored .carry/):
#   .carry/paper/minilm_fp16/   all-MiniLM-L6-v2, fp16 safetensors compressed with xz (39.7 MiB)
#                               plus its config and tokenizer files (upcast to fp32 there)
#   .carry/paper/data.tar.xz    the prepared gpu-profile data directory (5.1 MiB; sha256-checked)
#   .carry/paper/wheels/        what the image lacks: the service stack and the pinned
#                               transformers/tokenizers/huggingface_hub (25.7 MiB)
# 70.4 MiB together: over one call's 64 MiB, so the files travel in two calls on the same warm
# machine (each call must follow the last within 30 s, or the machine goes back and /tmp is lost):
#   1. carry .carry/paper/minilm_fp16 and .carry/paper/data.tar.xz:  bash bench/device_paper_findings.sh stage
#   2. carry .carry/paper/wheels:                                     bash bench/device_paper_findings.sh start
#      (installs, starts the run detached, follows it for 9 minutes)
#   3. no carry:                                                      bash bench/device_paper_findings.sh wait
#      (repeat until it prints "finished"; results, tables and plots come back in $OUT)
# Extra arguments of `start` go to bench.paper_findings (e.g. --seeds 0 --tasks trec).
set -euo pipefail
OUT=${OUT:-/tmp/out}
RUN=/tmp/paper-gpu
mode=${1:-start}
shift || true
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

stage() {
  if [ -d .carry/paper/wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/paper/wheels/*.whl
  fi
  if [ -d .carry/paper/minilm_fp16 ] || [ -f .carry/paper/data.tar.xz ]; then
    python3 - <<'PY'
import lzma, shutil, tarfile
from pathlib import Path
src, dst = Path(".carry/paper/minilm_fp16"), Path("/tmp/m0")
if src.is_dir():
    from safetensors.torch import load, save_file
    dst.mkdir(exist_ok=True)
    for f in src.iterdir():
        if not f.name.endswith(".xz"):
            shutil.copy(f, dst / f.name)
    tensors = load(lzma.open(src / "model.fp16.safetensors.xz").read())
    save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    print("M0 restored to /tmp/m0")
if Path(".carry/paper/data.tar.xz").is_file():
    with tarfile.open(".carry/paper/data.tar.xz", "r:xz") as archive:
        archive.extractall("/tmp", filter="data")
    print("data unpacked to /tmp/paper-data")
PY
  fi
}

if [ "$mode" = stage ]; then
  stage
  exit 0
fi
if [ "$mode" = start ]; then
  stage
  test -f /tmp/m0/model.safetensors && test -f /tmp/paper-data/manifest.json || { echo "stage M0 and the data first"; exit 2; }
  python3 -c "import torch, transformers, peft, fastapi, celery, sqlalchemy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name())"
  mkdir -p $RUN
  setsid nohup python3 -m bench.paper_findings --profile gpu --out $RUN --data-dir /tmp/paper-data --minilm /tmp/m0 --device cuda --no-fetch \
    --plot-dir $RUN/plots "$@" > $RUN/console.log 2>&1 < /dev/null &
  echo $! > $RUN/pid
  limit=540
else
  limit=570
fi

waited=0
while [ $waited -lt $limit ] && kill -0 "$(cat $RUN/pid)" 2>/dev/null; do
  sleep 10; waited=$((waited + 10))
done
grep -v -i "warn\|newly initialized\|TRAIN this\|Token indices\|expected if\|were not used" $RUN/console.log | tail -40 || true
if ! kill -0 "$(cat $RUN/pid)" 2>/dev/null; then
  cp $RUN/results.json $RUN/tables.md $RUN/run.log "$OUT"/ 2>/dev/null || true
  mkdir -p "$OUT/plots" && cp $RUN/plots/*.png "$OUT/plots/" 2>/dev/null || true
  echo "finished"
else
  echo "still running"
fi
