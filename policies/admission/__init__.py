"""Admission: judging one review.

The engine that runs the rules and mutations on a review (and on an UPDATE, judges the change),
its evaluation budget, the dry run. May import ``policies.model``, ``policies.quota``,
``policies.rules``, ``policies.placement.placement`` and ``policies.scoring.scoring``.
"""
