"""The admin dashboard in a real headless Chromium against a real ``recycle serve`` with real data.

Each page: loads without console errors, draws its plots (SVG elements with data), and is
saved as a screenshot. Live progress is observed while a job runs (no reload), and the admin's
cancel and retry buttons act on it; a reader key sees no such buttons and the API refuses it.
The same served stack checks that /metrics moved with the campaign and that logs are JSON lines
carrying request and job ids.
"""

from __future__ import annotations

import time

import pytest

from app.observability.metrics import parse_samples, sample
from tests.browser.conftest import Dashboard, Stack

# The first test also pays for the served stack and its tiny campaign (fixture setup).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _series(browser: Dashboard, plot: str) -> list[dict]:
    """The drawn series of a plot: name, number of points, length of the path data."""
    return browser.js(
        """
        const svg = document.querySelector(`svg[data-plot="${arguments[0]}"]`);
        if (!svg) return [];
        return [...svg.querySelectorAll("[data-series]")].map((e) => ({
          name: e.dataset.series, n: Number(e.dataset.n), d: (e.getAttribute("d") || "").length,
        }));
        """,
        plot,
    )


def _progress(browser: Dashboard, job_id: str) -> float:
    return float(
        browser.js(
            'const p = document.querySelector(`[data-job-progress="${arguments[0]}"] progress`); return p ? p.value : -1',
            job_id,
        )
    )


# --------------------------------------------------------------------------- sign-in


def test_login_refuses_a_bad_key_and_signs_in_with_a_good_one(
    stack: Stack, browser: Dashboard
) -> None:
    from selenium.webdriver.common.by import By

    browser.js("sessionStorage.clear()")
    browser.driver.get(stack.served.url + "/dashboard/jobs")
    browser.wait_for(
        "return location.pathname === '/dashboard/login'", 20, "the redirect to the login page"
    )
    assert "next=%2Fdashboard%2Fjobs" in browser.driver.current_url
    browser.wait_for("return document.body.dataset.ready === 'true'", 20, "the login page")
    assert browser.js("return document.activeElement.id") == "api-key"  # focus is on the field
    browser.screenshot("login")
    field = browser.driver.find_element(By.ID, "api-key")
    field.send_keys("rk_000000000000_not-a-real-key")
    browser.driver.find_element(By.ID, "login-submit").click()
    browser.wait_for(
        "return document.getElementById('login-message').classList.contains('error')",
        20,
        "the refusal",
    )
    assert "not valid" in browser.text("#login-message")
    assert [e for e in browser.console_errors() if "401" not in e] == []  # only the refused call
    field.clear()
    field.send_keys(stack.served.api_key)
    browser.driver.find_element(By.ID, "login-submit").click()
    browser.wait_for(
        "return location.pathname === '/dashboard/jobs' && document.body.dataset.ready === 'true'",
        20,
        "the page asked for",
    )
    assert (
        browser.text("#session-name") == "bootstrap-admin"
        and browser.text("#session-role") == "admin"
    )
    browser.assert_no_console_errors("after sign-in")


# --------------------------------------------------------------------------- pages


def test_overview(stack: Stack, browser: Dashboard) -> None:
    browser.open("/dashboard")
    counts = browser.js(
        "return [...document.querySelectorAll('#counts .stat')].map((s) => s.textContent)"
    )
    assert any(text.startswith("Models1") for text in counts), counts
    segments = browser.js(
        "return [...document.querySelectorAll('svg[data-plot=\"jobs-by-status\"] rect.segment')].map((r) => [r.dataset.status, Number(r.dataset.value)])"
    )
    statuses = dict(segments)
    assert statuses.get("SUCCEEDED", 0) >= 6 and statuses.get("FAILED") == 1, segments
    assert browser.js(
        "return [...document.querySelectorAll('[data-queue]')].map((r) => r.dataset.queue)"
    ) == ["gpu", "cpu"]
    assert "ok" in browser.text("#broker")
    assert browser.count("#workers tbody tr") >= 1
    failures = browser.text("#failures")
    assert (
        stack.data.failed_job["id"][:8] in failures
        and stack.data.failed_job["error_code"] in failures
    )
    browser.screenshot("overview")


def test_models_and_lineage(stack: Stack, browser: Dashboard) -> None:
    browser.open("/dashboard/models")
    assert "tiny-bert" in browser.text("#models")
    browser.screenshot("models")

    browser.open("/dashboard/models/tiny-bert")
    nodes = browser.js(
        "return [...document.querySelectorAll('svg[data-plot=\"lineage\"] [data-node]')].map((n) => n.dataset.node)"
    )
    assert sorted(nodes) == ["1", "2", "3"]
    edges = browser.js(
        "return [...document.querySelectorAll('svg[data-plot=\"lineage\"] path.edge')].map((e) => [e.dataset.from, e.dataset.to, e.getAttribute('d').length])"
    )
    assert [(a, b) for a, b, _ in edges] == [("1", "2")] and edges[0][2] > 10
    assert browser.count("[data-version]") == 3
    v2_adapters = browser.js(
        "return [...document.querySelectorAll('[data-version=\"2\"] [data-adapter]')].map((r) => r.textContent)"
    )
    assert len(v2_adapters) == 3 and any("production" in row for row in v2_adapters), v2_adapters
    assert any(
        "production" in row
        for row in browser.js(
            "return [...document.querySelectorAll('[data-version=\"1\"] [data-adapter]')].map((r) => r.textContent)"
        )
    )
    # Lineage nodes are links: keyboard users reach a version's adapters from the graph.
    browser.js('document.querySelector(\'svg[data-plot="lineage"] a[href="#version-2"]\').focus()')
    assert browser.js("return document.activeElement.getAttribute('href')") == "#version-2"
    browser.screenshot("model")


def test_campaign_pages(stack: Stack, browser: Dashboard) -> None:
    campaign = stack.data.campaign
    browser.open("/dashboard/campaigns")
    row = browser.text(f'[data-campaign="{campaign["id"]}"]')
    assert "SUCCEEDED" in row and "v1 → v2" in row and "1/1 adapters" in row
    browser.screenshot("campaigns")

    browser.open(f"/dashboard/campaigns/{campaign['id']}")
    assert browser.count("[data-job-row]") == len(campaign["jobs"])
    done = browser.js(
        "return [...document.querySelectorAll('[data-job-row] progress')].map((p) => p.value === p.max)"
    )
    assert done and all(done)
    assert "recycled" in browser.text("#campaign-adapters") and "production" in browser.text(
        "#campaign-adapters"
    )
    browser.screenshot("campaign")


def test_campaign_report_plots(stack: Stack, browser: Dashboard) -> None:
    browser.open(f"/dashboard/campaigns/{stack.data.campaign['id']}/report")
    browser.wait_for(
        "return document.querySelector('svg[data-plot=\"campaign-similarity\"]')",
        20,
        "the similarity heat map",
    )

    convergence = _series(browser, "campaign-convergence")
    names = {line["name"] for line in convergence}
    assert {"fresh (from scratch)"} <= names and len(convergence) == 3, convergence
    assert all(line["n"] > 1 and line["d"] > 10 for line in convergence)
    assert browser.count('svg[data-plot="campaign-convergence"] g.hline') == 1  # the target line

    for plot in ("campaign-interpolation-loss", "campaign-interpolation-metric"):
        [curve, chord] = _series(browser, plot)
        assert curve["n"] == 11 and curve["d"] > 10 and chord["n"] == 2, (plot, curve, chord)

    cells = browser.js(
        "return [...document.querySelectorAll('svg[data-plot=\"campaign-similarity\"] rect.cell')].map((c) => Number(c.dataset.value))"
    )
    matrix = stack.client.get_report(stack.data.reports["similarity"])["document"]["metrics"][
        "similarity"
    ]["matrix"]
    assert len(cells) == len(matrix) * len(matrix[0]) and all(
        0 <= value <= 1.0001 for value in cells
    )

    bars = browser.js(
        "return [...document.querySelectorAll('svg[data-plot=\"campaign-scores\"] rect.bar')].map((b) => Number(b.dataset.value))"
    )
    assert len(bars) == 5  # old model, new model as is, init, distill, fresh
    browser.screenshot("campaign-report")


@pytest.mark.parametrize(
    "kind", ["train", "compatibility", "recycle", "interpolation", "similarity"]
)
def test_report_page(stack: Stack, browser: Dashboard, kind: str) -> None:
    browser.open(f"/dashboard/reports/{stack.data.reports[kind]}")
    expected = {
        "train": ["convergence"],
        "compatibility": ["compatibility-scores"],
        "recycle": ["convergence", "train-loss"],
        "interpolation": ["interpolation-loss", "interpolation-metric"],
        "similarity": ["similarity"],
    }[kind]
    for plot in expected:
        series = _series(browser, plot)
        assert series and all(line["n"] > 0 for line in series), (plot, series)
    assert "How it ran" in browser.text("#report-body")
    browser.screenshot(f"report-{kind}")


# --------------------------------------------------------------------------- live progress, cancel, retry


def test_live_progress_then_cancel_and_retry(stack: Stack, browser: Dashboard) -> None:
    client = stack.client
    job = client.train_adapter(
        {
            "model": "tiny-bert",
            "version": 2,
            "task": "topics",
            "training": {"steps": 5000, "eval_every": 10, "learning_rate": 0.005, "max_length": 64},
            "name": "long-run",
        }
    )
    job_id = job["id"]
    try:
        browser.open("/dashboard/jobs")
        token = browser.js("return window.__dashboard.token")
        browser.wait_for(
            f"return Number(document.querySelector('[data-job-progress=\"{job_id}\"] progress')?.value) > 0",
            120,
            "the job to start",
        )
        first = _progress(browser, job_id)
        browser.wait_for(
            f"return Number(document.querySelector('[data-job-progress=\"{job_id}\"] progress')?.value) > {first}",
            60,
            "progress to move on the jobs page",
        )
        assert browser.js("return window.__dashboard.token") == token  # the same page: no reload
        browser.assert_no_console_errors("jobs page while a job runs")
        browser.screenshot("jobs")

        # The overview shows which worker runs it, with its live progress.
        browser.open("/dashboard")
        browser.wait_for(
            f"return document.querySelector('#workers [data-job-progress=\"{job_id}\"]')",
            30,
            "the worker running the job on the overview",
        )
        assert "busy" in browser.text("#workers")
        browser.screenshot("overview-busy")

        browser.open(f"/dashboard/jobs/{job_id}")
        token = browser.js("return window.__dashboard.token")
        first = _progress(browser, job_id)
        browser.wait_for(
            f"return Number(document.querySelector('[data-job-progress=\"{job_id}\"] progress')?.value) > {first}",
            60,
            "progress to move on the job page",
        )
        browser.wait_for(
            "return Number(document.querySelector("
            "'svg[data-plot=\"job-convergence\"] [data-series]')?.dataset.n) >= 4",
            240,
            "the live dev curve to have a few evaluations",
        )
        assert browser.js("return window.__dashboard.token") == token
        browser.assert_no_console_errors("job page while it runs")
        browser.screenshot("job-running")

        browser.js("document.querySelector('#job-actions [data-action=\"cancel\"]').click()")
        browser.wait_for(
            "return document.querySelector('#job-status')?.textContent.includes('CANCELLED')",
            60,
            "the job to be cancelled",
        )
        assert client.get_job(job_id)["status"] == "CANCELLED"
        browser.wait_for(
            "return document.querySelector('#job-actions [data-action=\"retry\"]')",
            10,
            "the retry button",
        )
        browser.js("document.querySelector('#job-actions [data-action=\"retry\"]').click()")
        browser.wait_for(
            "return /QUEUED|RUNNING/.test(document.querySelector('#job-status')?.textContent)",
            30,
            "the job to run again",
        )
        retried = client.get_job(job_id)
        assert (
            retried["status"] in {"QUEUED", "RUNNING"}
            and retried["progress"].get("retried_from")
            or retried["attempts"] >= 2
        )
        assert browser.js("return window.__dashboard.token") == token
        browser.assert_no_console_errors("job page after cancel and retry")
    finally:
        if client.get_job(job_id)["status"] in {"QUEUED", "RUNNING"}:
            client.cancel_job(job_id)
        client.wait_for_job(job_id, timeout=120)


def test_reader_sees_no_admin_buttons_and_is_refused(stack: Stack, browser: Dashboard) -> None:
    reader = stack.client.create_key("dashboard-reader", "reader")["secret"]
    failed = stack.data.failed_job["id"]
    try:
        browser.sign_in(reader)
        browser.open(f"/dashboard/jobs/{failed}")
        assert browser.text("#session-role") == "reader"
        assert browser.count("#job-actions button") == 0
        browser.open("/dashboard/jobs?status=FAILED")
        assert browser.count("[data-action]") == 0
        status = browser.driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch(`/v1/jobs/${arguments[0]}/retry`, {method: "POST", headers: {Authorization: `Bearer ${sessionStorage.getItem("recycle.apiKey")}`}})
              .then((r) => done(r.status));
            """,
            failed,
        )
        assert status == 403
        browser.console_errors()  # the refused call is logged by the browser
    finally:
        browser.sign_in(stack.served.api_key)
        browser.console_errors()


def test_keyboard_skip_link_and_focus_styles(stack: Stack, browser: Dashboard) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser.open("/dashboard/campaigns")
    browser.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    ActionChains(browser.driver).send_keys(Keys.TAB).perform()
    assert browser.js("return document.activeElement.className") == "skip-link"
    assert browser.js(
        "return document.activeElement.getBoundingClientRect().top >= 0"
    )  # visible on focus
    ActionChains(browser.driver).send_keys(Keys.ENTER).perform()
    browser.wait_for("return location.hash === '#main'", 5, "the skip link to move on")
    ActionChains(browser.driver).send_keys(Keys.TAB).perform()
    outline = browser.js(
        "const s = getComputedStyle(document.activeElement); return [document.activeElement.tagName, s.outlineStyle, s.outlineWidth]"
    )
    assert outline[0] == "A" and outline[1] != "none" and outline[2] != "0px", outline
    labels = browser.js(
        "return [...document.querySelectorAll('input, select')].every((e) => e.labels && e.labels.length > 0)"
    )
    assert labels


# --------------------------------------------------------------------------- metrics and logs


def test_metrics_moved_with_the_campaign(stack: Stack) -> None:
    before = parse_samples(stack.data.metrics_before)
    after = parse_samples(stack.client.metrics_text())
    for kind in ("compatibility", "recycle", "interpolation"):
        assert sample(after, "recycle_jobs_finished_total", kind=kind, status="SUCCEEDED") > sample(
            before, "recycle_jobs_finished_total", kind=kind, status="SUCCEEDED"
        ), kind
        assert sample(
            after, "recycle_job_duration_seconds_count", kind=kind, status="SUCCEEDED"
        ) > sample(before, "recycle_job_duration_seconds_count", kind=kind, status="SUCCEEDED"), (
            kind
        )
    assert sample(after, "recycle_job_wall_seconds_total", kind="recycle") > sample(
        before, "recycle_job_wall_seconds_total", kind="recycle"
    )
    assert sample(after, "recycle_job_device_seconds_total", kind="recycle") >= sample(
        before, "recycle_job_device_seconds_total", kind="recycle"
    )
    assert (
        sample(after, "recycle_campaigns_finished_total", outcome="SUCCEEDED")
        == sample(before, "recycle_campaigns_finished_total", outcome="SUCCEEDED") + 1
    )
    assert sample(after, "recycle_jobs_finished_total", kind="compatibility", status="FAILED") >= 1
    route = {"method": "GET", "route": "/v1/campaigns/{campaign_id}", "status": "200"}
    assert sample(after, "recycle_http_requests_total", **route) > sample(
        before, "recycle_http_requests_total", **route
    )
    assert (
        sample(after, "recycle_queue_depth", queue="gpu") >= 0
        and sample(after, "recycle_broker_up") == 1
    )


def test_logs_are_json_lines_with_request_and_job_ids(stack: Stack) -> None:
    import httpx

    response = httpx.get(
        f"{stack.served.url}/v1/models",
        headers={
            "Authorization": f"Bearer {stack.served.api_key}",
            "X-Request-ID": "browser-suite-1",
        },
    )
    assert response.headers["x-request-id"] == "browser-suite-1"
    deadline = time.monotonic() + 10
    while True:
        records = stack.served.log_records()
        mine = [r for r in records if r.get("request_id") == "browser-suite-1"]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert mine and mine[0]["logger"] == "app.access" and mine[0]["route"] == "/v1/models"
    train_job = stack.data.train_job["id"]
    assert any(r.get("job_id") == train_job for r in records), (
        "no worker log line carries the job id"
    )
    assert len(records) > 20  # the API and the worker both log JSON lines
