"""recycling_core: recycle PEFT adapters and fine-tuning deltas across base-model upgrades.

A plain library (no service code): model and adapter I/O, structural compatibility checks, one
training loop, the recycling methods, the metrics of the design, reports, a continual
pre-training simulator and tiny models for tests. The runs live in :mod:`recycling_core.pipeline`.
"""

__version__ = "0.1.0"
