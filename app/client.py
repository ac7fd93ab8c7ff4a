"""Python client of the recycling service's HTTP API (httpx), used by the demo and the CLI.

Every method maps to one endpoint; responses come back as plain dicts (the OpenAPI document at
``/docs`` gives their schemas). Errors become :class:`ApiError` subclasses carrying the HTTP
status, the service's error code and its detail.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

JsonDict = dict[str, Any]
TERMINAL_JOB_STATES = {"SUCCEEDED", "FAILED", "CANCELLED"}
TERMINAL_CAMPAIGN_STATES = {"SUCCEEDED", "FAILED", "PARTIAL", "CANCELLED"}


class ApiError(Exception):
    """An error answer of the service: ``status``, ``code`` (e.g. ``NotFound``) and ``detail``."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class BadRequestError(ApiError):
    """400 or 422: the request was malformed or its content invalid."""


class AuthenticationError(ApiError):
    """401: no key, or an unknown or revoked one."""


class PermissionDeniedError(ApiError):
    """403: the key's role is too weak."""


class NotFoundError(ApiError):
    """404."""


class ConflictError(ApiError):
    """409: a duplicate, or a state that does not allow the action."""


class PayloadTooLargeError(ApiError):
    """413."""


class ServiceUnavailableError(ApiError):
    """503: a dependency (database, broker, artifact store) is down."""


class ServerError(ApiError):
    """500 and other 5xx answers: a fault of the service (its detail says what)."""


class ConnectionFailedError(ApiError):
    """The service could not be reached (``status`` 0): refused, timed out, DNS, TLS."""


_ERRORS_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: BadRequestError,
    503: ServiceUnavailableError,
}


def _error_class(status: int) -> type[ApiError]:
    if status in _ERRORS_BY_STATUS:
        return _ERRORS_BY_STATUS[status]
    if status >= 500:
        return ServerError
    if status >= 400:
        return BadRequestError if status in (405, 415) else ApiError
    return ApiError


def directory_archive(directory: str | Path) -> bytes:
    """A .tar.gz of a directory's files (regular files only, paths relative to it)."""
    root = Path(directory)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                archive.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return buffer.getvalue()


class RecycleClient:
    """A synchronous client; use as a context manager or call :meth:`close`."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> RecycleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ plumbing
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise ConnectionFailedError(0, "ConnectionFailed", f"{self.base_url}: {error}") from error
        if response.status_code >= 400:
            try:
                body = response.json()
                code, detail = str(body.get("error", "Error")), str(body.get("detail", ""))
            except (ValueError, AttributeError):
                code, detail = "Error", response.text[:500]
            raise _error_class(response.status_code)(response.status_code, code, detail)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        return None if response.status_code == 204 or not response.content else response.json()

    @staticmethod
    def _params(**values: Any) -> dict[str, Any]:
        return {k: v for k, v in values.items() if v is not None}

    @staticmethod
    def _upload_fields(directory: str | Path | None, source_uri: str | None) -> tuple[dict, dict]:
        if (directory is None) == (source_uri is None):
            raise ValueError("give exactly one of directory or source_uri")
        if directory is not None:
            return {"file": ("upload.tar.gz", directory_archive(directory), "application/gzip")}, {}
        return {}, {"source_uri": source_uri}

    # ------------------------------------------------------------------ health
    def healthz(self) -> JsonDict:
        return self._json("GET", "/healthz")

    def readyz(self) -> JsonDict:
        """The readiness checks; a 503 (a dependency down) raises ServiceUnavailableError."""
        return self._json("GET", "/readyz")

    def metrics_text(self) -> str:
        """The Prometheus exposition of ``/metrics``."""
        return self._request("GET", "/metrics").text

    def admin_overview(self) -> JsonDict:
        """Counts, queue depth per queue, workers and recent failures."""
        return self._json("GET", "/v1/admin/overview")

    # ------------------------------------------------------------------ models and versions
    def create_model(self, name: str, description: str | None = None) -> JsonDict:
        return self._json("POST", "/v1/models", json=self._params(name=name, description=description))

    def list_models(self, limit: int = 50, offset: int = 0) -> JsonDict:
        return self._json("GET", "/v1/models", params={"limit": limit, "offset": offset})

    def get_model(self, model: str) -> JsonDict:
        return self._json("GET", f"/v1/models/{model}")

    def delete_model(self, model: str) -> None:
        self._json("DELETE", f"/v1/models/{model}")

    def register_version(
        self,
        model: str,
        directory: str | Path | None = None,
        *,
        source_uri: str | None = None,
        parent_version: int | None = None,
        tags: dict[str, str] | None = None,
        aliases: list[str] | None = None,
        description: str | None = None,
    ) -> JsonDict:
        files, data = self._upload_fields(directory, source_uri)
        if parent_version is not None:
            data["parent_version"] = str(parent_version)
        if tags:
            data["tags"] = json.dumps(tags)
        if aliases:
            data["aliases"] = json.dumps(aliases)
        if description:
            data["description"] = description
        return self._json("POST", f"/v1/models/{model}/versions", files=files or None, data=data)

    def list_versions(
        self, model: str, limit: int = 50, offset: int = 0, *, status: str | None = None
    ) -> JsonDict:
        params = self._params(limit=limit, offset=offset, status=status)
        return self._json("GET", f"/v1/models/{model}/versions", params=params)

    def get_version(self, model: str, version: int) -> JsonDict:
        return self._json("GET", f"/v1/models/{model}/versions/{version}")

    def update_version(
        self,
        model: str,
        version: int,
        *,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        add_aliases: list[str] | None = None,
        remove_aliases: list[str] | None = None,
    ) -> JsonDict:
        body: JsonDict = self._params(description=description, tags=tags)
        body["aliases"] = {"add": add_aliases or [], "remove": remove_aliases or []}
        return self._json("PATCH", f"/v1/models/{model}/versions/{version}", json=body)

    def delete_version(self, model: str, version: int) -> None:
        self._json("DELETE", f"/v1/models/{model}/versions/{version}")

    def get_alias(self, model: str, alias: str) -> JsonDict:
        return self._json("GET", f"/v1/models/{model}/aliases/{alias}")

    def get_policy(self, model: str) -> JsonDict:
        return self._json("GET", f"/v1/models/{model}/policy")

    def put_policy(self, model: str, policy: JsonDict) -> JsonDict:
        return self._json("PUT", f"/v1/models/{model}/policy", json=policy)

    # ------------------------------------------------------------------ tasks
    def create_task(
        self,
        name: str,
        task_dir: str | Path,
        *,
        kind: str | None = None,
        labels: list[str] | None = None,
        metric: str | None = None,
        description: str | None = None,
    ) -> JsonDict:
        """Upload a task directory's train/dev/test files (.jsonl or .csv)."""
        directory = Path(task_dir)
        files = {}
        for split in ("train", "dev", "test"):
            matches = sorted(directory.glob(f"{split}.jsonl")) + sorted(directory.glob(f"{split}.csv"))
            if not matches:
                raise FileNotFoundError(f"{directory} has no {split}.jsonl or {split}.csv")
            files[split] = (matches[0].name, matches[0].read_bytes(), "application/octet-stream")
        data = self._params(
            name=name,
            kind=kind,
            labels=json.dumps(labels) if labels else None,
            metric=metric,
            description=description,
        )
        return self._json("POST", "/v1/tasks", files=files, data=data)

    def list_tasks(self, limit: int = 50, offset: int = 0) -> JsonDict:
        return self._json("GET", "/v1/tasks", params={"limit": limit, "offset": offset})

    def get_task(self, task: str) -> JsonDict:
        return self._json("GET", f"/v1/tasks/{task}")

    def delete_task(self, task: str) -> None:
        self._json("DELETE", f"/v1/tasks/{task}")

    # ------------------------------------------------------------------ adapters
    def register_adapter(
        self,
        model: str,
        version: int,
        task: str,
        directory: str | Path | None = None,
        *,
        source_uri: str | None = None,
        name: str | None = None,
        aliases: list[str] | None = None,
    ) -> JsonDict:
        files, data = self._upload_fields(directory, source_uri)
        data.update({"model": model, "version": str(version), "task": task})
        if name:
            data["name"] = name
        if aliases:
            data["aliases"] = json.dumps(aliases)
        return self._json("POST", "/v1/adapters", files=files or None, data=data)

    def list_adapters(self, **filters: Any) -> JsonDict:
        return self._json("GET", "/v1/adapters", params=self._params(**filters))

    def get_adapter(self, adapter_id: str) -> JsonDict:
        return self._json("GET", f"/v1/adapters/{adapter_id}")

    def update_adapter(
        self,
        adapter_id: str,
        *,
        name: str | None = None,
        add_aliases: list[str] | None = None,
        remove_aliases: list[str] | None = None,
    ) -> JsonDict:
        body: JsonDict = {"aliases": {"add": add_aliases or [], "remove": remove_aliases or []}}
        if name is not None:
            body["name"] = name
        return self._json("PATCH", f"/v1/adapters/{adapter_id}", json=body)

    def delete_adapter(self, adapter_id: str) -> None:
        self._json("DELETE", f"/v1/adapters/{adapter_id}")

    def download_adapter(self, adapter_id: str, destination: str | Path) -> Path:
        """Download an adapter into ``destination``; return the PEFT directory inside it."""
        response = self._request("GET", f"/v1/adapters/{adapter_id}/download")
        target = Path(destination)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as archive:
            archive.extractall(target, filter="data")
        configs = sorted(target.rglob("adapter_config.json"))
        return configs[0].parent if configs else target

    def train_adapter(self, params: JsonDict) -> JsonDict:
        return self._json("POST", "/v1/adapters/train", json=params)

    # ------------------------------------------------------------------ jobs
    def submit_job(self, kind: str, params: JsonDict, *, max_attempts: int | None = None) -> JsonDict:
        body: JsonDict = {"kind": kind, "params": params}
        if max_attempts is not None:
            body["max_attempts"] = max_attempts
        return self._json("POST", "/v1/jobs", json=body)

    def list_jobs(self, **filters: Any) -> JsonDict:
        return self._json("GET", "/v1/jobs", params=self._params(**filters))

    def get_job(self, job_id: str) -> JsonDict:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def cancel_job(self, job_id: str) -> JsonDict:
        return self._json("POST", f"/v1/jobs/{job_id}/cancel")

    def retry_job(self, job_id: str) -> JsonDict:
        """Queue a FAILED or CANCELLED job again (same id and parameters); 409 otherwise."""
        return self._json("POST", f"/v1/jobs/{job_id}/retry")

    def job_events(self, job_id: str, *, timeout: float = 3600.0) -> Iterator[JsonDict]:
        """Server-sent progress events of a job, until its final status event."""
        try:
            with self._http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response)
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        yield json.loads(line[5:].strip())
        except httpx.TransportError as error:
            raise ConnectionFailedError(0, "ConnectionFailed", f"{self.base_url}: {error}") from error

    def _raise_for(self, response: httpx.Response) -> None:
        try:
            body = response.json()
        except ValueError:
            body = {}
        raise _error_class(response.status_code)(
            response.status_code, str(body.get("error", "Error")), str(body.get("detail", ""))
        )

    def wait_for_job(self, job_id: str, *, timeout: float = 600.0, interval: float = 1.0) -> JsonDict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job["status"] in TERMINAL_JOB_STATES:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout:.0f} s")
            time.sleep(interval)

    # ------------------------------------------------------------------ campaigns
    def start_campaign(self, body: JsonDict) -> JsonDict:
        return self._json("POST", "/v1/campaigns", json=body)

    def list_campaigns(self, **filters: Any) -> JsonDict:
        return self._json("GET", "/v1/campaigns", params=self._params(**filters))

    def get_campaign(self, campaign_id: str) -> JsonDict:
        return self._json("GET", f"/v1/campaigns/{campaign_id}")

    def wait_for_campaign(self, campaign_id: str, *, timeout: float = 900.0, interval: float = 1.0) -> JsonDict:
        deadline = time.monotonic() + timeout
        while True:
            campaign = self.get_campaign(campaign_id)
            if campaign["status"] in TERMINAL_CAMPAIGN_STATES:
                return campaign
            if time.monotonic() > deadline:
                raise TimeoutError(f"campaign {campaign_id} still {campaign['status']} after {timeout:.0f} s")
            time.sleep(interval)

    # ------------------------------------------------------------------ reports, keys, webhooks
    def get_report(self, report_id: str) -> JsonDict:
        return self._json("GET", f"/v1/reports/{report_id}")

    def list_reports(self, **filters: Any) -> JsonDict:
        return self._json("GET", "/v1/reports", params=self._params(**filters))

    def create_key(self, name: str, role: str) -> JsonDict:
        return self._json("POST", "/v1/keys", json={"name": name, "role": role})

    def list_keys(self, *, include_revoked: bool = False, limit: int = 50, offset: int = 0) -> JsonDict:
        params = {"include_revoked": str(include_revoked).lower(), "limit": limit, "offset": offset}
        return self._json("GET", "/v1/keys", params=params)

    def whoami(self) -> JsonDict:
        return self._json("GET", "/v1/keys/me")

    def revoke_key(self, key_id: str) -> None:
        self._json("DELETE", f"/v1/keys/{key_id}")

    def create_webhook(self, url: str, events: list[str]) -> JsonDict:
        return self._json("POST", "/v1/webhooks", json={"url": url, "events": events})

    def list_webhooks(self, limit: int = 50, offset: int = 0) -> JsonDict:
        return self._json("GET", "/v1/webhooks", params={"limit": limit, "offset": offset})

    def get_webhook(self, webhook_id: int) -> JsonDict:
        return self._json("GET", f"/v1/webhooks/{webhook_id}")

    def delete_webhook(self, webhook_id: str) -> None:
        self._json("DELETE", f"/v1/webhooks/{webhook_id}")

    def list_deliveries(self, webhook_id: int, limit: int = 50, offset: int = 0) -> JsonDict:
        params = {"limit": limit, "offset": offset}
        return self._json("GET", f"/v1/webhooks/{webhook_id}/deliveries", params=params)
