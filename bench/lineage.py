"""The model team's side: M1 = M0 continually pre-trained on domain 1, M2 = M1 on domain 2.

Produced locally with the library (``recycling_core.upgrade.simulate_upgrade``), then registered
with the service as versions 1, 2, 3 by the runner. Each hop measures the held-out masked-LM loss
on both domains' held-out paragraphs (never trained on) before and after, and the relative weight
change, so the upgrade is shown to be real and its size is known. M0 has no MLM head: before the
first hop a head is initialised (tied decoder) and warmed with the encoder frozen, so M0's
"before" losses are those of M0's encoder with a briefly trained head.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.data import PreparedData
from bench.profiles import UpgradeSettings
from recycling_core.files import sha256_file
from recycling_core.models import inspect_model_dir
from recycling_core.reports import Report
from recycling_core.upgrade import (
    UPGRADE_REPORT_NAME,
    UpgradeConfig,
    UpgradeRequest,
    simulate_upgrade,
)

DOMAIN_NAMES = {"sotu": "State of the Union addresses", "spdx": "SPDX licence texts"}


def _config(settings: UpgradeSettings, seed: int, device: str, warmup: bool) -> UpgradeConfig:
    return UpgradeConfig(
        steps=settings.steps,
        batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        max_length=settings.max_length,
        head_warmup_steps=settings.head_warmup_steps if warmup else None,
        max_held_out_blocks=settings.max_held_out_blocks,
        seed=seed,
        device=device,  # type: ignore[arg-type]
    )


def _reusable(out_dir: Path, base: Path, corpus: Path, config: UpgradeConfig) -> Report | None:
    """A finished upgrade of the same base, corpus and settings already in ``out_dir``."""
    path = out_dir / UPGRADE_REPORT_NAME
    if not path.is_file():
        return None
    report = Report.read(path)
    prints = {f.role: f.sha256 for f in report.fingerprints}
    same = (
        prints.get("base") == inspect_model_dir(base).fingerprint
        and prints.get("corpus") == sha256_file(corpus)
        and all(report.hyperparameters.get(k) == v for k, v in config.__dict__.items() if k not in ("device", "head_warmup_steps"))
    )
    return report if same else None


def upgrade(
    base: Path,
    domain: str,
    data: PreparedData,
    out_dir: Path,
    settings: UpgradeSettings,
    *,
    seed: int = 0,
    device: str = "auto",
    first_hop: bool = False,
) -> Report:
    """One hop: continual pre-training of ``base`` on ``domain``'s training paragraphs."""
    corpus = data.corpora[domain]["train"]
    config = _config(settings, seed, device, warmup=first_hop)
    reused = _reusable(out_dir, base, corpus, config)
    if reused is not None:
        return reused
    eval_corpora = tuple(data.corpora[d]["heldout"] for d in sorted(data.corpora))
    return simulate_upgrade(UpgradeRequest(base, corpus, out_dir, config, eval_corpora=eval_corpora))


def hop_summary(report: Report, domain: str, data: PreparedData) -> dict[str, Any]:
    """Weight change and held-out MLM losses (both domains) of one hop, from its upgrade report."""
    extra = report.metrics.extra
    order = [str(p) for p in report.hyperparameters.get("eval_corpora", [])]
    losses: dict[str, dict[str, float | None]] = {}
    for d in sorted(data.corpora):
        held = str(data.corpora[d]["heldout"])
        index = order.index(held) + 1 if held in order else None
        if index is None:
            continue
        losses[d] = {
            "before": extra.get(f"eval_corpus_{index}_loss_before"),
            "after": extra.get(f"eval_corpus_{index}_loss_after"),
        }
    distance = report.metrics.weight_distance
    return {
        "corpus": DOMAIN_NAMES.get(domain, domain),
        "domain": domain,
        "steps": report.hyperparameters.get("steps"),
        "head_warmup_steps": report.hyperparameters.get("head_warmup_steps"),
        "relative_l2": distance.relative_l2 if distance else None,
        "cosine": distance.cosine if distance else None,
        "per_module": distance.per_module if distance else {},
        "mlm_loss": losses,
        "in_domain_training_holdout": {"before": extra.get("held_out_loss_before"), "after": extra.get("held_out_loss_after")},
        "final_train_loss": extra.get("final_train_loss"),
        "report_id": report.report_id,
        "fingerprints": {f.role: f.sha256 for f in report.fingerprints},
        "wall_seconds": report.cost.wall_seconds,
        "hardware": report.hardware.model_dump() if report.hardware else None,
        "produced_locally": True,
    }


def two_hop_summary(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """M0→M2: M0's losses (before hop 1) against M2's (after hop 2); the weight change is filled
    in from the service's compatibility reports, which measure it between the registered versions."""
    losses = {}
    for d in set(first["mlm_loss"]) & set(second["mlm_loss"]):
        losses[d] = {"before": first["mlm_loss"][d]["before"], "after": second["mlm_loss"][d]["after"]}
    return {
        "corpus": f"{first['corpus']}, then {second['corpus']}",
        "steps": (first.get("steps") or 0) + (second.get("steps") or 0),
        "relative_l2": None,
        "cosine": None,
        "mlm_loss": losses,
        "report_ids": [first["report_id"], second["report_id"]],
        "produced_locally": True,
    }


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2, default=str) + "\n")
