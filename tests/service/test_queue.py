"""The one Celery configuration, the worker's task names, and sending by name."""

from __future__ import annotations

from pathlib import Path

from app.queue import (
    DELIVER_WEBHOOK_TASK,
    RUN_JOB_TASK,
    CeleryDispatcher,
    backoff_delay,
    create_celery_app,
)
from app.settings import Settings


def test_celery_configuration(tmp_path: Path) -> None:
    embedded = create_celery_app(Settings(data_dir=tmp_path / "data"))
    conf = embedded.conf
    assert conf.broker_url == f"sqla+sqlite:///{tmp_path / 'data' / 'broker.sqlite'}"
    assert conf.task_acks_late is True and conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_serializer == "json" and list(conf.accept_content) == ["json"]
    assert conf.result_backend is None and conf.task_ignore_result is True
    assert sorted(queue.name for queue in conf.task_queues) == ["cpu", "gpu"]
    assert (
        conf.broker_transport_options == {}
    )  # the SQLAlchemy transport passes them to create_engine
    production = create_celery_app(
        Settings(data_dir=tmp_path / "data", broker_url="redis://redis:6379/0")
    )
    assert production.conf.broker_transport_options["socket_connect_timeout"] > 0


def test_worker_registers_the_stable_task_names() -> None:
    from workers.celery_app import celery_app

    assert RUN_JOB_TASK == "recycle.run_job" and DELIVER_WEBHOOK_TASK == "recycle.deliver_webhook"
    assert {RUN_JOB_TASK, DELIVER_WEBHOOK_TASK} <= set(celery_app.tasks)


def test_dispatcher_sends_by_name_to_the_job_queue(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    celery = create_celery_app(Settings(data_dir=tmp_path / "data"))
    sent: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    monkeypatch.setattr(celery, "send_task", lambda name, **kwargs: sent.append((name, kwargs)))
    dispatcher = CeleryDispatcher(celery)
    dispatcher.send_job("job-1", "gpu", countdown=3.0)
    dispatcher.send_webhook_delivery(7)
    assert sent[0] == (
        RUN_JOB_TASK,
        {"args": ["job-1"], "queue": "gpu", "routing_key": "gpu", "countdown": 3.0},
    )
    assert sent[1][0] == DELIVER_WEBHOOK_TASK and sent[1][1]["queue"] == "cpu"


def test_backoff_doubles_up_to_the_cap() -> None:
    assert 0.8 <= backoff_delay(1, 1.0, 10.0) <= 1.2
    assert 3.2 <= backoff_delay(3, 1.0, 10.0) <= 4.8
    assert 8.0 <= backoff_delay(9, 1.0, 10.0) <= 12.0
    assert backoff_delay(5, 0.0, 10.0) == 0.0
