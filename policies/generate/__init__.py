"""Generated from the rules' declarations: the webhooks' matchConditions and the backstop policy.

May import ``policies.model``, ``policies.quota`` and ``policies.rules``.
"""
