"""``POST /dry-run``: manifests in (YAML or JSON), verdicts, patches and rankings out.

The body is parsed by ``webhook.documents.manifests.parse_manifests`` (multi-document YAML, a JSON
object, a ``List`` or an AdmissionReview); the policy work is ``policies.dryrun``. Nothing
is written: not the state, not the binding assume-cache.

The answer is bounded (``dry_run`` settings): at most ``max_documents`` objects per request, the
best ``ranking_nodes`` nodes of each ranking with a count of the rest, and ``max_answer_bytes``
in all; past a bound, a 413 that names it. Without the bounds a hundred tiny documents drew a
ranking of every node each: an answer thousands of times the size of its question.
"""

from __future__ import annotations

from typing import Any

import msgspec
from flask import Blueprint, request

from policies.cluster import ClusterState
from policies.dryrun import DryRun, ObjectReport, PodPreview
from policies.resources import ShapeError
from policies.rules.base import Finding
from policies.scoring import ranking_entry
from policies.workloads import WorkloadConfigError
from webhook.documents.manifests import Manifest, ManifestError, parse_manifests
from webhook.documents.reader import TooManyDocuments
from webhook.http.body import BodyError, read_body
from webhook.http.routing import RouteTable, Work
from webhook.routes.observe import Observer, Refusal, observed
from webhook.routes.services import Services
from webhook.settings import DryRunSettings, InputSettings

BODY_SOURCE = "body"
_ENCODER = msgspec.json.Encoder()


class DryRunInputError(ValueError):
    """The body or the query cannot be judged (an HTTP 400)."""


def read_text_body(max_bytes: int) -> str:
    """The body as text; RequestEntityTooLarge (a 413) over ``max_bytes``, chunked or not."""
    try:
        raw = read_body(request.environ, max_bytes)
    except BodyError as exc:
        raise DryRunInputError(str(exc)) from None
    if not raw.strip():
        raise DryRunInputError("empty body; send Kubernetes manifests as YAML or JSON")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DryRunInputError(f"body is not UTF-8 (byte {exc.start})") from None


def _finding(finding: Finding, manifest: Manifest) -> dict[str, Any]:
    return {"rule": finding.rule, "severity": finding.severity, "message": finding.message,
            "path": finding.path_text, "line": manifest.line_of(finding.path)}


def _render(report: ObjectReport, manifest: Manifest, ranking_nodes: int | None) -> dict[str, Any]:
    verdict = report.verdict
    out: dict[str, Any] = {
        "kind": verdict.kind, "name": verdict.name, "namespace": verdict.namespace, "line": manifest.line,
        "allowed": verdict.allowed,
        "violations": [_finding(f, manifest) for f in verdict.violations],
        "warnings": [_finding(f, manifest) for f in verdict.warnings],
        "patch": verdict.patch,
        "mutated": report.mutated,
        "ranking": None,
        "node": report.judged_node or None,
    }
    preview = report.pod_preview
    if preview is not None:
        out["podTemplate"] = _preview(preview)
    if report.pod_previews:  # a custom workload: one per pod template, named by its path
        out["podTemplates"] = [{"path": p.path, **_preview(p)} for p in report.pod_previews]
    if report.ranking is not None and report.request is not None:
        demand = report.request.demand
        shown = report.ranking if ranking_nodes is None else report.ranking[:ranking_nodes]
        out["ranking"] = [ranking_entry(score, demand) for score in shown]
        if ranking_nodes is not None:
            out["rankingOmitted"] = len(report.ranking) - len(shown)
    return out


def _preview(preview: PodPreview) -> dict[str, Any]:
    out = {"appliedTo": preview.applied, "pod": preview.pod, "patch": preview.patch, "mutations": preview.patch_ids,
           "mutatedPod": preview.mutated_pod}
    if preview.mutated_template is not None:
        out["mutatedTemplate"] = preview.mutated_template
    return out


def _name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _check_node(node: str, state: ClusterState | None) -> None:
    if not node:
        return
    if state is None or state.get_node(node) is None:
        known = sorted(n.name for n in state.nodes())[:5] if state is not None else []
        hint = f" (known: {', '.join(known)}{', ...' if known else ''})" if known else ""
        raise DryRunInputError(f"?node={node}: no such node in the cluster state{hint}")


def dry_run_body(text: str, dry_run: DryRun, state: ClusterState | None, node: str,
                 limits: InputSettings, bounds: DryRunSettings | None = None) -> list[dict[str, Any]]:
    """One result per object in the body, in order; DryRunInputError for input that cannot be
    judged. With ``bounds`` (the server's), Refusal 413 past ``max_documents`` and each ranking
    cut to its best ``ranking_nodes`` (the local dashboard shows them all)."""
    _check_node(node, state)
    try:
        # With bounds, counted as the body is read: past the bound, nothing more is made of it.
        manifests = parse_manifests(text, BODY_SOURCE, limits, bounds.max_documents if bounds is not None else None)
    except TooManyDocuments as exc:
        raise Refusal(413, f"the body holds more than {exc.limit} objects; /dry-run judges at most {exc.limit} per "
                           "request (dry_run.max_documents): send them in smaller batches, or judge any number "
                           "offline with `gpushare check`") from None
    except ManifestError as exc:
        raise DryRunInputError(str(exc)) from None
    if not manifests:
        raise DryRunInputError("the body holds no Kubernetes object")
    results: list[dict[str, Any]] = []
    for manifest in manifests:
        kind = manifest.kind
        if not kind:
            raise DryRunInputError(f"{BODY_SOURCE}:{manifest.line}: object has no kind")
        namespace = str((manifest.obj.get("metadata") or {}).get("namespace") or "default") \
            if isinstance(manifest.obj.get("metadata"), dict) else "default"
        try:
            report = dry_run.report(kind, manifest.obj, state, namespace=namespace, node=node)
        except (ShapeError, WorkloadConfigError) as exc:  # this object cannot be judged; the others still are
            # Not allowed: the API server itself refuses an object of this shape.
            results.append({"kind": kind, "name": _name_of(manifest.obj), "line": manifest.line, "allowed": False,
                            "error": f"{BODY_SOURCE}:{manifest.line_of(exc.path)}: {kind}: {exc}"})
            continue
        results.append(_render(report, manifest, bounds.ranking_nodes if bounds is not None else None))
    if all("error" in result for result in results):  # nothing could be judged: the body is bad
        raise DryRunInputError("; ".join(str(result["error"]) for result in results))
    return results


def dry_run_routes(table: RouteTable, services: Services, observer: Observer, dry_run: DryRun) -> Blueprint:
    """``POST /dry-run[?node=NAME]``: verdicts, patches and rankings, no side effects."""
    routes = Blueprint("dry_run", __name__)

    def answer() -> Any:
        node = request.args.get("node", "")
        settings = services.settings
        bounds = settings.dry_run
        try:
            results = dry_run_body(read_text_body(settings.server.max_body_bytes), dry_run, services.state, node,
                                   settings.input, bounds)
        except DryRunInputError as exc:
            raise Refusal(400, str(exc)) from None
        encoded = _ENCODER.encode({"state": services.state_source, "cluster": services.state_description,
                                   "results": results})
        if len(encoded) > bounds.max_answer_bytes:
            raise Refusal(413, f"the answer would be {len(encoded)} bytes, more than dry_run.max_answer_bytes "
                               f"({bounds.max_answer_bytes}): send fewer objects per request")
        return msgspec.Raw(encoded)  # encoded once: the answer's JSON as it is

    path = table.declare("/dry-run", Work.TOOL, ["POST"])
    routes.add_url_rule(path, "dry_run", observed(observer, table.count(path), answer), methods=["POST"])
    return routes
