"""``recycle serve`` stopped with SIGTERM (what ``recycle demo``, docker and kill send) takes its
embedded worker subprocess with it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.serving import serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_to_serve_stops_its_worker(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        workers = _children(served.process.pid)
        assert workers, "the embedded worker subprocess should be running"
        served.process.send_signal(signal.SIGTERM)  # the serve process alone, not its group
        served.process.wait(timeout=90)
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_running(pid) for pid in workers), served.log_tail()
