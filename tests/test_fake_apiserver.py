"""The fake API server itself, driven by the official client: single objects and their events."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from webhook.state.live import core_api

from .fake_apiserver import FakeApiServer, running


def test_create_get_patch_delete_and_the_watch_sees_each(tmp_path):
    with running(FakeApiServer()) as api:
        client, _ = core_api(api.kubeconfig(tmp_path / "kubeconfig"))
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
                "data": {"a": "1"}}
        client.create_namespaced_config_map("ns", body)
        with pytest.raises(ApiException) as exists:
            client.create_namespaced_config_map("ns", body)
        assert exists.value.status == 409
        assert client.read_namespaced_config_map("c", "ns").data == {"a": "1"}
        client.patch_namespaced_config_map("c", "ns", {"data": {"b": "2"}})
        assert client.read_namespaced_config_map("c", "ns").data == {"a": "1", "b": "2"}
        client.delete_namespaced_config_map("c", "ns")
        with pytest.raises(ApiException) as gone:
            client.read_namespaced_config_map("c", "ns")
        assert gone.value.status == 404
        stream = client.list_namespaced_config_map("ns", watch=True, resource_version="1000", timeout_seconds=1,
                                                   _preload_content=False)
        events = [json.loads(line) for line in stream.read().splitlines()]
        assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(versions)
        listed = client.list_namespaced_config_map("ns")
        assert listed.items == [] and int(listed.metadata.resource_version) == versions[-1]
