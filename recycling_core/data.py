"""Task data (DESIGN §4): loading, validating, sampling and writing task directories.

A task directory holds three splits, ``train``, ``dev`` and ``test``, each stored as
``<split>.jsonl`` or ``<split>.csv`` (exactly one file per split), and an optional
``task.json``::

    {"name": "topics", "kind": "classification", "labels": ["music", "science", "sports"],
     "metric": "accuracy"}

Classification rows carry ``text`` and ``label``; generation rows carry ``prompt`` and
``response``. Every example of every split becomes one :class:`Example`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

from recycling_core.errors import ConfigError, DatasetError
from recycling_core.files import atomic_write_text

TaskKind: TypeAlias = Literal["classification", "generation"]
DataFormat: TypeAlias = Literal["jsonl", "csv"]

SPLITS: tuple[str, ...] = ("train", "dev", "test")
DATA_FORMATS: tuple[str, ...] = get_args(DataFormat)
TASK_FILE = "task.json"
DEFAULT_MAX_FILE_BYTES = 200 * 1024 * 1024
"""Largest split file :func:`load_task` reads (200 MB)."""

MAX_TASK_FILE_BYTES = 1024 * 1024
METRICS_BY_KIND: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "macro_f1"),
    "generation": ("exact_match", "loss"),
}
DEFAULT_METRIC: dict[str, str] = {"classification": "accuracy", "generation": "exact_match"}
COLUMNS_BY_KIND: dict[str, tuple[str, str]] = {
    "classification": ("text", "label"),
    "generation": ("prompt", "response"),
}
_TASK_FILE_KEYS = frozenset({"name", "kind", "labels", "metric", "description"})


@dataclass(frozen=True, slots=True)
class Example:
    """One example of a task.

    For classification, ``text`` is the input and ``label`` the class name (always a string;
    integer labels are converted with ``str``); ``response`` is None. For generation, ``text``
    holds the prompt (also readable as :attr:`prompt`), ``response`` the target and ``label``
    is None.
    """

    text: str
    label: str | None = None
    response: str | None = None

    @property
    def prompt(self) -> str:
        """The generation prompt (the same string as ``text``)."""
        return self.text

    @property
    def is_generation(self) -> bool:
        """True for a prompt/response example."""
        return self.response is not None

    def sort_key(self) -> tuple[str, str, str]:
        """A content key that orders examples independently of where they came from."""
        return (self.text, self.label or "", self.response or "")


@dataclass(frozen=True)
class TaskData:
    """A loaded, validated task directory.

    Attributes:
        name: task name (``task.json`` ``name``, else the directory name).
        kind: ``"classification"`` or ``"generation"``.
        labels: the label set in id order (empty for generation).
        label2id: label -> class id.
        id2label: class id -> label.
        train, dev, test: the examples of each split, in file order.
        directory: the task directory.
        metric: the task's primary metric (``accuracy``, ``macro_f1``, ``exact_match`` or
            ``loss``).
        split_files: split name -> the file it was read from.
        split_sha256: split name -> sha256 of the exact bytes that were parsed.
    """

    name: str
    kind: TaskKind
    labels: tuple[str, ...]
    label2id: dict[str, int]
    id2label: dict[int, str]
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    directory: Path
    metric: str
    split_files: dict[str, Path] = field(default_factory=dict)
    split_sha256: dict[str, str] = field(default_factory=dict)

    def split(self, name: str) -> list[Example]:
        """Return the examples of one split (``train``, ``dev`` or ``test``).

        Raises:
            DatasetError: for an unknown split name.
        """
        if name not in SPLITS:
            raise DatasetError(f"unknown split {name!r}; expected one of {', '.join(SPLITS)}")
        examples: list[Example] = getattr(self, name)
        return examples

    def fingerprints(self) -> dict[str, str]:
        """Return split name -> sha256 of that split's file (as read by :func:`load_task`)."""
        return dict(self.split_sha256)


# --------------------------------------------------------------------------- loading


def _split_file(root: Path, split: str) -> Path:
    candidates = [root / f"{split}.{fmt}" for fmt in DATA_FORMATS]
    present = [path for path in candidates if path.is_file()]
    if not present:
        raise DatasetError(
            f"missing split {split!r}: expected {split}.jsonl or {split}.csv in {root}",
            field=split,
        )
    if len(present) > 1:
        raise DatasetError(
            f"split {split!r} is given twice ({present[0].name} and {present[1].name}); "
            "keep exactly one file per split",
            field=split,
        )
    return present[0]


def _read_capped(path: Path, split: str, max_file_bytes: int) -> bytes:
    size = path.stat().st_size
    if size > max_file_bytes:
        raise DatasetError(
            f"split {split!r} file {path.name} is {size / 1e6:.1f} MB, over the "
            f"{max_file_bytes / 1e6:.0f} MB limit",
            field=split,
        )
    return path.read_bytes()


def _decode(raw: bytes, split: str, file_name: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"split {split!r} file {file_name} is not valid UTF-8 (byte {error.start})",
            field=split,
        ) from error


def _jsonl_records(text: str, split: str, file_name: str) -> list[tuple[int, dict[str, Any]]]:
    records: list[tuple[int, dict[str, Any]]] = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(
                f"malformed JSON in {split} line {line_number} ({file_name}): {error.msg}",
                field=split,
            ) from error
        if not isinstance(record, dict):
            raise DatasetError(
                f"{split} line {line_number} ({file_name}) is a JSON "
                f"{type(record).__name__}, expected an object",
                field=split,
            )
        records.append((line_number, record))
    return records


def _csv_records(text: str, split: str, file_name: str) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    records: list[tuple[int, dict[str, Any]]] = []
    try:
        for row in reader:
            if None in row:
                raise DatasetError(
                    f"{split} line {reader.line_num} ({file_name}) has more fields than the header",
                    field=split,
                )
            records.append((reader.line_num, {k: v for k, v in row.items() if v is not None}))
    except csv.Error as error:
        raise DatasetError(
            f"malformed CSV in {split} line {reader.line_num} ({file_name}): {error}",
            field=split,
        ) from error
    return records


def _read_records(
    path: Path, split: str, max_file_bytes: int
) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    raw = _read_capped(path, split, max_file_bytes)
    sha256 = hashlib.sha256(raw).hexdigest()
    text = _decode(raw, split, path.name)
    if path.suffix == ".jsonl":
        records = _jsonl_records(text, split, path.name)
    else:
        records = _csv_records(text, split, path.name)
    if not records:
        raise DatasetError(f"split {split!r} ({path.name}) is empty", field=split)
    return records, sha256


def _label_string(value: Any, split: str, line_number: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DatasetError(
            f"label in {split} line {line_number} must be a string or an integer, "
            f"got {json.dumps(value)}",
            field=split,
        )
    label = str(value).strip()
    if not label:
        raise DatasetError(f"empty label in {split} line {line_number}", field=split)
    return label


def _text_field(record: Mapping[str, Any], column: str, split: str, line_number: int) -> str:
    if column not in record:
        raise DatasetError(f"missing column {column!r} in {split} line {line_number}", field=split)
    value = record[column]
    if not isinstance(value, str):
        raise DatasetError(
            f"column {column!r} in {split} line {line_number} must be a string, "
            f"got {json.dumps(value)}",
            field=split,
        )
    if not value.strip():
        raise DatasetError(f"empty {column} in {split} line {line_number}", field=split)
    return value


def _to_example(record: Mapping[str, Any], kind: TaskKind, split: str, line_number: int) -> Example:
    if kind == "classification":
        text = _text_field(record, "text", split, line_number)
        if "label" not in record:
            raise DatasetError(f"missing column 'label' in {split} line {line_number}", field=split)
        return Example(text=text, label=_label_string(record["label"], split, line_number))
    prompt = _text_field(record, "prompt", split, line_number)
    response = _text_field(record, "response", split, line_number)
    return Example(text=prompt, response=response)


def _infer_kind(record: Mapping[str, Any], line_number: int) -> TaskKind:
    if "text" in record and "label" in record:
        return "classification"
    if "prompt" in record and "response" in record:
        return "generation"
    raise DatasetError(
        f"cannot infer the task kind from train line {line_number}: its columns are "
        f"{sorted(record)}; expected 'text' and 'label' (classification) or 'prompt' and "
        "'response' (generation)",
        field="train",
    )


def _sorted_labels(labels: Iterable[str]) -> tuple[str, ...]:
    unique = set(labels)
    if all(label.lstrip("-").isdigit() for label in unique):
        return tuple(sorted(unique, key=int))
    return tuple(sorted(unique))


def _read_task_file(root: Path) -> dict[str, Any]:
    path = root / TASK_FILE
    if not path.is_file():
        return {}
    if path.stat().st_size > MAX_TASK_FILE_BYTES:
        raise DatasetError(f"{TASK_FILE} is over {MAX_TASK_FILE_BYTES} bytes", field=TASK_FILE)
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DatasetError(f"{TASK_FILE} is not valid JSON: {error}", field=TASK_FILE) from error
    if not isinstance(document, dict):
        raise DatasetError(f"{TASK_FILE} must hold a JSON object", field=TASK_FILE)
    unknown = sorted(set(document) - _TASK_FILE_KEYS)
    if unknown:
        raise DatasetError(
            f"{TASK_FILE} has unknown keys {unknown}; allowed: {sorted(_TASK_FILE_KEYS)}",
            field=TASK_FILE,
        )
    return document


def _declared_labels(document: Mapping[str, Any]) -> tuple[str, ...] | None:
    if "labels" not in document or document["labels"] is None:
        return None
    raw = document["labels"]
    if not isinstance(raw, list) or not raw:
        raise DatasetError(f"{TASK_FILE} 'labels' must be a non-empty list", field="labels")
    labels: list[str] = []
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
            raise DatasetError(
                f"{TASK_FILE} label {json.dumps(value)} must be a non-empty string or integer",
                field="labels",
            )
        labels.append(str(value).strip())
    duplicates = sorted(label for label, count in Counter(labels).items() if count > 1)
    if duplicates:
        raise DatasetError(f"{TASK_FILE} repeats labels {duplicates}", field="labels")
    return tuple(labels)


def _resolve_kind(
    requested: str | None,
    document: Mapping[str, Any],
    first_train_record: tuple[int, dict[str, Any]],
) -> TaskKind:
    declared = document.get("kind")
    for source, value in (("kind argument", requested), (f"{TASK_FILE} 'kind'", declared)):
        if value is not None and value not in COLUMNS_BY_KIND:
            raise DatasetError(
                f"{source} is {value!r}; expected 'classification' or 'generation'", field="kind"
            )
    if requested is not None and declared is not None and requested != declared:
        raise DatasetError(
            f"kind argument {requested!r} contradicts {TASK_FILE} kind {declared!r}", field="kind"
        )
    chosen = requested if requested is not None else declared
    if chosen is not None:
        return "classification" if chosen == "classification" else "generation"
    line_number, record = first_train_record
    return _infer_kind(record, line_number)


def _check_labels(
    split: str,
    examples: Sequence[Example],
    line_numbers: Sequence[int],
    label_set: frozenset[str],
) -> None:
    for example, line_number in zip(examples, line_numbers, strict=True):
        if example.label not in label_set:
            raise DatasetError(
                f"unknown label {example.label!r} in {split} line {line_number}; "
                f"the label set is {sorted(label_set)}",
                field=split,
            )


def load_task(
    directory: str | Path,
    kind: TaskKind | None = None,
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> TaskData:
    """Load and validate a task directory.

    The kind comes from ``kind`` if given, else from ``task.json``, else from the columns of the
    first train row (``text``/``label`` or ``prompt``/``response``). The label set is the
    ``task.json`` ``labels`` list in its order if given, else the sorted unique train labels
    (numerically sorted when every label is an integer string, so ``"10"`` follows ``"9"``).

    Args:
        directory: the task directory.
        kind: ``"classification"`` or ``"generation"``, to force the kind; it must agree with
            ``task.json`` when that declares one.
        max_file_bytes: the largest split file accepted (default 200 MB).

    Returns:
        The validated :class:`TaskData`.

    Raises:
        DatasetError: naming the split, the line number and the problem, for: a missing split,
            a split given both as JSONL and CSV, an empty split, a malformed JSON or CSV line,
            a missing column, an empty text/prompt/response/label, a label outside the label
            set (dev and test always; train when ``task.json`` declares labels), fewer than two
            labels, a file over the size cap, or an invalid ``task.json``.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(f"task directory {str(root)!r} does not exist or is not a directory")
    document = _read_task_file(root)
    split_files = {split: _split_file(root, split) for split in SPLITS}
    raw_records: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    split_sha256: dict[str, str] = {}
    for split in SPLITS:
        raw_records[split], split_sha256[split] = _read_records(
            split_files[split], split, max_file_bytes
        )

    task_kind = _resolve_kind(kind, document, raw_records["train"][0])
    examples = {
        split: [_to_example(record, task_kind, split, line) for line, record in raw_records[split]]
        for split in SPLITS
    }
    line_numbers = {split: [line for line, _ in raw_records[split]] for split in SPLITS}

    metric = document.get("metric", DEFAULT_METRIC[task_kind])
    if metric not in METRICS_BY_KIND[task_kind]:
        raise DatasetError(
            f"{TASK_FILE} metric {metric!r} does not fit a {task_kind} task; expected one of "
            f"{list(METRICS_BY_KIND[task_kind])}",
            field="metric",
        )

    declared = _declared_labels(document)
    labels: tuple[str, ...] = ()
    if task_kind == "generation":
        if declared is not None:
            raise DatasetError(
                f"{TASK_FILE} declares labels, but a generation task has none", field="labels"
            )
    else:
        if declared is not None:
            labels = declared
            _check_labels("train", examples["train"], line_numbers["train"], frozenset(labels))
        else:
            labels = _sorted_labels(example.label or "" for example in examples["train"])
        if len(labels) < 2:
            raise DatasetError(
                f"a classification task needs at least 2 labels, found {list(labels)}",
                field="labels",
            )
        for split in ("dev", "test"):
            _check_labels(split, examples[split], line_numbers[split], frozenset(labels))

    name = document.get("name") or root.resolve().name
    if not isinstance(name, str):
        raise DatasetError(f"{TASK_FILE} 'name' must be a string", field="name")
    label2id = {label: index for index, label in enumerate(labels)}
    return TaskData(
        name=name,
        kind=task_kind,
        labels=labels,
        label2id=label2id,
        id2label={index: label for label, index in label2id.items()},
        train=examples["train"],
        dev=examples["dev"],
        test=examples["test"],
        directory=root,
        metric=metric,
        split_files=split_files,
        split_sha256=split_sha256,
    )


# --------------------------------------------------------------------------- sampling


def _is_generation_set(examples: Sequence[Example]) -> bool:
    generation = [example.label is None for example in examples]
    if any(generation) and not all(generation):
        raise DatasetError("examples mix labelled (classification) and unlabelled ones")
    return bool(generation) and all(generation)


def few_shot_sample(examples: Sequence[Example], k_per_label: int, seed: int) -> list[Example]:
    """Draw a deterministic few-shot subset: K examples per label.

    The subset depends only on the seed and the examples' content, not on their order: each
    label's examples are sorted by content before sampling. A label with fewer than K examples
    contributes all of them. The result is shuffled deterministically by the seed. For
    generation examples (no labels), ``k_per_label`` examples are drawn in total.

    Args:
        examples: the pool (typically a task's train split).
        k_per_label: K, at least 1.
        seed: the random seed.

    Returns:
        The sampled examples in a seed-determined order.

    Raises:
        ConfigError: when ``k_per_label`` is below 1.
        DatasetError: when labelled and unlabelled examples are mixed.
    """
    if k_per_label < 1:
        raise ConfigError(f"k_per_label must be at least 1, got {k_per_label}", field="k_per_label")
    rng = random.Random(seed)
    if _is_generation_set(examples):
        groups: dict[str, list[Example]] = {"": list(examples)}
    else:
        groups = {}
        for example in examples:
            groups.setdefault(example.label or "", []).append(example)
    sample: list[Example] = []
    for label in sorted(groups):
        pool = sorted(groups[label], key=Example.sort_key)
        sample.extend(rng.sample(pool, min(k_per_label, len(pool))))
    rng.shuffle(sample)
    return sample


def majority_floor(examples: Sequence[Example]) -> float:
    """Return the accuracy of always predicting the most common label (DESIGN §6 floor).

    For generation examples the floor is the exact match of always answering the most common
    response.

    Args:
        examples: the evaluation split.

    Returns:
        The share of the most common label (or response), in ``(0, 1]``.

    Raises:
        DatasetError: when ``examples`` is empty or mixes labelled and unlabelled examples.
    """
    if not examples:
        raise DatasetError("the majority floor of an empty split is undefined")
    if _is_generation_set(examples):
        counts = Counter(example.response for example in examples)
    else:
        counts = Counter(example.label for example in examples)
    return counts.most_common(1)[0][1] / len(examples)


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, seed: int, shuffle: bool = True
) -> list[list[int]]:
    """Group example indices into batches of similar length (less padding).

    With ``shuffle``: the indices are shuffled, cut into chunks of ``batch_size * 50``, each
    chunk is sorted by length and split into batches, and the batch order is shuffled. Without
    it the same is done on the original order and the batches keep their order (for
    evaluation). Every index appears exactly once; the result depends only on the inputs and
    the seed. The last batch of a chunk may be smaller.

    Args:
        lengths: length (e.g. token count) of each example; index i is example i.
        batch_size: the largest batch, at least 1.
        seed: the random seed.
        shuffle: whether to randomise the example and batch order.

    Returns:
        A list of batches, each a list of example indices.

    Raises:
        ConfigError: when ``batch_size`` is below 1.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}", field="batch_size")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
    chunk_size = batch_size * 50
    batches: list[list[int]] = []
    for chunk_start in range(0, len(order), chunk_size):
        chunk = sorted(order[chunk_start : chunk_start + chunk_size], key=lambda i: lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    if shuffle:
        rng.shuffle(batches)
    return batches


# --------------------------------------------------------------------------- writing


def _row_of(item: Example | Mapping[str, Any], kind: TaskKind) -> dict[str, Any]:
    first, second = COLUMNS_BY_KIND[kind]
    if isinstance(item, Example):
        if kind == "classification":
            if item.label is None:
                raise DatasetError("a classification example needs a label")
            return {"text": item.text, "label": item.label}
        if item.response is None:
            raise DatasetError("a generation example needs a response")
        return {"prompt": item.text, "response": item.response}
    missing = [column for column in (first, second) if column not in item]
    if missing:
        raise DatasetError(f"row {dict(item)} lacks columns {missing} of a {kind} task")
    return {first: item[first], second: item[second]}


def _serialise_split(rows: Sequence[dict[str, Any]], fmt: DataFormat, kind: TaskKind) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS_BY_KIND[kind]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_task(
    directory: str | Path,
    name: str,
    kind: TaskKind,
    train: Sequence[Example | Mapping[str, Any]],
    dev: Sequence[Example | Mapping[str, Any]],
    test: Sequence[Example | Mapping[str, Any]],
    labels: Sequence[str] | None = None,
    fmt: DataFormat = "jsonl",
    metric: str | None = None,
) -> Path:
    """Write a task directory that :func:`load_task` reads back.

    Writes ``train``/``dev``/``test`` as ``<split>.jsonl`` or ``<split>.csv`` and a
    ``task.json`` with the name, kind and, when given, the label set and metric. Files are
    written atomically; existing files of the same name are replaced.

    Args:
        directory: destination directory (created if missing).
        name: task name.
        kind: ``"classification"`` or ``"generation"``.
        train, dev, test: :class:`Example` objects or mappings with the kind's columns.
        labels: the label set in id order (classification only); None derives it from train
            at load time.
        fmt: ``"jsonl"`` or ``"csv"``.
        metric: primary metric to record in ``task.json``; None uses the kind's default.

    Returns:
        The task directory.

    Raises:
        DatasetError: when a row lacks a column or the directory already holds a split in the
            other format (which would make the task ambiguous).
        ConfigError: for an unknown ``kind`` or ``fmt``.
    """
    if kind not in COLUMNS_BY_KIND:
        raise ConfigError(f"unknown task kind {kind!r}", field="kind")
    if fmt not in DATA_FORMATS:
        raise ConfigError(f"unknown data format {fmt!r}; expected jsonl or csv", field="fmt")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("dev", dev), ("test", test)):
        other = root / f"{split}.{'csv' if fmt == 'jsonl' else 'jsonl'}"
        if other.exists():
            raise DatasetError(
                f"{other.name} already exists in {root}; remove it before writing {split}.{fmt}",
                field=split,
            )
        serialised = _serialise_split([_row_of(row, kind) for row in rows], fmt, kind)
        atomic_write_text(root / f"{split}.{fmt}", serialised)
    document: dict[str, Any] = {"name": name, "kind": kind}
    if labels is not None:
        document["labels"] = [str(label) for label in labels]
    if metric is not None:
        document["metric"] = metric
    atomic_write_text(root / TASK_FILE, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return root


def split_examples(
    rows: Sequence[Example], seed: int, dev_fraction: float, test_fraction: float
) -> tuple[list[Example], list[Example], list[Example]]:
    """Split examples into train/dev/test deterministically, stratified by label.

    Each label's examples are sorted by content, shuffled by the seed and cut into
    ``round(n * test_fraction)`` test, ``round(n * dev_fraction)`` dev and the rest train, so
    every split keeps the label proportions and the result does not depend on the input order.
    Generation examples (no labels) are split as one group. Each split is returned in a
    seed-determined order.

    Args:
        rows: the examples to split.
        seed: the random seed.
        dev_fraction: share of each label for dev, in ``[0, 1)``.
        test_fraction: share of each label for test, in ``[0, 1)``; the two shares must sum to
            less than 1.

    Returns:
        ``(train, dev, test)``.

    Raises:
        ConfigError: for fractions out of range.
        DatasetError: when labelled and unlabelled examples are mixed.
    """
    fractions = (("dev_fraction", dev_fraction), ("test_fraction", test_fraction))
    for fraction_name, fraction in fractions:
        if not 0.0 <= fraction < 1.0:
            raise ConfigError(
                f"{fraction_name} must be in [0, 1), got {fraction}", field=fraction_name
            )
    if dev_fraction + test_fraction >= 1.0:
        raise ConfigError(
            f"dev_fraction + test_fraction must be below 1, got {dev_fraction + test_fraction}",
            field="dev_fraction",
        )
    rng = random.Random(seed)
    groups: dict[str, list[Example]] = {}
    generation = _is_generation_set(rows)
    for example in rows:
        groups.setdefault("" if generation else example.label or "", []).append(example)
    train: list[Example] = []
    dev: list[Example] = []
    test: list[Example] = []
    for label in sorted(groups):
        pool = sorted(groups[label], key=Example.sort_key)
        rng.shuffle(pool)
        n_test = round(len(pool) * test_fraction)
        n_dev = round(len(pool) * dev_fraction)
        test.extend(pool[:n_test])
        dev.extend(pool[n_test : n_test + n_dev])
        train.extend(pool[n_test + n_dev :])
    for split in (train, dev, test):
        rng.shuffle(split)
    return train, dev, test
