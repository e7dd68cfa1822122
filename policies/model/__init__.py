"""The model: what the objects are and what they say, pure data and reading.

Settings and resource names (``settings``, ``resources``, ``quantity``, ``field_paths``), nodes, pods
and the cluster snapshot (``cluster``, ``cluster_manifests``, ``cluster_snapshot``, ``selectors``,
``modes``, ``ecs``, ``catalog``, ``compatibility``), workloads (``workloads``, ``workload_sites``),
the subject of a review (``subject``), exemptions and grants, env isolation (``isolation``,
``isolation_findings``, ``env_expansion``), GS003's and GS007's readings (``gpu_memory``,
``near_miss``), what a pod charges quotas (``pod_usage``), rule sources and warning text.

Imports nothing else of ``policies``: every other package is built on it.
"""
