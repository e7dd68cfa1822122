"""The dry run of manifests: one result per object (verdict, findings with their lines, patch,
pod previews, ranking), shared by ``POST /dry-run`` (webhook.routes.dry_run) and the local dashboard
(webhook.dashboard). No HTTP here: the caller reads the text and says what an error becomes."""

from __future__ import annotations

from typing import Any

from policies.admission.dryrun import DryRun, ObjectReport, PodPreview
from policies.model.cluster import ClusterState
from policies.model.resources import ShapeError
from policies.model.workloads import WorkloadConfigError
from policies.rules.base import Finding
from policies.scoring.scoring import ranking_entry
from webhook.documents.manifests import Manifest, ManifestError, parse_manifests
from webhook.documents.reader import TooManyDocuments
from webhook.settings import DryRunSettings, InputSettings

BODY_SOURCE = "body"


class DryRunInputError(ValueError):
    """The body or the query cannot be judged (an HTTP 400)."""


class TooManyObjects(ValueError):
    """More objects than ``dry_run.max_documents`` (an HTTP 413)."""


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
    judged. With ``bounds`` (the server's), TooManyObjects past ``max_documents`` and each ranking
    cut to its best ``ranking_nodes`` (the local dashboard shows them all)."""
    _check_node(node, state)
    try:
        # With bounds, counted as the body is read: past the bound, nothing more is made of it.
        manifests = parse_manifests(text, BODY_SOURCE, limits, bounds.max_documents if bounds is not None else None)
    except TooManyDocuments as exc:
        raise TooManyObjects(f"the body holds more than {exc.limit} objects; /dry-run judges at most {exc.limit} per "
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
