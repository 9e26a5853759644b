"""The Helm chart, rendered by the real Helm for the default values and every file under
charts/lagtrace/ci/, checked against the Kubernetes schemas offline and against what a
platform team relies on: probes and resources everywhere, one privileged container,
immutable selectors, migrations before the app, a strict values schema, no secrets in
plain sight, and time limits that nest."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from services.settings import Settings
from tests.chart.conftest import (
    CHART,
    VALUE_SETS,
    Rendered,
    all_containers,
    long_running_containers,
    pod_spec,
    render,
    run_helm,
    value_set_id,
)

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a recent one.
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
# Kinds of CRDs (KEDA) that the Kubernetes schemas do not know: checked below against
# the fields of KEDA's own CRD that the chart uses.
CRD_KINDS = {"ScaledObject", "TriggerAuthentication"}
SELECTOR_KEYS = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}


@pytest.fixture(scope="module", params=VALUE_SETS, ids=value_set_id)
def rendered(request, helm) -> Rendered:
    return render(helm, request.param)


@pytest.mark.parametrize("values", VALUE_SETS, ids=value_set_id)
def test_lint_strict(helm, values):
    done = run_helm(helm, "lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_every_manifest_validates_against_the_kubernetes_schemas(rendered):
    kinds = set()
    for manifest in rendered.objects:
        if manifest["kind"] in CRD_KINDS:
            continue
        kinds.add(manifest["kind"])
        for version in KUBERNETES_VERSIONS:
            # strict: an unknown field (a typo, a field of a newer API) is an error.
            kubernetes_validate.validate(manifest, version, strict=True)
    assert {"Deployment", "Job", "ConfigMap", "ServiceAccount"} <= kinds


def test_the_offline_validator_rejects_what_the_api_server_would(helm):
    deployment = render(helm).one("Deployment", "-api")
    broken = json.loads(json.dumps(deployment))
    pod_spec(broken)["containers"][0]["livenesProbe"] = pod_spec(broken)["containers"][0].pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


KEDA_SCHEMA = {
    "ScaledObject": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["scaleTargetRef", "triggers"],
                "properties": {
                    "scaleTargetRef": {"type": "object", "required": ["name"]},
                    "minReplicaCount": {"type": "integer"},
                    "maxReplicaCount": {"type": "integer"},
                    "cooldownPeriod": {"type": "integer"},
                    "pollingInterval": {"type": "integer"},
                    "triggers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["type", "metadata"],
                            "properties": {
                                "type": {"type": "string"},
                                # KEDA's trigger metadata is map[string]string.
                                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                                "authenticationRef": {"type": "object", "required": ["name"]},
                            },
                        },
                    },
                },
            }
        },
    },
    "TriggerAuthentication": {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "secretTargetRef": {
                        "type": "array",
                        "items": {"type": "object", "required": ["parameter", "name", "key"]},
                    }
                },
            }
        },
    },
}


def test_workers_scale_on_the_celery_queue_with_keda(helm):
    trial = render(helm, CHART / "ci" / "trial-values.yaml")
    for kind in CRD_KINDS:
        for manifest in trial.of_kind(kind):
            jsonschema.validate(manifest, KEDA_SCHEMA[kind])
    scaled = trial.one("ScaledObject", "-worker")
    worker = trial.one("Deployment", "-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    # The autoscaler owns the replica count; a fixed one would fight it on every upgrade.
    assert "replicas" not in worker["spec"]
    trigger = scaled["spec"]["triggers"][0]
    # Celery's Redis transport keeps a queue's messages in a list named after the queue.
    from worker.app import QUEUE

    assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == QUEUE
    auth = trial.one("TriggerAuthentication", "-worker")["spec"]["secretTargetRef"][0]
    assert auth["name"] == trial.one("StatefulSet", "-redis")["metadata"]["name"]


def test_every_container_has_resources_and_every_long_running_one_probes(rendered):
    for workload in rendered.workloads():
        name = workload["metadata"]["name"]
        for container in all_containers(workload):
            resources = container.get("resources") or {}
            where = f"{name}/{container['name']}"
            assert resources.get("requests", {}).get("memory"), f"{where}: no memory request"
            assert resources.get("requests", {}).get("cpu"), f"{where}: no cpu request"
            assert resources.get("limits", {}).get("memory"), f"{where}: no memory limit"
        if workload["kind"] == "Job":
            continue  # a Job's pod runs to completion: nothing to probe
        for container in long_running_containers(workload):
            where = f"{name}/{container['name']}"
            assert "livenessProbe" in container, f"{where}: no liveness probe"
            assert "readinessProbe" in container, f"{where}: no readiness probe"


def test_containers_of_the_lagtrace_image_run_lagtrace_commands(rendered):
    # The image's entrypoint is `lagtrace`: args name one of its commands; anything else
    # (a shell, cp) must replace the entrypoint with `command`.
    from cli.main import cli

    for workload in rendered.workloads():
        for container in all_containers(workload):
            if not re.match(r"lagtrace[:@]", container["image"].split("/")[-1]) or "command" in container:
                continue
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert container.get("args"), f"{where}: no lagtrace command"
            assert container["args"][0] in cli.commands, f"{where}: `lagtrace {container['args'][0]}` is no command"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        for workload in rendered.workloads():
            for container in all_containers(workload):
                command = (container.get(probe) or {}).get("exec", {}).get("command", [])
                if command[:1] == ["lagtrace"]:
                    assert command[1] in cli.commands, f"{container['name']}: {command}"


def test_only_the_dind_engine_is_privileged_and_everything_else_is_locked_down(rendered):
    privileged = []
    for workload in rendered.workloads():
        pod = pod_spec(workload)
        for container in all_containers(workload):
            context = container.get("securityContext") or {}
            if context.get("privileged"):
                privileged.append(container["name"])
                assert container["image"].startswith("docker:") and container["image"].endswith("-dind")
                continue
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert context.get("runAsNonRoot") is True, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not context.get("capabilities", {}).get("add"), where
        assert pod.get("automountServiceAccountToken") is False
        assert not pod.get("hostNetwork") and not pod.get("hostPID")
    assert set(privileged) <= {"dind"}


def test_the_worker_has_a_dind_engine_by_default_and_none_with_an_external_one(helm):
    default = pod_spec(render(helm).one("Deployment", "-worker"))
    assert [c["name"] for c in default["initContainers"] if c.get("restartPolicy") == "Always"] == ["dind"]
    external = render(helm, CHART / "ci" / "external-engine-values.yaml")
    assert not any(
        (c.get("securityContext") or {}).get("privileged") for w in external.workloads() for c in all_containers(w)
    )


def _mounts(container: dict) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_worker_and_its_engine_see_checkouts_and_tools_at_the_same_paths(helm):
    """The docker executor bind-mounts the checkout, the run directory and py-spy at their
    paths in the worker; the engine resolves those paths in its own filesystem."""
    spec = pod_spec(render(helm).one("Deployment", "-worker"))
    worker = spec["containers"][0]
    dind = next(c for c in spec["initContainers"] if c["name"] == "dind")
    tools = next(c for c in spec["initContainers"] if c["name"] == "engine-tools")
    settings = Settings()  # the image's defaults are not what matters: the chart sets them
    env = _env(worker)
    config = render(helm).one("ConfigMap", "lagtrace")["data"]
    work_dir = config["LAGTRACE_WORK_DIR"]
    assert _mounts(worker)[work_dir] == _mounts(dind)[work_dir]
    assert env["TMPDIR"].startswith(work_dir + "/")  # run directories (tempfile.mkdtemp)
    socket_dir = env["DOCKER_HOST"].removeprefix("unix://").rsplit("/", 1)[0]
    assert _mounts(worker)[socket_dir] == _mounts(dind)[socket_dir]
    assert f"--host=unix://{socket_dir}/docker.sock" in dind["args"]
    # py-spy at the worker's path inside the engine (the image keeps it in /opt/lagtrace/tools).
    assert tools["command"][1] == "/opt/lagtrace/tools/py-spy"
    assert _mounts(dind)["/opt/lagtrace/tools"] == _mounts(tools)["/engine-tools"]
    # The socket's group is the worker's, so the non-root worker may use it.
    assert f"--group={worker['securityContext']['runAsGroup']}" in dind["args"]
    assert settings.worker_heartbeat_file is None  # unset outside the image and chart
    assert config["LAGTRACE_WORKER_HEARTBEAT_FILE"].startswith(work_dir + "/")


def test_selectors_use_only_labels_that_never_change(helm, tmp_path):
    def selectors(rendered: Rendered) -> dict[str, dict]:
        found = {}
        for o in rendered.objects:
            spec = o.get("spec") or {}
            if o["kind"] in ("Deployment", "StatefulSet", "PodDisruptionBudget"):
                found[f"{o['kind']}/{o['metadata']['name']}"] = spec["selector"]["matchLabels"]
            elif o["kind"] == "Service":
                found[f"Service/{o['metadata']['name']}"] = spec["selector"]
            elif o["kind"] == "NetworkPolicy":
                found[f"NetworkPolicy/{o['metadata']['name']}"] = spec["podSelector"]["matchLabels"]
        return found

    trial = CHART / "ci" / "trial-values.yaml"
    before = selectors(render(helm, trial))
    assert before
    for name, labels in before.items():
        assert set(labels) <= SELECTOR_KEYS, f"{name}: {labels}"
    # A new chart and app version, another image and pod labels: an upgrade whose
    # selectors changed would be refused by the API server (they are immutable).
    bumped = tmp_path / "lagtrace"
    shutil.copytree(CHART, bumped)
    chart_yaml = yaml.safe_load((bumped / "Chart.yaml").read_text())
    chart_yaml.update(version="9.9.9", appVersion="9.9.9")
    (bumped / "Chart.yaml").write_text(yaml.safe_dump(chart_yaml))
    after = selectors(
        render(
            helm,
            trial,
            "--set",
            "image.tag=other",
            "--set",
            "worker.podLabels.team=perf",
            "--set",
            "commonLabels.cost=ci",
            chart=bumped,
        )
    )
    assert after == before


def test_migrations_run_in_a_hook_before_the_app(helm):
    rendered = render(helm, CHART / "ci" / "production-values.yaml")
    job = rendered.one("Job", "-migrate")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert pod_spec(job)["containers"][0]["args"] == ["migrate"]
    # A pre-install hook runs before any of the release's ordinary resources exist: all it
    # uses must be a hook of lower weight, or exist already.
    hooks = {
        (o["kind"], o["metadata"]["name"]): int(o["metadata"]["annotations"].get("helm.sh/hook-weight", 0))
        for o in rendered.objects
        if "helm.sh/hook" in (o["metadata"].get("annotations") or {})
    }
    weight = int(annotations["helm.sh/hook-weight"])
    spec = pod_spec(job)
    assert spec["serviceAccountName"] == "default"
    for container in spec["containers"]:
        assert not container.get("envFrom")
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert hooks.get(("Secret", ref["name"]), weight) < weight, ref
    # Its copy of the database URL lives only while the hook runs.
    hook_secret = rendered.one("Secret", "-migrate")["metadata"]["annotations"]
    assert "hook-succeeded" in hook_secret["helm.sh/hook-delete-policy"]
    # The app itself is no hook: it is created only after the hooks succeeded.
    for workload in rendered.of_kind("Deployment"):
        assert "helm.sh/hook" not in (workload["metadata"].get("annotations") or {})


def test_with_an_in_chart_database_the_app_waits_for_the_migration(helm):
    rendered = render(helm, CHART / "ci" / "trial-values.yaml")
    job = rendered.one("Job", "-migrate")
    # The in-chart PostgreSQL does not exist before install: migrate after it.
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    for workload in rendered.of_kind("Deployment"):
        first = pod_spec(workload)["initContainers"][0]
        assert first["name"] == "wait-for-schema"
        assert "lagtrace migrate --check" in " ".join(first["command"])


def test_an_existing_secret_is_used_everywhere_and_none_is_made(helm):
    rendered = render(helm, CHART / "ci" / "external-engine-values.yaml")
    assert not rendered.of_kind("Secret")
    for workload in rendered.workloads():
        for container in all_containers(workload):
            for entry in container.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "lagtrace-credentials"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "workers.replicas=3"], "Additional property workers is not allowed"),
        (["--set", "worker.replica=3"], "Additional property replica is not allowed"),
        (["--set", "engine.dind.privileged=false"], "Additional property privileged is not allowed"),
        (["--set", "api.replicas=two"], "api.replicas: Invalid type"),
        (["--set", "engine.mode=podman"], "engine.mode"),
        (["--set-string", "worker.exclusiveNodes=yes"], "worker.exclusiveNodes: Invalid type"),
    ],
)
def test_the_values_schema_rejects_unknown_keys_and_wrong_types(helm, args, message):
    done = run_helm(helm, "template", "rel", str(CHART), *args)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_values_yaml_documents_every_key_and_holds_no_secret():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, schema)
    assert all(value == "" for value in values["secrets"].values())
    assert values["postgresql"]["password"] == "" and values["redis"]["password"] == ""
    # Every top-level key has a comment above it or on its first sub-keys.
    text = (CHART / "values.yaml").read_text().splitlines()
    for index, line in enumerate(text):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            block = text[max(0, index - 3) : index + 3]
            assert any(part.strip().startswith("#") for part in block), f"undocumented key: {line}"


def _decoded_secret_values(rendered: Rendered) -> set[str]:
    values = set()
    for secret in rendered.of_kind("Secret"):
        for encoded in (secret.get("data") or {}).values():
            value = base64.b64decode(encoded).decode()
            values.add(value)
            # A URL's password is a secret on its own.
            if "://" in value and "@" in value:
                values.add(value.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[-1])
    return {v for v in values if len(v) >= 8}


@pytest.mark.parametrize("values", ["production-values.yaml", "trial-values.yaml"])
def test_no_secret_value_appears_outside_secrets(helm, values):
    rendered = render(helm, CHART / "ci" / values)
    secrets = _decoded_secret_values(rendered)
    assert len(secrets) >= 3  # database URL, broker URL, secret key (generated if unset)
    for manifest in rendered.objects:
        if manifest["kind"] == "Secret":
            assert not manifest.get("stringData"), "plain stringData in a Secret"
            continue
        text = yaml.safe_dump(manifest)
        for secret in secrets:
            assert secret not in text, f"a secret value appears in {manifest['kind']}/{manifest['metadata']['name']}"
    config = rendered.one("ConfigMap", "lagtrace")["data"]
    assert not any(
        "SECRET" in key
        or "TOKEN" in key
        or "PASSWORD" in key
        or (key.endswith("_URL") and "://" in config[key] and "@" in config[key])
        for key in config
    )


def test_configmap_settings_are_real_settings_and_load(rendered):
    config = next(o for o in rendered.of_kind("ConfigMap"))["data"]
    fields = {f"LAGTRACE_{name.upper()}" for name in Settings.model_fields}
    # Read by the image's entrypoint, or by a setting another branch adds (docs/guides/security.md).
    outside_settings = {"LAGTRACE_ALLOWED_EXECUTORS"}
    unknown = set(config) - fields - outside_settings
    assert not unknown, f"ConfigMap keys no setting reads: {unknown}"
    # pydantic-settings parses them exactly as the pods will (and checks the nesting).
    settings = Settings(
        _env_file=None, **{k.removeprefix("LAGTRACE_").lower(): v for k, v in config.items() if k in fields}
    )
    assert settings.task_soft_time_limit_s < settings.task_time_limit_s < settings.broker_visibility_timeout_s


def test_worker_grace_celery_limits_and_visibility_timeout_are_consistent(rendered):
    config = next(o for o in rendered.of_kind("ConfigMap"))["data"]
    soft = int(config["LAGTRACE_TASK_SOFT_TIME_LIMIT_S"])
    hard = int(config["LAGTRACE_TASK_TIME_LIMIT_S"])
    visibility = int(config["LAGTRACE_BROKER_VISIBILITY_TIMEOUT_S"])
    # A task outliving the visibility timeout is delivered to a second worker.
    assert soft < hard < visibility
    worker = rendered.one("Deployment", "-worker")
    # A worker asked to stop gives its step back (tests/chaos/test_workers.py) well before
    # SIGKILL, and a drain does not wait for an hour-long screen.
    assert 30 <= pod_spec(worker)["terminationGracePeriodSeconds"] <= 120
    # A live task is never reclaimed: its worker renews the step's lease by heartbeat, at
    # least twice per lease, however long the task runs (up to the hard limit).
    settings = Settings(task_soft_time_limit_s=soft, task_time_limit_s=hard, broker_visibility_timeout_s=visibility)
    assert settings.heartbeat_interval_s * 2 <= settings.step_lease_s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "timeLimits.taskHardSeconds=4000"], "must be below timeLimits.brokerVisibilitySeconds"),
        (["--set", "timeLimits.taskSoftSeconds=3500"], "must be below timeLimits.taskHardSeconds"),
        (["--set", "worker.terminationGracePeriodSeconds=10"], "must be at least 30"),
        (["--set", "worker.concurrency=2"], "needs worker.packDisjointCores"),
    ],
)
def test_the_chart_refuses_limits_that_do_not_nest(helm, args, message):
    done = run_helm(helm, "template", "rel", str(CHART), *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def _qos(pod: dict) -> str:
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    guaranteed = all(
        (c.get("resources") or {}).get("limits", {}).get(r) is not None
        and (c["resources"].get("requests", {}).get(r, c["resources"]["limits"][r]) == c["resources"]["limits"][r])
        for c in containers
        for r in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _cpu_limit(container: dict) -> str | None:
    limit = (container.get("resources") or {}).get("limits", {}).get("cpu")
    return None if limit is None else str(limit)


def test_whole_cores_values_give_the_engine_guaranteed_integer_cpus(helm):
    rendered = render(helm, CHART / "ci" / "whole-cores-values.yaml")
    spec = pod_spec(rendered.one("Deployment", "-worker"))
    assert _qos(spec) == "Guaranteed"
    # The runs live in the engine's cgroup (the dind sidecar): the static CPU manager pins
    # only integer CPUs, and they must be there, not on the worker process beside it.
    containers = [*spec["initContainers"], *spec["containers"]]
    integer = [c["name"] for c in containers if (_cpu_limit(c) or "").isdigit()]
    assert integer == ["dind"], integer
    terms = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["topologyKey"] == "kubernetes.io/hostname"
    # The default is Burstable: whole cores are a choice docs/guides/kubernetes.md explains.
    assert _qos(pod_spec(render(helm).one("Deployment", "-worker"))) == "Burstable"


def test_every_worker_container_shares_the_nodes_measurement_lock(rendered):
    """The lock is a host directory, the same for every worker pod of a node, and each
    lagtrace container of a worker is told to lock there (not in its own work directory)."""
    worker = rendered.one("Deployment", "-worker")
    spec = pod_spec(worker)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in spec["containers"]:
        lock_dir = _env(container)["LAGTRACE_NODE_LOCK_PATH"]
        volume = volumes[_mounts(container)[lock_dir]]
        assert volume["hostPath"]["path"] == "/var/lib/lagtrace/lock", volume
        assert volume["hostPath"]["type"] == "DirectoryOrCreate"
        work_dir = next(o for o in rendered.of_kind("ConfigMap"))["data"]["LAGTRACE_WORK_DIR"]
        assert not lock_dir.startswith(work_dir + "/")
    # The setting the chart sets is the one the worker reads.
    assert Settings(_env_file=None, node_lock_path="/x").node_lock_path == Path("/x")


def test_measurement_workers_are_one_per_node_by_default(helm):
    spec = pod_spec(render(helm).one("Deployment", "-worker"))
    [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
    # A surge pod could only go to a node without a worker: the old one drains first.
    rolling = render(helm).one("Deployment", "-worker")["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxUnavailable": 1, "maxSurge": 0}
    shared = pod_spec(render(helm, None, "--set", "worker.exclusiveNodes=false").one("Deployment", "-worker"))
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in shared["affinity"]["podAntiAffinity"]


def test_no_manifest_gives_the_prepare_step_the_host_network(rendered):
    """ "host" is the pod's own network: it reaches the database, the broker and the
    cloud's metadata service. No rendered variable or pod may choose it."""
    for manifest in rendered.objects:
        if manifest["kind"] == "ConfigMap":
            assert manifest["data"].get("LAGTRACE_DOCKER_PREPARE_NETWORK", "none") != "host"
    for workload in rendered.workloads():
        assert not pod_spec(workload).get("hostNetwork")
        for container in all_containers(workload):
            assert _env(container).get("LAGTRACE_DOCKER_PREPARE_NETWORK", "none") != "host", container["name"]


def test_light_work_has_its_own_queue_and_only_the_measurement_queue_scales(helm):
    from cli.main import cli
    from services.jobs.dispatch import NOTIFY, RECONCILE, SCREEN
    from worker.app import CHECKS_QUEUE, LIGHT_QUEUE, QUEUE, queue_for

    # Check runs and the reconciler never wait behind a screen, nor the reconciler behind
    # check runs: every `lagtrace worker` serves the light queue and the check-run queue
    # with a pool each (tests/worker/test_light_pool.py).
    assert queue_for(RECONCILE) == LIGHT_QUEUE and queue_for(NOTIFY) == CHECKS_QUEUE and queue_for(SCREEN) == QUEUE
    trial = render(helm, CHART / "ci" / "trial-values.yaml")
    worker = pod_spec(trial.one("Deployment", "-worker"))["containers"][0]
    assert worker["args"][0] == "worker" and "worker" in cli.commands
    assert _env(worker)["LAGTRACE_WORKER_CONCURRENCY"] == "1"  # one screen at a time
    assert _env(worker)["LAGTRACE_CHECK_RUN_CONCURRENCY"] == "4"
    # KEDA adds workers for queued measurements only.
    lists = [t["metadata"]["listName"] for t in trial.one("ScaledObject", "-worker")["spec"]["triggers"]]
    assert lists == [QUEUE]


def test_the_worker_pod_takes_a_runtime_class(helm):
    def runtime(*args: str) -> str | None:
        return pod_spec(render(helm, None, *args).one("Deployment", "-worker")).get("runtimeClassName")

    assert runtime() is None
    assert runtime("--set", "engine.runtimeClassName=kata") == "kata"
    # With dind the engine shares the worker's pod: one RuntimeClass, and a conflict is refused.
    assert runtime("--set", "worker.runtimeClassName=gvisor") == "gvisor"
    done = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "--set",
        "worker.runtimeClassName=gvisor",
        "--set",
        "engine.runtimeClassName=kata",
    )
    assert done.returncode != 0 and "differ" in done.stderr
    external = CHART / "ci" / "external-engine-values.yaml"
    assert (
        pod_spec(render(helm, external, "--set", "worker.runtimeClassName=gvisor").one("Deployment", "-worker"))[
            "runtimeClassName"
        ]
        == "gvisor"
    )


def test_the_beat_is_a_single_replica_that_never_overlaps(rendered):
    beats = [d for d in rendered.of_kind("Deployment") if d["metadata"]["name"].endswith("-beat")]
    for beat in beats:
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"]["type"] == "Recreate"
        assert pod_spec(beat)["containers"][0]["args"] == ["beat"]
    # No PDB for it: one on a single replica would block every node drain.
    assert not any(p["metadata"]["name"].endswith("-beat") for p in rendered.of_kind("PodDisruptionBudget"))


def test_probes_point_at_real_endpoints_and_the_heartbeat(helm):
    rendered = render(helm)
    api = pod_spec(rendered.one("Deployment", "-api"))["containers"][0]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    from cli.wsgi import create_app  # the paths exist in the app the image serves
    from services.jobs.dispatch import InProcessDispatcher

    app = create_app(Settings(database_url="sqlite://"), InProcessDispatcher(lambda step: None))
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert {"/healthz", "/readyz"} <= rules
    worker = pod_spec(rendered.one("Deployment", "-worker"))["containers"][0]
    assert worker["livenessProbe"]["exec"]["command"][:2] == ["lagtrace", "alive"]
    # Several missed beats (worker/app.py touches it every HEARTBEAT_INTERVAL_S) before a restart.
    from worker.app import HEARTBEAT_INTERVAL_S

    assert float(worker["livenessProbe"]["exec"]["command"][2]) >= 3 * HEARTBEAT_INTERVAL_S


def test_network_policies_close_workers_and_the_trial_databases(helm):
    rendered = render(helm, CHART / "ci" / "trial-values.yaml")
    policies = {
        p["metadata"]["name"].removeprefix("rel-lagtrace-"): p["spec"] for p in rendered.of_kind("NetworkPolicy")
    }
    assert policies["worker"]["ingress"] == [] and policies["beat"]["ingress"] == []
    assert policies["api"]["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    for database in ("postgresql", "redis"):
        peers = policies[database]["ingress"][0]["from"]
        assert peers[0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "rel"


def test_the_chart_files_are_complete():
    for name in ("Chart.yaml", "values.yaml", "values.schema.json", "templates/NOTES.txt", ".helmignore"):
        assert (CHART / name).is_file(), name
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["kubeVersion"].startswith(">=1.29")
    assert Path(CHART / "ci").is_dir() and len(list((CHART / "ci").glob("*.yaml"))) >= 3


def test_the_metrics_token_reaches_the_api_from_the_secret(helm):
    # /metrics answers only a scraper with LAGTRACE_METRICS_TOKEN (api/health.py); the chart
    # carries it in the Secret, never in the ConfigMap.
    rendered = render(helm, None, "--set", "secrets.metricsToken=scrape-token-0123456789")
    secret = next(s for s in rendered.of_kind("Secret") if "metrics-token" in (s.get("data") or {}))
    assert base64.b64decode(secret["data"]["metrics-token"]).decode() == "scrape-token-0123456789"
    api = pod_spec(rendered.one("Deployment", "-api"))["containers"][0]
    ref = next(e for e in api["env"] if e["name"] == "LAGTRACE_METRICS_TOKEN")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "metrics-token", "optional": True}
    assert "scrape-token-0123456789" not in json.dumps(rendered.one("ConfigMap", "lagtrace"))


@pytest.mark.parametrize("values", VALUE_SETS, ids=value_set_id)
def test_two_renders_are_identical_so_a_gitops_sync_changes_nothing(helm, values):
    """`helm template` (what Argo CD and Flux render with) has no cluster to look up: a
    secret generated at render time would differ on every sync, and with it the pods'
    checksum (a rollout) and the in-chart database's password."""
    first, second = render(helm, values), render(helm, values)
    assert first.objects == second.objects


@pytest.mark.parametrize("database", ["postgresql", "redis"])
def test_an_in_chart_database_without_a_password_is_refused(helm, database):
    done = run_helm(
        helm,
        "template",
        "rel",
        str(CHART),
        "-f",
        str(CHART / "ci" / "trial-values.yaml"),
        "--set",
        f"{database}.password=",
    )
    assert done.returncode != 0 and f"{database}.password is empty" in done.stderr, done.stderr


# --- The prepare step's network, worker egress and artifacts in object storage (docs/guides/kubernetes.md) ---


def _worker_egress(rendered: Rendered) -> dict:
    return rendered.one("NetworkPolicy", "-worker")["spec"]


@pytest.mark.parametrize("values", VALUE_SETS, ids=value_set_id)
def test_the_prepare_step_never_gets_the_pods_network(helm, values):
    rendered = render(helm, values)
    config = rendered.one("ConfigMap", "lagtrace")["data"]
    # The index's sealed network or none: "host" (or any named network) would reach the
    # database, the broker and the metadata service from repository code.
    expected = "index" if config.get("LAGTRACE_PACKAGE_INDEX_URL") else "none"
    assert config["LAGTRACE_DOCKER_PREPARE_NETWORK"] == expected
    for workload in rendered.workloads():
        for container in all_containers(workload):
            assert _env(container).get("LAGTRACE_DOCKER_PREPARE_NETWORK") is None


def test_an_index_url_gives_the_prepare_step_the_sealed_network(helm):
    url = "http://pypi.pypi.svc:8080/simple/"
    config = render(helm, None, "--set", f"packageIndex.url={url}").one("ConfigMap", "lagtrace")["data"]
    assert config["LAGTRACE_DOCKER_PREPARE_NETWORK"] == "index"
    assert config["LAGTRACE_PACKAGE_INDEX_URL"] == url and config["LAGTRACE_DOCKER_INDEX_UPLINK"] == "bridge"
    settings = Settings(
        _env_file=None,
        **{k.removeprefix("LAGTRACE_").lower(): v for k, v in config.items() if k != "LAGTRACE_ALLOWED_EXECUTORS"},
    )
    assert settings.docker_prepare_network == "index" and settings.package_index_url == url


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.extraEnv.LAGTRACE_DOCKER_PREPARE_NETWORK=host"], "never gets the pod's network"),
        (["--set", "packageIndex.uplink=host"], "packageIndex.uplink"),
        (["--set", "packageIndex.url=https://ci:pw@pypi.example/simple/"], "packageIndex.url"),
    ],
)
def test_the_chart_refuses_a_host_prepare_network_and_index_credentials(helm, args, message):
    done = run_helm(helm, "template", "rel", str(CHART), *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_worker_egress_is_denied_but_to_the_database_broker_index_and_github(helm):
    spec = _worker_egress(render(helm))
    assert "Egress" in spec["policyTypes"]
    ports = [sorted((p["port"], p["protocol"]) for p in rule["ports"]) for rule in spec["egress"]]
    # DNS, PostgreSQL, Redis, HTTPS; no index rule without an index.
    assert ports == [[(53, "TCP"), (53, "UDP")], [(5432, "TCP")], [(6379, "TCP")], [(443, "TCP")]]
    https = spec["egress"][3]["to"][0]["ipBlock"]
    assert https["cidr"] == "0.0.0.0/0" and "169.254.0.0/16" in https["except"] and "10.0.0.0/8" in https["except"]
    # The API and beat stay open (they reach only lagtrace's own services).
    assert "Egress" not in render(helm).one("NetworkPolicy", "-api")["spec"]["policyTypes"]

    with_index = _worker_egress(render(helm, CHART / "ci" / "object-storage-values.yaml"))["egress"]
    peers = {rule["ports"][0]["port"]: rule.get("to") for rule in with_index}
    assert peers[8080] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "pypi"}}}]
    assert peers[9000] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}]
    assert peers[5432] == [{"ipBlock": {"cidr": "10.20.0.0/24"}}]

    # The in-chart trial databases: reached by their pods' labels, nothing else on the port.
    trial = {
        rule["ports"][0]["port"]: rule.get("to")
        for rule in _worker_egress(render(helm, CHART / "ci" / "trial-values.yaml"))["egress"]
    }
    assert trial[5432][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "postgresql"
    assert trial[6379][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"

    opened = _worker_egress(render(helm, None, "--set", "networkPolicy.workerEgress.enabled=false"))
    assert "Egress" not in opened["policyTypes"]


def test_artifacts_go_to_object_storage_with_credentials_from_a_secret(helm):
    rendered = render(helm, CHART / "ci" / "object-storage-values.yaml")
    config = rendered.one("ConfigMap", "lagtrace")["data"]
    assert config["LAGTRACE_ARTIFACTS_S3_BUCKET"] == "lagtrace-artifacts"
    assert config["LAGTRACE_ARTIFACTS_S3_ENDPOINT_URL"] == "http://minio.minio.svc.cluster.local:9000"
    assert not any("ACCESS_KEY" in key for key in config)
    for suffix in ("-api", "-worker"):
        container = pod_spec(rendered.one("Deployment", suffix))["containers"][0]
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in container["env"]
            if e["name"].startswith("LAGTRACE_ARTIFACTS_S3_")
        }
        assert refs == {
            "LAGTRACE_ARTIFACTS_S3_ACCESS_KEY_ID": {"name": "lagtrace-s3", "key": "access-key-id"},
            "LAGTRACE_ARTIFACTS_S3_SECRET_ACCESS_KEY": {"name": "lagtrace-s3", "key": "secret-access-key"},
        }
    # Without a bucket: the directory store, and no S3 variables anywhere.
    default = render(helm)
    assert not any(key.startswith("LAGTRACE_ARTIFACTS_S3_") for key in default.one("ConfigMap", "lagtrace")["data"])


def test_the_api_serves_one_process_per_cpu_it_requests(rendered):
    """LAGTRACE_WEB_PROCESSES (`lagtrace serve --processes`) comes from the api container's
    own CPU request, rounded up; the node's CPU count would overcommit a small request."""
    api = rendered.one("Deployment", "-api")
    [container] = [c for c in pod_spec(api)["containers"] if c["name"] == "api"]
    env = {e["name"]: e for e in container["env"]}
    source = env["LAGTRACE_WEB_PROCESSES"]["valueFrom"]["resourceFieldRef"]
    assert source == {"containerName": "api", "resource": "requests.cpu", "divisor": "1"}
    assert container["resources"]["requests"]["cpu"]


def test_the_api_trusts_one_proxy_where_the_chart_deploys_an_ingress(helm):
    def proxies(*args: str) -> str:
        api = pod_spec(render(helm, None, *args).one("Deployment", "-api"))["containers"][0]
        return _env(api)["LAGTRACE_TRUSTED_PROXIES"]

    # Without the Ingress, X-Forwarded-For is the client's own word: ignored.
    assert proxies() == "0"
    # With it, the ingress's entry names the client (tests/security/test_abuse.py).
    assert proxies("--set", "ingress.enabled=true") == "1"
    assert proxies("--set", "ingress.enabled=true", "--set", "ingress.trustedProxies=2") == "2"
    assert proxies("--set", "ingress.enabled=true", "--set", "ingress.trustedProxies=0") == "0"
