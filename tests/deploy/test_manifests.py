"""The deployment manifests are well-formed and consistent with the code they run: secrets
are created, never applied; every long-running container has a liveness probe; PostgreSQL
initialises in a subdirectory of its volume; migrations run once per release; the compose file
and the prometheus-adapter rules hold together. (Schemas: ``test_schemas``.)"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
SECRET_NAME = "headroom-secrets"


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def _pods(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    pods = []
    if "template" in spec:
        pods.append(spec["template"]["spec"])
    if doc["kind"] == "RayCluster":
        pods.append(spec["headGroupSpec"]["template"]["spec"])
        pods += [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    return pods


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    pods = _pods(doc)
    return [c for pod in pods for c in pod.get("initContainers", []) + pod.get("containers", [])]


def _example_secret_keys() -> set[str]:
    lines = (K8S / "secrets.example.env").read_text().splitlines()
    return {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}


def _version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def test_every_document_names_kind_version_and_namespace() -> None:
    docs = _documents()
    assert docs
    for name, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), name
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "headroom", (name, doc["metadata"])


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_env_references_point_at_defined_config_and_secrets() -> None:
    docs = _documents()
    config_maps = {d["metadata"]["name"]: d["data"] for _, d in docs if d["kind"] == "ConfigMap"}
    # The one Secret is created from generated values, with the example file's keys.
    secrets = {SECRET_NAME: _example_secret_keys()}
    for name, doc in docs:
        for container in _containers(doc):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets[ref["name"]], (name, ref)


def test_production_settings_are_all_provided() -> None:
    docs = _documents()
    provided = set(_example_secret_keys())
    for _, doc in docs:
        provided |= set(doc.get("data", {}))
    for variable in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS"):
        assert variable in provided, variable


def test_no_secret_is_applied_and_the_generator_makes_every_key() -> None:
    # `kubectl apply -k` must never carry placeholder secrets (nor reset real ones).
    assert not [d for _, d in _documents() if d["kind"] == "Secret"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if "secret" in r.lower()]
    done = subprocess.run(
        [sys.executable, str(DEPLOY / "make_secrets.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    generated = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert set(generated) == _example_secret_keys()
    assert len(generated["SECRET_KEY"]) >= 50
    password = generated["POSTGRES_PASSWORD"]
    assert generated["DATABASE_URL"] == (
        f"postgres://headroom:{password}@postgres.headroom.svc:5432/headroom"
    )
    again = subprocess.run(
        [sys.executable, str(DEPLOY / "make_secrets.py")], capture_output=True, text=True
    )
    assert again.stdout != done.stdout  # generated, not fixed


def test_every_long_running_container_has_a_liveness_probe() -> None:
    for name, doc in _documents():
        if doc["kind"] in ("Job", "CronJob"):
            continue
        for pod in _pods(doc):
            for container in pod.get("containers", []):
                assert "livenessProbe" in container, (name, container["name"])


def test_postgres_initialises_in_a_subdirectory_of_its_volume() -> None:
    postgres = next(d for _, d in _documents() if d["kind"] == "StatefulSet")
    (container,) = postgres["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = container["volumeMounts"]
    # initdb refuses a non-empty directory; a fresh volume's root holds lost+found.
    assert env["PGDATA"].startswith(mount["mountPath"].rstrip("/") + "/")
    assert env["PGDATA"] != mount["mountPath"]


def test_migrations_run_once_per_release_before_the_web_serves() -> None:
    version = _version()
    (job,) = [d for _, d in _documents() if d["kind"] == "Job"]
    # A Job's template is immutable: each release applies a Job of its own name.
    assert job["metadata"]["name"] == f"headroom-migrate-{version.replace('.', '-')}"
    assert "ttlSecondsAfterFinished" in job["spec"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert {i["name"]: i["newTag"] for i in kustomization["images"]} == {
        "headroom": version,
        "headroom-ray": version,
    }
    web = next(d for _, d in _documents() if d["metadata"]["name"] == "headroom-web")
    (wait,) = web["spec"]["template"]["spec"]["initContainers"]
    assert "migrate --check" in " ".join(wait["command"])


def test_web_probes_use_the_health_endpoints() -> None:
    from controlplane.health import LIVENESS_PATH, READINESS_PATH

    web = next(
        d
        for _, d in _documents()
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "headroom-web"
    )
    (container,) = web["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == READINESS_PATH
    assert container["livenessProbe"]["httpGet"]["path"] == LIVENESS_PATH
    # No Host or scheme header is needed: the probe's Host is the pod IP.
    assert "httpHeaders" not in container["readinessProbe"]["httpGet"]


@pytest.mark.parametrize(
    "module, attribute",
    [("controlplane.wsgi", "application"), ("workers.celery", "app")],
)
def test_commands_name_real_entry_points(module: str, attribute: str) -> None:
    commands = " ".join(
        " ".join(c.get("command", [])) for _, doc in _documents() for c in _containers(doc)
    )
    assert module.split(".")[0] in commands
    assert hasattr(importlib.import_module(module), attribute)


def test_beat_is_a_single_replica_that_never_overlaps() -> None:
    beat = next(d for _, d in _documents() if d["metadata"]["name"] == "headroom-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"


# -- compose ---------------------------------------------------------------------------------


def test_compose_runs_every_process_with_production_settings() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"web", "worker", "beat", "postgres", "redis", "prometheus", "migrate"} <= set(services)
    for name, service in services.items():
        for dependency in service.get("depends_on", {}) or {}:
            assert dependency in services, (name, dependency)
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), (name, source)
            else:
                assert source in compose["volumes"], (name, source)
    web_env = services["web"]["environment"]
    assert web_env["DEBUG"] == "false"
    # Secrets come from deploy/.env (make_secrets.py); nothing starts without them.
    for key in ("SECRET_KEY", "DATABASE_URL"):
        assert re.fullmatch(r"\$\{" + key + r":\?[^}]+\}", web_env[key]), key
    assert services["postgres"]["environment"]["PGDATA"].startswith("/var/lib/postgresql/data/")
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    targets = [
        t
        for job in prometheus["scrape_configs"]
        for c in job["static_configs"]
        for t in c["targets"]
    ]
    assert "simulator:9400" in targets
    assert "--port" in services["simulator"]["command"]
    port = services["simulator"]["command"][services["simulator"]["command"].index("--port") + 1]
    assert port == "9400"


# -- prometheus-adapter ------------------------------------------------------------------------

# The adapter's configuration structs (kubernetes-sigs/prometheus-adapter, pkg/config/config.go):
# the YAML keys each level may hold.
ADAPTER_CONFIG = {"rules", "resourceRules", "externalRules"}
ADAPTER_RULE = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery"}
ADAPTER_RESOURCES = {"template", "overrides", "namespaced"}
ADAPTER_GROUP_RESOURCE = {"group", "resource"}
ADAPTER_NAME = {"matches", "as"}


def test_prometheus_adapter_rules_serve_the_emitted_autoscalers_metric() -> None:
    from controlplane.emission.conf import DEFAULT_HPA_METRIC

    config = yaml.safe_load((DEPLOY / "prometheus-adapter" / "rules.yaml").read_text())
    assert set(config) <= ADAPTER_CONFIG
    served = set()
    for rule in config["rules"]:
        assert set(rule) <= ADAPTER_RULE and {"seriesQuery", "resources", "name"} <= set(rule)
        assert set(rule["resources"]) <= ADAPTER_RESOURCES
        for label, target in rule["resources"]["overrides"].items():
            assert set(target) <= ADAPTER_GROUP_RESOURCE and "resource" in target, label
        assert {"namespace", "pod"} <= set(rule["resources"]["overrides"])
        assert set(rule["name"]) <= ADAPTER_NAME
        re.compile(rule["name"]["matches"])
        series = rule["seriesQuery"].split("{", 1)[0]
        assert re.search(rule["name"]["matches"], series), rule["name"]
        # Go templates the adapter fills in; the query must use both.
        assert "<<.LabelMatchers>>" in rule["metricsQuery"]
        assert "<<.GroupBy>>" in rule["metricsQuery"]
        served.add(rule["name"]["as"])
    assert DEFAULT_HPA_METRIC in served
    in_flight = next(r for r in config["rules"] if r["name"]["as"] == DEFAULT_HPA_METRIC)
    assert "vllm:num_requests_running" in in_flight["metricsQuery"]
    assert "vllm:num_requests_waiting" in in_flight["metricsQuery"]


def test_the_vllm_scrape_job_labels_series_as_the_adapter_expects() -> None:
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "scrape-vllm.yaml").read_text())
    (job,) = scrape["scrape_configs"]
    targets = {r.get("target_label") for r in job["relabel_configs"]}
    assert {"namespace", "pod"} <= targets
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert any(r["regex"] == "headroom" for r in keep)
