"""The Grafana dashboard and provisioning: JSON parses, every query is valid PromQL (checked by promtool)
and uses only our metric names or recording rules, and the required views are there."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.deploy import DEPLOY, exposed_series_names, metric_names

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "radscreen.json"
PROVISIONING = DEPLOY / "grafana" / "provisioning"


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def queries() -> list[tuple[str, str]]:
    """``(panel title, expr)`` for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def recording_rules() -> set[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def test_every_query_uses_only_our_metrics() -> None:
    allowed = exposed_series_names() | recording_rules()
    used: set[str] = set()
    for title, expr in queries():
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= allowed, f"{title}: unknown metric(s) {sorted(names - allowed)}"
        used |= names
    # the dashboard covers the contract: every metric family appears at least once
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert {
        "radscreen_requests_total", "radscreen_request_latency_seconds", "radscreen_queue_depth",
        "radscreen_batch_size", "radscreen_referrals_total", "radscreen_outcomes_total", "radscreen_mutual_information",
        "radscreen_probability", "radscreen_queue_wait_seconds", "radscreen_inference_seconds",
    } <= families


def test_every_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:check_{i}", "expr": expr.replace("$__rate_interval", "5m")}
        for i, (_, expr) in enumerate(queries())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    command = [promtool, "check", "rules", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_required_panels_and_datasource_wiring() -> None:
    dash = dashboard()
    assert dash["uid"] == "radscreen-overview"
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for needle in (
        "throughput", "latency percentiles", "queue depth", "batch size", "deferred to a human by reason",
        "screening outcomes", "mutual information distribution", "probability distribution",
    ):
        assert needle in titles, f"no panel about {needle}"
    # the outcome panel colours: a referable finding is never green, only no_referable_dr is
    outcome_panel = next(p for p in dash["panels"]
                         if p["type"] != "row" and p["title"].lower().startswith("screening outcomes"))
    colours = {o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"]
               for o in outcome_panel["fieldConfig"]["overrides"]}
    assert colours == {"refer_referable_dr": "red", "grader_review_uncertain": "orange",
                       "retake_ungradable": "purple", "no_referable_dr": "green"}
    assert "radscreen_outcomes_total" in outcome_panel["targets"][0]["expr"]
    datasource = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text(encoding="utf-8"))
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["type"] == "prometheus"
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid, f"{panel['title']} points at another datasource"
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "radscreen.yml").read_text(encoding="utf-8"))
    # the folder compose mounts deploy/grafana/dashboards at
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
