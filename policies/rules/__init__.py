"""Rule families; importing this package registers every rule."""

from . import node_rules, placement_rules, pod_resources  # noqa: F401
from .base import REGISTRY, Finding, Rule, Subject, UserInfo

__all__ = ["REGISTRY", "Finding", "Rule", "Subject", "UserInfo"]
