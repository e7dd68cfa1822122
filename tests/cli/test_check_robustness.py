"""Whatever the input, ``gpushare check`` answers 0, 1 or 2, never a traceback."""

from __future__ import annotations

import json

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.profiles import examples
from webhook.cli.commands import main

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-200, 200), st.text(max_size=6),
                    st.sampled_from(["2Gi", "33", "1e3", "500m", "GS001,GS003", "-5", ""]))
KEYS = st.sampled_from(["apiVersion", "kind", "metadata", "name", "namespace", "annotations", "spec",
                        "template", "jobTemplate", "containers", "initContainers", "resources", "limits",
                        "requests", "items", "nodeName", "gpushare.io/exempt", "gpushare.io/exempt-reason",
                        "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "nvidia.com/gpu"])
KINDS = st.sampled_from(["Pod", "Job", "CronJob", "Deployment", "Node", "Binding", "List", "Service", 7])
TREES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(KEYS, inner, max_size=4)), max_leaves=25)


def _objects(tree, kind):
    return {"kind": kind, **tree} if isinstance(tree, dict) else tree


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(st.tuples(TREES, KINDS), min_size=1, max_size=3), as_json=st.booleans())
def test_any_structure_is_judged_or_refused_cleanly(docs, as_json):
    objects = [_objects(tree, kind) for tree, kind in docs]
    text = json.dumps(objects[0]) if as_json else "\n---\n".join(json.dumps(o) for o in objects)
    result = CliRunner().invoke(main, ["check", "--format", "json", "-"], input=text)
    assert result.exit_code in (0, 1, 2), (text, result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), text


@settings(max_examples=examples(100), deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_are_judged_or_refused_cleanly(raw):
    result = CliRunner().invoke(main, ["check", "-"], input=raw)
    assert result.exit_code in (0, 1, 2), (raw, result.output, result.exception)
