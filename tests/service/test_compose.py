"""docker-compose.yml describes a runnable production stack.

Where the Docker compose plugin exists, ``docker compose config`` validates the file; everywhere,
the file is parsed and every command of ours must name a real entry point of this project.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _has_compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_compose_plugin(), reason="the docker compose plugin is not installed here")
def test_docker_compose_config_validates() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"RECYCLE_WEBHOOK_SECRET": "x" * 64, "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert result.returncode == 0, result.stderr


def test_stack_has_every_production_service() -> None:
    services = _compose()["services"]
    assert {"api", "worker-gpu", "worker-cpu", "postgres", "redis", "flower"} <= set(services)
    for name in ("api", "worker-gpu", "worker-cpu", "postgres", "redis"):
        assert "healthcheck" in services[name], f"{name} has no health check"
    gpu = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert "artifacts" in _compose()["volumes"]
    for name in ("api", "worker-gpu", "worker-cpu"):
        assert any(str(v).startswith("artifacts:") for v in services[name]["volumes"])


def _queue_of(command: list[str]) -> str:
    return command[command.index("-Q") + 1]


def test_worker_commands_name_the_celery_app_and_their_queues() -> None:
    services = _compose()["services"]
    for name, queue in (("worker-gpu", "gpu"), ("worker-cpu", "cpu")):
        command = services[name]["command"]
        assert command[:3] == ["celery", "-A", "workers.celery_app"]
        assert _queue_of(command) == queue
        module = importlib.import_module("workers.celery_app")
        assert hasattr(module, "celery_app")
        assert "recycle.run_job" in module.celery_app.tasks


def test_api_command_is_a_real_recycle_subcommand() -> None:
    from typer.main import get_command

    from app.cli import app

    command = _compose()["services"]["api"]["command"]
    assert command[0] == "recycle"
    cli = get_command(app)
    sub = cli.commands[command[1]]  # type: ignore[attr-defined]
    flags = {opt for param in sub.params for opt in getattr(param, "opts", [])}
    assert {flag for flag in command[2:] if flag.startswith("--")} <= flags


def test_every_environment_variable_is_a_setting() -> None:
    from app.settings import Settings

    environment = _compose()["x-recycle-env"]
    fields = {f"RECYCLE_{name.upper()}" for name in Settings.model_fields}
    assert set(environment) <= fields, set(environment) - fields
