"""The ``recycle`` program: the library's commands plus the service's (serve, worker, keys, demo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from app.cli_api import register_api_commands
from recycling_core.cli import app, err_console

ADMIN_KEY_FILE = "admin-key"

DataDir = Annotated[
    Path | None,
    typer.Option(help="Where the embedded registry, broker file and artifacts live (RECYCLE_DATA_DIR)."),
]


def _apply_data_dir(data_dir: Path | None) -> None:
    if data_dir is not None:
        os.environ["RECYCLE_DATA_DIR"] = str(data_dir.resolve())


def _settings():
    from app.settings import get_settings

    get_settings.cache_clear()
    return get_settings()


def bootstrap_admin_key(settings) -> Path | None:
    """Create the first admin key when none exists; write its secret to ``<data_dir>/admin-key``."""
    from app.auth.service import create_key, has_active_admin
    from app.db.migrate import upgrade_to_head
    from app.db.session import create_db_engine, create_session_factory, transaction

    upgrade_to_head(settings.database_url)
    engine = create_db_engine(settings.database_url)
    try:
        with transaction(create_session_factory(engine)) as session:
            if has_active_admin(session):
                return None
            created = create_key(session, "bootstrap-admin", "admin")
        path = Path(settings.data_dir) / ADMIN_KEY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(created.secret + "\n")
        path.chmod(0o600)
        return path
    finally:
        engine.dispose()


def _worker_command() -> list[str]:
    from workers.celery_app import WORKER_ARGV

    return [sys.executable, "-m", "celery", "-A", "workers.celery_app", *WORKER_ARGV]


class _SupervisedWorker:
    """The embedded worker subprocess, restarted if it dies while the API runs."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=os.environ.copy())
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopping.wait(2.0):
            if self.process is not None and self.process.poll() is not None:
                err_console.print(f"worker exited with {self.process.returncode}; restarting it")
                self.process = subprocess.Popen(self.command, env=os.environ.copy())

    def stop(self) -> None:
        self._stopping.set()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    data_dir: DataDir = None,
    production: Annotated[bool, typer.Option("--production", help="API only: workers, database and broker run elsewhere.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="API processes (with --production), e.g. one per core; each binds the port with SO_REUSEPORT.")] = 1,
) -> None:
    """Start the service. Embedded by default: SQLite registry, local artifacts, one worker subprocess.

    Example: recycle serve --port 8000 --data-dir ./.recycle
    """
    from app.serving import serve_api

    _apply_data_dir(data_dir)
    settings = _settings()
    if workers > 1 and not production:
        raise typer.BadParameter("several API processes need --production (SQLite allows one writer)", param_hint="--workers")
    worker = None
    if not production:
        key_file = bootstrap_admin_key(settings)
        if key_file is not None:
            err_console.print(f"created the first admin API key; its secret is in {key_file}")
        worker = _SupervisedWorker(_worker_command())
        worker.start()
    # uvicorn handles SIGTERM itself and, once it has shut down, raises the signal again; with
    # the default handler that would end this process before the worker is stopped.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        status = serve_api(settings, host, port, workers)
    finally:
        if worker is not None:
            worker.stop()
    raise typer.Exit(status)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@app.command("worker")
def worker_command(
    queues: Annotated[str, typer.Option(help="Comma-separated queues to consume.")] = "gpu,cpu",
    data_dir: DataDir = None,
) -> None:
    """Run one worker process (one per GPU: pin it with CUDA_VISIBLE_DEVICES).

    Example: CUDA_VISIBLE_DEVICES=0 recycle worker --queues gpu
    """
    _apply_data_dir(data_dir)
    command = _worker_command()
    command[command.index("-Q") + 1] = queues
    os.execv(command[0], command)


keys_app = typer.Typer(
    help="API keys: create (through the API with --url, else directly in the database), bootstrap "
    "(always in the database), list, revoke, whoami.\n\nExample: recycle keys bootstrap --name ops --role admin",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")

KeyName = Annotated[str, typer.Option(help="A name to recognise the key by.")]
KeyRole = Annotated[str, typer.Option(help="admin, platform or reader")]


def create_key_in_database(name: str, role: str, data_dir: Path | None) -> str:
    """Create an API key directly in the configured registry database; return its secret."""
    from app.auth.service import create_key
    from app.db.migrate import upgrade_to_head
    from app.db.session import create_db_engine, create_session_factory, transaction

    _apply_data_dir(data_dir)
    settings = _settings()
    upgrade_to_head(settings.database_url)
    engine = create_db_engine(settings.database_url)
    try:
        with transaction(create_session_factory(engine)) as session:
            return create_key(session, name, role).secret
    finally:
        engine.dispose()


@keys_app.command("bootstrap")
def keys_bootstrap_command(name: KeyName, role: KeyRole = "admin", data_dir: DataDir = None) -> None:
    """Create an API key directly in the registry database, no service needed (first admin key).

    Example: RECYCLE_DATABASE_URL=postgresql+psycopg://… recycle keys bootstrap --name ops --role admin
    """
    typer.echo(create_key_in_database(name, role, data_dir))


@keys_app.command("create")
def keys_create_command(
    name: KeyName,
    role: KeyRole = "admin",
    data_dir: DataDir = None,
    url: Annotated[str | None, typer.Option(envvar="RECYCLE_URL", help="Create it through this service (needs an admin --api-key); without it: directly in the database, like bootstrap.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RECYCLE_API_KEY", help="Admin API key for --url.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the created key as JSON (with --url).")] = False,
) -> None:
    """Create an API key and print its secret (shown once).

    With --url (or RECYCLE_URL) an admin key creates it through the API; without, it is written
    directly to the configured database, as `recycle keys bootstrap` does.

    Example: recycle keys create --name ci --role platform --url http://127.0.0.1:8000 --api-key rk_…
             RECYCLE_DATABASE_URL=postgresql+psycopg://… recycle keys create --name ops --role admin
    """
    if url:
        from app.cli_api import create_key_over_http

        create_key_over_http(url, api_key, name, role, as_json)
        return
    typer.echo(create_key_in_database(name, role, data_dir))


@app.command("demo")
def demo_command(
    url: Annotated[str | None, typer.Option(help="A running service; without it the embedded one is started.")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="RECYCLE_API_KEY", help="API key for --url.")] = None,
    real: Annotated[bool, typer.Option("--real", help="Use all-MiniLM-L6-v2 from its PyPI package.")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Working directory of the demo.")] = None,
    port: Annotated[int, typer.Option(help="Port of the embedded service.")] = 8765,
) -> None:
    """Walk through the whole upgrade story over HTTP and print a summary.

    A base version, a task, an adapter trained on it, an upgraded version registered with its
    parent, the campaign that starts by itself with live progress, and the result.

    Example: recycle demo            (starts the embedded service itself)
             recycle demo --url http://127.0.0.1:8000 --api-key rk_…
    """
    from app.demo import run_demo

    workdir = (data_dir or Path(".recycle-demo")).resolve()
    code = run_demo(url=url, api_key=api_key, real=real, workdir=workdir, port=port)
    raise typer.Exit(code)


register_api_commands(app, keys_app)  # models, versions, tasks, adapters, jobs, … (app.cli_api)


def main() -> None:
    """Entry point of ``recycle``."""
    # Load-report noise; our own errors are explicit. Read by transformers when it is first
    # imported, so commands that never load a model do not pay for importing it.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    app()


if __name__ == "__main__":
    main()
