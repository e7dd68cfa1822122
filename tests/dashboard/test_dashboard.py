"""``gpushare dashboard`` in a real headless browser: Debian's chromium driven by selenium
through /usr/bin/chromedriver (selenium's own driver download needs a network).

One browser for the module, one dashboard process per snapshot."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from tests.support import isolation_cluster
from tests.support.audit_cluster import CGPU_NODE, PENDING, write_snapshot
from tests.support.check_helpers import run_gpushare
from tests.support.helpers import DATA, gpushare_executable, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "webhook" / "data" / "demo-snapshot.yaml"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get update && apt-get install -y chromium chromium-driver"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"the dashboard tests need a headless browser ({', '.join(missing)} missing): run `{INSTALL}`",
                    pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1600", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except WebDriverException as exc:
        pytest.fail(f"chromium did not start ({exc.msg}); install it with `{INSTALL}`", pytrace=False)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


class Dashboard:
    def __init__(self, snapshot: Path, workdir: Path, *args: str) -> None:
        self.log = workdir / "dashboard.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([gpushare_executable(), "dashboard", "--snapshot", str(snapshot),
                                             "--port", "0", *args], stdout=log, stderr=subprocess.STDOUT,
                                            cwd=workdir, env={k: v for k, v in os.environ.items()
                                                              if not k.startswith("GPUSHARE_")})

        def url() -> str | None:
            if self.process.poll() is not None:
                raise RuntimeError(f"dashboard exited: {self.log.read_text()}")
            found = re.search(r"serving (http://127\.0\.0\.1:\d+/)", self.log.read_text())
            return found.group(1) if found else None

        self.url = wait_until(url, timeout=30, what="gpushare dashboard listening")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    # Refreshes every hour unless a test asks for less (?refresh=2): a swap under a test's feet
    # would make the elements it reads stale.
    dashboard = Dashboard(DEMO, tmp_path_factory.mktemp("demo"), "--refresh", "3600")
    yield dashboard
    dashboard.stop()


@pytest.fixture(scope="module")
def troubled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    workdir = tmp_path_factory.mktemp("troubled")
    snapshot, config = write_snapshot(workdir)
    dashboard = Dashboard(snapshot, workdir, "--config", str(config), "--refresh", "3600")
    yield dashboard
    dashboard.stop()


@pytest.fixture(scope="module")
def isolation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    workdir = tmp_path_factory.mktemp("isolation")
    dashboard = Dashboard(isolation_cluster.write_snapshot(workdir), workdir, "--refresh", "3600")
    yield dashboard
    dashboard.stop()


def _text(element: Any) -> str:
    return " ".join(element.text.split())


def test_every_node_and_card_with_the_numbers_inspect_shows(browser: webdriver.Chrome, demo: Dashboard,
                                                            tmp_path: Path) -> None:
    browser.get(demo.url)
    assert browser.title == "gpushare dashboard"
    usage = json.loads(run_gpushare("inspect", "--snapshot", DEMO, "-o", "json").stdout)
    shown = {n.get_attribute("data-node"): n for n in browser.find_elements(By.CSS_SELECTOR, "article.node")}
    assert set(n["name"] for n in usage["nodes"]) <= set(shown)
    for node in usage["nodes"]:
        article = shown[node["name"]]
        assert f"mode {node['mode']}" in _text(article)
        assert _text(article.find_element(By.CSS_SELECTOR, ".node-mem")) == \
            f"{node['allocatedMemGiB']}/{node['totalMemGiB']} GiB"
        cards = article.find_elements(By.CSS_SELECTOR, "li.card")
        assert len(cards) == len(node["gpus"])
        for card, gpu in zip(cards, node["gpus"], strict=True):
            assert _text(card.find_element(By.CSS_SELECTOR, ".card-mem")) == \
                f"{gpu['allocatedMemGiB']}/{gpu['totalMemGiB']} GiB"
            bar = card.find_element(By.CSS_SELECTOR, ".bar")  # every bar has a text alternative
            assert bar.get_attribute("role") == "img"
            assert bar.get_attribute("aria-label").startswith(
                f"GPU{gpu['index']}: {gpu['allocatedMemGiB']} of {gpu['totalMemGiB']} GiB assigned")
            if node["mode"] == "core_mem":
                assert _text(card.find_element(By.CSS_SELECTOR, ".core-value")) == f"{gpu['allocatedCorePercent']}%"
    # The topology node is there too, with its whole GPUs.
    assert any("whole GPUs held" in _text(n) for n in shown.values())
    total = sum(n["totalMemGiB"] for n in usage["nodes"])
    used = sum(n["allocatedMemGiB"] for n in usage["nodes"])
    assert _text(browser.find_element(By.ID, "cluster-mem")).startswith(f"{used} / {total} GiB")
    # Pods on a card: a click opens them (no script needed).
    holder = next(c for c in browser.find_elements(By.CSS_SELECTOR, "li.card") if "1 pod" in _text(c))
    holder.find_element(By.TAG_NAME, "summary").click()
    assert "default/" in _text(holder.find_element(By.CSS_SELECTOR, ".pods"))
    screenshot = tmp_path / "dashboard-demo.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000


def test_the_page_refreshes_itself(browser: webdriver.Chrome, demo: Dashboard) -> None:
    browser.get(demo.url + "?refresh=2")
    live = browser.find_element(By.ID, "live")
    assert live.get_attribute("data-refreshed") is None
    wait_until(lambda: browser.find_element(By.ID, "live").get_attribute("data-refreshed"), timeout=15,
               what="the live section refreshed by its script")
    assert browser.find_elements(By.CSS_SELECTOR, "article.node")  # still there after the swap


def test_dry_run_form_returns_a_verdict(browser: webdriver.Chrome, demo: Dashboard) -> None:
    browser.get(demo.url)
    manifest = (DATA / "seeds" / "000-cuda-sample-33.yaml").read_text()
    area = browser.find_element(By.ID, "manifests")
    browser.execute_script("arguments[0].value = arguments[1];", area, manifest)
    browser.find_element(By.CSS_SELECTOR, "#dry-run button[type=submit]").click()
    results = wait_until(lambda: browser.find_elements(By.ID, "dry-run-results"), timeout=15, what="dry-run results")
    text = _text(results[0])
    assert "denied" in text.lower() and "GS001" in text and "use 30 or 35" in text
    assert browser.find_elements(By.CSS_SELECTOR, "#dry-run-results table.ranking tbody tr")
    browser.find_element(By.ID, "manifests").clear()
    browser.find_element(By.CSS_SELECTOR, "#dry-run button[type=submit]").click()
    assert "Paste one or more" in _text(wait_until(lambda: browser.find_elements(By.ID, "dry-run-error"),
                                                   timeout=15, what="the empty-form error")[0])


def test_findings_and_pending_pods_with_their_explanation(browser: webdriver.Chrome, troubled: Dashboard,
                                                          tmp_path: Path) -> None:
    browser.get(troubled.url)
    rules = _text(browser.find_element(By.ID, "rules"))
    for rule in ("GA001", "GA002", "GA003", "GA004", "GA005", "GA006", "GA007", "GS001"):
        assert rule in rules
    over = browser.find_elements(By.CSS_SELECTOR, "li.card.over")
    assert over and "over-committed" in _text(over[0])  # said in words, not only by colour
    pending = browser.find_element(By.CSS_SELECTOR, f"article.pending-pod[data-pod='{PENDING[0]}/{PENDING[1]}']")
    assert f"To fit on {CGPU_NODE}" in _text(pending) and "10 GiB more would have to be free" in _text(pending)
    assert _text(browser.find_element(By.ID, "cluster-pending")) == "1"
    assert browser.save_screenshot(str(tmp_path / "dashboard-findings.png"))


def test_pods_setting_what_the_device_plugin_sets_show_on_their_node(browser: webdriver.Chrome,
                                                                      isolation: Dashboard) -> None:
    browser.get(isolation.url)
    rules = {tuple(_text(cell) for cell in row.find_elements(By.TAG_NAME, "td"))
             for row in browser.find_elements(By.CSS_SELECTOR, "#rules tbody tr")}
    assert {("GS010", "deny", "3"), ("GS011", "warn", "2")} <= rules  # the GPU-free monitor's node counts too
    node = browser.find_element(By.CSS_SELECTOR, f"article.node[data-node='{isolation_cluster.NODE}']")
    findings = [_text(li) for li in node.find_elements(By.CSS_SELECTOR, "ul.findings li")]
    assert f"⚠ {isolation_cluster.FORGED_MESSAGE}" in findings
    assert f"⚠ {isolation_cluster.DISABLED_MESSAGE}" in findings


def test_loopback_only(demo: Dashboard) -> None:
    import requests

    port = demo.url.rsplit(":", 1)[1].strip("/")
    assert requests.get(demo.url, timeout=5).status_code == 200
    assert requests.get(demo.url, headers={"Host": f"evil.example:{port}"}, timeout=5).status_code == 403
    page = requests.get(demo.url, timeout=5).text
    assert "http://" not in page.replace(demo.url, "") and "https://" not in page  # nothing from a network


def test_last_audit_names_its_time_zone_and_table_rows_are_as_tall_as_their_text(
        browser: webdriver.Chrome, troubled: Dashboard) -> None:
    browser.get(troubled.url)
    summary = _text(browser.find_element(By.CSS_SELECTOR, "dl.summary"))
    assert re.search(r"Last audit \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+-]\d\d:\d\d", summary), summary
    # The two tables side by side are each as tall as their rows: a short one is not stretched to
    # the other's height (which made its rows tall).
    heights = {table: [row.size["height"] for row in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")]
               for table in ("modes", "rules")}
    assert len(heights["rules"]) != len(heights["modes"]), heights  # one is shorter
    every = heights["modes"] + heights["rules"]
    assert max(every) <= min(every) * 1.3, heights


def test_the_dry_run_form_refuses_a_post_from_another_origin(demo: Dashboard) -> None:
    import requests

    form = {"manifests": (DATA / "seeds" / "000-cuda-sample-33.yaml").read_text()}
    origin = demo.url.rstrip("/")
    elsewhere = requests.post(demo.url + "dry-run", data=form, headers={"Origin": "http://evil.example"}, timeout=30)
    assert (elsewhere.status_code, elsewhere.text) == (403, "cross-origin form posts are refused; open the "
                                                            "dashboard itself\n")
    other_port = requests.post(demo.url + "dry-run", data=form, headers={"Origin": "http://127.0.0.1:1"}, timeout=30)
    assert other_port.status_code == 403
    # What browsers say of a form on another site (Fetch Metadata), whatever its Origin.
    for site in ("cross-site", "same-site"):
        refused = requests.post(demo.url + "dry-run", data=form, headers={"Sec-Fetch-Site": site, "Origin": "null"},
                                timeout=30)
        assert refused.status_code == 403, site
    itself = requests.post(demo.url + "dry-run", data=form, headers={"Origin": origin}, timeout=30)
    assert itself.status_code == 200 and "GS001" in itself.text
    # The page's own form as a browser posts it (the real browser does in test_dry_run_form_returns_a_verdict).
    own = requests.post(demo.url + "dry-run", data=form, headers={"Sec-Fetch-Site": "same-origin", "Origin": "null"},
                        timeout=30)
    assert own.status_code == 200
    tool = requests.post(demo.url + "dry-run", data=form, timeout=30)  # no Origin: not a browser
    assert tool.status_code == 200
