"""Scoring: ranking the nodes a pod fits (binpack or spread per card) and explaining the ranking.

May import ``policies.model`` and ``policies.placement.placement``.
"""
