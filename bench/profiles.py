"""The two sizes of the paper-findings benchmark: ``cpu`` (2 cores, < 30 min) and ``gpu`` (one H100/H200).

Every number a run uses is here, so the write-up can print the profile it ran under. The cpu
profile keeps the whole design (3 tasks × 3 hops, both regimes, LoRA + one full fine-tune, every
analysis) and shrinks each piece: shorter texts, smaller dev/test splits, fewer steps, a short
upgrade. Its effects are smaller and noisier than the gpu profile's; the write-up says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TASKS = ("trec", "sms_spam", "bbc_news")
HOPS = ("M0→M1", "M1→M2", "M0→M2")
"""Upgrade hops: (from version, to version) = (1, 2), (2, 3), (1, 3)."""
HOP_VERSIONS = {"M0→M1": (1, 2), "M1→M2": (2, 3), "M0→M2": (1, 3)}
FEW_SHOT_METHODS = ("fresh", "distill", "init", "init_distill")
FULL_METHODS = ("fresh", "init")


@dataclass(frozen=True)
class DataSettings:
    """How the prepared splits and corpora are cut for a profile."""

    dev_size: int | None
    """Stratified seeded subset of the dev split (None: the whole split)."""
    test_size: int | None
    max_words: int | None
    """Every text cut to its first N words (None: as prepared)."""
    corpus_train_lines: int | None
    """Seeded subset of a corpus's training paragraphs (None: all)."""
    corpus_heldout_lines: int = 400
    """Paragraphs held out of each corpus (never trained on) for the cross-domain MLM loss."""
    seed: int = 0


@dataclass(frozen=True)
class UpgradeSettings:
    steps: int
    batch_size: int
    learning_rate: float
    max_length: int
    head_warmup_steps: int
    max_held_out_blocks: int


@dataclass(frozen=True)
class TrainSettings:
    steps: int
    few_shot_steps: int
    learning_rate: float
    full_ft_learning_rate: float
    batch_size: int
    eval_every: int
    max_length: int
    eval_batch_size: int = 64


@dataclass(frozen=True)
class Profile:
    name: str
    data: DataSettings
    upgrade: UpgradeSettings
    train: TrainSettings
    seeds: tuple[int, ...]
    few_shot: int = 32
    interpolation_points: int = 11
    similarity_probes: int = 64
    lora_rank: int = 8
    lora_alpha: int = 16
    full_ft_task: str = "trec"
    full_ft_hop: str = "M0→M1"
    workers: int = 1
    """Worker processes of the embedded service (extra ones join once the upgrades are done)."""
    threads_per_worker: int | None = None
    """OMP/torch threads per worker and for the local upgrade (None: the library's default)."""
    job_timeout_s: float = 3600.0
    batch_max_adapters: int | None = None
    """The workers' ``RECYCLE_BATCH_MAX_ADAPTERS`` (None: the service default). 1 makes every job
    train alone, so a run is reproducible bit for bit: in a batched pass the composition depends
    on queue timing and dropout masks are drawn for the whole pass."""
    campaign_interpolation: bool = True
    """Let each campaign run its own interpolation (A0 ↔ its best recycled adapter, 11 points).
    The benchmark runs the paper's A0 ↔ fresh interpolations itself either way; False cancels the
    campaign's (POST /v1/jobs/{id}/cancel) to save time."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


CPU = Profile(
    name="cpu",
    data=DataSettings(dev_size=48, test_size=120, max_words=24, corpus_train_lines=3000),
    upgrade=UpgradeSettings(
        steps=48, batch_size=8, learning_rate=5e-4, max_length=64, head_warmup_steps=16, max_held_out_blocks=32
    ),
    train=TrainSettings(
        steps=50,
        few_shot_steps=30,
        learning_rate=5e-3,
        full_ft_learning_rate=1e-4,
        batch_size=16,
        eval_every=10,
        max_length=48,
    ),
    seeds=(0,),
    interpolation_points=5,
    similarity_probes=32,
    workers=2,
    threads_per_worker=1,
    batch_max_adapters=1,
    campaign_interpolation=False,
    notes=(
        "every job trains alone (RECYCLE_BATCH_MAX_ADAPTERS=1), so the run reproduces bit for bit",
        "texts cut to their first 24 words (max_length 48 tokens); dev 48 and test 120 examples (stratified, seeded)",
        "upgrades of 48 masked-LM steps at batch 8 × 64 tokens (lr 5e-4) on 3,000 paragraphs",
        "50 training steps (30 few-shot), dev evaluated every 10 steps; one seed",
        "one thread per worker process: on 2 shared cores, 2-thread OpenMP stalls under contention",
        "two worker processes once the upgrades are done (the upgrades run in the driver meanwhile)",
        "each campaign's own 11-point interpolation (A0 ↔ its best adapter) is cancelled; the 5-point A0 ↔ fresh ones are run",
    ),
)

GPU = Profile(
    name="gpu",
    data=DataSettings(dev_size=None, test_size=None, max_words=None, corpus_train_lines=None),
    upgrade=UpgradeSettings(
        steps=2000, batch_size=64, learning_rate=1e-4, max_length=128, head_warmup_steps=400, max_held_out_blocks=256
    ),
    train=TrainSettings(
        steps=600,
        few_shot_steps=300,
        learning_rate=2e-3,
        full_ft_learning_rate=5e-5,
        batch_size=32,
        eval_every=20,
        max_length=128,
        eval_batch_size=128,
    ),
    seeds=(0, 1, 2),
    interpolation_points=11,
    similarity_probes=64,
    workers=4,
    threads_per_worker=2,
    notes=(
        "full splits and corpora; the settings of docs/benchmarks/minilm-trec.md",
        "four worker processes share the GPU (MiniLM leaves it mostly idle with one)",
    ),
)

PROFILES = {"cpu": CPU, "gpu": GPU}


def smoke(profile: Profile) -> Profile:
    """A minutes-long variant of a profile that exercises every code path (numbers meaningless)."""
    from dataclasses import replace

    return replace(
        profile,
        name=profile.name + "-smoke",
        upgrade=replace(profile.upgrade, steps=4, head_warmup_steps=2, max_held_out_blocks=8),
        train=replace(profile.train, steps=10, few_shot_steps=10, eval_every=5),
        seeds=profile.seeds[:1],
        interpolation_points=3,
        similarity_probes=8,
        notes=("smoke run: a few steps of everything; the numbers mean nothing",),
    )
