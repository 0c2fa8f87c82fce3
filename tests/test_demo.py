"""``hami-web demo`` (the README's first command) end to end: the production server on its three listeners.

Covers: the demo exits 0, every example pod gets a verdict, GPU pods are scheduled through ``/webhook`` on
the webhook listener and ``/filter`` + ``/bind`` on the extender listener, and the usage table is read from
``/metrics`` on the plain-HTTP metrics listener; the Hygon DCU pod lands on the DCU node with a DCU, and the
Cambricon MLU pod on the MLU node (read from its capacity) with an MLU, each shown with its family both in the outcomes
and in the usage table; the Ascend pods (the server runs with ``--enable-ascend``): a slice rounded up to its template
on NPU 0 and a 4-NPU job inside the other HCCS group; a Biren, an Enflame GCU and a Metax GPU pod on their nodes;
Kunlunxin: two whole XPUs of one wing on the capacity-read XPU node and a vXPU slice rounded to a quarter card.
"""

from __future__ import annotations

import re

import pytest

from hami_web.cli import main


def test_the_demo_schedules_the_example_pods_through_the_three_listeners(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    output = capsys.readouterr().out
    assert "webhook https://127.0.0.1:" in output and "extender https://127.0.0.1:" in output
    assert "metrics http://127.0.0.1:" in output
    assert " scheduled " in output and " denied " in output
    assert "Device usage as the server reports it on /metrics" in output
    assert "demo failed" not in output
    # Biren, Enflame GCU and Metax GPU: whole cards on their own nodes (a register; the capacity; the capacity).
    assert re.search(r"^biren-job +scheduled +biren-1 +Biren +biren-1-card-[01]\(0MiB,0%\)", output, re.MULTILINE)
    assert re.search(r"^gcu-job +scheduled +gcu-1 +GCU +gcu-1-GCU-\d\(100MiB,100%\),gcu-1-GCU-\d", output, re.MULTILINE)
    # Enflame DRS: 30 GB and 40 % is the 3g.36gb profile (three of the GCU's six slices, 50 % of its cores).
    assert re.search(r"^drs-job +scheduled +drs-1 +Enflame +drs-1-enflame-drs-[01]\(36864MiB,50%\)", output,
                     re.MULTILINE)
    assert re.search(r"^drs-1 +drs-1-enflame-drs-[01] +Enflame +Enflame +3 +36864/73728 +50/100", output, re.MULTILINE)
    # Metax sGPU: 8 GiB and 25 % of one card (the webhook wrote best-effort).
    assert re.search(r"^sgpu-job +scheduled +sgpu-1 +Metax-SGPU +sgpu-1-card-[01]\(8192MiB,25%\)", output,
                     re.MULTILINE)
    assert re.search(r"^metax-job +scheduled +metax-1 +Metax-GPU +metax-1-metax-\d\(65536MiB,100%\),", output,
                     re.MULTILINE)
    assert re.search(r"^mthreads-slice +scheduled +mthreads-1 +Mthreads +mthreads-1-mthreads-[01]\(4096MiB,4%\)",
                     output, re.MULTILINE)
    assert re.search(r"^vastai-pair +scheduled +vastai-1 +Vastai +vastai-1-die-(0\(0MiB,0%\),vastai-1-die-1|"
                     r"2\(0MiB,0%\),vastai-1-die-3)", output, re.MULTILINE)  # two dies of one card
    # The DCU pod: scheduled on dcu-1, 16384 MiB and 50 % of one DCU; the usage table shows that DCU as a DCU.
    assert re.search(r"^dcu-inference +scheduled +dcu-1 +DCU +DCU-[01]\(16384MiB,50%\)", output, re.MULTILINE)
    assert re.search(r"^dcu-1 +DCU-[01] +DCU +DCU-BW100 +1 +16384/65520 +50/100", output, re.MULTILINE)
    # The MLU pod: scheduled on mlu-1 (no annotation, capacity only), 48 × 256 MiB and 50 % of one MLU370-X4.
    assert re.search(r"^mlu-inference +scheduled +mlu-1 +MLU +mlu-1-cambricon-mlu-[0-3]\(12288MiB,50%\)", output,
                     re.MULTILINE)
    assert re.search(r"^mlu-1 +mlu-1-cambricon-mlu-[0-3] +MLU +MLU370-X4 +1 +12288/24576 +50/100", output,
                     re.MULTILINE)
    # Ascend: 10000 MiB rounded by the webhook to vir05_1c_16g (16384 MiB); the job fills HCCS group 1.
    assert re.search(r"^npu-slice +scheduled +npu-1 +Ascend910B3 +Ascend910B3-0\(16384MiB,0%\)", output, re.MULTILINE)
    assert re.search(r"^npu-train +scheduled +npu-1 +Ascend910B3 +Ascend910B3-4\(65536MiB,0%\),Ascend910B3-5", output,
                     re.MULTILINE)
    assert re.search(r"^npu-1 +Ascend910B3-0 +Ascend910B3 +Ascend910B3 +1 +16384/65536", output, re.MULTILINE)
    # Kunlunxin: two whole XPUs of one wing (read from xpu-1's capacity); a vXPU slice of 20000 MiB rounded by the
    # webhook to a quarter card with a quarter of its cores.
    assert re.search(r"^xpu-train +scheduled +xpu-1 +kunlun +xpu-1-kunlun-0\(98304MiB,100%\),xpu-1-kunlun-1\(98304MiB,"
                     r"100%\)", output, re.MULTILINE)
    assert re.search(r"^vxpu-infer +scheduled +vxpu-1 +XPU +vxpu-1-xpu-[0-7]\(24576MiB,25%\)", output, re.MULTILINE)
    assert re.search(r"^vxpu-1 +vxpu-1-xpu-[0-7] +XPU +XPU-P800 +1 +24576/98304 +25/100", output, re.MULTILINE)
