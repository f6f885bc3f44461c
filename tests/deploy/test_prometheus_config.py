"""Prometheus config and alert rules: promtool accepts them, the rule unit tests pass (alerts fire on the
synthetic series of deploy/prometheus/alerts_test.yml and stay silent otherwise), and the rules only use
our metric names."""

from __future__ import annotations

import subprocess

import yaml

from tests.helpers.deploy import DEPLOY, exposed_series_names, metric_names

PROM = DEPLOY / "prometheus"


def run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=PROM)


def test_promtool_check_config(promtool: str) -> None:
    result = run(promtool, "check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_check_rules(promtool: str) -> None:
    result = run(promtool, "check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_fire_as_specified(promtool: str) -> None:
    result = run(promtool, "test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_required_alerts_exist_and_use_our_metrics() -> None:
    rules = yaml.safe_load((PROM / "alerts.yml").read_text(encoding="utf-8"))
    all_rules = [r for g in rules["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in all_rules if "alert" in r}
    assert {
        "RadscreenDown", "RadscreenHighP99Latency", "RadscreenHigh5xxRate", "RadscreenHigh503Rate",
        "RadscreenOutcomeShareDrift", "RadscreenMutualInformationDrift", "RadscreenRetakeSpike",
        "RadscreenPrecisionGuardShareHigh",
    } <= alerts
    allowed = exposed_series_names() | {r["record"] for r in all_rules if "record" in r} | {"up"}
    for rule in all_rules:
        names = metric_names(rule["expr"])
        name = rule.get("alert") or rule.get("record")
        assert names <= allowed, f"{name}: unknown {sorted(names - allowed)}"
        if "alert" in rule:
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert rule["annotations"]["summary"]


def test_scrape_target_is_the_service_metrics_endpoint() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text(encoding="utf-8"))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "radscreen")
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == ["radscreen:8000"]  # the compose service name
    assert config["rule_files"] == ["alerts.yml"]
