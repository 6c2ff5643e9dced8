"""Prometheus and Grafana of docker-compose's "monitoring" profile agree with the
servers and the prediction service: scrape targets, token, data source, and every
metric the dashboard uses."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests._servers import in_process
from tests.conftest import REPO

MONITORING = REPO / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "ftrl-ps.json"
LAYOUT = {"bits": 12, "group_size": 64, "num_shards": 1}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _servers(compose: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {name: svc["environment"] for name, svc in compose["services"].items()
            if svc.get("command") == ["python", "-m", "services.server"]}


def _serves(compose: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {name: svc["environment"] for name, svc in compose["services"].items()
            if svc.get("command") == ["python", "-m", "services.serve"]}


def _host_files(svc: dict[str, Any]) -> list[tuple[Path, str]]:
    out = []
    for vol in svc.get("volumes", []):
        source, target = vol.split(":")[:2]
        if source.startswith("./"):
            out.append((REPO / source[2:], target))
    return out


def exposed_metric_names() -> set[str]:
    """Every sample name a busy shard 0 exposes (with the checkpoint hook registered)."""
    with in_process(bits=12, group_size=64, num_workers=1, staleness=2) as c:
        wid = c.post("/v1/workers", json={"num_workers": 1, "layout": LAYOUT}).json()["worker_id"]
        c.post("/v1/push", json={"keys": [1], "delta_n": [1.0], "delta_z": [1.0]})
        c.post(f"/v1/workers/{wid}/clock", json={"stats": {"rows": 10, "loss_sum": 4.0}})
        c.app.state.ftrl.telemetry.gauge(  # type: ignore[attr-defined]
            "checkpoint_age_seconds", "as the checkpointer publishes it", lambda: 1.0)
        text = c.get("/metrics").text
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def serve_metric_names(tmp_path: Path) -> set[str]:
    """Every sample name a prediction service serving a model file exposes."""
    from fastapi.testclient import TestClient

    from ftrl_ps.core.ftrl import FTRL
    from ftrl_ps.core.modelio import save_model
    from ftrl_ps.ps.service import PredictionService, ServiceConfig
    from ftrl_ps.server.serve_app import create_serve_app

    model = save_model(tmp_path / "m.ftrl", FTRL(8))
    service = PredictionService(ServiceConfig(model=str(model)))
    with TestClient(create_serve_app(service)) as c:
        text = c.get("/metrics").text
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_monitoring_services_are_an_opt_in_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
        for path, _target in _host_files(services[name]):
            assert path.exists(), path
    for name, svc in services.items():
        if name not in ("prometheus", "grafana"):
            assert "profiles" not in svc, name  # the training cluster runs by default


def test_prometheus_scrapes_every_server_and_serve_with_the_token(
        compose: dict[str, Any]) -> None:
    prom = compose["services"]["prometheus"]
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"ftrl-ps", "ftrl-ps-serve"}
    servers, serves = _servers(compose), _serves(compose)
    assert serves, "no prediction service in docker-compose.yml"
    script = " ".join(prom["command"])
    for job, services, default_port in ((jobs["ftrl-ps"], servers, None),
                                        (jobs["ftrl-ps-serve"], serves, "8000")):
        targets = {t for sc in job["static_configs"] for t in sc["targets"]}
        assert targets == {f"{name}:{env.get('FTRL_PS_PORT', default_port)}"
                           for name, env in services.items()}
        assert job["metrics_path"] == "/metrics"
        creds = job["authorization"]["credentials_file"]
        assert f"> {creds}" in script and "$$FTRL_PS_TOKEN" in script
        # serve's /metrics takes its token (FTRL_PS_TOKEN), the servers' one
        assert {env["FTRL_PS_TOKEN"] for env in services.values()} == {
            prom["environment"]["FTRL_PS_TOKEN"]}
    assert "--config.file=/etc/prometheus/prometheus.yml" in shlex.split(script.replace(
        "&&", " "))
    mounted = {target: path for path, target in _host_files(prom)}
    assert mounted["/etc/prometheus/prometheus.yml"] == MONITORING / "prometheus.yml"


def test_shard_zero_knows_its_peers(compose: dict[str, Any]) -> None:
    servers = _servers(compose)
    others = sorted((env["FTRL_PS_SHARD_INDEX"], name, env["FTRL_PS_PORT"])
                    for name, env in servers.items() if env["FTRL_PS_SHARD_INDEX"] != "0")
    zero = next(env for env in servers.values() if env["FTRL_PS_SHARD_INDEX"] == "0")
    assert zero["FTRL_PS_PEERS"] == ",".join(f"http://{n}:{p}" for _, n, p in others)


def test_grafana_dashboard_uses_the_provisioned_source_and_real_metrics(
        tmp_path: Path) -> None:
    source = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "datasources"
                             / "prometheus.yml").read_text())["datasources"][0]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    provider = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "dashboards"
                               / "ftrl-ps.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dash = json.loads(DASHBOARD.read_text())
    exposed = exposed_metric_names() | serve_metric_names(tmp_path)
    used: set[str] = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
            used |= set(re.findall(r"\bftrl_ps_[a-z0-9_]+", target["expr"]))
    assert len(used) >= 15
    unknown = sorted(used - exposed)
    assert unknown == [], f"the dashboard queries metrics no server exposes: {unknown}"
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
