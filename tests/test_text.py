"""kit/_text.py: wrap, clip, plain and short_path, then the owner test: no other module of kit/
wraps text with textwrap, cuts it with an ellipsis of its own, makes values JSON-able by hand or
strips ``sglang/`` from a path."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kit._text import ELLIPSIS, clip, plain, short_path, wrap

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "kit"

# ---------------------------------------------------------------------------- wrap


def test_wrap_indents_the_first_line_and_the_rest():
    text = "affects: decode tok/s and time to first token for every request of this launch"
    out = wrap(text, 40, "   ", "     ")
    lines = out.split("\n")
    assert len(lines) > 1
    assert lines[0].startswith("   affects:") and all(line.startswith("     ") for line in lines[1:])
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(line.strip() for line in lines) == text


def test_wrap_never_splits_a_word_a_flag_or_a_long_path():
    path = "sglang/srt/layers/attention/flashinfer_mla_backend.py:1234"
    lines = wrap(f"set by --enable-two-batch-overlap at {path} when the batch is small", 30).split("\n")
    assert lines[0] == "set by"  # the flag does not fit beside it, and is not broken at a hyphen
    assert "--enable-two-batch-overlap at" in lines
    assert path in lines  # longer than the line: alone on its line, whole


def test_wrap_of_empty_text_is_the_first_indent():
    assert wrap("", 80, "  ", "    ") == "  "
    assert wrap("   ", 80) == ""


@given(st.lists(st.text(alphabet="abc-_/.", min_size=1, max_size=15), min_size=1, max_size=12),
       st.integers(min_value=10, max_value=60))
def test_wrap_keeps_every_word_in_order(words, width):
    text = " ".join(words)
    assert wrap(text, width, "> ", "  ").replace("\n", " ").split()[1:] == text.split()


# ---------------------------------------------------------------------------- clip


def test_clip_leaves_short_text_and_cuts_long_text_with_one_ellipsis():
    assert clip("tp_size", 20) == "tp_size"
    assert clip("x" * 20, 20) == "x" * 20
    assert clip("x" * 21, 20) == "x" * 17 + "..."
    assert ELLIPSIS == "..."


def test_clip_puts_text_on_one_line_and_takes_any_value():
    assert clip("a   long\nvalue\t here", 100) == "a long value here"
    assert clip("a   long\nvalue", 11) == "a long v..."
    assert clip(12345, 4) == "1..."
    assert clip(["a", "b"], 100) == "['a', 'b']"


def test_clip_never_exceeds_a_tiny_width():
    assert clip("abcdef", 2) == "ab"
    assert clip("abcdef", 0) == ""


@given(st.text(max_size=200), st.integers(min_value=0, max_value=120))
def test_clip_is_at_most_width_and_a_prefix_of_the_one_line_text(text, width):
    out = clip(text, width)
    line = " ".join(text.split())
    assert len(out) <= width
    assert out == line or line.startswith(out.removesuffix(ELLIPSIS))


# ---------------------------------------------------------------------------- plain


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"

    def __str__(self) -> str:
        return "opaque"


def test_plain_keeps_data_and_makes_the_rest_text():
    value = {"tp": (1, 2), 3: [None, True, 1.5, "s"], "set": {"b", "a"}, "x": _Opaque()}
    out = plain(value)
    assert out == {"tp": [1, 2], "3": [None, True, 1.5, "s"], "set": ["a", "b"], "x": "<opaque>"}
    json.dumps(out)  # JSON holds it


def test_plain_takes_the_callers_text_for_what_is_not_data():
    assert plain([_Opaque()], str) == ["opaque"]
    assert plain({"k": _Opaque()}, lambda v: "text of it") == {"k": "text of it"}
    assert plain(frozenset({2, 1})) == [1, 2]


# ---------------------------------------------------------------------------- short_path


def test_short_path_drops_only_a_leading_sglang_directory():
    assert short_path("sglang/srt/server_args.py") == "srt/server_args.py"
    assert short_path("sglang/srt/server_args.py:512") == "srt/server_args.py:512"
    assert short_path("srt/server_args.py:512") == "srt/server_args.py:512"
    assert short_path("python/sglang/srt/x.py") == "python/sglang/srt/x.py"
    assert short_path("sglang") == "sglang"


# ---------------------------------------------------------------------------- one owner

# Files that cannot import kit, so they keep their own small helpers:
#  - kit/_remote/: scripts shipped to a target host and run there with its python3 alone;
#  - kit/dryrun/_inside*.py: loaded by path by the Python of the dry-run's environment, where kit is
#    not installed (its `_exact_json` raises on what JSON cannot hold exactly: not `plain`).
_STANDALONE = ("kit/_remote/", "kit/dryrun/_inside")
_OWNER = "kit/_text.py"
_HELPER_NAMES = {"_wrap", "_clip", "_cut", "_plain"}
_IDIOMS = {
    "textwrap.wrap/fill (use kit._text.wrap)": re.compile(r"\btextwrap\.(?:wrap|fill)\("),
    "a slice plus an ellipsis (use kit._text.clip)": re.compile(r"""\[[^\[\]]*:[^\[\]]*\]\s*\+\s*(["'])(?:\.\.\.|…)\1"""),
    'removeprefix("sglang/") (use kit._text.short_path)': re.compile(r"""removeprefix\(\s*(["'])sglang/\1\s*\)"""),
    'a split at "sglang/" (use kit._text.short_path)': re.compile(r"""split\(\s*(["'])/\1\s*,\s*1\s*\)\[1\]\s+if\s+\S+\.startswith\(\s*(["'])sglang/\2"""),
}


def _sources():
    for path in sorted(KIT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != _OWNER and not rel.startswith(_STANDALONE):
            yield rel, path.read_text()


def test_the_scan_finds_the_idioms_it_forbids():
    samples = {
        'text if len(text) <= w else text[: w - 3] + "..."': 1,
        "t[:57] + '...'": 1,
        'text[:n - 1] + "…"': 1,
        'path.removeprefix("sglang/")': 2,
        "f\"{p.removeprefix('sglang/')}:1\"": 2,
        'p.split("/", 1)[1] if p.startswith("sglang/") else p': 3,
        'textwrap.fill(text, 80)': 0,
    }
    names = list(_IDIOMS)
    for sample, which in samples.items():
        assert _IDIOMS[names[which]].search(sample), sample


def test_no_other_module_defines_its_own_text_helper():
    found = []
    for rel, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in _HELPER_NAMES:
                found.append(f"{rel}:{node.lineno} def {node.name}")
    assert not found, "kit/_text.py owns wrap, clip and plain; call it instead:\n" + "\n".join(found)


def test_no_other_module_wraps_clips_or_shortens_a_path_by_hand():
    found = []
    for rel, text in _sources():
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{rel}:{n}: {what}: {line.strip()}" for what, pattern in _IDIOMS.items()
                      if pattern.search(line)]
    assert not found, "\n".join(found)
