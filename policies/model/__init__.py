"""The model: what the objects are and what they say.

Settings, quantities, resource names, pods and workloads, nodes and the cluster snapshot, the
subject of a review, exemptions and grants, isolation. Pure data and reading; imports nothing
else of ``policies``.
"""
