"""GPU quota: the quota objects (ResourceQuota, ElasticQuotaTree, Kueue's queues) as their enforcers
read them (``quota_objects``), and the limits a namespace is held to with what is used and left
under each (``quota_usage``; what a pod charges is ``policies.model.pod_usage``).

May import ``policies.model``.
"""
