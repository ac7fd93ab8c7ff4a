"""The whole upgrade story through the command line alone, against a real ``recycle serve``.

Each step is a subprocess ``recycle …`` (the installed console script) with the connection in
``RECYCLE_URL`` / ``RECYCLE_API_KEY``: create the model, register v1, set the policy, create the
task, register a plain-PEFT adapter, register v2 with its parent, watch the campaign that starts
by itself, read its report and download the recycled adapter. Then the other groups' commands,
errors and the offline key bootstrap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serving import REPO_ROOT, Served, adapter_labels, make_story_files, serve

# The first test also pays for the served stack and its tiny campaign (fixture setup).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _recycle_command() -> list[str]:
    script = Path(sys.executable).parent / "recycle"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("cli-story")
    files = make_story_files(root / "files")
    with serve(root) as service:
        yield service, files


class Recycle:
    """Runs ``recycle …`` against the served instance; checks the exit code."""

    def __init__(self, served: Served, workdir: Path) -> None:
        self.served = served
        self.workdir = workdir
        self.env = {
            **os.environ,
            "RECYCLE_URL": served.url,
            "RECYCLE_API_KEY": served.api_key,
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }

    def __call__(
        self, *args: str, code: int = 0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*_recycle_command(), *args],
            cwd=self.workdir,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == code, (
            f"recycle {' '.join(args)} exited {result.returncode}, expected {code}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}\nservice log:\n{self.served.log_tail(3000)}"
        )
        return result

    def json(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return json.loads(self(*args, "--json", env=env).stdout)


def test_upgrade_story_through_the_cli(
    served: tuple[Served, dict[str, Path]], tmp_path: Path
) -> None:
    service, files = served
    recycle = Recycle(service, tmp_path)

    model = recycle.json("models", "create", "story", "--description", "CLI story")
    assert model["name"] == "story"
    v1 = recycle.json(
        "versions", "register", "story", str(files["v1"]), "--tag", "stage=base", "--alias", "base"
    )
    assert v1["version"] == 1 and v1["status"] == "READY" and v1["aliases"] == ["base"]
    policy = recycle.json(
        "policy",
        "set",
        "story",
        "--method",
        "init",
        "--step-budget",
        "30",
        "--no-fresh",
        "--direct-min-retention",
        "none",
        "--training",
        "eval_every=10",
        "--training",
        "learning_rate=0.005",
    )
    assert policy["methods"] == ["init"] and policy["fresh_baseline"] is False
    assert (
        policy["gates"]["direct_min_retention"] is None and policy["training"]["eval_every"] == 10
    )
    labels = ",".join(adapter_labels(files["adapter"]))
    task = recycle.json("tasks", "create", "story-task", str(files["task"]), "--labels", labels)
    assert task["labels"] == labels.split(",")
    source = recycle.json(
        "adapters",
        "register",
        str(files["adapter"]),
        "--model",
        "story",
        "--version",
        "1",
        "--task",
        "story-task",
        "--name",
        "plain-peft",
    )
    assert source["status"] == "READY" and source["peft_type"] == "LORA"

    v2 = recycle.json("versions", "register", "story", str(files["v2"]), "--parent", "1")
    assert v2["parent_version"] == 1
    [campaign] = recycle.json("campaigns", "list", "--model", "story")["items"]
    assert campaign["trigger"] == "auto" and campaign["to_version"] == 2

    watched = recycle("campaigns", "watch", campaign["id"], "--json", "--timeout", "500")
    final = json.loads(watched.stdout)
    assert final["status"] == "SUCCEEDED", final
    assert "campaign" in watched.stderr  # the progress bars went to stderr
    entry = final["summary"]["adapters"][source["id"]]
    recycled_id = entry["methods"]["init"]["adapter_id"]

    table = recycle("campaigns", "get", campaign["id"]).stdout
    assert "SUCCEEDED" in table and "story-task" in table and "recycled" in table

    recycled = recycle.json("adapters", "get", recycled_id)
    assert (
        recycled["recycled_from"] == source["id"]
        and recycled["method"] == "init"
        and recycled["model_version"] == 2
    )
    report = recycle.json("reports", "get", recycled["metrics"]["report_id"])
    assert report["document"]["kind"] == "recycle" and report["document"]["curve"]["points"]
    downloaded = Path(
        recycle("adapters", "download", recycled_id, str(tmp_path / "recycled")).stdout.strip()
    )
    config = json.loads((downloaded / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and (downloaded / "adapter_model.safetensors").is_file()

    jobs = recycle.json("jobs", "list", "--campaign", campaign["id"])
    assert {job["kind"] for job in jobs["items"]} == {"compatibility", "recycle", "interpolation"}
    assert all(job["status"] == "SUCCEEDED" for job in jobs["items"])
    watched_job = recycle("jobs", "watch", jobs["items"][0]["id"])
    assert "SUCCEEDED" in watched_job.stderr


def test_every_group_has_its_actions(
    served: tuple[Served, dict[str, Path]], tmp_path: Path
) -> None:
    service, files = served
    recycle = Recycle(service, tmp_path)
    recycle.json("models", "create", "groups")
    recycle("versions", "register", "groups", str(files["v1"]))
    updated = recycle.json(
        "versions",
        "update",
        "groups",
        "1",
        "--tag",
        "owner=ml",
        "--add-alias",
        "production",
        "--description",
        "base",
    )
    assert updated["tags"] == {"owner": "ml"} and updated["aliases"] == ["production"]
    assert recycle.json("versions", "get", "groups", "--alias", "production")["version"] == 1
    assert recycle.json("versions", "list", "groups")["total"] == 1
    assert "groups" in recycle("models", "list").stdout
    assert recycle.json("models", "get", "groups")["aliases"] == {"production": 1}

    recycle(
        "tasks",
        "create",
        "groups-task",
        str(files["task"]),
        "--labels",
        ",".join(adapter_labels(files["adapter"])),
    )
    assert recycle.json("tasks", "get", "groups-task")["splits"]["train"]["examples"] > 0
    adapter = recycle.json(
        "adapters",
        "register",
        str(files["adapter"]),
        "--model",
        "groups",
        "--version",
        "1",
        "--task",
        "groups-task",
    )
    renamed = recycle.json(
        "adapters", "update", adapter["id"], "--name", "renamed", "--add-alias", "candidate"
    )
    assert renamed["name"] == "renamed" and renamed["aliases"] == ["candidate"]
    assert (
        recycle.json("adapters", "list", "--model", "groups", "--alias", "candidate")["total"] == 1
    )

    job = recycle.json(
        "adapters",
        "train",
        "--model",
        "groups",
        "--version",
        "1",
        "--task",
        "groups-task",
        "--steps",
        "400",
        "--eval-every",
        "50",
    )
    assert recycle.json("jobs", "get", job["id"])["kind"] == "train"
    cancelled = recycle.json("jobs", "cancel", job["id"])
    assert cancelled["status"] in {"CANCELLED", "RUNNING"}
    recycle("jobs", "watch", job["id"], code=1)  # it ends CANCELLED: not a success
    retried = recycle.json("jobs", "retry", job["id"])
    assert retried["status"] == "QUEUED" and retried["id"] == job["id"]
    recycle("jobs", "cancel", job["id"])
    submitted = recycle.json(
        "jobs",
        "submit",
        "similarity",
        "--params",
        json.dumps({"old_adapter_id": adapter["id"], "new_adapter_id": adapter["id"], "probes": 4}),
    )
    assert submitted["kind"] == "similarity"
    assert recycle.json("reports", "list")["total"] >= 0

    hook = recycle.json(
        "webhooks", "create", "https://ci.example/hook", "--event", "campaign.completed"
    )
    assert (
        hook["secret"]
        and recycle.json("webhooks", "get", str(hook["id"]))["url"] == "https://ci.example/hook"
    )
    assert recycle.json("webhooks", "list")["total"] >= 1
    assert recycle.json("webhooks", "deliveries", str(hook["id"]))["total"] == 0
    recycle("webhooks", "delete", str(hook["id"]))

    created = recycle.json("keys", "create", "--name", "ci", "--role", "platform")
    assert created["role"] == "platform" and created["secret"].startswith("rk_")
    assert (
        recycle.json("keys", "whoami", env={"RECYCLE_API_KEY": created["secret"]})["role"]
        == "platform"
    )
    assert any(key["name"] == "ci" for key in recycle.json("keys", "list")["items"])
    recycle("keys", "revoke", str(created["id"]))

    overview = recycle.json("admin", "overview")
    assert overview["counts"]["models"] >= 1 and {q["name"] for q in overview["queues"]} == {
        "gpu",
        "cpu",
    }
    assert "registry" in recycle("admin", "overview").stdout
    assert recycle.json("admin", "health")["readyz"]["status"] == "ready"
    assert "recycle_jobs{" in recycle("admin", "metrics").stdout

    recycle("adapters", "delete", adapter["id"])
    recycle("versions", "delete", "groups", "1")
    recycle("tasks", "delete", "groups-task")
    recycle("models", "delete", "groups")


def test_errors_are_one_line_and_exit_2(
    served: tuple[Served, dict[str, Path]], tmp_path: Path
) -> None:
    service, _files = served
    recycle = Recycle(service, tmp_path)
    missing = recycle("models", "get", "no-such-model", code=2)
    assert "ModelNotFound" in missing.stderr or "NotFound" in missing.stderr
    refused = recycle("models", "list", code=2, env={"RECYCLE_API_KEY": "rk_0_nope"})
    assert "401" in refused.stderr
    unreachable = recycle("models", "list", code=2, env={"RECYCLE_URL": "http://127.0.0.1:9"})
    assert "ConnectionFailed" in unreachable.stderr


def test_keys_create_offline_bootstraps_the_database(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECYCLE_")}
    env["RECYCLE_DATA_DIR"] = str(tmp_path / "offline")
    for command in (["keys", "create"], ["keys", "bootstrap"]):
        result = subprocess.run(
            [*_recycle_command(), *command, "--name", "ops", "--role", "admin"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().startswith("rk_")
    assert (tmp_path / "offline" / "registry.sqlite").is_file()


@pytest.mark.parametrize(
    "group",
    [
        "models",
        "versions",
        "tasks",
        "adapters",
        "jobs",
        "campaigns",
        "reports",
        "keys",
        "policy",
        "webhooks",
        "admin",
    ],
)
def test_help_everywhere_has_an_example(group: str) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    runner = CliRunner()
    result = runner.invoke(app, [group, "--help"])
    assert result.exit_code == 0 and "Example" in result.output
    click_group = (
        __import__("typer.main", fromlist=["get_command"]).get_command(app).commands[group]
    )
    for name in click_group.commands:
        sub = runner.invoke(app, [group, name, "--help"])
        assert sub.exit_code == 0 and "Example" in sub.output, (group, name, sub.output)
