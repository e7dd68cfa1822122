"""GPU quota: the quota objects (ElasticQuotaTree, ResourceQuota) and what a namespace uses.

May import ``policies.model``.
"""
