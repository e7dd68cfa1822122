"""Scoring: ranking the nodes a pod fits (binpack or spread per card), and explaining a Pending pod
or workload: the node ranking, and the quota that refuses or holds it back.

May import ``policies.model``, ``policies.placement`` and ``policies.quota`` (the quota limits an
explanation names).
"""
