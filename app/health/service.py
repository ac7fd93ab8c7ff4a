"""Readiness checks: a named list on the app that other parts extend (the broker check)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from fastapi import FastAPI

logger = logging.getLogger(__name__)

ReadinessProbe = Callable[[FastAPI], None]
"""Raises when the dependency it checks is not usable."""


@dataclass(frozen=True)
class ReadinessCheck:
    name: str
    probe: ReadinessProbe


def add_readiness_check(app: FastAPI, name: str, probe: ReadinessProbe) -> None:
    """Make ``/readyz`` also require ``probe(app)`` to pass (e.g. the Celery broker)."""
    checks: list[ReadinessCheck] = app.state.readiness_checks
    checks[:] = [check for check in checks if check.name != name]
    checks.append(ReadinessCheck(name, probe))


def check_database(app: FastAPI) -> None:
    with app.state.engine.connect() as connection:
        connection.execute(sa.text("SELECT 1"))


def check_artifact_store(app: FastAPI) -> None:
    app.state.artifact_store.check_writable()


DEFAULT_CHECKS = (
    ReadinessCheck("database", check_database),
    ReadinessCheck("artifact_store", check_artifact_store),
)


def run_readiness_checks(app: FastAPI) -> dict[str, str]:
    """``{name: "ok" | "<error>"}`` for every registered check."""
    results: dict[str, str] = {}
    for check in app.state.readiness_checks:
        try:
            check.probe(app)
            results[check.name] = "ok"
        except Exception as error:  # a probe reports any failure as "not ready"
            logger.warning("readiness check %s failed: %s", check.name, error)
            results[check.name] = f"{type(error).__name__}: {error}"[:300]
    return results
