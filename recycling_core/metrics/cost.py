"""Cost of a run (DESIGN §6): wall time, device time, tokens processed, peak memory; plus the
hardware and library versions recorded in every report (DESIGN §7)."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import resource
import sys
import time
from types import TracebackType

import torch

from recycling_core.reports import Cost, Hardware

RECYCLING_CORE_VERSION = "0.1.0"
_VERSIONED_PACKAGES = ("torch", "transformers", "peft", "safetensors", "numpy")


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class CostMeter:
    """Measures the cost of one run.

    Use as a context manager (``with CostMeter(device) as meter: ...; meter.cost``) or call
    :meth:`start` and :meth:`stop` explicitly; call :meth:`add_tokens` for every batch.

    Fields of the resulting :class:`Cost`:

    - ``wall_seconds``: :func:`time.perf_counter` time between start and stop;
    - ``device_seconds``: wall seconds during which an accelerator was in use, i.e. equal to
      ``wall_seconds`` on a CUDA device and 0.0 on CPU (the "GPU seconds" of a job; it is
      held time, not kernel-busy time);
    - ``tokens``: the sum of :meth:`add_tokens`;
    - ``peak_memory_bytes``: on CUDA, ``torch.cuda.max_memory_allocated`` since :meth:`start`
      (peak statistics are reset there); on CPU, the process's peak resident set size from
      ``resource.getrusage``, which covers the whole process lifetime, not only this run.
    """

    def __init__(self, device: str | torch.device = "cpu") -> None:
        """Create a stopped meter for ``device`` (e.g. ``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
        self.device = torch.device(device)
        self.tokens = 0
        self.cost: Cost | None = None
        self._started_at: float | None = None

    @property
    def uses_cuda(self) -> bool:
        """Whether the metered device is a CUDA device."""
        return bool(self.device.type == "cuda")

    @property
    def running(self) -> bool:
        """Whether :meth:`start` was called and :meth:`stop` not yet."""
        return self._started_at is not None

    def start(self) -> CostMeter:
        """Start (or restart) timing; resets the token count and CUDA peak-memory statistics."""
        self.tokens = 0
        self.cost = None
        if self.uses_cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._started_at = time.perf_counter()
        return self

    def add_tokens(self, n: int) -> None:
        """Count ``n`` more processed tokens.

        Raises:
            ValueError: when ``n`` is negative.
            RuntimeError: when the meter is not running.
        """
        if self._started_at is None:
            raise RuntimeError("CostMeter.add_tokens called before start()")
        if n < 0:
            raise ValueError(f"token count must be non-negative, got {n}")
        self.tokens += int(n)

    def elapsed(self) -> float:
        """Wall seconds since :meth:`start`, without stopping.

        Raises:
            RuntimeError: when the meter is not running.
        """
        if self._started_at is None:
            raise RuntimeError("CostMeter is not running")
        return time.perf_counter() - self._started_at

    def stop(self) -> Cost:
        """Stop timing and return the :class:`Cost` (also kept in :attr:`cost`).

        Raises:
            RuntimeError: when the meter is not running.
        """
        if self._started_at is None:
            raise RuntimeError("CostMeter.stop called before start()")
        if self.uses_cuda:
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._started_at
        self._started_at = None
        if self.uses_cuda:
            peak = int(torch.cuda.max_memory_allocated(self.device))
        else:
            peak = _peak_rss_bytes()
        self.cost = Cost(
            wall_seconds=wall,
            device_seconds=wall if self.uses_cuda else 0.0,
            tokens=self.tokens,
            peak_memory_bytes=peak,
        )
        return self.cost

    def __enter__(self) -> CostMeter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.running:
            self.stop()


def _usable_cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def hardware_info(device: str | torch.device) -> Hardware:
    """Describe the machine a run used.

    Args:
        device: the torch device of the run.

    Returns:
        :class:`Hardware` with the device string, its name (the CUDA device name, or the CPU's
        processor / machine name) and the number of CPU cores this process may use.
    """
    torch_device = torch.device(device)
    if torch_device.type == "cuda":
        name = torch.cuda.get_device_name(torch_device)
    else:
        name = platform.processor() or platform.machine() or "cpu"
    return Hardware(device=str(torch_device), device_name=name, cpu_count=_usable_cpu_count())


def library_versions() -> dict[str, str]:
    """Versions of the libraries that determine a run's numbers (DESIGN §7).

    Keys: torch, transformers, peft, safetensors, numpy, python, recycling_core. A package that
    is not installed is reported as ``"not installed"``. Read from package metadata, so nothing
    heavy is imported.
    """
    versions: dict[str, str] = {}
    for package in _VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    versions["python"] = platform.python_version()
    core = importlib.import_module("recycling_core")
    versions["recycling_core"] = str(getattr(core, "__version__", RECYCLING_CORE_VERSION))
    return versions
