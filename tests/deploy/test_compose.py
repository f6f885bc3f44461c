"""docker-compose.yml and the GPU override: they parse, every file they reference exists, the service has a
health check that Prometheus waits on, and the GPU override reserves an NVIDIA device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers.deploy import DEPLOY, ROOT

COMPOSE = ROOT / "docker-compose.yml"
GPU_OVERRIDE = DEPLOY / "docker-compose.gpu.yml"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


def bind_sources(service: dict[str, Any]) -> list[str]:
    """Host paths of the bind mounts of a service (short syntax ``host:container[:mode]``)."""
    sources = []
    for volume in service.get("volumes", []):
        host = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
        if host.startswith((".", "/")):
            sources.append(host)
    return sources


def test_compose_has_the_three_services_and_files_exist() -> None:
    compose = load(COMPOSE)
    services = compose["services"]
    assert set(services) == {"radscreen", "prometheus", "grafana"}
    for override in (compose, load(GPU_OVERRIDE)):  # override paths resolve against the root, like compose
        for name, service in override["services"].items():
            build = service.get("build")
            if build:
                assert (ROOT / build["context"]).is_dir(), f"{name}: build context missing"
                dockerfile = ROOT / build["context"] / build["dockerfile"]
                assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            for source in bind_sources(service):
                assert (ROOT / source).exists(), f"{name}: mounted path {source} does not exist"
    mounted = {s for svc in services.values() for s in bind_sources(svc)}
    assert "./deploy/prometheus/prometheus.yml" in mounted and "./deploy/prometheus/alerts.yml" in mounted
    assert "./deploy/grafana/provisioning" in mounted and "./deploy/grafana/dashboards" in mounted


def test_healthchecks_and_startup_order() -> None:
    services = load(COMPOSE)["services"]
    for name, service in services.items():
        assert "healthcheck" in service and service["healthcheck"]["test"], f"{name} has no healthcheck"
    probe = " ".join(services["radscreen"]["healthcheck"]["test"])
    assert "/readyz" in probe  # ready = artifact verified and backend warm, not merely alive
    assert services["prometheus"]["depends_on"]["radscreen"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_service_runs_the_cpu_image_by_default_with_env_from_settings() -> None:
    radscreen = load(COMPOSE)["services"]["radscreen"]
    assert radscreen["build"]["dockerfile"] == "deploy/Dockerfile.cpu"
    env = radscreen["environment"]
    assert all(key.startswith("RADSCREEN_") for key in env)
    expected = {"RADSCREEN_BACKEND", "RADSCREEN_DEVICE", "RADSCREEN_API_KEY", "RADSCREEN_CORS_ORIGINS"}
    assert expected <= set(env)


def test_environment_names_are_real_settings_fields() -> None:
    from service.settings import Settings

    fields = {f"RADSCREEN_{name.upper()}" for name in Settings.model_fields}
    for path in (COMPOSE, GPU_OVERRIDE):
        env = load(path)["services"]["radscreen"].get("environment", {})
        unknown = set(env) - fields
        assert not unknown, f"{path.name}: {sorted(unknown)} are not service settings"


def test_gpu_override_reserves_an_nvidia_gpu_and_uses_the_cuda_image() -> None:
    radscreen = load(GPU_OVERRIDE)["services"]["radscreen"]
    assert radscreen["build"]["dockerfile"] == "deploy/Dockerfile.gpu"
    devices = radscreen["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
