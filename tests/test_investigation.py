"""kit.investigation: the guided notebooks' steps, on a real lab process (no GPU: the lab stands in).

The notebooks themselves run end to end in tests/test_notebooks.py; these pin the pieces a
notebook's conclusion rests on, and the relaunch of a server the kit did not start.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import statistics
import urllib.request
from pathlib import Path

import pytest
from _lab_support import free_port
from hypothesis import given, settings
from hypothesis import strategies as st

from kit import investigation
from kit.errors import KitError
from kit.lab.control import Lab
from kit.server_args import server_flags
from kit.source import SourceTree
from kit.target import connect, resolve_server

pytestmark = pytest.mark.slow


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")  # the committed resolutions: starts in a second
    lab = Lab()
    status = lab.up(variant="new", port=free_port())
    host = connect("lab")
    yield lab, host, resolve_server(host, "lab"), status
    lab.down()
    host.close()


def _info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as resp:
        return json.loads(resp.read())


def test_the_plan_applies_each_fix_on_top_of_the_previous_ones(lab):
    from kit.doctor import doctor

    _, host, server, _ = lab
    plan = investigation.fix_plan(doctor("lab", host=host), server)
    assert [s.finding for s in plan] == ["speculative-steps-low", "prefill-cuda-graph-off"]
    first, second = plan
    assert "--speculative-num-steps" in first.flags and first.flags[first.flags.index("--speculative-num-steps") + 1] == "3"
    assert "--enforce-piecewise-cuda-graph" not in first.flags and "--enforce-piecewise-cuda-graph" in second.flags
    assert second.flags[second.flags.index("--speculative-num-steps") + 1] == "3"  # kept from step 1
    # the lab's launch sets --speculative-num-steps 1, so auto_choose_speculative_params (7506) does not run for it
    # (`if self.speculative_num_steps is None`, 3523): it is not cited as the source of the steps finding
    assert first.sites == [] and second.sites == ["srt/server_args.py:1230"]
    # the second is a check, not a fix: 0.5.11's gate would refuse the enforced graph for the EAGLE target
    assert not first.predicted and second.predicted.startswith("no change: PiecewiseCudaGraphRunner.can_run")
    assert "(a check: predicted no change" in investigation.describe_plan(plan).splitlines()[1]
    assert [s.finding for s in investigation.fix_plan(doctor("lab", host=host), server, checks=False)] == [
        "speculative-steps-low"]


def test_relaunch_restarts_a_server_the_way_it_ran_with_new_flags(lab):
    _, host, server, status = lab
    flags = server_flags(server.argv)
    flags[flags.index("--speculative-num-steps") + 1] = "3"
    flags[flags.index("--speculative-num-draft-tokens") + 1] = "4"
    result = investigation.relaunch(host, server, flags, timeout=60)
    try:
        assert result["outcome"] == "started" and result["pid"] != server.pid
        info = _info(status.port)
        assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (3, 4)
        again = resolve_server(host, "lab")
        assert again.pid == result["pid"] and again.cwd == server.cwd and again.log_path == server.log_path
        assert again.env.get("CUDA_VISIBLE_DEVICES") == server.env.get("CUDA_VISIBLE_DEVICES")
    finally:
        os.kill(result["pid"], signal.SIGTERM)


def test_a_relaunch_that_fails_says_so_with_the_log(lab):
    _, host, server, _ = lab
    with pytest.raises(KitError) as err:
        investigation.relaunch(host, server, [*server_flags(server.argv), "--no-such-flag"], timeout=60)
    assert "did not come up (exited)" in err.value.message and "--no-such-flag" in err.value.message


def test_the_baseline_by_name_and_its_errors(lab, tmp_path):
    _, _, server, _ = lab
    tree = SourceTree.of_server(server)
    base = investigation.baseline_launch("lab:old", tree)
    assert base.kind == "command" and base.explicit["speculative_num_steps"] == 3
    with pytest.raises(KitError, match="no record of the lab's 'older' launch"):
        investigation.baseline_launch("lab:older", tree)
    with pytest.raises(KitError, match="no such file"):
        investigation.baseline_launch(str(tmp_path / "absent.log"), tree)


# --------------------------------------------------------------------------- how the steps render in a notebook

# A token as the kit shows them: identifiers, dotted paths, file:line, flags, calls.
_SEPARATORS = "._/([,:="
_TOKENS = st.text(alphabet=st.sampled_from("abcXYZ019" + _SEPARATORS + "-)]'"), min_size=1, max_size=70)


def _text_of(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@settings(max_examples=300)
@given(st.lists(_TOKENS, min_size=1, max_size=6), st.sampled_from([" ", "  ", "\n"]))
def test_wrapping_never_splits_a_word(tokens, space):
    from kit.display import breakable, pre

    text = space.join(tokens)
    markup = breakable(text)
    assert _text_of(markup) == text  # nothing added or lost: only tags
    assert _text_of(pre(text)) == text
    for before, after in zip(markup.split("<wbr>"), markup.split("<wbr>")[1:], strict=False):
        last, first = _text_of(before)[-1], _text_of(after)[0]
        assert last in _SEPARATORS, f"a break after {last!r} in {text!r}"  # only ever after a separator
        assert not (last.isalnum() and first.isalnum())
    for token in tokens:  # a short token offers no break, and one with a hyphen is held on one line
        if len(token) <= 36 and "-" in token.strip("-"):
            assert f"<span style='white-space:nowrap'>{html.escape(token)}</span>" in markup


def test_an_identifier_breaks_at_its_dots_never_inside_a_word():
    from kit.display import breakable

    assert breakable("self.enforce_piecewise_cuda_graph") == "self.enforce_piecewise_cuda_graph"  # short: whole
    long = "self.get_model_config().hf_text_config.enforce_piecewise_cuda_graph"
    assert breakable(long) == "self.<wbr>get_model_config().<wbr>hf_text_config.<wbr>enforce_piecewise_cuda_graph"
    assert breakable("sglang/srt/configs/model_config.py:1455") == \
        "sglang/<wbr>srt/<wbr>configs/<wbr>model_config.<wbr>py:<wbr>1455"


def test_the_sites_table_says_each_guard_once_left_aligned(lab):
    """03's table: the guards every shown site shares (the caller's, the early return on the enforce flag)
    said once above it, each site's own guard with what decided it once, and no cell right-aligned."""
    from kit.provenance import explain_server

    _, _, server, _ = lab
    explanation = explain_server(server, "disable_piecewise_cuda_graph", SourceTree.of_server(server))
    markup = explanation._repr_html_()
    shown = markup.split("site(s) that did not fire")[0]
    assert shown.count("every site below is reached only when") == 1
    assert shown.count("<code>not self.enforce_piecewise_cuda_graph</code>") == 1  # not once per row
    [fired] = explanation.fired
    decided = [g for g in fired.guards if g.notes]
    assert decided, "the multimodal guard says what decided it"
    for note in decided[0].notes:
        assert _text_of(shown).count(note) == 1, note  # not again in a status line
    cells = re.findall(r"<t[dh]\b[^>]*>", markup)
    assert cells and all("text-align:left" in c for c in cells)


def test_the_evidence_captions_are_whole(lab):
    from kit.provenance import explain_server

    _, _, server, _ = lab
    tree = SourceTree.of_server(server)
    explanation = explain_server(server, "disable_piecewise_cuda_graph", tree)
    [fired] = explanation.fired
    snippets = investigation.evidence_lines(tree, fired)
    labels = [label for s in snippets for _, label in s.mark_spans()]
    assert len(labels) == len(snippets) == 3
    for label, claim in zip(labels, fired.evidence, strict=True):
        assert claim.startswith(label) and "sglang/srt" not in label  # the claim, less its reference
        assert claim[len(label):].strip().startswith("(sglang/srt/configs/model_config.py:")
    assert labels[0].endswith("`") and "SGLANG_EXTERNAL_MM_MODEL" in labels[0]  # was cut at 60 characters


def _decode_lines(log: str) -> list[float]:
    """gen throughput of the Decode batch lines with one request running, read here with a regex."""
    return [float(m[2]) for m in re.finditer(
        r"Decode batch, #running-req: (\d+),.*?gen throughput \(token/s\): ([\d.]+)", log) if m[1] == "1"]


def test_the_symptom_says_which_number_is_the_benchmarks_and_which_the_logs(lab):
    _, host, server, _ = lab
    run = investigation.measure(host, server, requests=3, max_tokens=48, progress=None, label="test-symptom")
    symptom = investigation.symptom(host, server, run, baseline_tok_s=70.0, target="lab")
    text = symptom.to_text()
    rates = _decode_lines(Path(server.log_path).read_text())  # the lab runs here: its log is a local file
    assert rates, "the lab logs Decode batch lines"
    assert symptom.log_rate == pytest.approx(statistics.median(rates))
    assert text.startswith(f"lab, this benchmark: {symptom.rate:.1f} tok/s per request (median of 3)")
    said = " ".join(text.split())
    assert f"the server's own Decode batch lines say {statistics.median(rates):.1f} tok/s (median gen throughput " \
           f"of {len(rates)} line(s) with one request running" in said
    assert "every 40 decode passes by the wall time since its previous line" in said


def test_the_doctors_answer_in_a_notebook(lab):
    """With findings: a table of them, left-aligned, and the launch with every fix (it changes the launch).
    With none (the runtime rules without metrics): no empty table, no '0 findings', no unchanged launch."""
    from kit.display import diagnosis_view
    from kit.doctor import doctor, runtime_diagnosis

    _, host, server, _ = lab
    found = diagnosis_view(doctor("lab", host=host, port=server.port))
    markup = found._repr_html_()
    # two tables: the answer's shape (verdict first), then the findings
    assert f"{len(found.findings)} findings" in markup and markup.count("<table") == 2
    answer, table = markup.split("<table")[1:3]
    assert "verdict" in answer and "problem class" in answer and "next step" in answer
    assert all(f.title in _text_of("<table" + table) for f in found.findings)
    assert all("text-align:left" in c for c in re.findall(r"<t[dh]\b[^>]*>", markup))
    assert "the launch with every fix:" in markup and "--enforce-piecewise-cuda-graph" in _text_of(markup)
    assert repr(found) == found.diagnosis.to_text()
    quiet = runtime_diagnosis(host, server)
    assert quiet.findings == [] and quiet.fixed_command  # the doctor's own form would show both
    markup = diagnosis_view(quiet)._repr_html_()
    # no findings table; the answer's shape is the one table, and says no cause was found
    assert markup.count("<table") == 1 and "0 findings" not in markup and ": no finding" in markup
    assert "no cause found" in _text_of(markup)
    assert "the launch with every fix" not in markup
    assert quiet.problems and all(p in _text_of(markup) for p in quiet.problems)  # what kept the rules from asking


def test_the_step_and_ab_plots_name_the_fix_and_keep_their_area(lab):
    from kit.bench import compare
    from kit.display import ab_comparison, steps_chart
    from kit.doctor import doctor

    _, host, server, _ = lab
    plan = investigation.fix_plan(doctor("lab", host=host), server)
    a = investigation.measure(host, server, requests=3, max_tokens=32, progress=None, label="test-a")
    b = investigation.measure(host, server, requests=3, max_tokens=32, progress=None, label="test-b")
    results = [investigation.StepResult(None, a, 1.0), *(investigation.StepResult(s, b, 1.0) for s in plan)]
    validation = investigation.Validation("lab", results, baseline_tok_s=70.0, ceiling_tok_s=69.0, applied=True)
    fig = steps_chart(validation)
    ticks = [t.x[0] for t in fig.data]
    assert ticks == ["as found", "+ --speculative-num-steps 3<br>+ --speculative-num-draft-tokens 4",
                     "+ --enforce-piecewise-cuda-graph"]  # the fix, whole, never the problem's title
    assert all(s.title in t.hovertemplate for s, t in zip(plan, fig.data[1:], strict=True))
    base, roof = fig.layout.annotations
    assert (base.text, roof.text) == ("baseline 70 tok/s", "roofline 69.0 tok/s")
    # 1 tok/s apart, the labels sit on opposite sides and opposite ends: they cannot cover each other
    assert (base.x, base.yanchor) != (roof.x, roof.yanchor) and {base.yanchor, roof.yanchor} == {"bottom", "top"}
    ab = ab_comparison(compare(a, b))
    boxes = [t for t in ab.data if t.type == "box"]
    assert [set(t.x) for t in boxes] == [{"A"}, {"B"}] and ab.layout.xaxis.tickangle == 0
    assert [t.name for t in boxes] == [f"A: {a.name}", f"B: {b.name}"] and ab.layout.showlegend
