"""``/dashboard``: the admin dashboard's pages and its static files.

The pages are Jinja2 templates: the layout, headings, landmarks and empty regions of each view.
Their scripts (``static/js``, ES modules, no third-party code) read the API key the login page
kept in ``sessionStorage``, call the JSON API with it (``Authorization: Bearer``), and draw the
tables and SVG plots; live progress comes from the jobs' server-sent events. The server never
puts data in the pages, so a page needs no key to load and every datum goes through the same
authorization as any API client. Everything is served from here: no asset from the internet,
and a Content-Security-Policy that allows only this origin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
STATIC_PATH = "/dashboard/static"
ASSET_VERSION = "1"
"""Appended to asset URLs; bump it when the scripts or styles change incompatibly."""

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}

templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(prefix="/dashboard", include_in_schema=False)


def _page(
    request: Request, template: str, *, page: str, section: str, title: str, **params: Any
) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        template,
        {
            "page": page,
            "section": section,
            "title": title,
            "params": {key: str(value) for key, value in params.items()},
            "static": STATIC_PATH,
            "asset_version": ASSET_VERSION,
        },
    )
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get("", response_class=HTMLResponse)
def overview_page(request: Request) -> HTMLResponse:
    return _page(request, "overview.html", page="overview", section="overview", title="Overview")


@router.get("/", response_class=HTMLResponse)
def overview_page_slash() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=308)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return _page(request, "login.html", page="login", section="login", title="Sign in")


@router.get("/models", response_class=HTMLResponse)
def models_page(request: Request) -> HTMLResponse:
    return _page(request, "models.html", page="models", section="models", title="Models")


@router.get("/models/{model}", response_class=HTMLResponse)
def model_page(request: Request, model: str) -> HTMLResponse:
    return _page(request, "model.html", page="model", section="models", title=model, model=model)


@router.get("/campaigns", response_class=HTMLResponse)
def campaigns_page(request: Request) -> HTMLResponse:
    return _page(
        request, "campaigns.html", page="campaigns", section="campaigns", title="Campaigns"
    )


@router.get("/campaigns/{campaign_id}", response_class=HTMLResponse)
def campaign_page(request: Request, campaign_id: str) -> HTMLResponse:
    return _page(
        request,
        "campaign.html",
        page="campaign",
        section="campaigns",
        title=f"Campaign {campaign_id[:8]}",
        campaign=campaign_id,
    )


@router.get("/campaigns/{campaign_id}/report", response_class=HTMLResponse)
def campaign_report_page(request: Request, campaign_id: str) -> HTMLResponse:
    return _page(
        request,
        "campaign_report.html",
        page="campaign-report",
        section="campaigns",
        title=f"Campaign {campaign_id[:8]} report",
        campaign=campaign_id,
    )


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request) -> HTMLResponse:
    return _page(request, "jobs.html", page="jobs", section="jobs", title="Jobs")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> HTMLResponse:
    return _page(
        request, "job.html", page="job", section="jobs", title=f"Job {job_id[:8]}", job=job_id
    )


@router.get("/reports/{report_id}", response_class=HTMLResponse)
def report_page(request: Request, report_id: str) -> HTMLResponse:
    return _page(
        request,
        "report.html",
        page="report",
        section="jobs",
        title=f"Report {report_id[:8]}",
        report=report_id,
    )


class _SecureStaticFiles:
    """The static files, with the dashboard's security headers on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def static_files() -> ASGIApp:
    """The ASGI app to mount at ``/dashboard/static``."""
    return _SecureStaticFiles(StaticFiles(directory=str(STATIC_DIR)))
