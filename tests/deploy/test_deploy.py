"""deploy/: the kustomize base and the Helm chart render the same, valid, locked-down objects.

The kustomize base is rendered by `kubectl kustomize` (kustomize built into kubectl); the chart
by Helm's own Go engine (helm-python-sdk, no helm binary here). Every object is validated
against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail), and
the webhooks' matchConditions are evaluated as CEL (cel-python) on real objects.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import celpy
import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.support.check_helpers import run_gpushare
from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import gpushare_executable, load_json
from tests.support.near_miss_cases import NEAR_MISSES, NOT_NEAR_MISSES, cronjob_with, deployment_with, pod_with

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kustomize"
CHART = ROOT / "deploy" / "helm" / "gpushare-webhook"
NS = "gpushare-system"
# matchConditions are GA in 1.30 and beta (on by default) in 1.28, the chart's kubeVersion floor.
KUBE_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
Obj = dict[str, Any]


def render_kustomize(directory: Path = KUSTOMIZE) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with kustomize built in) is part of the machine image"
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render_with_components(directory: Path, *components: Path) -> list[Obj]:
    """The base with ``components``, as a user's overlay in ``directory`` includes them."""
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(KUSTOMIZE, directory)],
        "components": [os.path.relpath(c, directory) for c in components]}))
    return render_kustomize(directory)


def render_helm(values: Obj | None = None, namespace: str = NS, *, scheduler: str | None = "ack-co-scheduler"
                ) -> list[Obj]:
    """The chart rendered; ``scheduler`` is the required choice (None leaves it unset)."""
    chosen = {"scheduler": scheduler} if scheduler is not None else {}
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render({**chosen, **(values or {})}, name="gpushare", namespace=namespace)
    return [d for text in manifests.values() for d in yaml.safe_load_all(text) if d]


def key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "duplicate objects"
    return keyed


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


@pytest.fixture(scope="module")
def kustomized() -> list[Obj]:
    return render_kustomize()


@pytest.fixture(scope="module")
def helm_rendered() -> list[Obj]:
    return render_helm({"namespace": {"create": True}})


@pytest.fixture(scope="module", params=["kustomize", "helm"])
def rendered(request, kustomized, helm_rendered) -> list[Obj]:
    return kustomized if request.param == "kustomize" else helm_rendered


EXPECTED = {
    ("Namespace", "", NS), ("PriorityClass", "", "gpushare-webhook-critical"),
    ("ServiceAccount", NS, "gpushare-webhook"), ("ServiceAccount", NS, "gpushare-webhook-certs"),
    ("ClusterRole", "", "gpushare-webhook"), ("ClusterRoleBinding", "", "gpushare-webhook"),
    ("Role", NS, "gpushare-webhook-certs"), ("RoleBinding", NS, "gpushare-webhook-certs"),
    ("ClusterRole", "", "gpushare-webhook-certs"), ("ClusterRoleBinding", "", "gpushare-webhook-certs"),
    ("ConfigMap", NS, "gpushare-webhook-config"), ("Deployment", NS, "gpushare-webhook"),
    ("PodDisruptionBudget", NS, "gpushare-webhook"), ("Service", NS, "gpushare-webhook"),
    ("Service", NS, "gpushare-webhook-bindings"),
    ("Role", NS, "gpushare-webhook-leader"), ("RoleBinding", NS, "gpushare-webhook-leader"),
    ("ClusterRole", "", "gpushare-webhook-reports"), ("ClusterRoleBinding", "", "gpushare-webhook-reports"),
    ("Job", NS, "gpushare-webhook-certs"), ("CronJob", NS, "gpushare-webhook-cert-rotation"),
    ("MutatingWebhookConfiguration", "", "gpushare-webhook"),
    ("ValidatingWebhookConfiguration", "", "gpushare-webhook"),
}


def test_both_render_the_expected_objects(rendered):
    assert set(by_key(rendered)) == EXPECTED


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_object_is_valid_against_the_kubernetes_openapi_schema(rendered, version):
    for obj in rendered:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{key(obj)} invalid for Kubernetes {version}: {exc.message} at {list(exc.path)}")


def _without_helm_annotations(obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    for meta in (obj["metadata"], obj.get("spec", {}).get("template", {}).get("metadata", {})):
        annotations = meta.get("annotations", {})
        for name in [a for a in annotations if a.startswith(("helm.sh/", "checksum/"))]:
            del annotations[name]
        if "annotations" in meta and not annotations:
            del meta["annotations"]
    return obj


def with_scheduler_chosen(obj: Obj, chosen: str = "ack-co-scheduler") -> Obj:
    """The object as an overlay choosing the scheduler makes it (the base chooses none; Helm must),
    its config compared as data: the comments differ, one saying how to choose."""
    if obj["kind"] != "ConfigMap" or "config.yaml" not in obj.get("data", {}):
        return obj
    config = yaml.safe_load(obj["data"]["config.yaml"]) or {}
    config.setdefault("names", {}).setdefault("scheduler_name", chosen)
    return {**obj, "data": {**obj["data"], "config.yaml": config}}


def assert_same_objects(kustomize: list[Obj], helm_objects: list[Obj]) -> None:
    by_helm = by_key([with_scheduler_chosen(_without_helm_annotations(o)) for o in helm_objects])
    for k, obj in by_key(kustomize).items():
        assert by_helm[k] == with_scheduler_chosen(obj), f"{k} differs between kustomize and helm"


def test_kustomize_and_helm_render_the_same_objects(kustomized, helm_rendered):
    assert_same_objects(kustomized, helm_rendered)
    # What Helm adds: the Job runs after install/upgrade (it injects into the webhook configurations).
    job = one(helm_rendered, "Job", "gpushare-webhook-certs")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"


# Every value a user of a system node pool and a private registry sets, as Helm's conventional names.
PLACEMENT = {"nodeSelector": {"node-pool": "system"},
             "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}],
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                 {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
             "imagePullSecrets": [{"name": "acr-credentials"}]}


@pytest.mark.parametrize("values", [{"kubeletConfigz": {"enabled": False}}, {"kubeletConfigz": {"enabled": True}},
                                    {**PLACEMENT, "podAnnotations": {"a": "b"}, "podLabels": {"team": "ml"}}],
                         ids=["defaults", "configz", "placement"])
def test_helm_lint_finds_no_error(values):
    report = helm.lint(str(CHART), {"scheduler": "none", **values})
    assert report["total_charts_linted"] == 1 and report["errors"] == []
    # Only informational findings (severity 1, e.g. "icon is recommended") are tolerated.
    assert all(m["severity"] <= 1 for m in report["messages"]), report["messages"]


def test_helm_fails_until_the_scheduler_is_chosen():
    with pytest.raises(Exception, match="scheduler is required") as failed:
        render_helm(scheduler=None)
    message = str(failed.value)
    assert "scheduler=ack-co-scheduler on registered clusters" in message and "scheduler=none on ACK Pro" in message
    for chosen in ("none", "ack-co-scheduler", "my-gpu-scheduler"):
        objects = render_helm({"config": {"names": {"priority_class": "x"}}}, scheduler=chosen)
        config = yaml.safe_load(one(objects, "ConfigMap", "gpushare-webhook-config")["data"]["config.yaml"])
        assert config["names"] == {"priority_class": "x", "scheduler_name": chosen}


def test_kustomize_states_no_scheduler_and_explains_both_choices(kustomized, tmp_path):
    text = one(kustomized, "ConfigMap", "gpushare-webhook-config")["data"]["config.yaml"]
    assert yaml.safe_load(text) is None  # no choice made for the installer
    (tmp_path / "config.yaml").write_text(text)
    # The webhook the base deploys refuses to serve a cluster until an overlay chooses.
    api = FakeApiServer().start()
    try:
        done = run_gpushare("serve", "--port", "0", "--config", tmp_path / "config.yaml", "--kubeconfig",
                            api.kubeconfig(tmp_path / "kc"), "--cert-dir", tmp_path / "certs", timeout=60)
    finally:
        api.stop()
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("gpushare: error: names.scheduler_name is not set: choose the scheduler GM001 "
                                  "gives shared-GPU pods before serving a cluster: ack-co-scheduler on registered "
                                  "clusters (ACK's ack-co-scheduler add-on places shared GPUs), none on ACK Pro "
                                  "clusters"), done.stderr
    assert not (tmp_path / "certs").exists()
    comments = " ".join(line.strip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "ack-co-scheduler registered clusters" in " ".join(comments.split())
    assert "none ACK Pro clusters" in " ".join(comments.split())


def test_the_extender_example_does_not_shadow_acks_scheduler():
    config = yaml.safe_load((ROOT / "deploy" / "scheduler" / "kube-scheduler-config.yaml").read_text())
    names = [p["schedulerName"] for p in config["profiles"]]
    assert "ack-co-scheduler" not in names and "gpushare-scheduler" in names


def generated_match_conditions(config: Obj, tmp_path: Path) -> Obj:
    """What `gpushare policy export --webhooks helm --config FILE` prints for ``config``, as values."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([gpushare_executable(), "policy", "export", "--webhooks", "helm", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_helm_values_reach_the_objects(tmp_path):
    config = {"rules": {"GS001": {"severity": "warn"}}, "names": {"gpushare_daemonsets": ["a-ds", "b-ds"]}}
    objects = render_helm({"image": {"repository": "registry.example/gpushare", "tag": "1.2.3"}, "replicas": 3,
                           "webhooks": {"failurePolicy": {"pods": "Ignore"}, "timeoutSeconds": 3},
                           "config": config, **generated_match_conditions(config, tmp_path)},
                          namespace="gpu-webhook")
    assert ("Namespace", "", "gpu-webhook") not in by_key(objects)  # --create-namespace makes it
    deployment = one(objects, "Deployment", "gpushare-webhook")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/gpushare:1.2.3"
    mutating = one(objects, "MutatingWebhookConfiguration", "gpushare-webhook")
    pods = mutating["webhooks"][0]
    assert pods["failurePolicy"] == "Ignore" and pods["timeoutSeconds"] == 3
    assert pods["clientConfig"]["service"]["namespace"] == "gpu-webhook"
    assert pods["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "gpu-webhook"]
    assert "['a-ds', 'b-ds']" in mutating["webhooks"][1]["matchConditions"][0]["expression"]
    config = yaml.safe_load(one(objects, "ConfigMap", "gpushare-webhook-config")["data"]["config.yaml"])
    assert config == {"rules": {"GS001": {"severity": "warn"}},
                      "names": {"gpushare_daemonsets": ["a-ds", "b-ds"], "scheduler_name": "ack-co-scheduler"}}
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)


def test_helm_places_every_pod_as_the_conventional_values_say():
    objects = render_helm({**PLACEMENT, "priorityClassName": "system-cluster-critical",
                           "priorityClass": {"create": False},
                           "podAnnotations": {"example.com/owner": "platform"}, "podLabels": {"team": "ml"},
                           "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}},
                           "certificates": {"resources": {"limits": {"cpu": "100m", "memory": "80Mi"}}}})
    assert ("PriorityClass", "", "gpushare-webhook-critical") not in by_key(objects)
    specs = dict(pod_specs(objects))
    assert set(specs) == {"gpushare-webhook", "gpushare-webhook-certs", "gpushare-webhook-cert-rotation"}
    for where, spec in specs.items():
        for field, value in PLACEMENT.items():
            assert spec[field] == value, (where, field)
    templates = [one(objects, "Deployment", "gpushare-webhook")["spec"]["template"],
                 one(objects, "Job", "gpushare-webhook-certs")["spec"]["template"]]
    for template in templates:
        assert template["metadata"]["labels"]["team"] == "ml"
        assert template["metadata"]["annotations"]["example.com/owner"] == "platform"
    webhook = specs["gpushare-webhook"]
    assert webhook["priorityClassName"] == "system-cluster-critical"
    # Helm merges values with the defaults: what is not given keeps its default.
    assert webhook["containers"][0]["resources"] == {"requests": {"cpu": "200m", "memory": "300Mi"},
                                                     "limits": {"cpu": "1", "memory": "1Gi"}}
    assert specs["gpushare-webhook-certs"]["containers"][0]["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "80Mi"}}
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)


def test_both_give_the_webhook_a_priority_class_of_its_own(rendered):
    [priority] = [o for o in rendered if o["kind"] == "PriorityClass"]
    # The highest value a class of one's own may take; above it are Kubernetes' system-* classes.
    assert (priority["value"], priority["globalDefault"]) == (1_000_000_000, False)
    spec = one(rendered, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == priority["metadata"]["name"] == "gpushare-webhook-critical"


@pytest.mark.parametrize(("values", "refusal"), [
    ({"nodeSelectr": {"pool": "system"}}, "additional properties 'nodeSelectr' not allowed"),
    ({"image": {"respository": "x"}}, "additional properties 'respository' not allowed"),
    ({"replicas": "two"}, "at '/replicas': got string, want integer"),
    ({"tolerations": {"key": "x"}}, "at '/tolerations': got object, want array"),
    ({"webhooks": {"failurePolicy": {"pods": "fail"}}}, "/webhooks/failurePolicy/pods"),
])
def test_the_values_schema_refuses_what_the_chart_would_ignore(values, refusal):
    with pytest.raises(helm.HelmValuesError, match="values don't meet the specifications") as refused:
        render_helm(values)
    assert refusal in str(refused.value)


def test_the_values_schema_takes_what_helm_gives_a_dependency():
    # A parent chart gives its dependencies `global`, and `enabled` when its condition names it
    # (helm/helm#10392): the schema must not refuse them.
    objects = render_helm({"global": {"imageRegistry": "registry.example"}, "enabled": True})
    assert one(objects, "Deployment", "gpushare-webhook")


def test_helm_refuses_to_create_a_system_priority_class():
    with pytest.raises(helm.HelmRenderError, match=re.escape(
            "priorityClassName system-cluster-critical is one of Kubernetes' own classes, which cannot be "
            "created: set priorityClass.create=false to use it")):
        render_helm({"priorityClassName": "system-cluster-critical"})
    with pytest.raises(helm.HelmRenderError, match=re.escape("podLabels sets app.kubernetes.io/component")):
        render_helm({"podLabels": {"app.kubernetes.io/component": "x"}})


def pod_specs(objects: list[Obj]) -> list[tuple[str, Obj]]:
    specs = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "Job"):
            specs.append((obj["metadata"]["name"], obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            specs.append((obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return specs


def test_every_pod_is_locked_down(rendered):
    specs = pod_specs(rendered)
    assert len(specs) == 3
    for name, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and isinstance(pod["runAsUser"], int) and pod["runAsUser"] > 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        assert all("hostPath" not in v for v in spec.get("volumes", [])), name
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, name
            assert ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            assert "privileged" not in ctx and "add" not in ctx["capabilities"], name
            resources = container["resources"]
            assert set(resources["requests"]) == {"cpu", "memory"} == set(resources["limits"]), name


def test_deployment_is_highly_available_and_probed(rendered):
    deployment = one(rendered, "Deployment", "gpushare-webhook")
    spec = deployment["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = spec["template"]["metadata"]["labels"]
    pod = spec["template"]["spec"]
    hostname = [c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname"]
    assert hostname and hostname[0]["whenUnsatisfiable"] == "DoNotSchedule" and hostname[0]["maxSkew"] == 1
    assert hostname[0]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = one(rendered, "PodDisruptionBudget", "gpushare-webhook")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    # The probes go to the probe port, which no review can occupy (server.probe_port).
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"},
                                  {"name": "ops", "containerPort": 9443, "protocol": "TCP"},
                                  {"name": "probes", "containerPort": 8081, "protocol": "TCP"}]
    assert "command" not in container  # the image's entrypoint: gpushare serve
    args = container["args"]
    assert args[args.index("--cert-dir") + 1] == "/etc/gpushare/tls"
    tls = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == "gpushare-webhook-tls"
    service = one(rendered, "Service", "gpushare-webhook")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
                                        {"name": "ops", "port": 9443, "targetPort": "ops", "protocol": "TCP"}]


def _rules_of(objects: list[Obj], kind: str, name: str) -> list[Obj]:
    return one(objects, kind, name)["rules"]


def _bindings_to(objects: list[Obj], service_account: str) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
            and any(s["name"] == service_account for s in o["subjects"])]


WEBHOOK_READS = [
    {"apiGroups": [""], "resources": ["namespaces", "nodes", "pods", "resourcequotas"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.sigs.k8s.io"], "resources": ["elasticquotatrees"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": ["get", "list", "watch"]}]


def test_rbac_is_least_privilege(rendered):
    # The webhook: get/list/watch on namespaces, nodes, pods and the GPU quota kinds (docs/quotas.md), nothing
    # else cluster-wide, through one binding.
    assert _rules_of(rendered, "ClusterRole", "gpushare-webhook") == WEBHOOK_READS
    bound_webhook = {(b["kind"], b["roleRef"]["name"], b["metadata"].get("namespace", ""))
                     for b in _bindings_to(rendered, "gpushare-webhook")}
    assert bound_webhook == {("ClusterRoleBinding", "gpushare-webhook", ""),
                             ("RoleBinding", "gpushare-webhook-leader", NS),
                             ("ClusterRoleBinding", "gpushare-webhook-reports", "")}
    # The audit's report objects: the two report APIs' kinds, and only the verbs the writer uses
    # (tests/state/test_audit_reports_served.py holds the writer's requests to these rules).
    assert _rules_of(rendered, "ClusterRole", "gpushare-webhook-reports") == [
        {"apiGroups": ["openreports.io"], "resources": ["reports", "clusterreports"],
         "verbs": ["get", "list", "create", "update", "delete"]},
        {"apiGroups": ["wgpolicyk8s.io"], "resources": ["policyreports", "clusterpolicyreports"],
         "verbs": ["get", "list", "create", "update", "delete"]}]
    # Leader election, in its own namespace only: its Lease by name (create cannot be named) and pod labels.
    assert _rules_of(rendered, "Role", "gpushare-webhook-leader") == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["gpushare-webhook-bindings"],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    assert one(rendered, "Role", "gpushare-webhook-leader")["metadata"]["namespace"] == NS
    # The certificate job: its own identity and roles, its Secrets and the two configurations by name.
    bound = {(b["kind"], b["roleRef"]["name"]) for b in _bindings_to(rendered, "gpushare-webhook-certs")}
    assert bound == {("RoleBinding", "gpushare-webhook-certs"), ("ClusterRoleBinding", "gpushare-webhook-certs")}
    assert _rules_of(rendered, "ClusterRole", "gpushare-webhook-certs") == [{
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "resourceNames": ["gpushare-webhook"], "verbs": ["get", "patch"]}]
    secrets = _rules_of(rendered, "Role", "gpushare-webhook-certs")
    assert all(r["resources"] == ["secrets"] for r in secrets)
    assert {v for r in secrets for v in r["verbs"]} == {"get", "update", "create"}
    assert all(r.get("resourceNames") == ["gpushare-webhook-ca", "gpushare-webhook-tls"] for r in secrets
               if r["verbs"] != ["create"])
    for obj in rendered:
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], key(obj)
    jobs = [spec for name, spec in pod_specs(rendered) if name != "gpushare-webhook"]
    assert {spec["serviceAccountName"] for spec in jobs} == {"gpushare-webhook-certs"}
    assert one(rendered, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]["serviceAccountName"] == \
        "gpushare-webhook"


def test_helm_grants_nothing_on_reports_when_the_server_writes_none():
    objects = render_helm({"config": {"audit": {"reports": "none"}}})
    assert not any(o["metadata"]["name"] == "gpushare-webhook-reports" for o in objects)
    config = yaml.safe_load(one(objects, "ConfigMap", "gpushare-webhook-config")["data"]["config.yaml"])
    assert config["audit"] == {"reports": "none"}
    kept = render_helm({"config": {"audit": {"reports": "policyreport"}}})
    assert one(kept, "ClusterRole", "gpushare-webhook-reports")


def webhooks(objects: list[Obj]) -> dict[str, Obj]:
    out = {}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(objects, kind, "gpushare-webhook")["webhooks"]:
            out[webhook["name"]] = {**webhook, "_kind": kind}
    return out


def covered(hooks: dict[str, Obj]) -> set[tuple[str, str, str]]:
    return {(group, resource, op) for w in hooks.values() for r in w["rules"] for group in r["apiGroups"]
            for resource in r["resources"] for op in r["operations"]}


def test_bindings_service_selects_the_leader_and_pods_know_their_name(rendered):
    both = one(rendered, "Service", "gpushare-webhook")["spec"]["selector"]
    leader = one(rendered, "Service", "gpushare-webhook-bindings")["spec"]["selector"]
    assert leader == {**both, "gpushare.io/binding-leader": "true"}
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in one(
        rendered, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUSHARE_LEADER__POD_NAME"] == "metadata.name"
    assert env["GPUSHARE_LEADER__NAMESPACE"] == "metadata.namespace"


def test_webhook_configurations(rendered):
    hooks = webhooks(rendered)
    for name, webhook in hooks.items():
        assert webhook["admissionReviewVersions"] == ["v1"], name
        assert webhook["sideEffects"] == "None", name
        assert isinstance(webhook["timeoutSeconds"], int) and 1 <= webhook["timeoutSeconds"] <= 10, name
        assert webhook["failurePolicy"] in ("Fail", "Ignore"), name
        service = webhook["clientConfig"]["service"]
        # Bindings go to the leader alone: the Service that selects the leader's label.
        expected_service = ("gpushare-webhook-bindings" if name == "bindings.validate.gpushare.io"
                            else "gpushare-webhook")
        assert (service["name"], service["namespace"], service["port"]) == (expected_service, NS, 443), name
        expected_path = "/mutate" if webhook["_kind"].startswith("Mutating") else "/validate"
        assert service["path"] == expected_path, name
    validating = {n: w for n, w in hooks.items() if w["_kind"].startswith("Validating")}
    assert {("", "pods", "CREATE"), ("", "pods/binding", "CREATE"), ("", "nodes", "CREATE"),
            ("", "nodes", "UPDATE")} <= covered(validating)
    for group, resource in (("apps", "deployments"), ("apps", "statefulsets"), ("apps", "daemonsets"),
                            ("apps", "replicasets"), ("batch", "jobs"), ("batch", "cronjobs"),
                            ("", "replicationcontrollers")):
        assert {(group, resource, "CREATE"), (group, resource, "UPDATE")} <= covered(validating), resource
    assert hooks["pods.mutate.gpushare.io"]["reinvocationPolicy"] == "IfNeeded"
    assert ("", "pods", "CREATE") in covered({"m": hooks["pods.mutate.gpushare.io"]})


def test_namespaces_left_out_and_the_narrow_daemonset_webhook(rendered):
    hooks = webhooks(rendered)
    narrow = hooks.pop("gpushare-daemonsets.mutate.gpushare.io")
    for name, webhook in hooks.items():
        if name.startswith(("nodes.", "new-nodes.")):
            assert "namespaceSelector" not in webhook  # nodes are cluster-scoped
            continue
        if name.startswith("quotas."):
            # ACK's ElasticQuotaTree lives in kube-system, ClusterQueues are cluster-scoped: every namespace is
            # sent (only GPU quotas, by its matchCondition), and a quota edit never waits on the webhook.
            assert "namespaceSelector" not in webhook and webhook["failurePolicy"] == "Ignore"
            assert webhook["matchConditions"]
            continue
        (expression,) = webhook["namespaceSelector"]["matchExpressions"]
        assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn"
        assert set(expression["values"]) == {"kube-system", NS}, name
    assert narrow["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system"]}]
    assert narrow["failurePolicy"] == "Ignore"
    assert covered({"n": narrow}) == {("apps", "daemonsets", "CREATE"), ("apps", "daemonsets", "UPDATE"),
                                      ("", "pods", "CREATE")}
    assert narrow["matchConditions"], "the narrow webhook must select the DaemonSets by name"


# --- matchConditions, evaluated as CEL on real objects ---------------------------------------

def condition(objects: list[Obj], webhook: str) -> celpy.Runner:
    (match,) = webhooks(objects)[webhook]["matchConditions"]
    env = celpy.Environment()
    return env.program(env.compile(match["expression"]))


def matches(program: celpy.Runner, obj: Obj, *, old: Obj | None = None, resource: str = "pods") -> bool:
    request = {"operation": "UPDATE" if old is not None else "CREATE",
               "resource": {"group": "", "version": "v1", "resource": resource}}
    activation = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel(request)}
    result = program.evaluate(activation)
    assert isinstance(result, celpy.celtypes.BoolType), f"CEL evaluation failed: {result!r}"
    return bool(result)


def pod(containers: list[Obj], init: list[Obj] | None = None, owner: str | None = None) -> Obj:
    spec: Obj = {"containers": containers}
    if init:
        spec["initContainers"] = init
    meta: Obj = {"name": "p", "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner, "uid": "u",
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


GPU = {"name": "gpu", "image": "cuda", "resources": {"limits": {"aliyun.com/gpu-mem": "2"}}}
CORE_REQUEST = {"name": "core", "image": "cuda", "resources": {"requests": {"aliyun.com/gpu-core.percentage": "30"}}}
CPU = {"name": "cpu", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}
BARE = {"name": "bare", "image": "busybox"}


@pytest.mark.parametrize("webhook", ["pods.mutate.gpushare.io", "pods.validate.gpushare.io"])
def test_pod_webhooks_see_exactly_the_pods_that_share_gpus(rendered, webhook):
    program = condition(rendered, webhook)
    assert matches(program, pod([GPU]))
    # A pod a controller made goes to controlled-pods.validate (fails open) instead of pods.validate.
    assert matches(program, pod([GPU], owner="gpu-ds")) is (webhook == "pods.mutate.gpushare.io")
    assert matches(condition(rendered, "controlled-pods.validate.gpushare.io"), pod([GPU], owner="gpu-ds"))
    assert not matches(condition(rendered, "controlled-pods.validate.gpushare.io"), pod([GPU]))
    # A compute share alone is judged (GS002) but has nothing to mutate (GM001 and GM003 need gpu-mem).
    assert matches(program, pod([CPU, CORE_REQUEST])) is (webhook == "pods.validate.gpushare.io")
    assert matches(program, pod([BARE], init=[GPU]))
    realistic = load_json("pod-realistic.json")
    assert matches(program, realistic) or matches(condition(rendered, "controlled-pods.validate.gpushare.io"),
                                                   realistic)
    assert not matches(program, pod([CPU, BARE]))
    assert not matches(program, pod([BARE], init=[CPU]))
    assert not matches(program, pod([{**CPU, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]))


@pytest.mark.parametrize(("resource", "value", "meant"), NEAR_MISSES)
def test_validating_webhooks_see_near_misses_and_the_mutating_one_does_not(rendered, resource, value, meant):
    validate, mutate = condition(rendered, "pods.validate.gpushare.io"), condition(rendered, "pods.mutate.gpushare.io")
    for section in ("limits", "requests"):
        assert matches(validate, pod_with(resource, value, section=section)), (resource, section)
        assert matches(validate, pod_with(resource, value, section=section, init=True)), (resource, section)
        assert not matches(mutate, pod_with(resource, value, section=section))  # nothing to mutate
    assert matches(condition(rendered, "workloads.validate.gpushare.io"), deployment_with(resource, value),
                   resource="deployments")
    assert matches(condition(rendered, "cronjobs.validate.gpushare.io"), cronjob_with(resource, value),
                   resource="cronjobs")


@pytest.mark.parametrize("resource", NOT_NEAR_MISSES)
def test_pods_asking_only_for_real_other_resources_do_not_depend_on_the_webhook(rendered, resource):
    for webhook in ("pods.validate.gpushare.io", "pods.mutate.gpushare.io"):
        assert not matches(condition(rendered, webhook), pod_with(resource, 1)), (webhook, resource)
    assert not matches(condition(rendered, "workloads.validate.gpushare.io"), deployment_with(resource, 1),
                       resource="deployments")
    assert not matches(condition(rendered, "cronjobs.validate.gpushare.io"), cronjob_with(resource, 1),
                       resource="cronjobs")


def test_workload_webhooks_see_templates_that_share_gpus(rendered):
    program = condition(rendered, "workloads.validate.gpushare.io")
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"template": {"spec": pod([GPU])["spec"]}}}
    assert matches(program, deployment, resource="deployments")
    deployment["spec"]["template"]["spec"] = pod([CPU])["spec"]
    assert not matches(program, deployment, resource="deployments")
    cronjobs = condition(rendered, "cronjobs.validate.gpushare.io")
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
               "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": pod([BARE], [GPU])[
                   "spec"]}}}}}
    assert matches(cronjobs, cronjob, resource="cronjobs")
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"] = pod([BARE])["spec"]
    assert not matches(cronjobs, cronjob, resource="cronjobs")


def test_node_webhook_sees_only_gpu_scheduling_labels(rendered):
    program = condition(rendered, "nodes.validate.gpushare.io")

    def node(labels: Obj | None) -> Obj:
        meta: Obj = {"name": "n"}
        if labels is not None:
            meta["labels"] = labels
        return {"apiVersion": "v1", "kind": "Node", "metadata": meta}

    assert matches(program, node({"ack.node.gpu.schedule": "cgpu"}), resource="nodes")
    assert matches(program, node({"ack.node.gpu.placement": "spread"}), resource="nodes")
    assert not matches(program, node({"kubernetes.io/hostname": "n"}), resource="nodes")
    assert not matches(program, node(None), resource="nodes")
    assert not matches(program, node({"a": "b"}), old=node(None), resource="nodes")
    # Removing the mode label is a change the webhook must see (GN006).
    assert matches(program, node({}), old=node({"ack.node.gpu.schedule": "share"}), resource="nodes")


def test_narrow_webhook_selects_the_gpushare_daemonsets_by_name(rendered):
    program = condition(rendered, "gpushare-daemonsets.mutate.gpushare.io")
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "gpushare-device-plugin-ds",
                                                                      "namespace": "kube-system"}}
    assert matches(program, ds, resource="daemonsets")
    assert not matches(program, {**ds, "metadata": {"name": "kube-proxy"}}, resource="daemonsets")
    assert matches(program, pod([BARE], owner="gpushare-device-plugin-ds"))
    assert not matches(program, pod([BARE], owner="kube-proxy"))
    assert not matches(program, pod([BARE]))


def test_scheduler_extender_stanza_reaches_this_service_under_a_certified_name(kustomized):
    from urllib.parse import urlsplit

    from webhook.settings import CertSettings

    config = yaml.safe_load((ROOT / "deploy" / "scheduler" / "kube-scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    url = urlsplit(extender["urlPrefix"])
    service = one(kustomized, "Service", "gpushare-webhook")
    assert url.scheme == "https" and url.port == service["spec"]["ports"][0]["port"]
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    # `gpushare certs` issues the serving certificate for exactly this name by default.
    assert extender["tlsConfig"]["serverName"] in CertSettings().service_dns_names()


# --- who can reach what: the admission port, the ops port, the extender, the NetworkPolicy ---------

def container_env(objects: list[Obj]) -> dict[str, str]:
    (container,) = one(objects, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_admission_port_carries_only_what_the_api_server_and_scheduler_call(rendered):
    from webhook.settings import Settings

    deployment = one(rendered, "Deployment", "gpushare-webhook")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    env = container_env(rendered)
    # The server listens where the container ports say: --port on "https", the ops port on "ops".
    assert int(args[args.index("--port") + 1]) == ports["https"]
    assert int(env["GPUSHARE_SERVER__OPS_PORT"]) == ports["ops"]
    assert int(env["GPUSHARE_SERVER__PROBE_PORT"]) == ports["probes"]
    server = Settings().server
    assert set(server.ops_paths) == {"/metrics", "/dry-run", "/explain"}
    assert set(server.probe_paths) == {"/healthz", "/readyz"}
    # Every path on the ops port wants the token; the extender's paths want a client certificate.
    assert set(yaml.safe_load(env["GPUSHARE_AUTH__BEARER_PATHS"])) == set(server.ops_paths)
    assert yaml.safe_load(env["GPUSHARE_AUTH__CLIENT_CERT_PATHS"]) == ["/scheduler/filter", "/scheduler/prioritize"]
    assert yaml.safe_load(env["GPUSHARE_AUTH__CLIENT_NAMES"]) == ["kube-scheduler"]
    # The client CA and the token come from the mounted Secrets.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["GPUSHARE_AUTH__CLIENT_CA_FILE"] == mounts["tls"] + "/ca.crt"
    assert env["GPUSHARE_AUTH__BEARER_TOKEN_FILE"] == mounts["token"] + "/token"
    assert volumes["token"]["secret"] == {"secretName": "gpushare-webhook-token", "optional": True,
                                          "defaultMode": 0o440}
    # The webhooks call the Service port whose target is the admission port, and only it.
    service = one(rendered, "Service", "gpushare-webhook")
    by_port = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    for name, webhook in webhooks(rendered).items():
        assert by_port[webhook["clientConfig"]["service"]["port"]] == "https", name
    # Probes go to the probe port, which wants no credentials (the kubelet has none) and which no
    # Service exposes: with the NetworkPolicy on, only the pod's own node reaches it.
    assert container["readinessProbe"]["httpGet"]["port"] == container["livenessProbe"]["httpGet"]["port"] == "probes"
    assert "probes" not in by_port.values()


def test_the_extender_config_presents_a_client_certificate():
    config = yaml.safe_load((ROOT / "deploy" / "scheduler" / "kube-scheduler-config.yaml").read_text())
    (extender,) = config["extenders"]
    tls = extender["tlsConfig"]
    # ExtenderTLSConfig (KubeSchedulerConfiguration v1): these are its only fields.
    assert set(tls) <= {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
    assert tls["certFile"].endswith("/kube-scheduler.crt") and tls["keyFile"].endswith("/kube-scheduler.key")
    assert tls["caFile"] and not tls.get("insecure")
    assert extender["enableHTTPS"] is True


NETWORK_POLICY = KUSTOMIZE / "components" / "network-policy"
PLACEHOLDER = [{"ipBlock": {"cidr": "192.0.2.0/24"}}]


@pytest.fixture(scope="module")
def with_network_policy(tmp_path_factory) -> list[Obj]:
    return render_with_components(tmp_path_factory.mktemp("netpol"), NETWORK_POLICY)


def test_the_network_policy_renders_valid_and_the_same_from_both(with_network_policy):
    kustomized = one(with_network_policy, "NetworkPolicy", "gpushare-webhook")
    helm_objects = render_helm({"networkPolicy": {"enabled": True, "admissionFrom": PLACEHOLDER}})
    assert one(helm_objects, "NetworkPolicy", "gpushare-webhook") == kustomized
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(kustomized, version, strict=True)
    spec = kustomized["spec"]
    deployment = one(with_network_policy, "Deployment", "gpushare-webhook")
    assert spec["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert spec["policyTypes"] == ["Ingress"]  # egress stays open: the webhook watches the API server
    admission, ops = spec["ingress"]
    assert admission["ports"] == [{"port": "https", "protocol": "TCP"}] and admission["from"] == PLACEHOLDER
    assert ops["ports"] == [{"port": "ops", "protocol": "TCP"}]
    assert ops["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    # Off by default: not every network plugin enforces NetworkPolicy, and the sources are the operator's.
    assert "NetworkPolicy" not in {o["kind"] for o in render_helm({})}


def test_helm_refuses_a_network_policy_that_would_let_everyone_in():
    with pytest.raises(Exception, match=r"networkPolicy\.admissionFrom is required"):
        render_helm({"networkPolicy": {"enabled": True}})
    objects = render_helm({"networkPolicy": {"enabled": True, "admissionFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}},
                                                                                 {"ipBlock": {"cidr": "10.9.0.5/32"}}],
                                             "opsFrom": []}, "ops": {"port": 9555}}, namespace="gpu")
    policy = one(objects, "NetworkPolicy", "gpushare-webhook")
    assert policy["metadata"]["namespace"] == "gpu"
    (admission,) = policy["spec"]["ingress"]  # no ops sources: the ops port is closed to pods
    assert [p["ipBlock"]["cidr"] for p in admission["from"]] == ["10.0.0.0/24", "10.9.0.5/32"]
    kubernetes_validate.validate(policy, KUBE_VERSIONS[-1], strict=True)
    assert container_env(objects)["GPUSHARE_SERVER__OPS_PORT"] == "9555"
    service = one(objects, "Service", "gpushare-webhook")
    assert {"name": "ops", "port": 9555, "targetPort": "ops", "protocol": "TCP"} in service["spec"]["ports"]


# --- the opt-in kubelet /configz source (state.kubelet_configz) ---------------------------------

CONFIGZ_OBJECTS = {("ClusterRole", "", "gpushare-webhook-kubelet-configz"),
                   ("ClusterRoleBinding", "", "gpushare-webhook-kubelet-configz")}
CONFIGZ_ENV = {"name": "GPUSHARE_STATE__KUBELET_CONFIGZ__ENABLED", "value": "true"}


@pytest.fixture(scope="module")
def configz_rendered() -> dict[str, list[Obj]]:
    return {"kustomize": render_kustomize(ROOT / "deploy" / "overlays" / "kubelet-configz"),
            "helm": render_helm({"namespace": {"create": True}, "kubeletConfigz": {"enabled": True}})}


def test_nodes_proxy_is_never_granted_by_default(rendered):
    for obj in rendered:
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            assert not any(r.startswith("nodes/") for r in rule["resources"]), key(obj)
    container = one(rendered, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert CONFIGZ_ENV["name"] not in {e["name"] for e in container["env"]}


@pytest.mark.parametrize("how", ["kustomize", "helm"])
def test_kubelet_configz_grants_only_get_on_nodes_proxy_and_turns_the_reader_on(configz_rendered, how, monkeypatch):
    objects = configz_rendered[how]
    assert set(by_key(objects)) == EXPECTED | CONFIGZ_OBJECTS
    assert _rules_of(objects, "ClusterRole", "gpushare-webhook-kubelet-configz") == [
        {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    assert _rules_of(objects, "ClusterRole", "gpushare-webhook") == WEBHOOK_READS
    granted = one(objects, "ClusterRoleBinding", "gpushare-webhook-kubelet-configz")
    assert granted["roleRef"]["name"] == "gpushare-webhook-kubelet-configz"
    assert granted["subjects"] == [{"kind": "ServiceAccount", "name": "gpushare-webhook", "namespace": NS}]
    assert not any(b["roleRef"]["name"] == "gpushare-webhook-kubelet-configz"
                   for b in _bindings_to(objects, "gpushare-webhook-certs"))
    container = one(objects, "Deployment", "gpushare-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert CONFIGZ_ENV in container["env"]
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
    # The variable is what the server's settings read.
    from webhook.settings import load_settings

    monkeypatch.setenv(CONFIGZ_ENV["name"], CONFIGZ_ENV["value"])
    assert load_settings().state.kubelet_configz.enabled is True


def test_kubelet_configz_renders_the_same_in_kustomize_and_helm(configz_rendered):
    assert_same_objects(configz_rendered["kustomize"], configz_rendered["helm"])


def test_the_chart_readme_explains_every_value_and_the_scheduler_choice():
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", readme, flags=re.M))

    def leaves(values: Obj, prefix: str = "") -> set[str]:
        out = set()
        for name, value in values.items():
            path = f"{prefix}{name}"
            # Resource blocks and name maps are one value each in the table.
            if isinstance(value, dict) and value and name not in ("resources", "labels", "requests", "limits"):
                out |= leaves(value, path + ".")
            else:
                out.add(path)
        return out

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert leaves(values) == documented
    # The schema knows every value (and what Helm gives a dependency), and nothing else.
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(values) | {"global", "enabled"}
    assert "`scheduler=ack-co-scheduler`" in readme and "`scheduler=none`" in readme


# --- the opt-in custom workloads' webhook (kustomize component / Helm customWorkloads) ------------------

CUSTOM_WORKLOADS = KUSTOMIZE / "components" / "custom-workloads"
CUSTOM_WEBHOOK = "custom-workloads.validate.gpushare.io"


@pytest.fixture(scope="module")
def with_custom_workloads(tmp_path_factory) -> list[Obj]:
    return render_with_components(tmp_path_factory.mktemp("custom-workloads"), CUSTOM_WORKLOADS)


def test_the_custom_workloads_webhook_is_opt_in_and_the_same_from_kustomize_and_helm(with_custom_workloads,
                                                                                      kustomized, helm_rendered):
    from policies.model.workloads import BUILT_IN

    assert CUSTOM_WEBHOOK not in webhooks(kustomized) and CUSTOM_WEBHOOK not in webhooks(helm_rendered)
    validating = one(with_custom_workloads, "ValidatingWebhookConfiguration", "gpushare-webhook")
    # The component adds one webhook to the base's (kustomize puts it first), which it leaves as they were.
    base = one(kustomized, "ValidatingWebhookConfiguration", "gpushare-webhook")["webhooks"]
    assert [w for w in validating["webhooks"] if w["name"] != CUSTOM_WEBHOOK] == base
    assert len(validating["webhooks"]) == len(base) + 1
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(validating, version, strict=True)
    custom = webhooks(with_custom_workloads)[CUSTOM_WEBHOOK]
    assert custom["failurePolicy"] == "Fail" and custom["sideEffects"] == "None"
    assert custom["clientConfig"]["service"] == {"name": "gpushare-webhook", "namespace": NS, "path": "/validate",
                                                 "port": 443}
    assert {(r["apiGroups"][0], r["resources"][0], r["scope"]) for r in custom["rules"]} == {
        (k.group, k.plural, "Namespaced" if k.namespaced else "Cluster") for k in BUILT_IN}
    helm_objects = render_helm({"namespace": {"create": True}, "customWorkloads": {"enabled": True}})
    assert webhooks(helm_objects)[CUSTOM_WEBHOOK] == custom


def test_helm_registers_the_kinds_it_is_given_and_refuses_one_the_table_does_not_hold():
    objects = render_helm({"customWorkloads": {"enabled": True,
                                               "kinds": ["RayCluster.ray.io", "Job.batch.volcano.sh"]}})
    custom = webhooks(objects)[CUSTOM_WEBHOOK]
    assert [(r["apiGroups"], r["apiVersions"], r["resources"]) for r in custom["rules"]] == [
        (["ray.io"], ["v1", "v1alpha1"], ["rayclusters"]), (["batch.volcano.sh"], ["v1alpha1"], ["jobs"])]
    with pytest.raises(Exception, match=r"customWorkloads\.kinds names Job\.batch, which the workload table does not"):
        render_helm({"customWorkloads": {"enabled": True, "kinds": ["Job.batch"]}})
    # A kind of one's own needs the generated values, as other config names do.
    with pytest.raises(Exception, match="policy export --webhooks helm"):
        render_helm({"customWorkloads": {"enabled": True}, "config": {"workloads": {"kinds": [
            {"group": "example.com", "kind": "TrainingRun", "paths": ["spec.template"]}]}}})


def test_the_custom_workloads_condition_sends_a_bad_pytorchjob_and_not_a_cpu_one(with_custom_workloads):
    from tests.support.workload_cases import CASES

    (match,) = webhooks(with_custom_workloads)[CUSTOM_WEBHOOK]["matchConditions"]
    env = celpy.Environment()
    program = env.program(env.compile(match["expression"]))
    case = next(c for c in CASES if c.file == "pytorchjob.yaml")

    def sends(obj: Obj) -> bool:
        request = {"operation": "CREATE", "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
                   "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"}}
        return bool(program.evaluate({"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel(request)}))

    assert sends(case.with_mistake()) and sends(case.manifest())
    assert not sends(case.without_gpus())
