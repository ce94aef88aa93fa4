"""The GPU table (kit/data/gpus.yaml) and its one matcher (kit.hardware.match_gpu).

The names in tests/data/hardware/gpu_names.tsv are copied verbatim from public outputs of
nvidia-smi, rocm-smi and torch (each row has its URL; tests/data/hardware/SOURCES.md says how
they were found). The nvidia-smi fixtures are the ones test_hardware.py parses.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from kit.doctor.roofline import roofline
from kit.dryrun import _inside
from kit.errors import KitError, UnknownGPU
from kit.hardware import GPUS_FILE, gpu_profile, gpu_profiles, match_gpu, parse_query_csv, parse_smi

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "hardware"
CONFIG = json.loads((ROOT / "tests" / "data" / "provenance" / "qwen3.6-27b" / "config.json").read_text())
RAW = yaml.safe_load(GPUS_FILE.read_text())["gpus"]


def _names() -> list[dict]:
    lines = [line for line in (DATA / "gpu_names.tsv").read_text().splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines, fieldnames=["name", "tool", "key", "url"], delimiter="\t"))


NAMES = _names()

# The GPUs people serve SGLang on, each by a spelling its owner would type or a tool prints.
WANTED = [
    "v100", "t4", "a10", "a10g", "a30", "a40", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "l4", "l20", "l40", "l40s", "h20", "NVIDIA H100 PCIe",
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL", "gh200", "b200", "b300", "gb200",
    "gb300", "RTX 3090", "RTX 4090", "RTX 5090", "RTX A5000", "RTX A6000", "RTX 6000 Ada Generation",
    "RTX PRO 6000 Blackwell Workstation Edition", "dgx-spark", "mi250x", "mi300x", "mi325x", "mi355x",
]


# --------------------------------------------------------------------------- the table


def test_every_entry_has_its_figures_and_the_datasheet_they_came_from():
    profiles = gpu_profiles()
    assert len(profiles) == len(RAW) >= 37
    for key, raw in RAW.items():
        p = profiles[key]
        for field in ("name", "vendor", "memory_gb", "bandwidth_gbs", "bf16_tflops", "source"):
            assert field in raw, (key, field)
        assert re.match(r"https://\S+$", p.source), (key, p.source)
        assert p.memory_gb > 0 and p.memory_mib > 0 and p.bandwidth_gbs > 0, key
        # An architecture for each vendor: SM for NVIDIA (sglang's get_device_sm), a gfx target for AMD.
        if p.vendor == "nvidia":
            assert p.sm is not None and 70 <= p.sm <= 129 and p.gfx is None, key
        else:
            assert p.vendor == "amd" and re.fullmatch(r"gfx9\w+", p.gfx or "") and p.sm is None, key
        # No dense BF16 figure on the datasheet: the entry says so instead of inventing one.
        assert p.bf16_tflops is not None or p.note, key
        if p.bf16_tflops is not None:
            assert 50 < p.bf16_tflops < 5000, key


def test_the_issue_s_gpus_are_all_there():
    missing = [name for name in WANTED if match_gpu(name) is None]
    assert missing == []
    assert len({match_gpu(name).key for name in WANTED}) == len(WANTED)


def test_a_table_entry_without_a_source_or_a_bandwidth_is_refused(tmp_path, monkeypatch):
    import kit.hardware as hardware

    broken = {"gpus": {"x1": {k: v for k, v in RAW["h100"].items() if k != "source"}}}
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump(broken))
    monkeypatch.setattr(hardware, "GPUS_FILE", path)
    hardware._table.cache_clear()
    try:
        with pytest.raises(KitError) as err:
            hardware.gpu_profiles()
        assert "'x1'" in err.value.message and "source" in err.value.message
        twice = {"gpus": {"x1": RAW["h100"], "x2": dict(RAW["h200"], aliases=["h100-sxm"])}}
        path.write_text(yaml.safe_dump(twice))
        hardware._table.cache_clear()
        with pytest.raises(KitError) as err:
            hardware.gpu_profiles()
        assert "names both" in err.value.message
    finally:
        hardware._table.cache_clear()


# --------------------------------------------------------------------------- names as tools print them


@pytest.mark.parametrize("row", NAMES, ids=[r["name"] for r in NAMES])
def test_a_real_printed_name_resolves_to_its_entry_or_stays_unknown(row):
    assert row["url"].startswith(("https://github.com/", "https://huggingface.co/")), row
    found = match_gpu(row["name"])
    if row["key"] == "-":
        assert found is None
        with pytest.raises(UnknownGPU) as err:
            gpu_profile(row["name"])
        assert repr(row["name"]) in err.value.message and "bandwidth is unknown" in err.value.message
        assert "gpus.yaml" in err.value.hint and "datasheet" in err.value.hint
    else:
        assert found is not None and found.key == row["key"]


def test_memory_sizes_and_form_factors_are_told_apart():
    pairs = [("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"), ("NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB"),
             ("NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"), ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"),
             ("NVIDIA H100 NVL", "NVIDIA H100 80GB HBM3"), ("NVIDIA H200 NVL", "NVIDIA H200"),
             ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), ("Tesla V100-PCIE-16GB", "Tesla V100-SXM2-16GB")]
    for a, b in pairs:
        pa, pb = match_gpu(a), match_gpu(b)
        assert pa is not None and pb is not None and pa.key != pb.key, (a, b)
    assert match_gpu("NVIDIA A100-SXM4-80GB").bandwidth_gbs == 2039 != match_gpu("NVIDIA A100 80GB PCIe").bandwidth_gbs
    assert match_gpu("NVIDIA H100 NVL").memory_gb == 94 != match_gpu("NVIDIA H100 80GB HBM3").memory_gb


def test_short_keys_work_but_never_stand_in_for_a_printed_name_the_table_lacks():
    assert match_gpu("h100").key == "h100" and match_gpu("a6000").key == "a6000"
    assert match_gpu("H100 PCIe").key == "h100-pcie" and match_gpu("3090").key == "rtx3090"
    # "NVIDIA H100" and "NVIDIA B300" are printed-name forms: no entry has them, so they are unknown rather
    # than taken for the entries whose short keys they resemble.
    assert match_gpu("NVIDIA H100") is None and match_gpu("NVIDIA B300") is None
    assert match_gpu("") is None and match_gpu(None) is None and match_gpu("   ") is None


def test_a_name_the_smi_table_cut_short_matches_only_when_one_gpu_begins_so():
    assert match_gpu("NVIDIA RTX 6000 Ada Gene...").key == "rtx6000-ada"
    assert match_gpu("NVIDIA GeForce RTX 2080 ...") is None  # not in the table
    assert match_gpu("NVIDIA A100...") is None  # four A100 entries begin so


# --------------------------------------------------------------------------- the hardware evidence


@pytest.mark.parametrize("fixture,key", [("smi_classic_8x_h100_sxm_550.txt", "h100"),
                                         ("smi_classic_1x_h100_590.txt", "h100"), ("smi_kmd_1x_h200_610.txt", "h200")])
def test_real_nvidia_smi_tables_name_a_table_entry(fixture, key):
    hw = parse_smi((DATA / fixture).read_text())
    assert hw.profile is not None and hw.profile.key == key
    # The table's entry agrees with what nvidia-smi itself reports about the memory.
    assert hw.profile.memory_mib == hw.gpus[0].memory_total_mib
    assert f"table     {key}: SM90" in hw.to_text() and hw.profile.source in hw.to_text()


def test_query_csv_names_resolve_too():
    gpus = parse_query_csv((DATA / "query_gpu_csv_1x_h200_610.txt").read_text())
    assert match_gpu(gpus[0].name).key == "h200"


def test_an_unknown_gpu_in_the_evidence_is_named_with_bandwidth_unknown():
    hw = parse_smi((DATA / "smi_kmd_1x_rtx2080super_windows_610.txt").read_text())
    assert hw.gpu_name == "NVIDIA GeForce RTX 2080 ..." and hw.profile is None
    line = hw.table_line()
    assert "'NVIDIA GeForce RTX 2080 ...' is not in the kit's GPU table: bandwidth unknown" in line
    assert "kit/data/gpus.yaml" in line and line in hw.to_text()


# --------------------------------------------------------------------------- the roofline and the dry-run


def test_the_roofline_reads_bandwidth_through_the_same_matcher():
    two_3090s = roofline(CONFIG, "NVIDIA GeForce RTX 3090", tp=2)
    assert two_3090s.bandwidth_gbs == 2 * match_gpu("rtx3090").bandwidth_gbs == 1872
    assert roofline(CONFIG, "AMD Instinct MI300X OAM", tp=1).bandwidth_gbs == 5300
    unknown = roofline(CONFIG, "Quadro RTX 6000", tp=1)
    assert unknown.bandwidth_gbs is None and unknown.ceiling_tok_s is None
    text = unknown.to_text()
    assert "'Quadro RTX 6000'" in text and "bandwidth unknown" in text and "gpus.yaml" in text


@pytest.mark.parametrize("key,sm90,sm100,blackwell", [("a6000", False, False, False), ("h100", True, False, False),
                                                      ("h20", True, False, False), ("b200", False, True, True),
                                                      ("gb200", False, True, True), ("rtx5090", False, False, True)])
def test_the_dry_run_probes_follow_the_sm(key, sm90, sm100, blackwell):
    profile = gpu_profile(key)
    answers = _inside.probe_answers(profile.probe_request())
    assert answers["get_device_sm"] == profile.sm and answers["get_device_name"] == profile.name
    assert answers["get_device_capability"] == (profile.sm // 10, profile.sm % 10)
    assert answers["get_device_memory_capacity"] == float(profile.memory_mib)
    assert answers["is_sm90_supported"] == sm90 and answers["is_sm100_supported"] == sm100
    assert answers["is_blackwell_supported"] == blackwell
