"""The dashboard's GPU quota view in a real headless browser (Debian's chromium through selenium, as
tests/dashboard/test_dashboard.py drives it): each quota with its namespaces and used / quota / left, the numbers
`inspect --quotas` prints, and a bar whose text says the same."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.dashboard.test_dashboard import DEMO, Dashboard, _text, browser  # noqa: F401  (the browser fixture)
from tests.support.check_helpers import run_gpushare
from tests.support.helpers import DATA

pytestmark = pytest.mark.processes

CLUSTER = DATA / "quota" / "cluster.yaml"


@pytest.fixture(scope="module")
def quotas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dashboard = Dashboard(CLUSTER, tmp_path_factory.mktemp("quotas"), "--refresh", "3600")
    yield dashboard
    dashboard.stop()


@pytest.fixture(scope="module")
def demo_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    dashboard = Dashboard(DEMO, tmp_path_factory.mktemp("demo-quotas"), "--refresh", "3600")
    yield dashboard
    dashboard.stop()


def test_each_quota_with_the_numbers_inspect_shows(browser: webdriver.Chrome, quotas: Dashboard) -> None:  # noqa: F811
    browser.get(quotas.url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#quotas tr.quota")
    shown = [(row.get_attribute("data-quota"), row.get_attribute("data-limit"),
              _text(row.find_element(By.CSS_SELECTOR, ".used")), _text(row.find_element(By.CSS_SELECTOR, ".hard")),
              _text(row.find_element(By.CSS_SELECTOR, ".left"))) for row in rows]
    inspected = json.loads(run_gpushare("inspect", "--quotas", "--snapshot", CLUSTER, "-o", "json").stdout)["quotas"]
    assert shown == [(q["quota"], q["limit"], f"{q['used']} {q['unit']}", f"{q['hard']} {q['unit']}",
                      f"{q['left']} {q['unit']}") for q in inspected]
    team_a = next(row for row in rows if row.get_attribute("data-quota") == "ResourceQuota team-a/gpu")
    assert _text(team_a).startswith("team-a ResourceQuota team-a/gpu requests.aliyun.com/gpu-mem 24 GiB 40 GiB 16 GiB")
    bar = team_a.find_element(By.CSS_SELECTOR, ".bar")
    assert bar.get_attribute("aria-label") == "ResourceQuota team-a/gpu: 24 of 40 GiB used, 16 left"
    fill = bar.find_element(By.CSS_SELECTOR, ".fill")
    assert fill.size["width"] == pytest.approx(bar.size["width"] * 0.6, abs=2)


def test_a_cluster_without_quota_says_so(browser: webdriver.Chrome, demo_dashboard: Dashboard) -> None:  # noqa: F811
    browser.get(demo_dashboard.url)
    assert _text(browser.find_element(By.ID, "quotas")) == ("GPU quotas No GPU quota: no ResourceQuota, "
                                                             "ElasticQuotaTree or ClusterQueue limits GPU memory or "
                                                             "compute.")
