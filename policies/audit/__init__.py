"""The audit: judging every node and GPU pod of a cluster state at once.

May import every other package: ``policies.model``, ``policies.quota``, ``policies.rules``,
``policies.placement``, ``policies.scoring`` and ``policies.admission``.
"""
