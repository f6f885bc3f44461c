"""A real Prometheus (Debian's binary) scrapes a real running service on 127.0.0.1 and loads our alert
rules: the service's metrics arrive with the labels of docs/contracts.md, the counters count the
requests we sent, and every rule group evaluates without error. Bounded in time; both processes stop."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.artifacts import build_e2e_artifact
from support.images import blank_png, fundus_png
from support.processes import free_port, running_process, wait_until_ready
from tests.helpers.deploy import DEPLOY, prometheus_tool
from tests.helpers.service_process import running_service

SCRAPE_INTERVAL_S = 1
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    """Path of the Prometheus server binary (Debian package `prometheus`); the test is skipped without it."""
    return prometheus_tool("prometheus")


@contextlib.contextmanager
def running_prometheus(binary: str, target: str, workdir: Path) -> Iterator[str]:
    """Prometheus on a free 127.0.0.1 port scraping ``target`` every second, with our alert rules."""
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", workdir / "alerts.yml")
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    config["global"].update(scrape_interval=f"{SCRAPE_INTERVAL_S}s", evaluation_interval=f"{SCRAPE_INTERVAL_S}s")
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "radscreen")
    job["scrape_interval"] = f"{SCRAPE_INTERVAL_S}s"
    job["static_configs"][0]["targets"] = [target]
    port = free_port()
    config["scrape_configs"] = [job]  # drop the self-scrape job of the compose setup
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    command = [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / "prometheus.log"
    with running_process(command, log_path, cwd=workdir) as proc:
        wait_until_ready(proc, f"{base}/-/ready", deadline_s=DEADLINE_S, log_path=log_path)
        yield base


def query(base: str, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5)
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def wait_for(base: str, promql: str, ready: Any) -> list[dict[str, Any]]:
    """Poll an instant query until ``ready(result)`` holds or the deadline passes."""
    deadline = time.monotonic() + DEADLINE_S
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = query(base, promql)
        if ready(result):
            return result
        time.sleep(0.5)
    raise AssertionError(f"{promql!r} not as expected within {DEADLINE_S} s; last result {result}")


def test_prometheus_scrapes_the_service_and_evaluates_our_rules(prometheus_binary: str, tmp_path: Path) -> None:
    model_dir = build_e2e_artifact(tmp_path / "artifact")
    with running_service(model_dir, tmp_path / "service.log") as service:
        images = [fundus_png(seed=0), fundus_png(seed=1), blank_png()]
        for i, png in enumerate(images):
            r = httpx.post(f"{service}/v1/predict", files={"image": (f"{i}.png", png, "image/png")}, timeout=60)
            assert r.status_code == 200, r.text
        assert httpx.post(f"{service}/v1/predict", files={"image": ("x.png", b"junk", "image/png")},
                          timeout=60).status_code == 415
        sha = httpx.get(f"{service}/v1/model", timeout=10).json()["model"]["sha256"]
        target = service.removeprefix("http://")
        workdir = tmp_path / "prometheus"
        workdir.mkdir()
        with running_prometheus(prometheus_binary, target, workdir) as prom:
            ok = wait_for(prom, 'radscreen_requests_total{status="200"}',
                          lambda res: sum(float(s["value"][1]) for s in res) >= 3)
            predict_ok = [s for s in ok if s["metric"]["endpoint"].endswith("/predict")]
            assert predict_ok and float(predict_ok[0]["value"][1]) == 3.0
            refused = query(prom, 'radscreen_requests_total{status="415"}')
            assert [float(s["value"][1]) for s in refused] == [1.0]
            assert float(query(prom, "sum(radscreen_mutual_information_count)")[0]["value"][1]) == 3.0
            assert float(query(prom, "sum(radscreen_predictions_total)")[0]["value"][1]) == 3.0
            info = query(prom, "radscreen_model_info")
            assert info and info[0]["metric"]["sha256"] == sha
            assert query(prom, 'up{job="radscreen"}')[0]["value"][1] == "1"

            # the alert rules loaded and their groups evaluate without errors against real data
            def rules_evaluated() -> list[dict[str, Any]]:
                groups = httpx.get(f"{prom}/api/v1/rules", timeout=5).json()["data"]["groups"]
                return [r for g in groups for r in g["rules"]]

            deadline = time.monotonic() + DEADLINE_S
            rules = rules_evaluated()
            while any(r.get("lastEvaluation", "").startswith("0001") for r in rules):
                assert time.monotonic() < deadline, "rules were never evaluated"
                time.sleep(0.5)
                rules = rules_evaluated()
            ours = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
            assert len(rules) == sum(len(g["rules"]) for g in ours["groups"])
            assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
            firing = {r["name"] for r in rules if r["type"] == "alerting" and r["state"] != "inactive"}
            assert "RadscreenDown" not in firing and "RadscreenHigh5xxRate" not in firing
