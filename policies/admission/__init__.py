"""Admission: judging one review.

The engine that runs the rules and mutations on a review (and on an UPDATE, judges the change),
the budget of what one object may make the rules judge, the dry run (verdict, patch, node ranking).

May import ``policies.model``, ``policies.quota``, ``policies.rules``, ``policies.placement`` and
``policies.scoring``.
"""
