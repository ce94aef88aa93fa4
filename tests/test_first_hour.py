"""What a new user meets in the first hour: the lab in the state the notebooks teach, `make lab`'s
working copy, one cross-check answer for the notebook and the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _lab_support import free_port

import kit.lab
from kit import demo, investigation
from kit.lab.control import Lab
from kit.provenance import explain_server
from kit.source import SourceTree
from kit.target import connect, resolve_server

ROOT = Path(__file__).resolve().parent.parent
SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"


@pytest.fixture
def fixed_lab(tmp_path, monkeypatch):
    """A lab left on the incident's fixed launch, as `make demo` and notebook 04 used to leave it."""
    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")
    lab = Lab()
    status = lab.up(variant="fixed", port=free_port())
    yield lab, status
    lab.down()


@pytest.mark.slow
def test_a_notebook_puts_the_lab_back_on_the_launch_it_teaches_and_says_so(fixed_lab):
    lab, before = fixed_lab
    status = kit.lab.ensure_running("lab", launch="new")
    assert status.running and status.label == "variant new" and status.pid != before.pid
    assert status.port == before.port
    assert status.note.startswith(f"the lab was running variant fixed (pid {before.pid}); restarted it with "
                                  "the incident's new launch")
    assert 'lab_launch = ""' in status.note  # and how to keep whatever runs
    again = kit.lab.ensure_running("lab", launch="new")
    assert again.pid == status.pid and "the launch this notebook teaches from" in again.note
    kept = kit.lab.ensure_running("lab", launch="")
    assert kept.pid == status.pid and "kept as it is" in kept.note
    assert kit.lab.ensure_running("ssh://nobody@127.0.0.1:1", launch="new") is None  # a real target: untouched


@pytest.mark.slow
def test_the_notebook_cross_check_and_why_dryrun_give_one_answer_on_the_fixed_launch(fixed_lab, env_0511):
    lab, status = fixed_lab
    with connect("lab") as host:
        server = resolve_server(host, "lab")
        tree = SourceTree.of_server(server)
        explanation = explain_server(server, "disable_piecewise_cuda_graph", tree)
        check = investigation.dryrun_crosscheck(server, tree, explanation, gpu="a6000")
    assert check.how == "dry-run (live)"
    # The enforce flag's early `disable_piecewise_cuda_graph = False` is the write that ran, and the
    # static reading names the same line.
    assert check.dryrun_sites == check.static_sites and len(check.dryrun_sites) == 1
    cli = subprocess.run([SGL_KIT, "--json", "why", "disable_piecewise_cuda_graph", "--dryrun", "--gpu", "a6000",
                          "--sglang", "0.5.11", "--model", str(ROOT / "kit/data/lab/Qwen3.6-27B"), "--",
                          *kit.lab.variants()["fixed"].flags()],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    verdict = json.loads(cli.stdout)
    assert verdict["agree"] is check.agree is True
    assert [c["where"] for c in verdict["checks"] if c["static"] == "fired"] == check.static_sites
    assert check.checked == len(verdict["checks"])


def test_make_labs_working_copy_leaves_the_tracked_notebooks_alone(tmp_path):
    settings = tmp_path / "settings" / "overrides.json"
    dest = tmp_path / "nb"
    dest.mkdir()
    # A twin an earlier working copy made, unedited: removed; the file browser lists each notebook once.
    (dest / "02_config.py").write_text("# the twin as copied")
    (dest / ".copied.json").write_text(json.dumps({"02_config.py": {
        "source": "old", "copy": hashlib.sha256(b"# the twin as copied").hexdigest()}}))
    demo.workspace(dest, settings=settings)
    tracked = ROOT / "notebooks" / "01_symptom.ipynb"
    copy = dest / "01_symptom.ipynb"
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in (ROOT / "notebooks").iterdir() if p.suffix == ".ipynb" or p.name == "templates")
    assert not list(dest.rglob("*.py")) and (dest / "templates" / "investigation.ipynb").is_file()
    # The same notebook, unpaired: saving it in JupyterLab writes no .py twin.
    theirs, ours = json.loads(tracked.read_text()), json.loads(copy.read_text())
    assert theirs["metadata"]["jupytext"]["formats"] == "ipynb,py:percent" and "jupytext" not in ours["metadata"]
    assert ours["cells"] == theirs["cells"]
    overrides = json.loads(settings.read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    copy.write_text(copy.read_text().replace("The symptom", "My notes on the symptom"))  # the user's work
    demo.workspace(dest, settings=settings)
    assert "My notes on the symptom" in copy.read_text()  # kept while the tracked notebook is unchanged
    manifest = json.loads((dest / ".copied.json").read_text())
    manifest["01_symptom.ipynb"]["source"] = "an older version"
    (dest / ".copied.json").write_text(json.dumps(manifest))
    demo.workspace(dest, settings=settings)  # the tracked one "changed": fresh copy, the user's kept beside
    assert json.loads(copy.read_text())["cells"] == theirs["cells"]
    assert "My notes on the symptom" in (dest / "01_symptom.ipynb.mine").read_text()


# --------------------------------------------------------------------------- the command line


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from kit.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_mistyped_command_or_option_says_what_was_meant(capsys):
    code, _, err = _cli(capsys, "doctr", "lab")
    assert code == 2 and "invalid choice: 'doctr'" in err and "  -> did you mean 'doctor'?" in err
    code, _, err = _cli(capsys, "doctor", "--lgo", "x.log")
    assert code == 2 and "unrecognized arguments: --lgo" in err and "  -> did you mean --log?" in err


def test_an_abbreviated_option_is_an_error_not_a_guess(capsys, tmp_path):
    launch = tmp_path / "old.sh"
    launch.write_text("python -m sglang.launch_server --model-path /m --tp-size 2\n")
    code, _, err = _cli(capsys, "doctor", "--baselin", str(launch))
    assert code == 2 and "unrecognized arguments: --baselin" in err and "did you mean --baseline?" in err


def test_a_directory_where_a_file_is_wanted_is_named_as_such(capsys, tmp_path):
    (tmp_path / "server.log").write_text("")
    code, _, err = _cli(capsys, "args", "parse", str(tmp_path))
    assert code == 2
    assert err == (f"sgl-kit: error: {tmp_path} is a directory; this takes one file\n"
                   f"  -> give one of its files, e.g. {tmp_path / 'server.log'}\n")


def test_source_errors_point_at_the_cli_not_the_python_api(capsys, sglang_source):
    sglang_source = sglang_source("0.5.11")
    code, _, err = _cli(capsys, "source", "local", "srt/server_args.py:999999-1000000",
                        "--package-dir", str(sglang_source))
    assert code == 2 and "`sgl-kit source TARGET --function NAME`" in err and "tree." not in err
    code, _, err = _cli(capsys, "source", "local", "--function", "ServerArgs._no_such_method",
                        "--package-dir", str(sglang_source))
    assert code == 2 and "`sgl-kit grep TARGET" in err and "tree." not in err
    code, _, err = _cli(capsys, "source", "local", "srt/no_such_file.py", "--package-dir", str(sglang_source))
    assert code == 2 and "`sgl-kit grep TARGET PATTERN --glob 'no_such_file.py'`" in err and "tree." not in err


def test_run_files_go_to_the_users_own_directory_not_a_shared_temp_name(tmp_path, monkeypatch, sglang_source):
    import os
    import stat

    from kit.hosts import LocalHost

    tree = SourceTree.at(LocalHost(), sglang_source("0.5.11"))
    monkeypatch.setenv("SGL_KIT_CACHE", str(tmp_path / "cache"))
    side = investigation.baseline_launch("lab:old", tree)
    runs = tmp_path / "cache" / "runs"
    assert stat.S_IMODE(os.stat(runs).st_mode) == 0o700
    assert [p.name for p in runs.iterdir()] == ["baseline-lab-old-0.5.11.sh"]
    assert "--speculative-num-steps 3" in (runs / "baseline-lab-old-0.5.11.sh").read_text()
    assert side is not None


def test_a_cut_off_log_leaves_tp_and_speculative_decoding_unknown_in_the_roofline(tmp_path, capsys):
    """Fields a cut-off `server_args=` line lacks are unknown, never defaults: no `tp=1`, and never
    "no speculative decoding" when the line stops before speculative_algorithm."""
    full = json.loads((ROOT / "kit/data/resolved/incident-new-0.5.11.json").read_text())["server_args_line"]
    cut = full[:full.index(", mem_fraction_static=")]  # the post ends mid-line
    assert "tp_size=" not in cut and "speculative_algorithm=" not in cut
    log = tmp_path / "cut.log"
    log.write_text(cut + "\n")
    code, out, _ = _cli(capsys, "doctor", "--log", str(log), "--sglang", "0.5.11", "--gpu", "a6000")
    assert code == 0
    roof = out[out.index("decode roofline"):]
    assert "tp=?" in roof and "the tensor parallel size is not known" in roof
    assert "speculative decoding unknown" in roof and "no speculative decoding" not in out


@pytest.mark.slow
def test_the_demo_starts_the_lab_on_a_free_port_when_the_default_is_taken_and_honours_its_port(tmp_path,
                                                                                                monkeypatch):
    import io
    import os
    import socket

    from rich.console import Console

    monkeypatch.setenv("SGL_KIT_LAB_DIR", str(tmp_path / "lab"))
    monkeypatch.setenv("SGL_KIT_LAB_DRYRUN", "0")
    console = Console(file=io.StringIO(), width=300, highlight=False)
    with socket.create_server(("127.0.0.1", 0)) as held:  # another server on the lab's default port
        taken = held.getsockname()[1]
        monkeypatch.setenv("SGL_KIT_LAB_PORT", str(taken))
        try:
            status = demo.lab_step(console)  # what `make demo` does first
            printed = console.file.getvalue().splitlines()
            assert status.running and status.label == "variant new" and status.port != taken
            assert printed[0] == f"lab: variant new at http://127.0.0.1:{status.port} (pid {status.pid})"
            assert printed[1].startswith(f"  port {taken} is in use by pid {os.getpid()} (")
            assert printed[1].endswith(f"so the lab listens on {status.port} (--port N to choose one)")
            # the notebooks' resolver finds it there
            with connect("lab") as host:
                assert resolve_server(host, "lab").port == status.port
            # `python -m kit.demo --port N`: the lab moves to N, still on the incident's new launch
            asked = free_port()
            moved = demo.lab_step(console, asked)
            assert moved.port == asked and moved.label == "variant new" and moved.pid != status.pid
            assert console.file.getvalue().splitlines()[-1] == (f"lab: variant new at http://127.0.0.1:{asked} "
                                                                f"(pid {moved.pid})")
        finally:
            Lab().down()
