"""Placement: which card of which node a pod would take.

Cards and their free memory/compute, node placement filters, topology, capacity, the bindings
admitted but not yet seen by the watch, followers' view. May import ``policies.model``.
"""
