"""The fake API server itself, driven by the official client: single objects and their events."""

from __future__ import annotations

import http.client
import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.support.fake_apiserver import FakeApiServer, running
from tests.support.helpers import wait_until
from webhook.state.live import core_api


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


# -- history, compaction and faults, each as kube-apiserver behaves (the double's docstring cites the
#    Kubernetes API Concepts page and the apiserver code for each) ---------------------------------

def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}}


PATH = "/api/v1/namespaces/ns/configmaps"


class Watch:
    """A raw watch stream over HTTP, read line by line with a deadline (the socket's timeout)."""

    def __init__(self, api: FakeApiServer, resource_version: str, bookmarks: bool = False) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
        query = f"watch=true&resourceVersion={resource_version}&timeoutSeconds=30"
        self.connection.request("GET", f"{PATH}?{query}" + ("&allowWatchBookmarks=true" if bookmarks else ""))
        self.response = self.connection.getresponse()

    def next(self) -> dict:
        line = self.response.readline()
        assert line, "the stream ended"
        return json.loads(line)

    def names(self, count: int) -> list[tuple[str, str]]:
        return [(e["type"], e["object"]["metadata"].get("name", "")) for e in (self.next() for _ in range(count))]

    def close(self) -> None:
        self.connection.close()


def get(api: FakeApiServer, path: str) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_an_open_watch_keeps_receiving_every_event_after_compaction():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"), configmap("b"))
        watch = Watch(api, str(api.resource_version))
        wait_until(lambda: api.open_watches() == 1, timeout=10)
        try:
            api.add(configmap("c"))
            api.compact()
            api.add(configmap("d"), configmap("e"), configmap("f"))
            assert watch.names(4) == [("ADDED", "c"), ("ADDED", "d"), ("ADDED", "e"), ("ADDED", "f")]
            api.compact()
            api.delete(configmap("a"))
            assert watch.names(1) == [("DELETED", "a")]
        finally:
            watch.close()


def test_compaction_keeps_only_the_history_an_open_watch_still_needs():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"), configmap("b"))
        api.compact()
        assert api._collections[("/api/v1", "configmaps")].history == []  # nothing open: all of it goes
        api.add(configmap("c"))
        watch = Watch(api, str(api.resource_version))
        wait_until(lambda: api.open_watches() == 1, timeout=10)
        try:
            api.add(configmap("d"))
            assert watch.names(1) == [("ADDED", "d")]
            api.compact()
            assert api._collections[("/api/v1", "configmaps")].history == []  # delivered: not kept
        finally:
            watch.close()


def test_a_watch_or_list_that_starts_below_the_compaction_gets_410():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"))
        old = api.resource_version
        api.add(configmap("b"))
        api.compact()
        watch = Watch(api, str(old))
        try:
            assert watch.response.status == 200  # the watch cache's answer: an ERROR event in the stream
            event = watch.next()
            assert event["type"] == "ERROR"
            assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
            assert "too old resource version" in event["object"]["message"]
            assert watch.response.readline() == b""  # and the stream ends
        finally:
            watch.close()
        api.gone_as_http = True
        status, body = get(api, f"{PATH}?watch=true&resourceVersion={old}")
        assert status == 410 and body["reason"] == "Expired"
        assert api.gone == {"watch-event": 1, "watch-http": 1}  # what a soak counts, by form
        # a new list (no continue token) is never too old: it reads the current state
        status, body = get(api, PATH)
        assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
        # a watch from the list's resourceVersion is served
        watch = Watch(api, body["metadata"]["resourceVersion"])
        try:
            api.add(configmap("c"))
            assert watch.names(1) == [("ADDED", "c")]
        finally:
            watch.close()


def test_a_continue_token_from_before_a_compaction_expires_with_a_token_for_the_rest():
    with running(FakeApiServer()) as api:
        api.add(*(configmap(n) for n in "abcd"))
        status, first = get(api, f"{PATH}?limit=2")
        assert status == 200 and [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
        token = first["metadata"]["continue"]
        api.add(configmap("e"))
        api.compact()
        status, gone = get(api, f"{PATH}?limit=2&continue={token}")
        assert status == 410 and gone["kind"] == "Status" and gone["reason"] == "Expired"
        assert "use the continue token in this response" in gone["message"] and api.gone == {"continue": 1}
        # the token in the Status reads the rest of the list as it is now (inconsistent: e shows up)
        rest: list[str] = []
        token = gone["metadata"]["continue"]
        while token:
            status, page = get(api, f"{PATH}?limit=2&continue={token}")
            assert status == 200 and int(page["metadata"]["resourceVersion"]) == api.resource_version
            rest += [i["metadata"]["name"] for i in page["items"]]
            token = page["metadata"].get("continue")
        assert rest == ["c", "d", "e"]


def test_a_compaction_between_two_pages_of_a_list():
    with running(FakeApiServer()) as api:
        api.add(*(configmap(n) for n in "abc"))
        api.compact_before_next_page(PATH)
        status, first = get(api, f"{PATH}?limit=2")
        assert status == 200  # the first page has no token: served
        status, second = get(api, f"{PATH}?limit=2&continue={first['metadata']['continue']}")
        assert status == 200  # nothing was written since: compacting at its revision expires nothing
        status, first = get(api, f"{PATH}?limit=2")
        api.add(configmap("d"))  # the cluster moves on during the list; etcd compacts
        status, gone = get(api, f"{PATH}?limit=2&continue={first['metadata']['continue']}")
        assert status == 410 and gone["reason"] == "Expired"
        status, again = get(api, f"{PATH}?limit=2")  # one compaction only: a new list pages through
        api.add(configmap("e"))
        status, second = get(api, f"{PATH}?limit=2&continue={again['metadata']['continue']}")
        assert status == 200 and [i["metadata"]["name"] for i in second["items"]] == ["c", "d"]


def test_expired_watches_end_with_an_error_event_and_cannot_resume():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"))
        start = str(api.resource_version)
        watch = Watch(api, start)
        wait_until(lambda: api.open_watches() == 1, timeout=10)
        try:
            api.add(configmap("b"))
            api.expire_watches()
            event = watch.next()
            if event["type"] == "ADDED":  # delivered before the expiry reached the stream
                event = watch.next()
            assert event["type"] == "ERROR" and event["object"]["code"] == 410
            assert event["object"]["message"] == "The resourceVersion for the provided watch is too old."
            assert watch.response.readline() == b""
        finally:
            watch.close()
        again = Watch(api, start)
        try:
            assert again.next()["object"]["code"] == 410  # history up to the expiry is compacted
        finally:
            again.close()


def test_bookmarks_only_when_asked_for_carry_only_a_resource_version():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"))
        asked, plain = Watch(api, str(api.resource_version), bookmarks=True), Watch(api, str(api.resource_version))
        wait_until(lambda: api.open_watches() == 2, timeout=10)
        try:
            api.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}})
            api.bookmark()
            event = asked.next()
            assert event == {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
                "resourceVersion": str(api.resource_version)}}}
            api.add(configmap("b"))
            assert plain.names(1) == [("ADDED", "b")]  # no bookmark came before it
        finally:
            asked.close()
            plain.close()


def test_dropped_connections_end_without_the_closing_chunk():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"))
        watch = Watch(api, str(api.resource_version))
        wait_until(lambda: api.open_watches() == 1, timeout=10)
        try:
            api.drop_watches()
            with pytest.raises((http.client.IncompleteRead, http.client.HTTPException, OSError)):
                watch.response.read()
        finally:
            watch.close()


def test_injected_failures_answer_a_status_then_recover():
    with running(FakeApiServer()) as api:
        api.add(configmap("a"))
        api.fail_next(2, 500, PATH)
        for _ in range(2):
            status, body = get(api, PATH)
            assert status == 500 and body["kind"] == "Status" and body["reason"] == "InternalError"
        status, body = get(api, PATH)
        assert status == 200 and len(body["items"]) == 1
        api.set_unavailable()
        status, body = get(api, PATH)
        assert status == 503 and body["reason"] == "ServiceUnavailable"
        api.set_unavailable(False)
        assert get(api, PATH)[0] == 200


def test_a_field_selector_lists_the_events_of_one_object(tmp_path):
    def event(name: str, kind: str, involved: str) -> dict:
        return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "ns"},
                "involvedObject": {"kind": kind, "name": involved, "namespace": "ns"}, "reason": "FailedCreate"}

    with running(FakeApiServer()) as api:
        api.add(event("a", "ReplicaSet", "web"), event("b", "Job", "web"), event("c", "ReplicaSet", "db"))
        client, _ = core_api(api.kubeconfig(tmp_path / "kubeconfig"))
        listed = client.list_namespaced_event("ns", field_selector="involvedObject.kind=ReplicaSet,"
                                                                  "involvedObject.name=web")
        assert [e.metadata.name for e in listed.items] == ["a"]
        assert len(client.list_namespaced_event("ns").items) == 3
