#!/usr/bin/env bash
# Run bench/minilm_trec.py on a lent GPU machine that has no package registry: the working tree
# carries .carry/ (all-MiniLM-L6-v2 as fp16 safetensors compressed with xz — the transfer limit is
# 64 MiB —, the State of the Union corpus, the TREC task, and wheels of the pinned libraries).
set -euo pipefail
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-deps --target /tmp/pydeps .carry/wheels/*.whl
export PYTHONPATH=/tmp/pydeps:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 - <<'PY'
import lzma, shutil
from pathlib import Path
from safetensors.torch import load, save_file
src, dst = Path(".carry/minilm_fp16"), Path("/tmp/m0")
dst.mkdir(exist_ok=True)
for f in src.iterdir():
    if not f.name.endswith(".xz"):
        shutil.copy(f, dst / f.name)
tensors = load(lzma.open(src / "model.fp16.safetensors.xz").read())
save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
Path("/tmp/sotu.txt").write_bytes(lzma.open(".carry/sotu.txt.xz").read())
PY
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name())"
python3 -m bench.minilm_trec --out /tmp/run --minilm /tmp/m0 --trec .carry/trec --corpus /tmp/sotu.txt --device cuda "$@" 2>&1 | grep -v -i "warn\|newly initialized\|TRAIN this\|Token indices" || true
cp /tmp/run/results.json "$OUT/results.json"
