"""``recycle`` sub-commands for every API action, through :class:`app.client.RecycleClient`.

Groups: ``models``, ``versions``, ``tasks``, ``adapters``, ``jobs``, ``campaigns``, ``reports``,
``keys`` (list, revoke, whoami; ``create`` and ``bootstrap`` live in ``app.cli``), ``policy``,
``webhooks`` and ``admin``. Every command takes ``--url`` (``RECYCLE_URL``, default
``http://127.0.0.1:8000``) and ``--api-key`` (``RECYCLE_API_KEY``), prints a table by default and
JSON with ``--json``. Progress bars and messages go to stderr, so ``--json`` output stays clean.

Exit codes: 0 done; 1 a watched job or campaign ended other than SUCCEEDED; 2 the service
answered an error (its code and detail are printed) or could not be reached.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from app.client import TERMINAL_CAMPAIGN_STATES, ApiError, JsonDict, RecycleClient

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_NOT_SUCCEEDED = 1
EXIT_API_ERROR = 2

console = Console()
err_console = Console(stderr=True)

Url = Annotated[
    str,
    typer.Option("--url", envvar="RECYCLE_URL", help="Base URL of the service (RECYCLE_URL)."),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="RECYCLE_API_KEY",
        help="API key rk_… (RECYCLE_API_KEY).",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Limit = Annotated[int, typer.Option(min=1, max=500, help="Rows per page.")]
Offset = Annotated[int, typer.Option(min=0, help="Rows to skip.")]
Watch = Annotated[bool, typer.Option("--watch", help="Follow it with live progress until it ends.")]


def _group(help_text: str) -> typer.Typer:
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


models_app = _group("Registered models: list, create, get, delete.\n\nExample: recycle models list")
versions_app = _group(
    "Model versions: register (upload a directory), list, get, update tags and aliases, delete.\n\n"
    "Example: recycle versions register minilm ./v2 --parent 1"
)
tasks_app = _group(
    "Tasks (train/dev/test splits): create, list, get, delete.\n\nExample: recycle tasks create trec ./trec"
)
adapters_app = _group(
    "Adapters: register (upload a PEFT directory), train, list, get, update aliases, download, delete.\n\n"
    "Example: recycle adapters download 3f2a… ./out"
)
jobs_app = _group(
    "Jobs: submit, list, get, watch, cancel, retry.\n\nExample: recycle jobs watch 3f2a…"
)
campaigns_app = _group(
    "Upgrade campaigns: start, list, get, watch.\n\nExample: recycle campaigns watch 3f2a…"
)
reports_app = _group("Job reports: list, get.\n\nExample: recycle reports get 3f2a… --json")
policy_app = _group(
    "A model's recycling policy: get, set.\n\nExample: recycle policy set minilm --method init --step-budget 300"
)
webhooks_app = _group(
    "Webhooks: create, list, get, delete, deliveries.\n\nExample: recycle webhooks create https://ci.example/hook --event campaign.completed"
)
admin_app = _group(
    "Operators: overview (counts, queues, workers, failures), health, metrics.\n\nExample: recycle admin overview"
)


# --------------------------------------------------------------------------- plumbing


@contextmanager
def connect(url: str, api_key: str | None) -> Iterator[RecycleClient]:
    """A client for the command; API errors become a one-line message and exit code 2."""
    client = RecycleClient(url, api_key)
    try:
        yield client
    except ApiError as error:
        where = f" ({error.status})" if error.status else ""
        err_console.print(f"[red]{error.code}{where}:[/red] {error.detail}")
        raise typer.Exit(EXIT_API_ERROR) from error
    finally:
        client.close()


def emit(data: Any, as_json: bool, render: Callable[[Any], Any]) -> None:
    """JSON on stdout with ``--json``; else the rendered table."""
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
    else:
        console.print(render(data))


def _table(
    title: str | None, columns: list[str], rows: list[list[Any]], empty: str = "nothing yet"
) -> Any:
    if not rows:
        return f"[dim]{empty}[/dim]"
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("—" if value is None or value == "" else str(value) for value in row))
    return table


def _pairs(title: str | None, pairs: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column(overflow="fold")
    for key, value in pairs:
        table.add_row(key, "—" if value is None or value == "" else str(value))
    return table


def _short(identifier: Any) -> str:
    return str(identifier)[:8] if identifier else "—"


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _key_values(items: list[str] | None, option: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        result[key] = value
    return result


def _json_arg(value: str, option: str) -> Any:
    """A JSON value given inline or as ``@file.json``."""
    text = Path(value[1:]).read_text() if value.startswith("@") else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not valid JSON: {error}", param_hint=option) from error


def _status(value: str | None) -> str:
    colours = {
        "SUCCEEDED": "green",
        "READY": "green",
        "FAILED": "red",
        "RUNNING": "blue",
        "CANCELLED": "yellow",
        "PARTIAL": "yellow",
    }
    if not value:
        return "—"
    colour = colours.get(value)
    return f"[{colour}]{value}[/{colour}]" if colour else value


# --------------------------------------------------------------------------- renderers


def _models_table(page: JsonDict) -> Any:
    rows = [
        [
            m["name"],
            m.get("description"),
            m.get("latest_version"),
            ", ".join(f"{a}→v{v}" for a, v in m["aliases"].items()),
        ]
        for m in page["items"]
    ]
    return _table(
        f"models ({page['total']})",
        ["name", "description", "latest ready", "aliases"],
        rows,
        "no models",
    )


def _model_view(model: JsonDict) -> Any:
    return _pairs(
        f"model {model['name']}",
        [
            ("description", model.get("description")),
            ("latest ready", model.get("latest_version")),
            ("aliases", ", ".join(f"{a}→v{v}" for a, v in model["aliases"].items())),
            ("created", model["created_at"]),
        ],
    )


def _versions_table(page: JsonDict) -> Any:
    rows = [
        [
            f"v{v['version']}",
            _status(v["status"]),
            f"v{v['parent_version']}" if v.get("parent_version") else None,
            ", ".join(v["aliases"]),
            ", ".join(f"{k}={val}" for k, val in v["tags"].items()),
            (v.get("fingerprint") or "")[:12],
            v["created_at"],
        ]
        for v in page["items"]
    ]
    return _table(
        f"versions ({page['total']})",
        ["version", "status", "parent", "aliases", "tags", "fingerprint", "created"],
        rows,
        "no versions",
    )


def _version_view(v: JsonDict) -> Any:
    return _pairs(
        f"{v['model']} v{v['version']}",
        [
            ("id", v["id"]),
            (
                "status",
                _status(v["status"])
                + (f" ({v['status_message']})" if v.get("status_message") else ""),
            ),
            ("parent", f"v{v['parent_version']}" if v.get("parent_version") else None),
            ("aliases", ", ".join(v["aliases"])),
            ("tags", ", ".join(f"{k}={val}" for k, val in v["tags"].items())),
            ("model class", v.get("model_class")),
            ("fingerprint", v.get("fingerprint")),
            ("files", len(v.get("manifest") or {})),
            ("size bytes", v.get("size_bytes")),
            ("description", v.get("description")),
            ("created", v["created_at"]),
        ],
    )


def _tasks_table(page: JsonDict) -> Any:
    rows = [
        [
            t["name"],
            t["kind"],
            t["metric"],
            ", ".join(t.get("labels") or []),
            " ".join(f"{s}:{d['examples']}" for s, d in t["splits"].items()),
        ]
        for t in page["items"]
    ]
    return _table(
        f"tasks ({page['total']})",
        ["name", "kind", "metric", "labels", "examples"],
        rows,
        "no tasks",
    )


def _task_view(t: JsonDict) -> Any:
    return _pairs(
        f"task {t['name']}",
        [
            ("id", t["id"]),
            ("kind", t["kind"]),
            ("metric", t["metric"]),
            ("labels", ", ".join(t.get("labels") or [])),
            *[
                (f"{split} split", f"{d['examples']} examples, sha256 {d['sha256'][:12]}")
                for split, d in t["splits"].items()
            ],
            ("description", t.get("description")),
            ("created", t["created_at"]),
        ],
    )


def _adapter_score(a: JsonDict) -> str:
    test = (a.get("metrics") or {}).get("test") or {}
    value = test.get("accuracy", test.get("exact_match"))
    return _num(value)


def _adapters_table(page: JsonDict) -> Any:
    rows = [
        [
            a["id"],
            a.get("name"),
            f"{a['model']} v{a['model_version']}",
            a["task"],
            a["peft_type"],
            _status(a["status"]),
            ", ".join(a["aliases"]),
            f"{a['method']} ← {_short(a['recycled_from'])}"
            if a.get("recycled_from")
            else a.get("method"),
            _adapter_score(a),
        ]
        for a in page["items"]
    ]
    return _table(
        f"adapters ({page['total']})",
        ["id", "name", "model", "task", "type", "status", "aliases", "lineage", "test"],
        rows,
        "no adapters",
    )


def _adapter_view(a: JsonDict) -> Any:
    return _pairs(
        f"adapter {a['id']}",
        [
            ("name", a.get("name")),
            ("model", f"{a['model']} v{a['model_version']}"),
            ("task", a["task"]),
            ("type", a["peft_type"]),
            ("status", _status(a["status"])),
            ("aliases", ", ".join(a["aliases"])),
            ("recycled from", a.get("recycled_from")),
            ("method", a.get("method")),
            ("job", a.get("job_id")),
            ("lineage version", a.get("lineage_version")),
            ("target modules", ", ".join(a.get("target_modules") or [])),
            ("test", _adapter_score(a)),
            ("fingerprint", a.get("fingerprint")),
            ("size bytes", a.get("size_bytes")),
            ("created", a["created_at"]),
        ],
    )


def _progress_text(job: JsonDict) -> str:
    p = job.get("progress") or {}
    if p.get("total"):
        text = f"{p.get('step', 0)}/{p['total']}"
        metrics = p.get("metrics") or {}
        if "dev_metric" in metrics:
            text += f" dev={metrics['dev_metric']:.3f}"
        return text
    return "done" if job["status"] == "SUCCEEDED" else ""


def _job_role(job: JsonDict) -> str:
    key = job.get("campaign_key") or ""
    if key.startswith("recycle:"):
        return key.rsplit(":", 1)[-1]
    return str((job.get("params") or {}).get("method") or "")


def _jobs_table(page: JsonDict) -> Any:
    rows = [
        [
            j["id"],
            j["kind"],
            _job_role(j),
            _status(j["status"]),
            _progress_text(j),
            f"{j['attempts']}/{j['max_attempts']}",
            _short(j.get("campaign_id")),
            j["created_at"],
        ]
        for j in page["items"]
    ]
    return _table(
        f"jobs ({page['total']})",
        ["id", "kind", "method", "status", "progress", "attempts", "campaign", "created"],
        rows,
        "no jobs",
    )


def _job_view(j: JsonDict) -> Any:
    cost = j.get("cost") or {}
    pairs: list[tuple[str, Any]] = [
        ("kind", j["kind"]),
        (
            "status",
            _status(j["status"])
            + (
                " (cancel requested)"
                if j.get("cancel_requested") and j["status"] == "RUNNING"
                else ""
            ),
        ),
        ("progress", _progress_text(j)),
        ("queue", j["queue"]),
        ("attempts", f"{j['attempts']}/{j['max_attempts']}"),
        ("worker", j.get("worker")),
        ("campaign", j.get("campaign_id")),
        ("created", j["created_at"]),
        ("started", j.get("started_at")),
        ("finished", j.get("finished_at")),
        ("result adapter", j.get("result_adapter_id")),
        ("result report", j.get("result_report_id")),
        ("device seconds", _num(cost.get("device_seconds"))),
    ]
    if j.get("error_code"):
        pairs.append(("error", f"{j['error_code']}: {j.get('error_message') or ''}"))
    pairs += [
        (f"param {k}", json.dumps(v) if isinstance(v, (dict, list)) else v)
        for k, v in (j.get("params") or {}).items()
    ]
    return _pairs(f"job {j['id']}", pairs)


def _campaigns_table(page: JsonDict) -> Any:
    rows = []
    for c in page["items"]:
        totals = (c.get("summary") or {}).get("totals") or {}
        rows.append(
            [
                c["id"],
                c["model"],
                f"v{c['from_version']} → v{c['to_version']}",
                _status(c["status"]),
                f"{totals.get('done', 0)}/{totals.get('adapters', len(c['policy'].get('adapter_ids', [])))}",
                totals.get("promoted", 0),
                c["trigger"],
                c["created_at"],
            ]
        )
    return _table(
        f"campaigns ({page['total']})",
        ["id", "model", "upgrade", "status", "adapters done", "promoted", "trigger", "created"],
        rows,
        "no campaigns",
    )


def _campaign_summary(c: JsonDict) -> Any:
    rows = []
    for entry in ((c.get("summary") or {}).get("adapters") or {}).values():
        compat = entry.get("compatibility") or {}
        methods = entry.get("methods") or {}
        interp = entry.get("interpolation") or {}
        best = entry.get("best") or {}
        promotion = entry.get("promotion") or {}
        rows.append(
            [
                entry.get("task"),
                _short(entry["adapter_id"]),
                _num(compat.get("retention"), 3),
                entry.get("decision"),
                " ".join(
                    f"{m}={_num(v.get('test'), 3)}"
                    + (f"({_num(v.get('speedup'), 3)}x)" if v.get("speedup") else "")
                    for m, v in methods.items()
                ),
                f"{best.get('method')} {_num(best.get('test'), 3)}" if best else None,
                f"{promotion.get('alias')}→{_short(promotion.get('adapter_id'))}"
                if promotion
                else None,
                _num(interp.get("loss_barrier"), 3),
                entry.get("outcome"),
            ]
        )
    header = _pairs(
        f"campaign {c['id']}",
        [
            ("model", f"{c['model']} v{c['from_version']} → v{c['to_version']}"),
            ("status", _status(c["status"])),
            ("trigger", c["trigger"]),
            (
                "methods",
                ", ".join(c["policy"].get("methods", []))
                + (" + fresh" if c["policy"].get("fresh_baseline") else ""),
            ),
            ("jobs", len(c.get("jobs") or [])),
            ("started", c.get("started_at")),
            ("finished", c.get("finished_at")),
        ],
    )
    adapters = _table(
        "adapters",
        [
            "task",
            "adapter",
            "retention",
            "decision",
            "methods (test, speedup)",
            "best",
            "promoted",
            "barrier",
            "outcome",
        ],
        rows,
        "no adapters yet",
    )
    return Group(header, adapters)


def _reports_table(page: JsonDict) -> Any:
    rows = [
        [r["id"], r["kind"], _short(r.get("job_id")), r["schema_version"], r["created_at"]]
        for r in page["items"]
    ]
    return _table(
        f"reports ({page['total']})", ["id", "kind", "job", "schema", "created"], rows, "no reports"
    )


def _report_view(r: JsonDict) -> Any:
    doc = r["document"]
    metrics = doc.get("metrics") or {}
    pairs: list[tuple[str, Any]] = [
        ("kind", doc["kind"]),
        ("method", doc.get("method")),
        ("job", r.get("job_id")),
    ]
    for split in ("test", "dev"):
        score = metrics.get(split)
        if score:
            pairs.append(
                (
                    f"{split}",
                    " ".join(
                        f"{k}={_num(score.get(k))}"
                        for k in ("accuracy", "macro_f1", "exact_match", "loss")
                        if score.get(k) is not None
                    ),
                )
            )
    if metrics.get("compatibility"):
        c = metrics["compatibility"]
        pairs.append(
            (
                "compatibility",
                f"source={_num(c['source'])} direct={_num(c['direct'])} retention={_num(c['retention'])} negative flips={_num(c['negative_flip_rate'])}",
            )
        )
    if metrics.get("convergence"):
        c = metrics["convergence"]
        pairs.append(
            (
                "convergence",
                f"target={_num(c['target'])} ({c['target_source']}) steps to target={c.get('steps_to_target')} speedup={_num(c.get('speedup'))}",
            )
        )
    if metrics.get("interpolation"):
        i = metrics["interpolation"]
        pairs.append(
            (
                "interpolation",
                f"{i['mode']} mode, loss barrier={_num(i['loss_barrier'])} accuracy barrier={_num(i['accuracy_barrier'])} connected={i['connected']}",
            )
        )
    if metrics.get("similarity"):
        s = metrics["similarity"]
        pairs.append(
            (
                "similarity",
                f"mean={_num(s['mean'])} chance={_num(s['chance_level'])} ({len(s['matrix'])} layers)",
            )
        )
    cost = doc.get("cost") or {}
    pairs.append(
        (
            "cost",
            f"wall={_num(cost.get('wall_seconds'))}s device={_num(cost.get('device_seconds'))}s tokens={cost.get('tokens')}",
        )
    )
    return _pairs(f"report {r['id']}", pairs)


def _policy_view(p: JsonDict) -> Any:
    gates = p.get("gates") or {}
    return _pairs(
        f"policy of {p['model']}" + (" (defaults)" if p.get("is_default") else ""),
        [
            ("methods", ", ".join(p["methods"])),
            ("step budget", p["step_budget"]),
            ("few shot", p.get("few_shot")),
            ("fresh baseline", p["fresh_baseline"]),
            ("auto campaign", p["auto_campaign"]),
            ("direct min retention", gates.get("direct_min_retention")),
            ("recycled min metric", gates.get("recycled_min_metric")),
            ("must beat fresh", gates.get("must_beat_fresh")),
            ("training", ", ".join(f"{k}={v}" for k, v in (p.get("training") or {}).items())),
        ],
    )


def _keys_table(page: JsonDict) -> Any:
    rows = [
        [
            k["id"],
            k["name"],
            k["role"],
            k["prefix"],
            k["created_at"],
            k.get("last_used_at"),
            k.get("revoked_at"),
        ]
        for k in page["items"]
    ]
    return _table(
        f"API keys ({page['total']})",
        ["id", "name", "role", "prefix", "created", "last used", "revoked"],
        rows,
        "no keys",
    )


def _webhooks_table(page: JsonDict) -> Any:
    rows = [
        [w["id"], w["url"], ", ".join(w["events"]), w["active"], w["created_at"]]
        for w in page["items"]
    ]
    return _table(
        f"webhooks ({page['total']})",
        ["id", "url", "events", "active", "created"],
        rows,
        "no webhooks",
    )


def _deliveries_table(page: JsonDict) -> Any:
    rows = [
        [
            d["id"],
            d["event"],
            _status(d["status"]),
            d["attempts"],
            d.get("response_status"),
            d.get("last_error"),
            d["created_at"],
        ]
        for d in page["items"]
    ]
    return _table(
        f"deliveries ({page['total']})",
        ["id", "event", "status", "attempts", "HTTP", "last error", "created"],
        rows,
        "no deliveries",
    )


def _overview_view(o: JsonDict) -> Any:
    counts = o["counts"]
    registry = _pairs("registry", [(k, v) for k, v in counts.items()])
    jobs = _table(
        "jobs",
        ["kind", *o["jobs_by_status"].keys()],
        [
            [kind, *(states.get(s, 0) for s in o["jobs_by_status"])]
            for kind, states in o["jobs_by_kind"].items()
        ],
    )
    broker = o["broker"]
    queues = _table(
        f"queues (broker {broker['transport']}: {'ok' if broker['ok'] else 'DOWN ' + str(broker['error'])})",
        ["queue", "waiting in broker", "queued jobs", "running jobs"],
        [
            [
                q["name"],
                q["depth"] if q["depth"] is not None else "unknown",
                q["queued_jobs"],
                q["running_jobs"],
            ]
            for q in o["queues"]
        ],
    )
    workers = _table(
        "workers",
        ["worker", "state", "last heartbeat", "running"],
        [
            [
                w["name"],
                w["state"],
                w.get("last_heartbeat_at"),
                ", ".join(
                    f"{j['kind']} {_short(j['id'])} {_progress_text(j)}" for j in w["running"]
                ),
            ]
            for w in o["workers"]
        ],
        "no worker reported in the last hour",
    )
    failures = _table(
        "recent failures",
        ["job", "kind", "error", "finished"],
        [
            [
                f["id"],
                f["kind"],
                f"{f.get('error_code')}: {(f.get('error_message') or '')[:100]}",
                f.get("finished_at"),
            ]
            for f in o["recent_failures"]
        ],
        "no failed jobs",
    )
    return Group(registry, jobs, queues, workers, failures)


# --------------------------------------------------------------------------- live progress


def watch_job(client: RecycleClient, job_id: str) -> JsonDict:
    """A progress bar fed by the job's server-sent events (stderr); returns the final job."""
    job = client.get_job(job_id)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err_console,
    ) as bar:
        task = bar.add_task(f"job {_short(job_id)} {job['kind']}", total=None, info=job["status"])
        for snapshot in client.job_events(job_id):
            p = snapshot.get("progress") or {}
            metrics = p.get("metrics") or {}
            info = " ".join(
                [snapshot["status"], p.get("phase") or ""]
                + [f"{k}={v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float))]
            )
            total = p.get("total") or None
            completed = p.get("step") or 0
            if snapshot["status"] == "SUCCEEDED" and total is None:
                total, completed = 1, 1
            bar.update(task, completed=completed, total=total, info=info.strip())
    return client.get_job(job_id)


def _job_outcome(job: JsonDict) -> None:
    colour = "green" if job["status"] == "SUCCEEDED" else "red"
    line = f"job {job['id']}: [{colour}]{job['status']}[/{colour}]"
    if job.get("error_code"):
        line += f" {job['error_code']}: {job.get('error_message') or ''}"
    if job.get("result_adapter_id"):
        line += f"; adapter {job['result_adapter_id']}"
    if job.get("result_report_id"):
        line += f"; report {job['result_report_id']}"
    err_console.print(line)


def watch_campaign(
    client: RecycleClient, campaign_id: str, interval: float = 1.0, timeout: float | None = None
) -> JsonDict:
    """One bar for the adapters done and one per job, refreshed from the campaign (stderr)."""
    deadline = time.monotonic() + timeout if timeout else None
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err_console,
    ) as bar:
        campaign = client.get_campaign(campaign_id)
        overall = bar.add_task(
            f"campaign {_short(campaign_id)} v{campaign['from_version']}→v{campaign['to_version']}",
            total=None,
            info="",
        )
        job_tasks: dict[str, TaskID] = {}
        while True:
            totals = (campaign.get("summary") or {}).get("totals") or {}
            adapters = (
                totals.get("adapters") or len(campaign["policy"].get("adapter_ids", [])) or None
            )
            bar.update(
                overall,
                completed=totals.get("done", 0),
                total=adapters,
                info=f"{campaign['status']} promoted={totals.get('promoted', 0)} failed={totals.get('failed', 0)}",
            )
            for job in campaign.get("jobs") or []:
                role = _job_role(job)
                label = f"  {job['kind']}{' ' + role if role else ''} {_short(job['id'])}"
                p = job.get("progress") or {}
                total = p.get("total") or None
                completed = p.get("step") or 0
                if job["status"] == "SUCCEEDED":
                    total = total or 1
                    completed = total
                if job["id"] not in job_tasks:
                    job_tasks[job["id"]] = bar.add_task(label, total=total, info=job["status"])
                bar.update(
                    job_tasks[job["id"]], completed=completed, total=total, info=job["status"]
                )
            if campaign["status"] in TERMINAL_CAMPAIGN_STATES:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"campaign {campaign_id} still {campaign['status']} after {timeout:.0f} s"
                )
            time.sleep(interval)
            campaign = client.get_campaign(campaign_id)
    return campaign


# --------------------------------------------------------------------------- models


@models_app.command("list")
def models_list(
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List registered models.

    Example: recycle models list --json
    """
    with connect(url, api_key) as client:
        emit(client.list_models(limit, offset), as_json, _models_table)


@models_app.command("create")
def models_create(
    name: Annotated[str, typer.Argument(help="Model name (letters, digits, . _ -).")],
    description: Annotated[str | None, typer.Option(help="What this model family is.")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Register a model (a family whose versions upgrade one another).

    Example: recycle models create minilm --description "all-MiniLM-L6-v2 lineage"
    """
    with connect(url, api_key) as client:
        emit(client.create_model(name, description), as_json, _model_view)


@models_app.command("get")
def models_get(
    name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a model, its latest ready version and its aliases.

    Example: recycle models get minilm
    """
    with connect(url, api_key) as client:
        emit(client.get_model(name), as_json, _model_view)


@models_app.command("delete")
def models_delete(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Soft-delete a model (its versions and adapters stay readable by id).

    Example: recycle models delete old-model
    """
    with connect(url, api_key) as client:
        client.delete_model(name)
    err_console.print(f"deleted model {name}")


# --------------------------------------------------------------------------- versions


@versions_app.command("register")
def versions_register(
    model: Annotated[str, typer.Argument(help="Model name.")],
    directory: Annotated[
        Path | None,
        typer.Argument(exists=True, file_okay=False, help="Model directory to upload (HF format)."),
    ] = None,
    source_uri: Annotated[
        str | None,
        typer.Option(help="Instead of uploading: a path or fsspec URL the server can read."),
    ] = None,
    parent: Annotated[
        int | None,
        typer.Option(
            "--parent", min=1, help="The version this one upgrades (starts a campaign per policy)."
        ),
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE, repeatable.")] = None,
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Alias to point here, repeatable.")
    ] = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Register a new version of a model: upload a directory (or name a source URI).

    Example: recycle versions register minilm ./minilm-v2 --parent 1 --tag stage=cpt-2 --alias latest
    """
    if (directory is None) == (source_uri is None):
        raise typer.BadParameter("give a DIRECTORY or --source-uri (one of them)")
    with connect(url, api_key) as client:
        version = client.register_version(
            model,
            directory,
            source_uri=source_uri,
            parent_version=parent,
            tags=_key_values(tag, "--tag"),
            aliases=alias or None,
            description=description,
        )
        emit(version, as_json, _version_view)


@versions_app.command("list")
def versions_list(
    model: str,
    status: Annotated[str | None, typer.Option(help="PENDING, READY or FAILED.")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List the versions of a model.

    Example: recycle versions list minilm --status READY
    """
    with connect(url, api_key) as client:
        emit(client.list_versions(model, limit, offset, status=status), as_json, _versions_table)


@versions_app.command("get")
def versions_get(
    model: str,
    version: Annotated[int | None, typer.Argument(help="Version number (or use --alias).")] = None,
    alias: Annotated[
        str | None, typer.Option(help="Resolve an alias instead, e.g. production.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Show one version, by number or by alias.

    Example: recycle versions get minilm 2      recycle versions get minilm --alias latest
    """
    if (version is None) == (alias is None):
        raise typer.BadParameter("give a VERSION or --alias (one of them)")
    with connect(url, api_key) as client:
        row = (
            client.get_version(model, version)
            if version is not None
            else client.get_alias(model, str(alias))
        )
        emit(row, as_json, _version_view)


@versions_app.command("update")
def versions_update(
    model: str,
    version: int,
    description: Annotated[str | None, typer.Option(help="Replace the description.")] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="KEY=VALUE to set, repeatable.")
    ] = None,
    untag: Annotated[
        list[str] | None, typer.Option("--untag", help="Tag key to delete, repeatable.")
    ] = None,
    add_alias: Annotated[
        list[str] | None, typer.Option("--add-alias", help="Point this alias here (moves it).")
    ] = None,
    remove_alias: Annotated[
        list[str] | None, typer.Option("--remove-alias", help="Drop this alias from this version.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Change a version's description, tags or aliases.

    Example: recycle versions update minilm 2 --add-alias production --tag reviewed=yes
    """
    tags: dict[str, Any] = dict(_key_values(tag, "--tag"))
    tags.update({key: None for key in untag or []})
    with connect(url, api_key) as client:
        row = client.update_version(
            model,
            version,
            description=description,
            tags=tags or None,
            add_aliases=add_alias,
            remove_aliases=remove_alias,
        )
        emit(row, as_json, _version_view)


@versions_app.command("delete")
def versions_delete(
    model: str, version: int, url: Url = DEFAULT_URL, api_key: ApiKey = None
) -> None:
    """Soft-delete a version (its aliases are dropped).

    Example: recycle versions delete minilm 3
    """
    with connect(url, api_key) as client:
        client.delete_version(model, version)
    err_console.print(f"deleted {model} v{version}")


# --------------------------------------------------------------------------- tasks


@tasks_app.command("create")
def tasks_create(
    name: str,
    directory: Annotated[
        Path,
        typer.Argument(exists=True, file_okay=False, help="Holds train/dev/test .jsonl or .csv."),
    ],
    kind: Annotated[
        str | None, typer.Option(help="classification or generation (default: from the columns).")
    ] = None,
    labels: Annotated[str | None, typer.Option(help="Comma-separated labels in id order.")] = None,
    metric: Annotated[
        str | None, typer.Option(help="accuracy, macro_f1, exact_match or loss.")
    ] = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Create a task from a directory of train/dev/test splits.

    Example: recycle tasks create trec ./trec --labels ABBR,DESC,ENTY,HUM,LOC,NUM
    """
    label_list = [label.strip() for label in labels.split(",")] if labels else None
    with connect(url, api_key) as client:
        emit(
            client.create_task(
                name,
                directory,
                kind=kind,
                labels=label_list,
                metric=metric,
                description=description,
            ),
            as_json,
            _task_view,
        )


@tasks_app.command("list")
def tasks_list(
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List tasks.

    Example: recycle tasks list
    """
    with connect(url, api_key) as client:
        emit(client.list_tasks(limit, offset), as_json, _tasks_table)


@tasks_app.command("get")
def tasks_get(
    name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a task and its splits.

    Example: recycle tasks get trec --json
    """
    with connect(url, api_key) as client:
        emit(client.get_task(name), as_json, _task_view)


@tasks_app.command("delete")
def tasks_delete(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Soft-delete a task.

    Example: recycle tasks delete old-task
    """
    with connect(url, api_key) as client:
        client.delete_task(name)
    err_console.print(f"deleted task {name}")


# --------------------------------------------------------------------------- adapters


@adapters_app.command("register")
def adapters_register(
    model: Annotated[str, typer.Option(help="Model name.")],
    version: Annotated[int, typer.Option(min=1, help="Model version number.")],
    task: Annotated[str, typer.Option(help="Task name.")],
    directory: Annotated[
        Path | None,
        typer.Argument(
            exists=True, file_okay=False, help="PEFT directory (adapter_config.json + weights)."
        ),
    ] = None,
    source_uri: Annotated[
        str | None, typer.Option(help="Instead of uploading: a path or URL the server can read.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="A readable name.")] = None,
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Alias to point here, repeatable.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Register an adapter (a PEFT directory) for a model version and a task.

    Example: recycle adapters register ./lora --model minilm --version 1 --task trec --alias production
    """
    if (directory is None) == (source_uri is None):
        raise typer.BadParameter("give a DIRECTORY or --source-uri (one of them)")
    with connect(url, api_key) as client:
        emit(
            client.register_adapter(
                model,
                version,
                task,
                directory,
                source_uri=source_uri,
                name=name,
                aliases=alias or None,
            ),
            as_json,
            _adapter_view,
        )


@adapters_app.command("train")
def adapters_train(
    model: Annotated[str, typer.Option(help="Model name.")],
    version: Annotated[int, typer.Option(min=1, help="Model version number.")],
    task: Annotated[str, typer.Option(help="Task name.")],
    peft: Annotated[str, typer.Option(help="lora, ia3, prompt or full.")] = "lora",
    rank: Annotated[int, typer.Option(min=1, help="LoRA rank.")] = 8,
    steps: Annotated[int | None, typer.Option(min=1, help="Optimizer steps.")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate.")] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Examples per step.")] = None,
    eval_every: Annotated[
        int | None, typer.Option(min=1, help="Dev evaluation every N steps.")
    ] = None,
    few_shot: Annotated[
        int | None, typer.Option(min=1, help="Train on K examples per label.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Name of the produced adapter.")] = None,
    alias: Annotated[
        list[str] | None, typer.Option("--alias", help="Alias of the produced adapter.")
    ] = None,
    watch: Watch = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Train a fresh adapter on a model version for a task (a job).

    Example: recycle adapters train --model minilm --version 1 --task trec --steps 300 --lr 1e-3 --watch
    """
    training = {
        k: v
        for k, v in {
            "steps": steps,
            "learning_rate": lr,
            "batch_size": batch_size,
            "eval_every": eval_every,
        }.items()
        if v is not None
    }
    params: JsonDict = {
        "model": model,
        "version": version,
        "task": task,
        "adapter": {"peft": peft, "lora_rank": rank},
        "training": training,
        "aliases": alias or [],
    }
    if few_shot:
        params["few_shot"] = few_shot
    if name:
        params["name"] = name
    with connect(url, api_key) as client:
        job = client.train_adapter(params)
        _submitted(client, job, watch, as_json)


@adapters_app.command("list")
def adapters_list(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    version: Annotated[
        int | None, typer.Option(min=1, help="Only this version (with --model).")
    ] = None,
    task: Annotated[str | None, typer.Option(help="Only this task.")] = None,
    status: Annotated[str | None, typer.Option(help="PENDING, READY or FAILED.")] = None,
    alias: Annotated[str | None, typer.Option(help="Only adapters with this alias.")] = None,
    method: Annotated[str | None, typer.Option(help="Only adapters made by this method.")] = None,
    recycled_from: Annotated[
        str | None, typer.Option(help="Only adapters recycled from this one.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List adapters, filtered.

    Example: recycle adapters list --model minilm --version 2 --alias production
    """
    with connect(url, api_key) as client:
        page = client.list_adapters(
            model=model,
            version=version,
            task=task,
            status=status,
            alias=alias,
            method=method,
            recycled_from=recycled_from,
            limit=limit,
            offset=offset,
        )
        emit(page, as_json, _adapters_table)


@adapters_app.command("get")
def adapters_get(
    adapter_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show an adapter with its lineage and metrics.

    Example: recycle adapters get 3f2a…
    """
    with connect(url, api_key) as client:
        emit(client.get_adapter(adapter_id), as_json, _adapter_view)


@adapters_app.command("update")
def adapters_update(
    adapter_id: str,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    add_alias: Annotated[
        list[str] | None, typer.Option("--add-alias", help="Point this alias here (moves it).")
    ] = None,
    remove_alias: Annotated[
        list[str] | None, typer.Option("--remove-alias", help="Drop this alias.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Rename an adapter or move its aliases.

    Example: recycle adapters update 3f2a… --add-alias production
    """
    with connect(url, api_key) as client:
        emit(
            client.update_adapter(
                adapter_id, name=name, add_aliases=add_alias, remove_aliases=remove_alias
            ),
            as_json,
            _adapter_view,
        )


@adapters_app.command("download")
def adapters_download(
    adapter_id: str,
    destination: Annotated[Path, typer.Argument(file_okay=False, help="Directory to unpack into.")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Download an adapter in PEFT format; prints the directory to load with PeftModel.

    Example: recycle adapters download 3f2a… ./recycled && python -c "import peft; …"
    """
    with connect(url, api_key) as client:
        path = client.download_adapter(adapter_id, destination)
    typer.echo(str(path))


@adapters_app.command("delete")
def adapters_delete(adapter_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Soft-delete an adapter (its aliases are dropped).

    Example: recycle adapters delete 3f2a…
    """
    with connect(url, api_key) as client:
        client.delete_adapter(adapter_id)
    err_console.print(f"deleted adapter {adapter_id}")


# --------------------------------------------------------------------------- jobs


def _submitted(client: RecycleClient, job: JsonDict, watch: bool, as_json: bool) -> None:
    if not watch:
        emit(job, as_json, _job_view)
        return
    err_console.print(f"queued job {job['id']} ({job['kind']})")
    final = watch_job(client, job["id"])
    _job_outcome(final)
    if as_json:
        emit(final, True, _job_view)
    if final["status"] != "SUCCEEDED":
        raise typer.Exit(EXIT_NOT_SUCCEEDED)


@jobs_app.command("submit")
def jobs_submit(
    kind: Annotated[
        str, typer.Argument(help="train, compatibility, recycle, interpolation or similarity.")
    ],
    params: Annotated[
        str, typer.Option("--params", help="The job's parameters as JSON, or @file.json.")
    ],
    max_attempts: Annotated[
        int | None, typer.Option(min=1, max=20, help="Runs allowed (retries, lost workers).")
    ] = None,
    watch: Watch = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Submit a job of any kind (parameters as in POST /v1/jobs).

    Example: recycle jobs submit recycle --params '{"adapter_id": "3f2a…", "to_version_id": 2, "method": "init"}' --watch
    """
    with connect(url, api_key) as client:
        job = client.submit_job(kind, _json_arg(params, "--params"), max_attempts=max_attempts)
        _submitted(client, job, watch, as_json)


@jobs_app.command("list")
def jobs_list(
    status: Annotated[
        str | None, typer.Option(help="QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED.")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="Job kind.")] = None,
    campaign: Annotated[str | None, typer.Option(help="Only this campaign's jobs.")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List jobs, newest first.

    Example: recycle jobs list --status FAILED
    """
    with connect(url, api_key) as client:
        emit(
            client.list_jobs(
                status=status, kind=kind, campaign=campaign, limit=limit, offset=offset
            ),
            as_json,
            _jobs_table,
        )


@jobs_app.command("get")
def jobs_get(
    job_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a job: status, progress, parameters, result, error.

    Example: recycle jobs get 3f2a…
    """
    with connect(url, api_key) as client:
        emit(client.get_job(job_id), as_json, _job_view)


@jobs_app.command("watch")
def jobs_watch(
    job_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Follow a job with a live progress bar until it ends (exit 1 unless it SUCCEEDED).

    Example: recycle jobs watch 3f2a…
    """
    with connect(url, api_key) as client:
        final = watch_job(client, job_id)
    _job_outcome(final)
    if as_json:
        emit(final, True, _job_view)
    if final["status"] != "SUCCEEDED":
        raise typer.Exit(EXIT_NOT_SUCCEEDED)


@jobs_app.command("cancel")
def jobs_cancel(
    job_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Cancel a job: a QUEUED one at once, a RUNNING one at its next check.

    Example: recycle jobs cancel 3f2a…
    """
    with connect(url, api_key) as client:
        emit(client.cancel_job(job_id), as_json, _job_view)


@jobs_app.command("retry")
def jobs_retry(
    job_id: str,
    watch: Watch = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Run a FAILED or CANCELLED job again (same id and parameters; its campaign reopens).

    Example: recycle jobs retry 3f2a… --watch
    """
    with connect(url, api_key) as client:
        _submitted(client, client.retry_job(job_id), watch, as_json)


# --------------------------------------------------------------------------- campaigns


@campaigns_app.command("start")
def campaigns_start(
    model: Annotated[str, typer.Option(help="Model name.")],
    from_version: Annotated[
        int, typer.Option("--from", min=1, help="Version the adapters are on.")
    ],
    to_version: Annotated[int, typer.Option("--to", min=1, help="The upgraded version.")],
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method", help="direct, init, distill, init_distill (repeatable; default: policy)."
        ),
    ] = None,
    step_budget: Annotated[
        int | None, typer.Option(min=1, help="Training steps per method.")
    ] = None,
    few_shot: Annotated[
        int | None, typer.Option(min=1, help="Labelled examples per class.")
    ] = None,
    fresh: Annotated[
        bool | None, typer.Option("--fresh/--no-fresh", help="Also tune from scratch (baseline).")
    ] = None,
    adapter: Annotated[
        list[str] | None, typer.Option("--adapter", help="Only this adapter id (repeatable).")
    ] = None,
    watch: Watch = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Start a campaign by hand: recycle a version's adapters for its upgrade.

    Example: recycle campaigns start --model minilm --from 1 --to 2 --method init --method distill --watch
    """
    body: JsonDict = {"model": model, "from_version": from_version, "to_version": to_version}
    for key, value in {
        "methods": method or None,
        "step_budget": step_budget,
        "few_shot": few_shot,
        "fresh_baseline": fresh,
        "adapter_ids": adapter or None,
    }.items():
        if value is not None:
            body[key] = value
    with connect(url, api_key) as client:
        campaign = client.start_campaign(body)
        if not watch:
            emit(campaign, as_json, _campaign_summary)
            return
        err_console.print(f"started campaign {campaign['id']}")
        _finish_campaign_watch(client, campaign["id"], as_json)


def _finish_campaign_watch(
    client: RecycleClient, campaign_id: str, as_json: bool, timeout: float | None = None
) -> None:
    final = watch_campaign(client, campaign_id, timeout=timeout)
    emit(final, as_json, _campaign_summary)
    if final["status"] != "SUCCEEDED":
        raise typer.Exit(EXIT_NOT_SUCCEEDED)


@campaigns_app.command("list")
def campaigns_list(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    status: Annotated[
        str | None, typer.Option(help="PENDING, RUNNING, SUCCEEDED, PARTIAL, FAILED, CANCELLED.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List campaigns, newest first.

    Example: recycle campaigns list --model minilm
    """
    with connect(url, api_key) as client:
        emit(
            client.list_campaigns(model=model, status=status, limit=limit, offset=offset),
            as_json,
            _campaigns_table,
        )


@campaigns_app.command("get")
def campaigns_get(
    campaign_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a campaign: per adapter, compatibility, methods, promotion, barrier.

    Example: recycle campaigns get 3f2a…
    """
    with connect(url, api_key) as client:
        emit(client.get_campaign(campaign_id), as_json, _campaign_summary)


@campaigns_app.command("watch")
def campaigns_watch(
    campaign_id: str,
    timeout: Annotated[
        float | None, typer.Option(min=1, help="Give up after this many seconds.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Follow a campaign with live progress bars until it ends (exit 1 unless it SUCCEEDED).

    Example: recycle campaigns watch 3f2a…
    """
    with connect(url, api_key) as client:
        _finish_campaign_watch(client, campaign_id, as_json, timeout)


# --------------------------------------------------------------------------- reports


@reports_app.command("list")
def reports_list(
    job: Annotated[str | None, typer.Option(help="Only this job's reports.")] = None,
    kind: Annotated[
        str | None, typer.Option(help="train, compatibility, recycle, interpolation, similarity.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List reports.

    Example: recycle reports list --kind interpolation
    """
    with connect(url, api_key) as client:
        emit(
            client.list_reports(job=job, kind=kind, limit=limit, offset=offset),
            as_json,
            _reports_table,
        )


@reports_app.command("get")
def reports_get(
    report_id: str,
    out: Annotated[
        Path | None, typer.Option(dir_okay=False, help="Also write the JSON document here.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Show a report's metrics (--json: the whole versioned document).

    Example: recycle reports get 3f2a… --out report.json
    """
    with connect(url, api_key) as client:
        report = client.get_report(report_id)
    if out is not None:
        out.write_text(json.dumps(report["document"], indent=2))
    emit(report, as_json, _report_view)


# --------------------------------------------------------------------------- keys (API side)


def create_key_over_http(
    url: str, api_key: str | None, name: str, role: str, as_json: bool
) -> None:
    """``recycle keys create --url …``: an admin creates a key through the API."""
    with connect(url, api_key) as client:
        created = client.create_key(name, role)
    if as_json:
        emit(created, True, lambda c: c)
    else:
        err_console.print(
            f"created key {created['id']} ({created['role']}); the secret is shown once:"
        )
        typer.echo(created["secret"])


def register_key_commands(keys_app: typer.Typer) -> None:
    """Add list, revoke and whoami to the ``keys`` group of ``app.cli``."""

    @keys_app.command("list")
    def keys_list(
        include_revoked: Annotated[
            bool, typer.Option("--include-revoked", help="Also revoked keys.")
        ] = False,
        url: Url = DEFAULT_URL,
        api_key: ApiKey = None,
        as_json: AsJson = False,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> None:
        """List API keys (admin).

        Example: recycle keys list --include-revoked
        """
        with connect(url, api_key) as client:
            emit(
                client.list_keys(include_revoked=include_revoked, limit=limit, offset=offset),
                as_json,
                _keys_table,
            )

    @keys_app.command("revoke")
    def keys_revoke(key_id: int, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
        """Revoke an API key (admin; the last admin key cannot be revoked).

        Example: recycle keys revoke 4
        """
        with connect(url, api_key) as client:
            client.revoke_key(str(key_id))
        err_console.print(f"revoked key {key_id}")

    @keys_app.command("whoami")
    def keys_whoami(
        url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
    ) -> None:
        """Show which key you are using and its role.

        Example: RECYCLE_API_KEY=rk_… recycle keys whoami
        """
        with connect(url, api_key) as client:
            emit(
                client.whoami(),
                as_json,
                lambda p: _pairs(
                    "this key", [("id", p["key_id"]), ("name", p["name"]), ("role", p["role"])]
                ),
            )


# --------------------------------------------------------------------------- policy


@policy_app.command("get")
def policy_get(
    model: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a model's recycling policy (or the defaults).

    Example: recycle policy get minilm
    """
    with connect(url, api_key) as client:
        emit(client.get_policy(model), as_json, _policy_view)


@policy_app.command("set")
def policy_set(
    model: str,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", exists=True, dir_okay=False, help="The whole policy as JSON (PUT body)."
        ),
    ] = None,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method", help="Recycling method, repeatable: direct, init, distill, init_distill."
        ),
    ] = None,
    step_budget: Annotated[
        int | None, typer.Option(min=1, help="Training steps per method.")
    ] = None,
    few_shot: Annotated[
        int | None, typer.Option(min=1, help="Labelled examples per class (0: all).")
    ] = None,
    fresh: Annotated[
        bool | None, typer.Option("--fresh/--no-fresh", help="Tune from scratch as a baseline.")
    ] = None,
    auto: Annotated[
        bool | None,
        typer.Option("--auto/--no-auto", help="Start a campaign when an upgrade is registered."),
    ] = None,
    direct_min_retention: Annotated[
        str | None, typer.Option(help="Promote as is when retention ≥ this; 'none' never.")
    ] = None,
    recycled_min_metric: Annotated[
        float | None, typer.Option(help="The best recycled adapter must reach this.")
    ] = None,
    must_beat_fresh: Annotated[
        bool | None,
        typer.Option("--must-beat-fresh/--need-not-beat-fresh", help="Gate on the fresh baseline."),
    ] = None,
    training: Annotated[
        list[str] | None,
        typer.Option(
            "--training", help="TrainingConfig override KEY=VALUE (JSON values), repeatable."
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Set a model's policy: the given fields change, the others keep their current values.

    Example: recycle policy set minilm --method init --method distill --step-budget 300 --no-fresh --training learning_rate=0.001
    """
    with connect(url, api_key) as client:
        if file is not None:
            body = _json_arg(f"@{file}", "--file")
        else:
            current = client.get_policy(model)
            body = {
                k: current[k]
                for k in (
                    "methods",
                    "step_budget",
                    "few_shot",
                    "fresh_baseline",
                    "gates",
                    "training",
                    "auto_campaign",
                )
            }
            updates = {
                "methods": method or None,
                "step_budget": step_budget,
                "fresh_baseline": fresh,
                "auto_campaign": auto,
            }
            body.update({k: v for k, v in updates.items() if v is not None})
            if few_shot is not None:
                body["few_shot"] = few_shot or None
            gates = dict(body.get("gates") or {})
            if direct_min_retention is not None:
                gates["direct_min_retention"] = (
                    None
                    if direct_min_retention.lower() in ("none", "null", "never")
                    else float(direct_min_retention)
                )
            if recycled_min_metric is not None:
                gates["recycled_min_metric"] = recycled_min_metric
            if must_beat_fresh is not None:
                gates["must_beat_fresh"] = must_beat_fresh
            body["gates"] = gates
            overrides = dict(body.get("training") or {})
            for key, value in _key_values(training, "--training").items():
                try:
                    overrides[key] = json.loads(value)
                except json.JSONDecodeError:
                    overrides[key] = value
            body["training"] = overrides
        emit(client.put_policy(model, body), as_json, _policy_view)


# --------------------------------------------------------------------------- webhooks


@webhooks_app.command("create")
def webhooks_create(
    target: Annotated[
        str, typer.Argument(metavar="URL", help="http(s) URL that receives the events.")
    ],
    event: Annotated[
        list[str],
        typer.Option(
            "--event",
            help="job.completed, job.succeeded, job.failed, job.cancelled, campaign.completed, adapter.promoted or *.",
        ),
    ],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Subscribe a URL to events; prints the HMAC secret once.

    Example: recycle webhooks create https://ci.example/hook --event campaign.completed --event adapter.promoted
    """
    with connect(url, api_key) as client:
        created = client.create_webhook(target, event)
    emit(
        created,
        as_json,
        lambda w: _pairs(
            f"webhook {w['id']}",
            [
                ("url", w["url"]),
                ("events", ", ".join(w["events"])),
                ("secret (shown once)", w["secret"]),
            ],
        ),
    )


@webhooks_app.command("list")
def webhooks_list(
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List webhooks.

    Example: recycle webhooks list
    """
    with connect(url, api_key) as client:
        emit(client.list_webhooks(limit, offset), as_json, _webhooks_table)


@webhooks_app.command("get")
def webhooks_get(
    webhook_id: int, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Show a webhook.

    Example: recycle webhooks get 1
    """
    with connect(url, api_key) as client:
        emit(
            client.get_webhook(webhook_id),
            as_json,
            lambda w: _pairs(
                f"webhook {w['id']}",
                [
                    ("url", w["url"]),
                    ("events", ", ".join(w["events"])),
                    ("active", w["active"]),
                    ("created", w["created_at"]),
                ],
            ),
        )


@webhooks_app.command("delete")
def webhooks_delete(webhook_id: int, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete a webhook.

    Example: recycle webhooks delete 1
    """
    with connect(url, api_key) as client:
        client.delete_webhook(str(webhook_id))
    err_console.print(f"deleted webhook {webhook_id}")


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    webhook_id: int,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> None:
    """List a webhook's deliveries and their outcome.

    Example: recycle webhooks deliveries 1
    """
    with connect(url, api_key) as client:
        emit(client.list_deliveries(webhook_id, limit, offset), as_json, _deliveries_table)


# --------------------------------------------------------------------------- admin


@admin_app.command("overview")
def admin_overview(url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False) -> None:
    """Counts, jobs by kind and state, queue depth, workers and recent failures.

    Example: recycle admin overview
    """
    with connect(url, api_key) as client:
        emit(client.admin_overview(), as_json, _overview_view)


@admin_app.command("health")
def admin_health(url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Liveness and readiness (database, broker, artifact store); exit 2 when not ready.

    Example: recycle admin health --url http://api:8000
    """
    with connect(url, None) as client:
        live = client.healthz()
        ready = client.readyz()
    emit(
        {"healthz": live, "readyz": ready},
        as_json,
        lambda d: _pairs(
            "health", [("process", d["healthz"]["status"]), *d["readyz"]["checks"].items()]
        ),
    )


@admin_app.command("metrics")
def admin_metrics(url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Print the Prometheus exposition of /metrics.

    Example: recycle admin metrics | grep recycle_jobs
    """
    with connect(url, api_key) as client:
        typer.echo(client.metrics_text(), nl=False)


GROUPS: tuple[tuple[str, typer.Typer], ...] = (
    ("models", models_app),
    ("versions", versions_app),
    ("tasks", tasks_app),
    ("adapters", adapters_app),
    ("jobs", jobs_app),
    ("campaigns", campaigns_app),
    ("reports", reports_app),
    ("policy", policy_app),
    ("webhooks", webhooks_app),
    ("admin", admin_app),
)


def register_api_commands(app: typer.Typer, keys_app: typer.Typer) -> None:
    """Add the API groups to ``recycle`` and the API key commands to its ``keys`` group."""
    for name, group in GROUPS:
        app.add_typer(group, name=name)
    register_key_commands(keys_app)


__all__ = ["create_key_over_http", "register_api_commands", "watch_campaign", "watch_job"]
