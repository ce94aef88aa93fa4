"""`sgl-kit capture` and `sgl-kit doctor --case`: a live server's evidence kept, then diagnosed again offline.

The targets are real: the lab (a real process, sglang 0.5.11's resolution) with a planted API key, the real
sglang 0.5.11 server on CPU, and the lab behind the test sshd. The replay runs with no network (a network
namespace of its own), and with a rule changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from _lab_support import free_port

import kit
import kit.doctor
from kit.case import compare_case, open_case, replay
from kit.errors import CaseError

pytestmark = pytest.mark.slow

SGL_KIT = shutil.which("sgl-kit", path=str(Path(sys.executable).parent)) or "sgl-kit"
API_KEY = "sk-proj-Zq8vT3xLm2Np7Rk4Wb9Yc1Hd6Fj0Gs5AeQ"
ADMIN_KEY = "adm-9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c"
HF_TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678"


def sgl_kit(env, *args, timeout=300, prefix=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, SGL_KIT, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab running the incident's slow launch with an API key, an admin key and an HF token planted."""
    env = dict(os.environ, SGL_KIT_LAB_DIR=str(tmp_path_factory.mktemp("case-lab")), SGL_KIT_LAB_DRYRUN="0",
               HF_TOKEN=HF_TOKEN)
    up = sgl_kit(env, "--json", "lab", "up", "--port", str(free_port()), "--variant", "new", "--", "--api-key", API_KEY,
                 "--admin-api-key", ADMIN_KEY)
    assert up.returncode == 0, up.stderr
    yield env
    sgl_kit(env, "lab", "down")


@pytest.fixture(scope="module")
def captured(lab, tmp_path_factory):
    """`sgl-kit capture lab`, and the live doctor's answer right after it."""
    out = tmp_path_factory.mktemp("cases") / "incident"
    started = time.monotonic()
    proc = sgl_kit(lab, "capture", "lab", "-o", str(out), "--interval", "1")
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    live = sgl_kit(lab, "--json", "doctor", "lab")
    assert live.returncode == 0, live.stderr
    return out, proc, json.loads(live.stdout), seconds


def _every_file(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_capture_writes_the_case_layout_with_what_each_file_is_and_what_is_missing(captured):
    out, proc, _, seconds = captured
    meta = yaml.safe_load((out / "case.yaml").read_text())
    assert meta["format"] == 1 and meta["kind"] == "captured" and meta["id"] == "incident"
    assert meta["sglang"]["version"] == "0.5.11" and re.fullmatch(r"[0-9a-f]{64}", meta["sglang"]["record_sha256"])
    for name in ("server_info.json", "launch.sh", "environ.txt", "server.log", "config.json", "request.json",
                 "model_info.json", "health.txt", "findings.json"):
        assert (out / name).is_file() and meta["files"][name], name
    # each endpoint where sglang 0.5.11's own source serves it, with the line
    assert meta["endpoints"]["/v1/loads"] == "served (srt/entrypoints/v1_loads.py:134)"
    assert meta["endpoints"]["/server_info"].startswith("served (srt/entrypoints/http_server.py:")
    # what could not be collected is named with its error: no GPU here, no /metrics without --enable-metrics
    assert "nvidia-smi" in meta["missing"] and "not found" in meta["missing"]["nvidia-smi"]
    assert "--enable-metrics" in meta["missing"]["GET /metrics"]
    # the request is replayable and says it was written by the kit
    body = json.loads((out / "request.json").read_text())
    assert body["sampling_params"]["max_new_tokens"] > 0 and "not a request the server saw" in meta["files"]["request.json"]
    # the source lines the findings cite, with the file's hash
    assert meta["excerpts"] and all(re.fullmatch(r"[0-9a-f]{64}", e["sha256"]) for e in meta["excerpts"])
    excerpt = meta["excerpts"][0]
    assert (out / excerpt["path"]).is_file() and any(f"{n:>6}>" in (out / excerpt["path"]).read_text()
                                                     for n in excerpt["lines"])
    assert proc.stdout.startswith(f"captured {out} in ") and "not collected: nvidia-smi" in proc.stdout
    assert "capture: [1/" in proc.stderr  # a progress line per piece
    assert meta["captured"]["seconds"] <= seconds


def test_the_case_keeps_no_secret_and_says_what_it_masked(captured):
    out, _, _, _ = captured
    files = _every_file(out)
    for name, data in files.items():
        for secret in (API_KEY, ADMIN_KEY, HF_TOKEN):
            for piece in (secret, secret[4:16], secret[-12:]):
                assert piece.encode() not in data, (name, piece)
    meta = yaml.safe_load((out / "case.yaml").read_text())
    names = {n for r in meta["redacted"] for n in r["names"]}
    assert {"api_key", "admin_api_key"} <= names, meta["redacted"]  # HF_TOKEN: not a variable the case keeps
    assert "--api-key '<redacted>'" in (out / "launch.sh").read_text() or "--api-key <redacted>" in \
        (out / "launch.sh").read_text()


def test_findings_json_is_the_live_doctors_answer(captured):
    out, _, live, _ = captured
    recorded = json.loads((out / "findings.json").read_text())
    assert [f["id"] for f in recorded["findings"]] == [f["id"] for f in live["findings"]]
    assert recorded["findings"][0]["id"] == "speculative-steps-low"


def test_replay_with_no_network_gives_the_same_answer(captured, lab):
    out, _, _, _ = captured
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.fail("this test needs `unshare -n` (util-linux, run as root): a replay with no network at all")
    proc = sgl_kit(lab, "--json", "doctor", "--case", str(out), "--compare", prefix=("unshare", "-n"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["comparison"]["differs"] is False, data["comparison"]
    assert data["comparison"]["same"] == [f["id"] for f in json.loads((out / "findings.json").read_text())["findings"]]
    text = sgl_kit(lab, "doctor", "--case", str(out), "--compare", prefix=("unshare", "-n"))
    assert "the same answer" in text.stdout and re.search(r"masked \d+ secret values at capture", text.stdout)


def test_replay_in_process_opens_no_socket(captured, monkeypatch):
    out, _, _, _ = captured

    connect = socket.socket.connect

    def refuse(sock, address):  # the kit's own local helpers talk over Unix sockets; no network at all
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"the replay opened a network connection: {address}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", refuse)
    diagnosis, diff = compare_case(out)
    assert not diff.differs and diagnosis.findings


def test_replay_without_the_release_in_the_cache_says_so_and_fetches_nothing(captured, lab, tmp_path):
    out, _, _, _ = captured
    env = dict(lab, SGL_KIT_CACHE=str(tmp_path / "empty-cache"))
    proc = sgl_kit(env, "--json", "doctor", "--case", str(out), prefix=("unshare", "-n"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert any("not in this machine's cache" in p and "sources/" in p for p in data["problems"]), data["problems"]
    assert not (tmp_path / "empty-cache" / "wheels").exists() or not list((tmp_path / "empty-cache" / "wheels").iterdir())


def test_compare_after_a_rule_changed_says_what_is_gone_and_what_changed(captured, monkeypatch):
    out, _, _, _ = captured
    recorded = json.loads((out / "findings.json").read_text())
    first, second = [f["id"] for f in recorded["findings"] if f["id"] != "known-issue"][:2]
    rules = []
    for r in kit.doctor.RULES:
        if r.id == first:
            continue  # the rule is gone from this kit
        rules.append(dataclasses.replace(r, title=r.title + " (reworded)") if r.id == second else r)
    monkeypatch.setattr(kit.doctor, "RULES", rules)
    _, diff = compare_case(out)
    assert [g["id"] for g in diff.gone] == [first]
    (changed,) = [c for c in diff.changed if c["id"] == second]
    assert changed["what"]["title"][1].endswith("(reworded)")
    text = diff.to_text()
    assert f"gone     {first}" in text and f"changed  {second}" in text and "title:" in text


def test_bad_cases_get_one_line(captured, lab, tmp_path):
    out, _, _, _ = captured
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, said in ((empty, "is not a case: it has no case.yaml"), (tmp_path / "nowhere", "does not exist"),
                       (out / "case.yaml", "is a file, not a case directory")):
        proc = sgl_kit(lab, "doctor", "--case", str(path))
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    newer = tmp_path / "newer"
    shutil.copytree(out, newer)
    meta = yaml.safe_load((newer / "case.yaml").read_text())
    meta["format"] = 99
    (newer / "case.yaml").write_text(yaml.safe_dump(meta))
    proc = sgl_kit(lab, "doctor", "--case", str(newer))
    assert proc.returncode == 2 and "newer than this kit reads (1)" in proc.stderr
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    excerpt = open_case(edited).excerpts[0]
    (edited / excerpt.path).write_text((edited / excerpt.path).read_text() + "# a line nobody captured\n")
    with pytest.raises(CaseError, match="was changed after capture"):
        replay(edited)
    proc = sgl_kit(lab, "doctor", "--case", str(edited))
    assert proc.returncode == 2 and "was changed after capture" in proc.stderr and len(proc.stderr.splitlines()) <= 2


def test_capture_refuses_what_it_should_not_overwrite_or_cannot_reach(captured, lab, tmp_path):
    out, _, _, _ = captured
    again = sgl_kit(lab, "capture", "lab", "-o", str(out))
    assert again.returncode == 2 and "already holds a case" in again.stderr and "--force" in again.stderr
    dead = sgl_kit(lab, "capture", f"ssh://root@127.0.0.1:{free_port()}", "-o", str(tmp_path / "dead"))
    assert dead.returncode == 2 and "Traceback" not in dead.stderr and not (tmp_path / "dead").exists()
    typo = sgl_kit(lab, "capture", "lab", "-o", str(tmp_path / "x"), "--intervall", "3")
    assert typo.returncode == 2 and "--interval" in typo.stderr


def test_a_capture_from_the_real_sglang_server_replays_to_the_same_answer(real_server, tmp_path):
    """sglang 0.5.11 on CPU, with --enable-metrics: two /metrics pages, its own /server_info and log."""
    real_server.server()
    result = kit.capture("lab", tmp_path / "real", interval=1)
    meta = open_case(result.path).meta
    assert meta["sglang"]["version"] == "0.5.11" and meta["captured"]["server"]["kind"] == "sglang"
    assert {"metrics-1.prom", "metrics-2.prom", "server_info.json", "server.log"} <= set(result.files)
    assert meta["captured"]["interval"] >= 1
    first, second = ((tmp_path / "real" / n).read_text() for n in ("metrics-1.prom", "metrics-2.prom"))
    assert "sglang:" in first and "sglang:" in second
    _, diff = compare_case(result.path)
    assert not diff.differs, diff.to_text()
    recorded = json.loads((tmp_path / "real" / "findings.json").read_text())
    assert recorded["sources"].get("runtime", "").startswith("one scrape of /metrics (kept as metrics-2.prom)")


def test_a_capture_over_ssh_replays_to_the_same_answer(remote_lab, sshd, tmp_path):
    from kit.target import connect

    host = connect(sshd.alias, config_file=str(sshd.ssh_config))
    try:
        result = kit.capture(sshd.alias, tmp_path / "remote", host=host, port=remote_lab.port, interval=0)
    finally:
        host.close()
    meta = open_case(result.path).meta
    assert meta["captured"]["target"] == sshd.alias and meta["sglang"]["version"] == "0.5.11"
    assert {"server_info.json", "launch.sh", "server.log", "findings.json"} <= set(result.files)
    _, diff = compare_case(result.path)
    assert not diff.differs, diff.to_text()


def test_capture_with_redact_host_names_no_host(lab, tmp_path):
    proc = sgl_kit(lab, "--json", "capture", "lab", "-o", str(tmp_path / "hidden"), "--interval", "0", "--redact-host")
    assert proc.returncode == 0, proc.stderr
    meta = yaml.safe_load((tmp_path / "hidden" / "case.yaml").read_text())
    assert meta["captured"]["target"] == "<redacted host>" and "127.0.0.1" not in meta["captured"]["server"]["url"]
    assert meta["captured"]["log"] is None  # the log's path names the host's directories
    assert json.loads(proc.stdout)["path"] == str(tmp_path / "hidden")


def test_capture_never_writes_over_a_directory_of_other_files(lab, tmp_path):
    mine = tmp_path / "home"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    for extra in ((), ("--force",)):
        proc = sgl_kit(lab, "capture", "lab", "-o", str(mine), *extra)
        assert proc.returncode == 2 and "holds files that are not a case's (notes.txt)" in proc.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
