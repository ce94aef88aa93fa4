"""Properties of the server_args parsers: whatever the input, ParseError or a faithful answer."""

from __future__ import annotations

import keyword
import math
import re
import shlex

import pytest
from _server_args_support import incident_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.errors import ParseError
from kit.hosts import LocalHost
from kit.server_args import (
    NonLiteral,
    defaults,
    flag_table,
    format_server_args,
    parse_command,
    parse_log,
    parse_log_all,
)
from kit.source import SourceTree

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PREFIX = "[2026-05-01 10:00:00] server_args="
NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher


@pytest.fixture(scope="module")
def host():
    h = LocalHost()
    yield h
    h.close()


@pytest.fixture(scope="module")
def tree(host, sglang_source):
    return SourceTree.at(host, sglang_source("0.5.11"))


@pytest.fixture(scope="module")
def incident(tree):
    """The generated 0.5.11 line, and where each field's text ends in it."""
    values = incident_values(defaults(tree))
    line, ends = PREFIX + "ServerArgs(", {}
    for n, (name, value) in enumerate(values.items()):
        line += (
            ("" if n == 0 else ", ")
            + f"{name}="
            + format_server_args({name: value})[len(f"ServerArgs({name}=") : -1]
        )
        ends[name] = len(line)  # the ',' or ')' after it is at this index
    line += ")"
    assert line == PREFIX + format_server_args(values)
    return line, values, ends


@pytest.fixture(scope="module")
def flags(tree):
    return flag_table(tree)


def _only_parse_errors(text):
    try:
        return parse_log_all(text)
    except ParseError as err:
        size = len(text) if isinstance(text, str) else len(text.decode("utf-8", "replace"))
        assert isinstance(err.position, int) and 0 <= err.position <= size, err.position
        return None


@SETTINGS
@given(data=st.data())
def test_any_cut_keeps_exactly_the_fields_that_ended_before_it(incident, data):
    line, values, ends = incident
    cut = data.draw(st.integers(0, len(line)))
    snaps = _only_parse_errors(line[:cut])
    expected = {k: v for k, v in values.items() if ends[k] < cut}
    if snaps is None:
        assert not expected
        return
    (snap,) = snaps
    assert snap.fields == expected
    assert snap.truncated == (cut < len(line))
    if snap.truncated:
        assert len(expected) < len(values) and snap.stopped_at <= cut


@SETTINGS
@given(st.binary(max_size=3000))
def test_random_bytes(data):
    _only_parse_errors(data)


@SETTINGS
@given(
    st.text(max_size=300),
    st.sampled_from(
        ["server_args=ServerArgs(", "server_args={", "x server_args=ServerArgs(a=", "server_args={'a': "]
    ),
    st.text(alphabet=st.sampled_from(list("()[]{}<>'\",=:\\ abc123-.\n\r")), max_size=400),
)
def test_random_text_after_a_marker(before, marker, after):
    snaps = _only_parse_errors(before + marker + after)
    for snap in snaps or ():
        assert snap.stage in ("raw", "resolved", "unknown") and isinstance(snap.fields, dict)


@SETTINGS
@given(st.integers(1, 3000), st.sampled_from(["[", "(", "{", "[(", "-", "not ", "<"]))
def test_deep_nesting(depth, opener):
    closer = {"[": "]", "(": ")", "{": "}", "[(": ")]", "-": "", "not ": "", "<": ">"}[opener]
    text = "server_args=ServerArgs(a=" + opener * depth + "1" + closer * depth + ", b=2)"
    snap = parse_log(text)
    assert snap["b"] == 2 and "a" in snap


# Values a repr can hold: strings full of brackets and quotes, numbers, containers.
_text = st.text(alphabet=st.sampled_from(list("()[]{}<>'\",=:\\#\t abcXYZ019_-\u00e9\u4e2d")), max_size=20)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    _text,
    st.floats(allow_nan=False),
    st.binary(max_size=8),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(_text, st.integers()), inner, max_size=3),
        st.frozensets(st.one_of(_text, st.integers()), max_size=3).map(set),
    ),
    max_leaves=12,
)
_names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True).filter(lambda n: not keyword.iskeyword(n))


@SETTINGS
@given(st.dictionaries(_names, _value, max_size=8), st.sampled_from(["ServerArgs", "dict"]))
def test_reprs_round_trip(values, form):
    snap = parse_log(PREFIX + format_server_args(values, form))
    assert snap.fields == values and not snap.truncated
    assert snap.raw == {
        k: format_server_args({k: v})[len(k) + 12 : -1] for k, v in values.items() if _has_inf(v)
    }


def _has_inf(value) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, (list, tuple, set)):
        return any(map(_has_inf, value))
    if isinstance(value, dict):
        return any(map(_has_inf, value.values()))
    return False


class Call:
    """Something whose repr is a call, like LoRARef(...) or PhaseConfig(...)."""

    def __init__(self, name, kwargs):
        self.name, self.kwargs = name, kwargs

    def __repr__(self):
        return f"{self.name}(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items()) + ")"


class Opaque:
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


_opaque = st.sampled_from(
    ["<function f at 0x7f3a>", "<Backend.DISABLED: 'disabled'>", "<object object at 0x1>"]
).map(Opaque)
_call_value = st.recursive(
    st.one_of(_scalar, _opaque),
    lambda inner: st.one_of(
        st.builds(
            Call,
            st.sampled_from(["LoRARef", "PhaseConfig", "cfg.CudaGraphConfig"]),
            st.dictionaries(_names, inner, max_size=3),
        ),
        st.lists(inner, max_size=3),
    ),
    max_leaves=8,
)


def _matches(parsed, original) -> bool:
    if isinstance(original, Call):
        return (
            isinstance(parsed, NonLiteral)
            and parsed.call == original.name
            and parsed.text == repr(original)
            and parsed.kwargs.keys() == original.kwargs.keys()
            and all(_matches(parsed.kwargs[k], v) for k, v in original.kwargs.items())
        )
    if isinstance(original, Opaque):
        return isinstance(parsed, NonLiteral) and parsed.text == original.text and parsed.call is None
    if isinstance(original, list):
        return (
            isinstance(parsed, list) and len(parsed) == len(original) and all(map(_matches, parsed, original))
        )
    return parsed == original


@SETTINGS
@given(st.dictionaries(_names, _call_value, min_size=1, max_size=5))
def test_calls_and_opaque_reprs_parse_structurally(values):
    text = PREFIX + "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")"
    snap = parse_log(text)
    assert snap.fields.keys() == values.keys()
    assert all(_matches(snap[k], v) for k, v in values.items())


# ---------------------------------------------------------------------------
# Launch commands

_arg_text = st.text(alphabet=st.sampled_from(list("abcXYZ019_./:=,{}'\" \u00e9")), min_size=1, max_size=12)


def _flag_value(spec):
    if spec.choices:
        return st.sampled_from([c for c in spec.choices if not str(c).startswith("-")])
    if spec.type == "int":
        return st.integers(-(10**9), 10**9)
    if spec.type == "float":
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    return _arg_text


@SETTINGS
@given(data=st.data())
def test_commands_round_trip(flags, data):
    simple = [
        f
        for f in flags
        if f.kind in ("store", "store_true")
        and f.nargs is None
        and f.type in ("int", "float", "str", None)
        and f.dest != "config"
    ]
    chosen = data.draw(st.lists(st.sampled_from(simple), max_size=10, unique_by=lambda f: f.field))
    argv, expected = ["python3", "-m", "sglang.launch_server"], {}
    for spec in chosen:
        option = data.draw(st.sampled_from(spec.option_strings))
        if spec.kind == "store_true":
            argv.append(option)
            expected[spec.field] = True
            continue
        value = data.draw(_flag_value(spec))
        text = repr(value) if isinstance(value, float) else str(value)
        # argparse reads `-1e+16` as an option, not a value, unless it is glued on with '='.
        glued = data.draw(st.booleans()) or (text.startswith("-") and not NEGATIVE.match(text))
        argv += [f"{option}={text}"] if glued else [option, text]
        expected[spec.field] = value
    assert parse_command(argv, flags) == expected
    assert parse_command(shlex.join(argv), flags) == expected


@SETTINGS
@given(st.lists(st.text(max_size=15), max_size=12))
def test_random_argv_only_raises_parse_error(flags, argv):
    try:
        result = parse_command(["sglang", "serve", *argv], flags)
    except ParseError as err:
        assert err.position is None or 0 <= err.position < len(argv) + 2
    else:
        assert all(isinstance(k, str) for k in result)
