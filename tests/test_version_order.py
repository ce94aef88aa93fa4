"""kit._versions: the kit's one parse, order and range test of sglang versions, and the modules that use it."""

from __future__ import annotations

import re
from pathlib import Path

from kit._versions import in_range, key, parse, triple

ROOT = Path(__file__).resolve().parent.parent


def test_sglang_release_forms_sort_as_pep_440():
    forms = ["0.5.10.post1", "0.5.9", "0.5.10rc1", "0.5.10", "0.4.6.post5", "0.5.11", "main"]
    assert sorted(forms, key=key) == ["main", "0.4.6.post5", "0.5.9", "0.5.10rc1", "0.5.10", "0.5.10.post1", "0.5.11"]


def test_tags_and_suffixes_read_as_the_version_they_name():
    assert str(parse("v0.5.19")) == "0.5.19" and str(parse("v0.5.19-cu129")) == "0.5.19"
    assert parse("main") is None and parse("") is None and parse(None) is None
    assert triple("0.5.10rc1") == (0, 5, 10) and triple("nightly") is None


def test_a_range_holds_prereleases_and_never_what_does_not_parse():
    assert in_range("0.5.10rc1", ">=0.5.9,<0.5.11") and not in_range("0.5.8", ">=0.5.9")
    assert not in_range("main", ">=0") and not in_range("0.5.9", "not a range")


def test_the_dry_run_s_versions_use_the_same_order():
    from kit.dryrun._requirements import load_rules

    rules = load_rules()
    assert rules.covers("0.5.10rc1") == in_range("0.5.10rc1", f">={rules.first},<{rules.below}")


def test_no_module_keeps_an_order_or_range_test_of_its_own():
    """The concepts of docs/architecture.md's 'one owner' list: versions are ordered and ranged in kit/_versions.py only."""
    own = re.compile(r"def _?version_key\(|SpecifierSet\(")  # a range is parsed by kit._versions.specifier, once
    found = [f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "kit").rglob("*.py") if p.name != "_versions.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert found == []


def test_a_log_line_becomes_one_notice():
    """The doctor's evidence reads sglang's notices through kit.server_args.log_notices only: one notice per
    line (no raw copy of the line beside its message)."""
    from kit.doctor import from_files
    from kit.server_args import log_notices

    real = (ROOT / "tests" / "data" / "real_server" / "qwen3_5-cpu-0.5.11.log").read_text()
    # one line written for this test in sglang's log format; its message is sglang 0.5.11's own
    # (srt/server_args.py:2430), the kind of line the evidence once kept twice (raw and as a message)
    said = ("[2026-11-29 09:30:21] WARNING server_args.py:2429: Disabling overlap schedule since mamba no_buffer is "
            "not compatible with overlap schedule, try to use --disable-radix-cache if overlap schedule is necessary")
    log = Path(__import__("tempfile").mkdtemp()) / "server.log"
    log.write_text(real.replace("\n", "\n" + said + "\n", 1))
    ev = from_files(log=str(log), sglang="0.5.11")
    read = [n for n in log_notices(log.read_text()) if n.kind != "warning"]
    assert [n for n in ev.notices if "Disabling overlap schedule" in n] == [said.split(": ", 1)[1]]
    assert read and len(ev.notices) == len(set(ev.notices))
    assert not [a for a in ev.notices for b in ev.notices if a != b and b in a], "a notice kept twice"
    assert set(ev.notices) <= {n.text for n in read}
