"""CustomResourceDefinitions that let the fake API server serve the quota kinds (tests/support/fake_apiserver.py).

Written for the tests, not copied: each keeps every field (``x-kubernetes-preserve-unknown-fields``), so
what is under test is how gpushare reads the objects, not a schema. ACK does not publish the
ElasticQuotaTree CRD; Kueue's own CRDs (kubernetes-sigs/kueue config/components/crd/bases) are far larger
and would be pruned to the same objects.
"""

from __future__ import annotations

from typing import Any


def crd(group: str, version: str, kind: str, plural: str, namespaced: bool) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced" if namespaced else "Cluster",
                     "names": {"kind": kind, "plural": plural},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


ELASTIC_QUOTA_TREE = crd("scheduling.sigs.k8s.io", "v1beta1", "ElasticQuotaTree", "elasticquotatrees", True)
CLUSTER_QUEUE = crd("kueue.x-k8s.io", "v1beta1", "ClusterQueue", "clusterqueues", False)
LOCAL_QUEUE = crd("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues", True)
QUOTA_CRDS = (ELASTIC_QUOTA_TREE, CLUSTER_QUEUE, LOCAL_QUEUE)
