"""The corpus of real incidents (data/incidents/): every piece of posted evidence is read,
no flag dropped.

Each case folder holds ``source.md`` (URL, date, version, GPU, model, the stated cause),
``case.yaml`` (the cause, whether the evidence can show it, the fix, and what the reader must
get out of each evidence file) and the evidence exactly as posted. Launch commands are read
with the flag table of real sglang source (``reader_version``, the release the post states; or, for a
first-look case whose post states none, ``flag_table_version``, which only this test reads). A check the
reader fails on a case's evidence at first look is named in the case's ``reader_misses`` and skipped with
that reason, never dropped silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kit.hosts import LocalHost
from kit.server_args import (
    decode_summary,
    flag_table,
    log_capacity,
    log_notices,
    parse_decode_stats,
    parse_prefill_stats,
    read_launch_text,
    split_paste,
)
from kit.source import SourceTree

ROOT = Path(__file__).resolve().parent.parent / "data" / "incidents"
CASES = sorted(p for p in ROOT.iterdir() if (p / "case.yaml").is_file())
# Every misread that issue 19 names, and the corpus cases that carry it.
MISREADS = ("continuations", "vars", "cut_off", "wrapper", "yaml", "markdown", "decode_only", "notice",
            "docker", "env_prefix", "engine_kwargs", "sglang_serve", "check_env", "topo", "bench_serving")


def _case(path: Path) -> dict:
    return yaml.safe_load((path / "case.yaml").read_text())


@pytest.fixture(scope="module")
def tables(sglang_source):
    cache: dict[str, object] = {}

    def get(version: str):
        if version not in cache:
            cache[version] = flag_table(SourceTree.at(LocalHost(), sglang_source(version)))
        return cache[version]

    return get


def test_the_corpus_is_big_enough_and_well_formed():
    assert len(CASES) >= 20
    for path in CASES:
        data = _case(path)
        source = (path / "source.md").read_text()
        assert data["url"] in source, path.name
        for key in ("cause", "evidence_shows_cause", "kit_can_detect", "fix", "misreads", "evidence"):
            assert key in data, f"{path.name}: case.yaml lacks {key}"
        for item in data["evidence"]:
            assert (path / item["file"]).is_file(), f"{path.name}: {item['file']}"
    fine = [p for p in CASES if str(_case(p)["cause"]).startswith("none")]
    undetectable = [p for p in CASES if _case(p)["kit_can_detect"] in (False, "no")]
    assert fine and undetectable


def test_every_misread_of_the_issue_is_carried_by_a_real_case():
    carried = {m for p in CASES for m in _case(p)["misreads"]}
    assert set(MISREADS) <= carried, set(MISREADS) - carried


def _table_version(data: dict) -> str:
    return data.get("reader_version") or data["flag_table_version"]


def _skips(data: dict, check: str) -> bool:
    return check in (data.get("reader_misses") or [])


def _items(kind: str):
    for path in CASES:
        data = _case(path)
        for n, item in enumerate(data["evidence"]):
            if item["kind"] == kind:
                yield pytest.param(path, data, item, id=f"{path.name}:{item['file']}:{n}")


@pytest.mark.parametrize(("path", "data", "item"), list(_items("launch")))
def test_launch_evidence_is_read_flag_by_flag(path, data, item, tables):
    text = (path / item["file"]).read_text()
    found = read_launch_text(text, tables(_table_version(data)), where=item["file"])
    problems = [str(p) for p in found.all_problems()]
    assert len(found.launches) == item.get("launches", len(found.launches) or 1), problems
    for needle in item.get("problems", []):
        assert any(needle in p for p in problems), (needle, problems)
    if not item.get("flags"):
        return
    launch = found.launches[0]
    if item.get("launcher"):
        assert launch.launcher == item["launcher"]
    for name, value in item["flags"].items():
        assert launch.explicit.get(name) == value, (name, launch.explicit.get(name), problems)
    for name in item.get("unreadable", []):
        assert name in launch.unreadable and name not in launch.explicit, (name, problems)
    for key, value in (item.get("env") or {}).items():
        assert launch.env.get(key) == value, (key, launch.env)
    if item.get("origin_contains"):
        assert any(item["origin_contains"] in f.origin for f in launch.flags), [f.origin for f in launch.flags]
    # every flag read says where it came from, and a readable launch re-parses the same
    assert all(f.origin for f in launch.flags)
    if launch.launcher.startswith("sgl."):
        return  # keyword arguments, not argv
    again = read_launch_text(launch.readable_argv, tables(_table_version(data))).launches[0]
    assert again.explicit == launch.explicit


@pytest.mark.parametrize(("path", "data", "item"), list(_items("log")))
def test_log_evidence_is_read_without_a_server_args_line(path, data, item):
    text = (path / item["file"]).read_text()
    stats = parse_decode_stats(text)
    if "decode_lines" in item:
        assert len(stats) == item["decode_lines"]
    if "prefill_lines" in item:
        assert len(parse_prefill_stats(text)) == item["prefill_lines"]
    summary = decode_summary(stats) if stats else {}
    if "single_stream" in item:
        assert summary["single_stream"] is item["single_stream"]
    if "cuda_graph" in item:
        assert summary["cuda_graph"] is item["cuda_graph"]
    if "accept_len" in item:
        assert summary["accept_len"] == item["accept_len"]
    if "max_token_usage" in item:
        assert summary["max_token_usage"] == item["max_token_usage"]
    if "max_queue_req" in item:
        queued = [s.queue_req for s in [*stats, *parse_prefill_stats(text)] if s.queue_req is not None]
        assert max(queued) == item["max_queue_req"]
    if "gen_throughput_min" in item:
        assert min(s.gen_throughput for s in stats if s.gen_throughput) >= item["gen_throughput_min"]
    for key, value in (item.get("capacity") or {}).items():
        assert log_capacity(text)[key] == value, key
    if _skips(data, "notices"):
        pytest.skip(f"{path.name}: the reader misses sglang's notice at first look (reader_misses: notices)")
    notices = [n.text for n in log_notices(text)]
    for needle in item.get("notices", []):
        assert any(needle in n for n in notices), (needle, notices)


@pytest.mark.parametrize(("path", "data", "item"), list(_items("paste")))
def test_a_whole_post_is_split_into_its_pieces(path, data, item):
    paste = split_paste((path / item["file"]).read_text())
    assert set(item["pieces"]) <= set(paste.kinds), paste.summary()
    if item.get("version"):
        check_env = paste.of("check_env")[0].text
        assert f"sglang: {item['version']}" in check_env
    if item.get("gpus_min"):
        from kit.hardware import parse_smi

        hw = parse_smi(paste.of("nvidia_smi")[0].text)
        assert len(hw.gpus) >= item["gpus_min"] and hw.gpus[0].name == item["gpu_name"]
