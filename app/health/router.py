"""``/healthz`` (the process answers) and ``/readyz`` (its dependencies answer)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.errors import error_body
from app.health.service import run_readiness_checks

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "a dependency is down"}})
def readyz(request: Request) -> JSONResponse:
    checks = run_readiness_checks(request.app)
    failed = sorted(name for name, result in checks.items() if result != "ok")
    if failed:
        return JSONResponse(
            error_body("NotReady", f"not ready: {', '.join(failed)}", checks=checks),
            status_code=503,
        )
    return JSONResponse({"status": "ready", "checks": checks})
