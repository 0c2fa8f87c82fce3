"""The dashboard's JSON twins on the demo cluster, through the Flask test client and the in-process API server.

Covers: overview totals and one heatmap cell per device with its pods, paging, sorting by fullness, the
GPU-type filter, the memory/cores switch and the free-memory histograms; every device's family (each cell, the
totals per family, each node's families, the family filter, the histograms; the demo's Hygon node renders with
its DCUs and the DCU pod on one); the pending pod with the filter's grouped reasons and the nearest miss; the
decision log of filters and binds with latencies; the what-if answer as ``kubectl hami capacity`` gives it, for
NVIDIA and for DCUs; the HTML pages render the same data; bad parameters answer 400 naming the parameter; the
dashboard lives on its own listener only; nothing but GET is served.
"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from hami_web.ops.capacity import PodShape, plan_capacity
from hami_web.server.listeners import LISTENER_ENVIRON_KEY

from .conftest import PENDING_POD, DemoCluster

DEMO_GPUS = 78  # 4 + 4 A40, 8 A100, 2 MIG A100, 2 T4, 2 Hygon DCUs, 4 Cambricon MLUs, 8 Ascend 910B3 NPUs,
# 2 Biren cards, 4 Enflame GCUs, 2 Enflame DRS GCUs, 4 Metax GPUs, 2 Metax sGPU cards, 2 Moore Threads GPUs, 4 Vastai
# dies, 8 whole XPUs, 8 vXPU cards, 2 AMD GPUs, 6 AWS Neuron devices
DEMO_NODES = 19


@pytest.fixture
def client(demo: DemoCluster) -> FlaskClient:
    return demo.runtime.app.test_client()


def _get(client: FlaskClient, path: str) -> dict:
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_overview_has_one_cell_per_gpu_with_the_pods_the_cache_holds(client: FlaskClient, demo: DemoCluster) -> None:
    overview = _get(client, "/ui/api/overview")
    cells = [gpu for node in overview["nodes"] for gpu in node["gpus"]]
    assert len(cells) == overview["totals"]["gpus"] == DEMO_GPUS
    held = {usage.name for usage in demo.runtime.cache.pod_usages()}
    shown = {pod["pod"].split("/")[1] for cell in cells for pod in cell["pods"]}
    assert shown == held
    assert overview["totals"]["pods"] == len(held)


def test_overview_sorts_by_fullness_of_the_chosen_metric(client: FlaskClient) -> None:
    for metric in ("memory", "cores"):
        nodes = _get(client, f"/ui/api/overview?metric={metric}&sort=fullness")["nodes"]
        fills = [node["fill"] for node in nodes]
        assert fills == sorted(fills, reverse=True)
        for cell in (gpu for node in nodes for gpu in node["gpus"]):
            used, total = (("memory_booked_mib", "memory_mib") if metric == "memory" else ("cores_booked", "cores"))
            # A device without memory (AWS Neuron) is never full of it.
            assert cell["fill"] == pytest.approx(cell[used] / cell[total] if cell[total] else 0.0, abs=1e-4)


def test_overview_pages_by_node_and_keeps_the_totals(client: FlaskClient) -> None:
    per_page = -(-DEMO_NODES // 2)  # two pages, whatever the demo holds
    first = _get(client, f"/ui/api/overview?sort=name&per_page={per_page}")
    second = _get(client, f"/ui/api/overview?sort=name&per_page={per_page}&page=2")
    assert first["paging"] == {"page": 1, "pages": 2, "per_page": per_page, "total": DEMO_NODES}
    names = [node["name"] for node in first["nodes"] + second["nodes"]]
    assert names == sorted(names) and len(names) == DEMO_NODES
    assert first["totals"] == second["totals"]


def test_overview_filters_by_gpu_type(client: FlaskClient) -> None:
    t4 = next(t for t in _get(client, "/ui/api/overview")["gpu_types"] if "T4" in t)
    nodes = _get(client, f"/ui/api/overview?type={t4}")["nodes"]
    assert [node["name"] for node in nodes] == ["gpu-t4-1"]


def test_overview_draws_a_free_memory_histogram_per_gpu_type(client: FlaskClient) -> None:
    histograms = _get(client, "/ui/api/overview")["histograms"]
    assert [(h["family"], h["type"]) for h in histograms] == [
        ("AMD", "AMD_Instinct_MI300X"), ("AWSNeuron", "AWSNeuron"), ("Ascend910B3", "Ascend910B3"),
        ("Biren", "Biren"),
        ("DCU", "DCU-BW100"), ("Enflame", "Enflame"), ("GCU", "GCU"), ("MLU", "MLU370-X4"),
        ("Metax-GPU", "Metax-GPU"), ("Metax-SGPU", "Metax-SGPU"), ("Mthreads", "Mthreads"),
        ("NVIDIA", "NVIDIA-NVIDIA A100-SXM4-40GB"), ("NVIDIA", "NVIDIA-NVIDIA A100-SXM4-80GB"),
        ("NVIDIA", "NVIDIA-NVIDIA A40"), ("NVIDIA", "NVIDIA-Tesla T4"), ("Vastai", "Vastai"), ("XPU", "XPU-P800"),
        ("kunlun", "kunlun")]
    for histogram in histograms:
        assert sum(bar["count"] for bar in histogram["bars"]) == histogram["gpus"]
    # Unhealthy and cordoned GPUs cannot take pods: they are not free memory.
    assert sum(h["gpus"] for h in histograms) == DEMO_GPUS - 2


def test_pending_shows_the_refused_pod_with_grouped_reasons_and_nearest_miss(client: FlaskClient) -> None:
    pods = {pod["pod"]: pod for pod in _get(client, "/ui/api/pending")["pods"]}
    too_big = pods[PENDING_POD]
    causes = {group["cause"]: group for group in too_big["last_filter"]["groups"]}
    assert causes["CardInsufficientMemory"]["nodes"] == 5
    assert too_big["attempts"] == 1 and too_big["age_seconds"] >= 0
    assert too_big["now"]["verdict"] == "unschedulable"
    assert too_big["now"]["nearest_miss"] is None  # no GPU is that large: freeing memory would not help
    whole_card = pods["ml/whole-card"]["now"]
    assert whole_card["nearest_miss"]["text"] == "gpu-t4-1: GPU 0 has 13360 of 15360 MiB free, the pod asks 15360 MiB"


def test_pending_leaves_out_placed_pods(client: FlaskClient, demo: DemoCluster) -> None:
    placed = {f"{u.namespace}/{u.name}" for u in demo.runtime.cache.pod_usages()}
    assert not placed & {pod["pod"] for pod in _get(client, "/ui/api/pending")["pods"]}


def test_decisions_list_filters_and_binds_newest_first_with_latency(client: FlaskClient, demo: DemoCluster) -> None:
    answer = _get(client, "/ui/api/decisions")
    decisions = answer["decisions"]
    placed = [d for d in decisions if d["kind"] == "filter" and d["result"] == "placed"]
    bound = [d for d in decisions if d["kind"] == "bind" and d["result"] == "bound"]
    nodes = {node["metadata"]["name"] for node in demo.apiserver.list("nodes")}
    assert {d["pod"] for d in bound} == {pod for pod, node in demo.outcomes.items() if node in nodes}
    assert all(d["node"] and d["gpus"] for d in placed)
    assert any(d["pod"] == PENDING_POD and d["result"] == "unschedulable" for d in decisions)
    assert [d["at"] for d in decisions] == sorted((d["at"] for d in decisions), reverse=True)
    assert all(d["latency_ms"] > 0 for d in decisions)
    assert answer["latency"]["bind"]["count"] == len([d for d in decisions if d["kind"] == "bind"])
    only_binds = _get(client, "/ui/api/decisions?kind=bind")["decisions"]
    assert {d["kind"] for d in only_binds} == {"bind"}


def test_whatif_answers_as_the_capacity_command(client: FlaskClient, demo: DemoCluster) -> None:
    answer = _get(client, "/ui/api/whatif?gpus=1&memory_mib=8000&cores=10")["answer"]
    dashboard = demo.runtime.app.extensions["hami_web"].dashboard
    report = plan_capacity(dashboard.snapshot(), PodShape(gpus=1, memory_mib=8000, cores=10), dashboard.policies())
    assert answer["fits"] == report.fits > 0
    assert answer["by_gpu_type"] == report.by_gpu_type
    assert sum(row["pods"] for row in answer["by_node"]) == report.fits
    assert answer["runs_out_first"] == report.runs_out_first


def test_whatif_without_a_shape_only_offers_the_form(client: FlaskClient) -> None:
    answer = _get(client, "/ui/api/whatif")
    assert answer["answer"] is None and answer["gpu_types"]
    ascend = [{"cw": cw, "label": f"Ascend {chip}"} for cw, chip in (
        ("Ascend310P", "310P3"), ("Ascend910A", "910A"), ("Ascend910B2", "910B2"), ("Ascend910B3", "910B3"),
        ("Ascend910B4", "910B4"), ("Ascend910B4-1", "910B4-1"), ("Ascend910C", "Ascend910"))]
    assert answer["families"] == [{"cw": "AMD", "label": "AMD GPU"}, {"cw": "AWSNeuron", "label": "AWS Neuron"},
                                  *ascend,
                                  {"cw": "Biren", "label": "Biren GPU"}, {"cw": "DCU", "label": "Hygon DCU"},
                                  {"cw": "Enflame", "label": "Enflame DRS"},
                                  {"cw": "GCU", "label": "Enflame GCU"}, {"cw": "MLU", "label": "Cambricon MLU"},
                                  {"cw": "Metax-GPU", "label": "Metax GPU"},
                                  {"cw": "Metax-SGPU", "label": "Metax sGPU"},
                                  {"cw": "Mthreads", "label": "Moore Threads GPU"},
                                  {"cw": "NVIDIA", "label": "NVIDIA GPU"}, {"cw": "Vastai", "label": "Vastai"},
                                  {"cw": "XPU", "label": "Kunlunxin vXPU"}, {"cw": "kunlun", "label": "Kunlunxin XPU"}]


def test_a_mig_gpu_is_drawn_as_its_slices(client: FlaskClient, demo: DemoCluster) -> None:
    assert demo.outcomes["ml/mig-inference"] == demo.outcomes["ml/mig-training-pair"] == "mig-a100-1"
    nodes = {node["name"]: node for node in _get(client, "/ui/api/overview?sort=name")["nodes"]}
    cells = nodes["mig-a100-1"]["gpus"]
    # The pair comes second and GPU spread sends it to the emptier GPU, which takes both of its instances; the pod
    # whose policy is a typo (read as spread, as HAMi v2.10 reads it) comes later and takes a 1g.5gb beside the first.
    assert [cell["mig"]["instances"] for cell in cells] == [
        [{"profile": "1g.5gb", "placement": "5+1", "pod": "ml/typo-policy"},
         {"profile": "1g.10gb", "placement": "6+2", "pod": "ml/mig-inference"}],
        [{"profile": "3g.20gb", "placement": "0+4", "pod": "ml/mig-training-pair"},
         {"profile": "3g.20gb", "placement": "4+4", "pod": "ml/mig-training-pair"}]]
    assert [[s["used"] for s in cell["mig"]["slices"]] for cell in cells] == [[False] * 5 + [True] * 3, [True] * 8]
    assert [s["first"] for s in cells[1]["mig"]["slices"]] == [True, False, False, False, True, False, False, False]
    assert cells[0]["mig"]["free"][:3] == ["1g.5gb@0,1,2,3,4", "1g.10gb@0,2", "2g.10gb@0,2"]
    assert all(cell["mig"] is None for cell in nodes["gpu-a40-1"]["gpus"])
    page = client.get("/ui/?sort=name").get_data(as_text=True)
    assert page.count('class="slice used') == 11 and page.count('class="slice"') == 5


def test_every_cell_carries_its_family_and_the_dcu_node_shows_its_dcus(client: FlaskClient, demo: DemoCluster
                                                                      ) -> None:
    overview = _get(client, "/ui/api/overview?sort=name")
    nodes = {node["name"]: node for node in overview["nodes"]}
    dcu = nodes["dcu-1"]
    assert (dcu["status"], dcu["families"]) == ("Ready", {"DCU": {"status": "Ready", "gpus": 2}})
    assert [(cell["family"], cell["type"]) for cell in dcu["gpus"]] == [("DCU", "DCU-BW100")] * 2
    assert demo.outcomes["ml/dcu-inference"] == "dcu-1"
    held = [pod for cell in dcu["gpus"] for pod in cell["pods"]]
    assert held == [{"pod": "ml/dcu-inference", "container": "server", "memory_mib": 16384, "cores": 50}]
    assert {cell["family"] for name, node in nodes.items()
            if name not in ("dcu-1", "mlu-1", "npu-1", "biren-1", "gcu-1", "drs-1", "metax-1", "sgpu-1", "mthreads-1",
                            "vastai-1", "xpu-1", "vxpu-1", "amd-1", "neuron-1")
            for cell in node["gpus"]} == {"NVIDIA"}
    families = overview["totals"]["families"]
    assert (families["DCU"]["nodes"], families["DCU"]["gpus"], families["DCU"]["pods"]) == (1, 2, 1)
    assert sum(families[cw]["gpus"] for cw in ("DCU", "MLU", "NVIDIA", "Ascend910B3", "Biren", "GCU", "Enflame",
                                                 "Metax-GPU", "Metax-SGPU", "Mthreads", "Vastai", "XPU", "kunlun",
                                                 "AMD", "AWSNeuron")) \
        == DEMO_GPUS
    assert overview["families"] == [family.cw for family in demo.runtime.settings.devices]
    assert {"DCU", "MLU", "Ascend910B3"} <= set(overview["families"])


def test_the_mlu_node_shows_the_cards_read_from_its_capacity(client: FlaskClient, demo: DemoCluster) -> None:
    overview = _get(client, "/ui/api/overview?sort=name")
    mlu = {node["name"]: node for node in overview["nodes"]}["mlu-1"]
    assert (mlu["status"], mlu["families"]) == ("Ready", {"MLU": {"status": "Ready", "gpus": 4}})
    assert [(cell["family"], cell["type"]) for cell in mlu["gpus"]] == [("MLU", "MLU370-X4")] * 4
    assert demo.outcomes["ml/mlu-inference"] == "mlu-1"
    held = [pod for cell in mlu["gpus"] for pod in cell["pods"]]
    assert held == [{"pod": "ml/mlu-inference", "container": "server", "memory_mib": 12288, "cores": 50}]
    families = overview["totals"]["families"]
    assert (families["MLU"]["nodes"], families["MLU"]["gpus"], families["MLU"]["pods"]) == (1, 4, 1)
    # The what-if takes the family's memory resource as written in a pod: 48 units of 256 MiB are 12288 MiB. Four cards
    # of 24576 MiB, one half used: two more on each free card, one more on the used one.
    answer = _get(client, "/ui/api/whatif?family=MLU&gpus=1&memory_mib=48&cores=50")["answer"]
    assert (answer["fits"], answer["device"]) == (7, "Cambricon MLU")


def test_the_npu_node_shows_its_hccs_groups_and_templates(client: FlaskClient, demo: DemoCluster) -> None:
    npu = {node["name"]: node for node in _get(client, "/ui/api/overview?sort=name")["nodes"]}["npu-1"]
    assert [cell["group"] for cell in npu["gpus"]] == ["HCCS 0"] * 4 + ["HCCS 1"] * 4
    # Not through the webhook here: the slice asks 10000 MiB, which runs as the vir05_1c_16g template.
    assert demo.outcomes["ml/npu-slice"] == demo.outcomes["ml/npu-train"] == "npu-1"
    assert npu["gpus"][0]["pods"] == [{"pod": "ml/npu-slice", "container": "infer", "memory_mib": 10000, "cores": 0,
                                       "template": "vir05_1c_16g"}]
    assert [cell["pods"][0]["pod"] for cell in npu["gpus"][4:]] == ["ml/npu-train"] * 4
    html = client.get("/ui/?sort=name").get_data(as_text=True)
    assert "npu-1 Ascend910B3 4 (Ascend910B3, HCCS 1, ok)" in html
    assert "ml/npu-slice [infer] 10000 MiB (vir05_1c_16g), 0%" in html


def test_overview_filters_by_family(client: FlaskClient) -> None:
    assert [node["name"] for node in _get(client, "/ui/api/overview?family=DCU")["nodes"]] == ["dcu-1"]
    assert "dcu-1" not in {node["name"] for node in _get(client, "/ui/api/overview?family=NVIDIA")["nodes"]}


def test_the_overview_page_shows_the_families(client: FlaskClient) -> None:
    html = client.get("/ui/?sort=name").get_data(as_text=True)
    assert 'id="family-totals"' in html and '<tr data-family="DCU">' in html
    assert 'data-uuid="DCU-0" data-family="DCU"' in html
    assert "dcu-1 DCU 0 (DCU-BW100, ok)" in html


def test_whatif_of_dcus_answers_as_the_capacity_command(client: FlaskClient, demo: DemoCluster) -> None:
    answer = _get(client, "/ui/api/whatif?family=DCU&gpus=1&memory_mib=8000&cores=10")["answer"]
    dashboard = demo.runtime.app.extensions["hami_web"].dashboard
    report = plan_capacity(dashboard.snapshot(), PodShape(family="DCU", gpus=1, memory_mib=8000, cores=10),
                           dashboard.policies())
    assert (answer["fits"], answer["device"]) == (report.fits, "Hygon DCU")
    assert answer["by_gpu_type"] == {"DCU-BW100": report.fits} and answer["by_node"] == [
        {"node": "dcu-1", "pods": report.fits}]
    html = client.get("/ui/whatif?family=DCU&gpus=1&memory_mib=8000&cores=10").get_data(as_text=True)
    assert f"{report.fits}</b> more pods of 1 Hygon DCU (8000 MiB, 10% cores)" in html


@pytest.mark.parametrize(("path", "named"), [
    ("/ui/api/overview?metric=power", "metric"),
    ("/ui/api/overview?per_page=0", "per_page"),
    ("/ui/api/overview?page=99", "page"),
    ("/ui/api/overview?page=two", "page"),
    ("/ui/api/decisions?kind=delete", "kind"),
    ("/ui/api/whatif?gpus=0", "gpus"),
    ("/ui/api/whatif?gpus=1&memory_mib=100&memory_percent=50", "memory_percent"),
    ("/ui/api/whatif?gpus=1&gpu_policy=binpak", "gpu_policy"),
    ("/ui/api/whatif?gpus=1&cores=101", "cores"),
    ("/ui/api/overview?family=Intel", "family"),
    ("/ui/api/whatif?gpus=1&family=MR-V100", "family"),
    ("/ui/api/whatif?gpus=1&family=DCU&memory_percent=50", "memory percentage"),
])
def test_a_bad_parameter_is_a_400_naming_it(client: FlaskClient, path: str, named: str) -> None:
    response = client.get(path)
    assert response.status_code == 400
    assert named in response.get_json()["message"]
    page = client.get(path.replace("/api/", "/").replace("/ui/overview", "/ui/"))
    assert page.status_code == 400 and named in page.get_data(as_text=True)


@pytest.mark.parametrize("page", ["/ui/", "/ui/pending", "/ui/decisions", "/ui/whatif?gpus=1&memory_mib=8000"])
def test_every_page_renders_with_its_json_twin_linked(client: FlaskClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert 'id="json-twin"' in response.get_data(as_text=True)
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]


def test_the_pending_page_names_the_pod_and_its_reason(client: FlaskClient) -> None:
    html = client.get("/ui/pending").get_data(as_text=True)
    assert PENDING_POD in html and "CardInsufficientMemory" in html


def test_static_files_are_served_from_the_package(client: FlaskClient) -> None:
    for name in ("dashboard.css", "dashboard.js"):
        assert client.get(f"/ui/static/{name}").status_code == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_no_page_accepts_a_write(client: FlaskClient, method: str) -> None:
    for path in ("/ui/", "/ui/api/overview", "/ui/whatif"):
        assert client.open(path, method=method).status_code == 405


@pytest.mark.parametrize(("audience", "path", "found"), [
    ("ui", "/ui/", True), ("ui", "/ui/api/overview", True), ("ui", "/filter", False), ("ui", "/webhook", False),
    ("webhook", "/ui/", False), ("extender", "/ui/api/pending", False), ("metrics", "/ui/", False),
])
def test_the_dashboard_is_served_on_its_own_listener_only(client: FlaskClient, audience: str, path: str,
                                                          found: bool) -> None:
    response = client.get(path, environ_base={LISTENER_ENVIRON_KEY: audience})
    assert (response.status_code != 404) is found


def test_whatif_counts_pods_of_a_mig_profile(client: FlaskClient) -> None:
    answer = _get(client, "/ui/api/whatif?gpus=1&mig_profile=2g.10gb")["answer"]
    # mig-a100-1 after the demo: GPU 0 holds a 1g.10gb at slices 6-7 and a 1g.5gb at 5 (two 2g.10gb fit), GPU 1 is
    # full.
    assert (answer["fits"], answer["by_mig_profile"], answer["memory_mib_per_device"]) == (2, {"2g.10gb": 2}, 9984)
    page = client.get("/ui/whatif?gpus=1&mig_profile=2g.10gb").get_data(as_text=True)
    assert 'id="whatif-mig"' in page and "2g.10gb" in page
    refused = client.get("/ui/api/whatif?gpus=1&mig_profile=2g.10gb&memory_mib=100")
    assert refused.status_code == 400 and "mig_profile" in refused.get_data(as_text=True)
