"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Selenium.

Starts ``hami-web demo --keep-serving`` as a user would, reads the dashboard URL it prints, and checks the
rendered DOM: a heatmap cell per device whose hover shows its pods, the Hygon node's DCUs under their family,
the family filter, the pending pod with its reason, the what-if form's answer (for NVIDIA GPUs and for DCUs),
the decision log. Screenshots go to ``test-artifacts/screenshots/`` for a person to
open. Nothing downloads a browser: without ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (or selenium)
the module is skipped with one line saying so.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("HAMI_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HAMI_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
DEMO_START_SECONDS = 90.0
PAGE_WAIT_SECONDS = 10.0
# 20 NVIDIA GPUs (2 in MIG mode), 2 Hygon DCUs, 4 Cambricon MLUs, 8 Ascend NPUs, 2 Biren, 4 GCU, 2 DRS GCUs,
# 4 Metax, 2 Metax sGPU cards, 2 Mthreads, 4 Vastai, 8 whole XPUs, 8 vXPU cards, 2 AMD GPUs, 6 AWS Neuron devices
DEMO_GPUS = 78
DEMO_NODES = 19

_missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(path) and os.access(path, os.X_OK))]
if _missing:
    pytest.skip(f"browser tests skipped: {', '.join(_missing)} not installed (apt-get install chromium "
                "chromium-driver)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests skipped: selenium is not installed")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


def _read_lines(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)


@pytest.fixture(scope="module")
def dashboard_url() -> Iterator[str]:
    """``hami-web demo --keep-serving`` running; the dashboard URL it printed."""
    process = subprocess.Popen([sys.executable, "-m", "hami_web", "demo", "--keep-serving"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    seen: list[str] = []
    url = ""
    try:
        while not url:
            try:
                line = lines.get(timeout=DEMO_START_SECONDS)
            except queue.Empty:
                pytest.fail("the demo printed no dashboard URL in time:\n" + "".join(seen))
            seen.append(line)
            match = re.match(r"Dashboard \(read-only, loopback\): (http://\S+)", line)
            url = match.group(1) if match else ""
            if process.poll() is not None and lines.empty():
                pytest.fail("the demo exited:\n" + "".join(seen))
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless Chromium with a fresh profile, no network besides the pages, no updates, no sync."""
    profile = tempfile.mkdtemp(prefix="hami-web-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={profile}", "--window-size=1360,1000"):
        options.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for a driver online
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(browser: webdriver.Chrome, url: str, ready_css: str) -> None:
    browser.get(url)
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ready_css)))


def _screenshot(browser: webdriver.Chrome, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1360, max(1000, int(height) + 40))
    browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def test_overview_draws_a_cell_per_gpu_and_hover_shows_its_pods(browser: webdriver.Chrome, dashboard_url: str
                                                                  ) -> None:
    _open(browser, dashboard_url, "#heatmap .cell")
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap .cell")
    assert len(cells) == DEMO_GPUS
    assert len(browser.find_elements(By.CSS_SELECTOR, "#heatmap tr.node-row")) == DEMO_NODES
    busiest = next(cell for cell in cells if "ml/" in (cell.get_attribute("title") or ""))
    ActionChains(browser).move_to_element(busiest).perform()
    detail = browser.find_element(By.ID, "gpu-detail")
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(lambda _: "ml/" in detail.text)
    busiest.click()
    assert "selected" in (busiest.get_attribute("class") or "")
    # One histogram of 10 bars per device type: A100 (40 and 80 GB), A40, T4, DCU-BW100, MLU370-X4, Ascend910B3, Biren,
    # GCU, Enflame (DRS GCUs), Metax-GPU, Metax-SGPU, Mthreads, Vastai, XPU-P800 (vXPU cards), kunlun (whole XPUs),
    # AMD_Instinct_MI300X, AWSNeuron.
    assert len(browser.find_elements(By.CSS_SELECTOR, ".histogram svg rect.bar")) == 18 * 10
    _screenshot(browser, "overview")


def test_the_dcu_node_shows_its_dcus_under_their_family(browser: webdriver.Chrome, dashboard_url: str) -> None:
    _open(browser, dashboard_url, "#heatmap .cell")
    row = browser.find_element(By.CSS_SELECTOR, '#heatmap tr.node-row[data-node="dcu-1"]')
    assert [tag.text for tag in row.find_elements(By.CSS_SELECTOR, "span.family")] == ["DCU"]
    cells = row.find_elements(By.CSS_SELECTOR, ".cell")
    assert [cell.get_attribute("data-family") for cell in cells] == ["DCU", "DCU"]
    held = next(cell for cell in cells if "ml/dcu-inference" in (cell.get_attribute("title") or ""))
    ActionChains(browser).move_to_element(held).perform()
    detail = browser.find_element(By.ID, "gpu-detail")
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(lambda _: "ml/dcu-inference" in detail.text)
    assert detail.text.startswith("dcu-1 DCU ") and "16384 MiB, 50%" in detail.text
    totals = browser.find_element(By.CSS_SELECTOR, '#family-totals tr[data-family="DCU"]')
    assert totals.text.split()[:3] == ["DCU", "1", "2"]
    Select(browser.find_element(By.NAME, "family")).select_by_value("DCU")  # submits the form on change
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(lambda b: "family=DCU" in b.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#heatmap tr.node-row")
    assert [row.get_attribute("data-node") for row in rows] == ["dcu-1"]
    _screenshot(browser, "overview-dcu")


def test_overview_type_filter_narrows_the_heatmap(browser: webdriver.Chrome, dashboard_url: str) -> None:
    _open(browser, dashboard_url, "#heatmap .cell")
    select = Select(browser.find_element(By.NAME, "type"))
    t4 = next(option.get_attribute("value") for option in select.options if "T4" in option.text)
    select.select_by_value(t4)  # the page's script submits the form on change
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(lambda b: "type=" in b.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#heatmap tr.node-row")
    assert [row.get_attribute("data-node") for row in rows] == ["gpu-t4-1"]


def test_pending_page_shows_the_refused_pod_and_its_reason(browser: webdriver.Chrome, dashboard_url: str) -> None:
    _open(browser, dashboard_url + "pending", "main")
    articles = {a.get_attribute("data-pod"): a for a in browser.find_elements(By.CSS_SELECTOR, "article.pending")}
    assert "ml/too-big" in articles
    assert "CardInsufficientMemory" in articles["ml/too-big"].text
    _screenshot(browser, "pending")


def test_whatif_form_answers_how_many_fit(browser: webdriver.Chrome, dashboard_url: str) -> None:
    _open(browser, dashboard_url + "whatif", "#whatif-form")
    memory = browser.find_element(By.NAME, "memory_mib")
    memory.clear()
    memory.send_keys("8000")
    browser.find_element(By.ID, "whatif-submit").click()
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(
        expected_conditions.presence_of_element_located((By.ID, "fits-count")))
    assert int(browser.find_element(By.ID, "fits-count").text) > 0
    assert browser.find_elements(By.CSS_SELECTOR, "#whatif-nodes tr")
    _screenshot(browser, "whatif")
    Select(browser.find_element(By.NAME, "family")).select_by_value("DCU")
    browser.find_element(By.ID, "whatif-submit").click()
    WebDriverWait(browser, PAGE_WAIT_SECONDS).until(lambda b: "family=DCU" in b.current_url)
    answer = browser.find_element(By.ID, "whatif-answer").text
    assert "Hygon DCU" in answer and "DCU-BW100" in answer
    assert [row.text.split()[0] for row in browser.find_elements(By.CSS_SELECTOR, "#whatif-nodes tr")[1:]] == ["dcu-1"]


def test_decisions_page_lists_the_demo_decisions_and_charts_latency(browser: webdriver.Chrome, dashboard_url: str
                                                                     ) -> None:
    _open(browser, dashboard_url + "decisions", "#decisions")
    rows = browser.find_elements(By.CSS_SELECTOR, "#decisions tr.decision")
    assert any("bound" in row.text for row in rows) and any("unschedulable" in row.text for row in rows)
    lines = browser.find_elements(By.CSS_SELECTOR, "#latency-chart polyline")
    assert any(line.get_attribute("points") for line in lines)
    _screenshot(browser, "decisions")
