"""Generated from the rules' declarations: the webhooks' matchConditions (``match_conditions``,
``workload_conditions``) and the backstop ValidatingAdmissionPolicy (``backstop``, its variables,
its isolation CEL, GS007's near-miss test as RE2 built on ``automata``).

May import ``policies.model``, ``policies.quota`` and ``policies.rules``.
"""
