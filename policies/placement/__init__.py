"""Placement: which card of which node a pod would take.

Cards and their occupancy (``cards``), where a pod's containers would go on them (``card_choice``),
whether a pod fits a node (``placement``), whole GPUs on topology nodes (``topology``), GC001's
walk (``capacity``) and its index (``capacity_index`` over ``node_groups``, its work counted by
``work_budget``), allocation as ``kubectl inspect cgpu`` reports it (``allocation``), bindings
admitted but not yet seen by the watch (``assume``) and followers' view (``leadership``).

May import ``policies.model``.
"""
