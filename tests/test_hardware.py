"""kit.hardware against real nvidia-smi outputs (tests/data/hardware/SOURCES.md names each one).

The expected values in expected.json were written down from the pasted outputs by hand, not
produced by the parser. A live GPU cannot exist here: the read_hardware test puts a stand-in
``nvidia-smi`` on PATH that prints those same real outputs, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from kit.errors import ParseError
from kit.hardware import link_rank, parse_p2p, parse_query_csv, parse_smi, parse_topo, read_hardware
from kit.hosts import LocalHost

DATA = Path(__file__).parent / "data" / "hardware"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def _fixtures(*kinds):
    return [name for name, e in EXPECTED.items() if e["kind"] in kinds]


@pytest.mark.parametrize("name", _fixtures("smi-table-classic", "smi-table-kmd"))
def test_smi_table(name):
    want = EXPECTED[name]
    hw = parse_smi((DATA / name).read_text())
    assert hw.driver == want["driver_version"]
    assert hw.cuda == want["cuda_version"]
    assert len(hw.gpus) == want["gpu_count"]
    for gpu, expected in zip(hw.gpus, want["gpus"], strict=True):
        assert (gpu.index, gpu.name, gpu.bus_id, gpu.memory_used_mib, gpu.memory_total_mib) == (
            expected["index"], expected["name"], expected["bus_id"], expected["memory_used_mib"],
            expected["memory_total_mib"])


@pytest.mark.parametrize("name", _fixtures("topo"))
def test_topology(name):
    want = EXPECTED[name]
    topo = parse_topo((DATA / name).read_text())
    assert topo.gpus == want["gpus"]
    assert topo.nics == want["nics"]
    assert topo.gpu_links() == want["links"]
    assert topo.cpu_affinity == want["cpu_affinity"]
    assert topo.numa_affinity == want["numa_affinity"]
    assert topo.legend == want["legend_present"]


def test_nvlink_counts_and_ranks():
    nv4 = parse_topo((DATA / "topo_2x_rtx3090_nvlink_nv4.txt").read_text())
    assert nv4.nvlink("GPU0", "GPU1") == 4
    phb = parse_topo((DATA / "topo_2x_rtx5090_pcie_phb_tabs.txt").read_text())
    assert phb.nvlink("GPU0", "GPU1") == 0
    assert link_rank(nv4.link("GPU0", "GPU1")) < link_rank(phb.link("GPU0", "GPU1"))
    assert [link_rank(x) for x in ("NV18", "PIX", "PXB", "PHB", "NODE", "SYS", None)] == [0, 1, 2, 3, 4, 5, 6]


def test_p2p_status():
    want = EXPECTED["topo_p2p_rw_2x_rtx5090.txt"]
    p2p = parse_p2p((DATA / "topo_p2p_rw_2x_rtx5090.txt").read_text())
    assert p2p.status == want["status"]
    assert p2p.supported("GPU0", "GPU1") is (want["status"]["GPU0-GPU1"] == "OK")


def test_query_csv():
    want = EXPECTED["query_gpu_csv_1x_h200_610.txt"]
    gpus = parse_query_csv((DATA / "query_gpu_csv_1x_h200_610.txt").read_text())
    assert len(gpus) == want["gpu_count"]
    assert gpus[0].name == want["rows"][0]["name"]
    assert gpus[0].memory_total_mib == want["rows"][0]["memory_total_mib"]


# --------------------------------------------------------------------------- bad input


def test_truncated_topology_names_the_row():
    text = (DATA / "topo_8x_h100_nv18_matrix_only.txt").read_text()
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU0" in line and "GPU7" in line)
    cut = "\n".join(lines[:header + 4]) + "\n" + lines[header + 4][:20]
    with pytest.raises(ParseError) as err:
        parse_topo(cut)
    assert "GPU3" in err.value.message and "cut off" in err.value.message
    rows_only = "\n".join(lines[:header + 3])
    with pytest.raises(ParseError, match="rows missing for GPU2, GPU3"):
        parse_topo(rows_only)


@pytest.mark.parametrize("parse", [parse_topo, parse_p2p, parse_smi, parse_query_csv])
@pytest.mark.parametrize("text", ["", "bash: nvidia-smi: command not found\n", "\x00\xff garbage"])
def test_not_nvidia_smi_output(parse, text):
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.hint  # says what to paste instead


# --------------------------------------------------------------------------- a live host


def test_no_nvidia_smi_is_a_result(monkeypatch):
    assert shutil.which("nvidia-smi", path="/usr/bin:/bin") is None  # this machine has no GPU
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    hw = read_hardware(LocalHost(), timeout=5)
    assert hw.gpus == []
    assert "nvidia-smi not found" in hw.note


def test_read_hardware_with_stand_in_nvidia_smi(tmp_path, monkeypatch):
    """A stand-in for a GPU host: ``nvidia-smi`` is a script printing real outputs from tests/data."""
    csv = (DATA / "query_gpu_csv_1x_h200_610.txt").read_text()
    header = csv.splitlines()[0]
    row = csv.splitlines()[1]
    (tmp_path / "query.csv").write_text("\n".join([header, row, row.replace(", 0,", ", 1,", 1)]) + "\n")
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n'
        f'  --query-gpu*) cat {tmp_path / "query.csv"} ;;\n'
        f'  "topo -m") cat {DATA / "topo_2x_rtx5090_pcie_phb_tabs.txt"} ;;\n'
        f'  "topo -p2p r") cat {DATA / "topo_p2p_rw_2x_rtx5090.txt"} ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
        "esac\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    hw = read_hardware(LocalHost(), timeout=5)
    assert len(hw.gpus) == 2 and hw.gpus[0].name == EXPECTED["query_gpu_csv_1x_h200_610.txt"]["rows"][0]["name"]
    assert hw.topology.link("GPU0", "GPU1") == "PHB"
    assert hw.p2p.status["GPU0-GPU1"] == EXPECTED["topo_p2p_rw_2x_rtx5090.txt"]["status"]["GPU0-GPU1"]
    assert hw.note == ""
    assert "GPU0" in hw.to_text() and "PHB" in hw.to_text()
