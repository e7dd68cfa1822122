"""The audit: judging every object of a cluster at once.

May import every other package of ``policies``.
"""
