"""Every operation of the API has a RecycleClient method and a ``recycle`` command, and the
client turns error answers into the exception of their status."""

from __future__ import annotations

import httpx
import pytest

from app.client import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RecycleClient,
    ServerError,
    ServiceUnavailableError,
)
from app.main import create_app
from app.settings import Settings

# (method, path) → (client method, recycle command)
OPERATIONS = {
    ("GET", "/healthz"): ("healthz", "admin health"),
    ("GET", "/readyz"): ("readyz", "admin health"),
    ("GET", "/metrics"): ("metrics_text", "admin metrics"),
    ("GET", "/v1/admin/overview"): ("admin_overview", "admin overview"),
    ("POST", "/v1/keys"): ("create_key", "keys create"),
    ("GET", "/v1/keys"): ("list_keys", "keys list"),
    ("GET", "/v1/keys/me"): ("whoami", "keys whoami"),
    ("DELETE", "/v1/keys/{key_id}"): ("revoke_key", "keys revoke"),
    ("POST", "/v1/models"): ("create_model", "models create"),
    ("GET", "/v1/models"): ("list_models", "models list"),
    ("GET", "/v1/models/{model}"): ("get_model", "models get"),
    ("DELETE", "/v1/models/{model}"): ("delete_model", "models delete"),
    ("POST", "/v1/models/{model}/versions"): ("register_version", "versions register"),
    ("GET", "/v1/models/{model}/versions"): ("list_versions", "versions list"),
    ("GET", "/v1/models/{model}/versions/{version}"): ("get_version", "versions get"),
    ("PATCH", "/v1/models/{model}/versions/{version}"): ("update_version", "versions update"),
    ("DELETE", "/v1/models/{model}/versions/{version}"): ("delete_version", "versions delete"),
    ("GET", "/v1/models/{model}/aliases/{alias}"): ("get_alias", "versions get"),
    ("GET", "/v1/models/{model}/policy"): ("get_policy", "policy get"),
    ("PUT", "/v1/models/{model}/policy"): ("put_policy", "policy set"),
    ("POST", "/v1/tasks"): ("create_task", "tasks create"),
    ("GET", "/v1/tasks"): ("list_tasks", "tasks list"),
    ("GET", "/v1/tasks/{task}"): ("get_task", "tasks get"),
    ("DELETE", "/v1/tasks/{task}"): ("delete_task", "tasks delete"),
    ("POST", "/v1/adapters"): ("register_adapter", "adapters register"),
    ("POST", "/v1/adapters/train"): ("train_adapter", "adapters train"),
    ("GET", "/v1/adapters"): ("list_adapters", "adapters list"),
    ("GET", "/v1/adapters/{adapter_id}"): ("get_adapter", "adapters get"),
    ("PATCH", "/v1/adapters/{adapter_id}"): ("update_adapter", "adapters update"),
    ("DELETE", "/v1/adapters/{adapter_id}"): ("delete_adapter", "adapters delete"),
    ("GET", "/v1/adapters/{adapter_id}/download"): ("download_adapter", "adapters download"),
    ("POST", "/v1/jobs"): ("submit_job", "jobs submit"),
    ("GET", "/v1/jobs"): ("list_jobs", "jobs list"),
    ("GET", "/v1/jobs/{job_id}"): ("get_job", "jobs get"),
    ("GET", "/v1/jobs/{job_id}/events"): ("job_events", "jobs watch"),
    ("POST", "/v1/jobs/{job_id}/cancel"): ("cancel_job", "jobs cancel"),
    ("POST", "/v1/jobs/{job_id}/retry"): ("retry_job", "jobs retry"),
    ("POST", "/v1/campaigns"): ("start_campaign", "campaigns start"),
    ("GET", "/v1/campaigns"): ("list_campaigns", "campaigns list"),
    ("GET", "/v1/campaigns/{campaign_id}"): ("get_campaign", "campaigns get"),
    ("GET", "/v1/reports"): ("list_reports", "reports list"),
    ("GET", "/v1/reports/{report_id}"): ("get_report", "reports get"),
    ("POST", "/v1/webhooks"): ("create_webhook", "webhooks create"),
    ("GET", "/v1/webhooks"): ("list_webhooks", "webhooks list"),
    ("GET", "/v1/webhooks/{webhook_id}"): ("get_webhook", "webhooks get"),
    ("DELETE", "/v1/webhooks/{webhook_id}"): ("delete_webhook", "webhooks delete"),
    ("GET", "/v1/webhooks/{webhook_id}/deliveries"): ("list_deliveries", "webhooks deliveries"),
}


def test_every_api_operation_has_a_client_method_and_a_command(tmp_path):  # type: ignore[no-untyped-def]
    import typer.main

    from app.cli import app as cli

    schema = create_app(Settings(data_dir=tmp_path)).openapi()
    operations = {
        (method.upper(), path) for path, item in schema["paths"].items() for method in item
    }
    assert operations == set(OPERATIONS), (
        f"not covered: {sorted(operations - set(OPERATIONS))}; gone: {sorted(set(OPERATIONS) - operations)}"
    )
    command = typer.main.get_command(cli)
    for client_method, words in OPERATIONS.values():
        assert callable(getattr(RecycleClient, client_method)), client_method
        group, name = words.split()
        assert name in command.commands[group].commands, words


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (409, ConflictError),
        (413, PayloadTooLargeError),
        (422, BadRequestError),
        (500, ServerError),
        (502, ServerError),
        (503, ServiceUnavailableError),
        (418, ApiError),
    ],
)
def test_errors_map_to_exceptions(status: int, error: type[ApiError]) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": "Code", "detail": "what happened"})

    client = RecycleClient("http://service")
    client._http = httpx.Client(base_url="http://service", transport=httpx.MockTransport(answer))
    with pytest.raises(error) as raised:
        client.get_job("x")
    assert type(raised.value) is error and raised.value.status == status
    assert raised.value.code == "Code" and raised.value.detail == "what happened"


def test_unreachable_service_is_an_api_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = RecycleClient("http://service")
    client._http = httpx.Client(base_url="http://service", transport=httpx.MockTransport(refuse))
    with pytest.raises(ConnectionFailedError) as raised:
        client.list_models()
    assert raised.value.status == 0
    with pytest.raises(ConnectionFailedError):
        list(client.job_events("x"))
