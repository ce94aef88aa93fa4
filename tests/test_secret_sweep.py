"""No planted secret survives in what the kit prints or writes.

Secrets of every kind the report's scanner knows are planted in a launch command, an environment file,
a server log, a saved ``/server_info``, an issue body, the live lab's flags and environment, the kit's own
environment and arguments, and a notebook that prints its environment; then every ``sgl-kit`` command
that reads them runs (and the guided notebook 02_config against the lab), and stdout, stderr and every
file written are grepped for each value in its plain, escaped, URL-encoded and base64 forms
(``tests/_secret_sweep.py`` says what, where and why; ``benchmarks/secret_sweep.py`` prints the table).

The lab is given its environment the way a server gets it: ``sgl-kit lab up`` runs with the planted
variables, and the lab's server inherits them (``kit/_remote/lab_agent.py`` starts it with the agent's
environment); values under neutral names that only their shape gives away are planted in the files,
whose readers print through the report's scanner, not in the lab (see ``_secret_sweep``'s docstring).
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import _secret_sweep as sweep_support
import pytest
from _lab_support import free_port
from _secret_sweep import ENV_KINDS, LAUNCH_FIELDS, Planted, forms, planted

pytestmark = pytest.mark.slow  # a real lab process, two notebooks and one `sgl-kit` process per command


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("secret-sweep")
    s = sweep_support.prepare(root, free_port(), free_port())
    sweep_support.run_all(s)
    return s


@pytest.fixture(scope="module")
def found(sweep):
    checked = sweep_support.places(sweep)
    return sweep_support.survivors(sweep, checked), len(checked)


def _outputs(sweep) -> dict:
    return {o.name: o for o in sweep.outputs}


@pytest.mark.parametrize("value", [p for p in planted() if p.where in ("server.env", "paste.md", "lab env")],
                         ids=lambda p: f"{p.where}:{p.name}")
def test_the_grep_finds_a_planted_value_in_every_form_it_may_take(value: Planted):
    """Written for this test: the value inside longer text, base64-encoded at each byte alignment (standard
    and URL-safe), percent-encoded and JSON-escaped, is found by one of its forms."""
    wanted = forms(value)
    plain = wanted["plain"]
    encoded = [quote(plain, safe=""), json.dumps(plain), "log: " + plain + " end"]
    for pad in range(3):
        data = b"x" * pad + f"KEY={plain}\n".encode()
        encoded += [base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()]
    for text in encoded:
        assert any(form in text for form in wanted.values()), (value.name, text[:80])


def test_the_planted_values_cover_every_kind_the_reports_scanner_knows(tmp_path):
    """Every pattern detector of detect-secrets that the report runs, and every rule of the kit's own
    (kit.report.scanner.KIT_RULES), finds something in the planted files."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    from kit.report.scanner import KIT_RULES

    inputs = sweep_support.plant(tmp_path, planted(), 9)
    text = "".join(p.read_text() for p in (inputs.launch, inputs.environ, inputs.log, inputs.paste))
    missing = [kind for kind, cls in get_mapping_from_secret_type_to_class().items()
               if issubclass(cls, RegexBasedDetector) and kind != "Public IP (ipv4)"
               and not any(p.search(text) for p in cls().denylist)]
    missing += [kind for kind, pattern in KIT_RULES if not pattern.search(text)]
    assert not missing
    names = {name for name, _ in ENV_KINDS} | {name for name, _ in LAUNCH_FIELDS}
    assert {"HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SGLANG_API_KEY", "MY_SERVICE_TOKEN",
            "api_key", "admin_api_key"} <= names
    values = [p.value for p in planted()]
    assert len(values) == len(set(values))  # each unique, so a survivor names its place


def test_no_planted_secret_survives_in_what_the_kit_prints_or_writes(sweep, found):
    survivors, n_places = found
    assert n_places >= 40  # stdout and stderr of every command, and the files the kit wrote
    if survivors:
        lines = sorted({f"{s.planted.kind} from {s.planted.where} ({s.planted.name}) in {s.place} as {s.form}"
                        for s in survivors})
        pytest.fail(f"{len(survivors)} survivors:\n" + "\n".join(lines[:60]) + "\n\n"
                    + sweep_support.table(sweep, survivors, n_places))


def test_every_command_ran_and_the_planted_secrets_reached_it(sweep):
    out = _outputs(sweep)
    for name, o in out.items():  # upgrade-diff exits 1 when a version refuses the launch (0.5.23 renames a flag)
        assert o.code in ((0, 1) if name.startswith("upgrade-diff") else (0,)), f"{name}: {o.stderr[-1500:]}"
    assert '"SGLANG_API_KEY": "<redacted>"' in out["args show lab --json"].stdout  # the lab's environment, read
    assert "https://mirror:<redacted>@hf-mirror.internal/" in out["args show lab --json"].stdout
    assert json.loads(out["doctor lab --json"].stdout)["masked"]  # the Prometheus URL's password
    assert "masked 4 secret values" in out["args parse"].stderr  # api_key, admin_api_key, ssl pw, otlp URL
    removed = json.loads(out["report --markdown --json"].stdout)["secrets_removed"]
    assert removed >= len(ENV_KINDS)  # the environment the notebook printed, at least once each
    expected = {"lab up", "lab status", "doctor files", "doctor files --json", "doctor lab", "args parse", "args diff",
                "args read", "args show lab", "why files", "why lab", "gates lab", "bench lab", "upgrade-diff --static",
                "notebook 02_config", "report", "lab down"}
    assert expected <= set(out)
    assert (sweep.work / "runs" / "bench-lab.jsonl").is_file()  # the run file, with /server_info in it
    assert (sweep.root / "out" / "02_config_shared.html").is_file()  # the notebook's own share cell


def test_each_command_that_masked_something_says_how_many(sweep):
    assert sweep_support.unsaid(sweep) == []
