"""Redaction under an adversarial reading: every kind of secret the issue lists, in every place a notebook holds text.

Every secret here is made up by this file (a seeded hash shaped like the real thing:
``xoxb-`` Slack tokens, ``ghp_`` GitHub tokens, ``AIza`` Google keys, ``nvapi-`` NGC keys,
JWTs, ``hf_`` tokens); none was ever issued. The text around them (host names, ports,
flags, model names, server_args fields) is written here too, and must survive.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from kit._secrets import SECRET_NAME_PATTERN, is_secret_name, redact_env
from kit.report import build_report, redact
from kit.report.scanner import detect_secrets_version


def fake(seed: str, n: int, alphabet: str = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") -> str:
    """A made-up random-looking string of `n` characters from `alphabet` (seeded, so stable)."""
    out, i = "", 0
    while len(out) < n:
        out += "".join(alphabet[b % len(alphabet)] for b in hashlib.sha256(f"{seed}{i}".encode()).digest())
        i += 1
    return out[:n]


def fake_jwt(seed: str) -> str:
    part = lambda obj: base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")  # noqa: E731
    sig = base64.urlsafe_b64encode(hashlib.sha256(seed.encode()).digest()).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': seed, 'iat': 1767225600})}.{sig}"


HEX = "0123456789abcdef"
S = {  # kind -> made-up secret values
    "api_key in K=": "sk-" + fake("k", 32),
    "api_key in SGL_AUTH=": "sk-" + fake("sglauth", 32),
    "api_key in CREDS= and prose": "cr-" + fake("creds", 28),
    "slack webhook": "https://hooks.slack.com/services/T0" + fake("t", 8).upper() + "/B0" + fake("b", 8).upper()
                     + "/" + fake("hook", 24),
    "slack xoxb": f"xoxb-{fake('x1', 12, '0123456789')}-{fake('x2', 13, '0123456789')}-{fake('x3', 24)}",
    "github ghp_": "ghp_" + fake("ghp", 36),
    "github ghp_ in clone URL": "ghp_" + fake("ghpclone", 36),
    "curl -u password": fake("curlpw", 14) + "!9",
    "?token= in URL": fake("qtoken", 30),
    'JSON "token"': fake("jsontoken", 32),
    "api_token=": fake("apitoken", 32),
    "JWT in a cookie": fake_jwt("cookie"),
    "wandb login": fake("wandb", 40, HEX),
    "mysql -p": "My" + fake("mysql", 12) + "7",
    "Google AIza": "AIza" + fake("aiza", 35),
    "NGC nvapi-": "nvapi-" + fake("ngc", 64),
    "password in prose": "Tr0ub4dor-" + fake("prose", 8),
    "netrc password": fake("netrc", 20),
    "os.environ variable": "sgk-" + fake("osenv", 30),
    "hf_ bare": "hf_" + fake("hf1", 34),
    "hf_ HF_TOKEN=": "hf_" + fake("hf2", 34),
    "hf_ --token": "hf_" + fake("hf3", 34),
    "hf_ in URL": "hf_" + fake("hf4", 34),
    "hf_ Bearer": "hf_" + fake("hf5", 34),
    "server_args api_key": "sk-" + fake("sa1", 32),
    "server_args admin_api_key": "adm-" + fake("sa2", 24),
    "server_args ssl_keyfile_password": "Ssl" + fake("sa3", 14) + "1",
}
V = S  # short alias in the f-strings below
HOST = "gpu-box-17.prod.example.com"
SERVER_ARGS = (f"server_args=ServerArgs(model_path='Qwen/Qwen3-8B', host='0.0.0.0', port=30000, "
               f"api_key='{V['server_args api_key']}', admin_api_key='{V['server_args admin_api_key']}', "
               f"ssl_keyfile_password='{V['server_args ssl_keyfile_password']}', ssl_keyfile='/etc/ssl/key.pem', "
               "tp_size=2, mem_fraction_static=0.88, max_total_tokens=65536, tokenizer_path='Qwen/Qwen3-8B', "
               "speculative_num_steps=3, disable_piecewise_cuda_graph=True)")
SNIPPETS = [  # (text, what must survive around the secrets)
    (f"K={V['api_key in K=']}; python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 30000 --api-key $K --tp 2",
     ["python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 30000 --api-key $K --tp 2"]),
    (f"export SGL_AUTH={V['api_key in SGL_AUTH=']}\nsglang serve --host {HOST} --api-key \"${{SGL_AUTH}}\"",
     [f"sglang serve --host {HOST} --api-key \"${{SGL_AUTH}}\"", "export SGL_AUTH="]),
    (f"CREDS={V['api_key in CREDS= and prose']} bash run.sh", ["bash run.sh"]),
    (f"The key we used was {V['api_key in CREDS= and prose']} (copied from the runbook).",
     ["The key we used was", "(copied from the runbook)."]),
    (f"alerts go to {V['slack webhook']} from the bench job", ["alerts go to", "from the bench job"]),
    (f"SLACK_BOT={V['slack xoxb']} posts to #sglang-perf", ["posts to #sglang-perf"]),
    (f"gh auth with {V['github ghp_']} done", ["gh auth with", "done"]),
    (f"git clone https://{V['github ghp_ in clone URL']}@github.com/acme/serving-configs.git",
     ["git clone https://", "@github.com/acme/serving-configs.git"]),
    (f"curl -u admin:{V['curl -u password']} http://{HOST}:30000/metrics -s",
     ["curl -u admin:", f"http://{HOST}:30000/metrics -s"]),
    (f"GET http://{HOST}:30000/v1/models?token={V['?token= in URL']}&verbose=1",
     [f"GET http://{HOST}:30000/v1/models?token=", "&verbose=1"]),
    (f'{{"token": "{V[chr(74) + "SON " + chr(34) + "token" + chr(34)]}", "model": "Qwen/Qwen3-8B", "port": 30000}}',
     ['"model": "Qwen/Qwen3-8B", "port": 30000']),
    (f"client.yaml: api_token={V['api_token=']} retries=3", ["client.yaml: api_token=", "retries=3"]),
    (f"curl -b 'sid={V['JWT in a cookie']}' http://{HOST}:30000/health", [f"http://{HOST}:30000/health"]),
    (f"wandb login {V['wandb login']} && python bench.py --num-prompts 200",
     ["wandb login", "&& python bench.py --num-prompts 200"]),
    (f"mysql -h db.internal -P 3306 -u grafana -p{V['mysql -p']} metrics", ["mysql -h db.internal -P 3306 -u grafana -p"]),
    (f"export GOOG={V['Google AIza']} # gemini judge", ["# gemini judge"]),
    (f"NGC={V['NGC nvapi-']} docker pull nvcr.io/nvidia/pytorch:24.05-py3", ["docker pull nvcr.io/nvidia/pytorch:24.05-py3"]),
    (f"Note: the staging db password is {V['password in prose']}, rotate it after the incident.",
     ["Note: the staging db password is", "rotate it after the incident."]),
    (f"machine api.wandb.ai login bench password {V['netrc password']}", ["machine api.wandb.ai login bench password"]),
    (f"token file ~/.cache/huggingface/token holds {V['hf_ bare']}", ["token file ~/.cache/huggingface/token holds"]),
    (f"HF_TOKEN={V['hf_ HF_TOKEN=']} HF_HUB_ENABLE_HF_TRANSFER=1", ["HF_HUB_ENABLE_HF_TRANSFER=1"]),
    (f"huggingface-cli login --token {V['hf_ --token']} --add-to-git-credential",
     ["huggingface-cli login --token", "--add-to-git-credential"]),
    (f"git clone https://bench:{V['hf_ in URL']}@huggingface.co/Qwen/Qwen3-8B", ["@huggingface.co/Qwen/Qwen3-8B"]),
    (f"curl -H 'Authorization: Bearer {V['hf_ Bearer']}' https://huggingface.co/api/whoami-v2",
     ["https://huggingface.co/api/whoami-v2"]),
    (SERVER_ARGS, ["model_path='Qwen/Qwen3-8B', host='0.0.0.0', port=30000", "ssl_keyfile='/etc/ssl/key.pem'",
                   "tp_size=2, mem_fraction_static=0.88, max_total_tokens=65536, tokenizer_path='Qwen/Qwen3-8B'",
                   "speculative_num_steps=3, disable_piecewise_cuda_graph=True)"]),
]
TEXT = "\n".join(t for t, _ in SNIPPETS)
SURVIVE = [s for _, keep in SNIPPETS for s in keep]
# encoded copies: each line base64-encoded, and URL-encoded inside a query string
ENCODED = "\n".join([f"blob {base64.b64encode(t.encode()).decode()} ." for t, _ in SNIPPETS]
                    + [f"https://grafana.internal/d?q={quote(t, safe='')}&orgId=1" for t, _ in SNIPPETS])
PLACES = ["markdown", "code", "stream", "text/html", "application/json", "plotly JSON", "widget state",
          "traceback", "cell metadata", "notebook metadata", "attachment"]


def leak_forms(secret: str) -> set[str]:
    raw = secret.encode()
    forms = {secret, html.escape(secret), json.dumps(secret)[1:-1], quote(secret, safe="")}
    for pad in range(3):  # base64 at the three byte alignments, both alphabets
        enc = base64.b64encode(b"\0" * pad + raw).decode()
        core = enc[-(-8 * pad // 6):(8 * pad + 8 * len(raw)) // 6]
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return {f for f in forms if len(f) >= 8}


def leaks(data: str) -> list[tuple[str, str]]:
    return [(kind, form[:16]) for kind, secret in S.items() for form in leak_forms(secret) if form in data]


def env_cells() -> list:
    """A variable assigned from os.environ, shown by itself and printed: its value is the secret."""
    value = V["os.environ variable"]
    return [new_code_cell('import os\nkey = os.environ["SGLANG_API_KEY"]', execution_count=2),
            new_code_cell("key", execution_count=3, outputs=[
                new_output("execute_result", execution_count=3, data={"text/plain": repr(value)})]),
            new_code_cell("print(key)", execution_count=4, outputs=[new_output("stream", name="stdout",
                                                                               text=value + "\n")]),
            new_markdown_cell(f"We pasted {value} into the ticket by mistake.")]


def planted_notebook(text: str = TEXT + "\n" + ENCODED) -> nbformat.NotebookNode:
    lines = text.splitlines()
    figure = {"data": [{"type": "scatter", "x": [1, 2, 3], "y": [3, 1, 2], "name": lines[0], "hovertext": lines}],
              "layout": {"title": {"text": "tok/s per request"}, "annotations": [{"text": text, "x": 1, "y": 1}]}}
    state = {"state": {"m1": {"model_name": "TextareaModel", "model_module": "@jupyter-widgets/controls",
                              "model_module_version": "2.0.0", "state": {"value": text, "description": lines[1]}}},
             "version_major": 2, "version_minor": 0}
    nb = new_notebook()
    nb.metadata.update({"kit_notes": text, "widgets": {"application/vnd.jupyter.widget-state+json": state},
                        "papermill": {"parameters": {"target": f"ssh://root@{HOST}:22", "notes": text}}})
    md = new_markdown_cell(f"# Incident on {HOST}\n\n{text}\n\n![note](attachment:note.txt)")
    md["attachments"] = {"note.txt": {"text/plain": text}}
    nb.cells = [md, new_code_cell("\n".join(f"# {ln}" for ln in lines) + "\nshow()", execution_count=1,
                                  metadata={"kit_note": text}, outputs=[
        new_output("stream", name="stdout", text=text + "\n"),
        new_output("display_data", data={"text/html": f"<pre>{html.escape(text)}</pre>", "text/plain": "table"}),
        new_output("display_data", data={"application/json": {"lines": lines, "blob": text}}),
        new_output("display_data", data={"application/vnd.plotly.v1+json": figure, "text/plain": "figure"}),
        new_output("display_data", data={"application/vnd.jupyter.widget-state+json": state, "text/plain": "w"}),
        new_output("error", ename="RuntimeError", evalue=lines[0], traceback=["\x1b[0;31mRuntimeError\x1b[0m", text]),
    ]), *env_cells()]
    return nb


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("adversarial") / "incident.ipynb"
    nbformat.write(planted_notebook(), path)
    return path


@pytest.mark.parametrize("mode", ["html", "html-no-input", "markdown-code"])
def test_every_planted_kind_is_gone_in_every_form_and_the_text_around_stays(planted, tmp_path, mode):
    out = tmp_path / ("r.md" if mode.startswith("markdown") else "r.html")
    result = build_report([planted], out, no_input=mode == "html-no-input", markdown=mode.startswith("markdown"),
                          code=True)
    data = out.read_text()
    assert leaks(data) == []
    readable = html.unescape(re.sub(r"<[^>]+>", "", data)) if mode.startswith("html") else data
    assert [s for s in SURVIVE if s not in readable] == []
    assert HOST in readable and "Qwen/Qwen3-8B" in readable and "--port 30000" in readable
    for kind in ("slack_token", "github_token", "jwt", "google_api_key", "ngc_api_key", "wandb_api_key",
                 "password", "netrc_password", "prose_secret", "hf_token", "api_key", "admin_api_key",
                 "ssl_keyfile_password", "secret_variable", "token", "env_secret"):
        assert result.counts[kind] > 0, kind
    assert "every secret" not in data


def place_notebook(place: str) -> nbformat.NotebookNode:
    """Every kind planted (plain, base64, URL-encoded) in one place only, plus the os.environ cells."""
    text = TEXT + "\n" + ENCODED
    lines = text.splitlines()
    nb = new_notebook(cells=env_cells())
    if place == "markdown":
        nb.cells.append(new_markdown_cell(text))
    elif place == "code":
        nb.cells.append(new_code_cell(text))
    elif place == "attachment":
        cell = new_markdown_cell("see ![n](attachment:n.txt)")
        cell["attachments"] = {"n.txt": {"text/plain": text}}
        nb.cells.append(cell)
    elif place == "cell metadata":
        nb.cells.append(new_code_cell("x", metadata={"note": text}))
    elif place == "notebook metadata":
        nb.metadata["note"] = text
    elif place == "widget state":
        nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m": {
            "model_name": "TextareaModel", "state": {"value": text}}}, "version_major": 2, "version_minor": 0}}
    else:
        output = {"stream": new_output("stream", name="stdout", text=text),
                  "text/html": new_output("display_data", data={"text/html": f"<p>{html.escape(text)}</p>"}),
                  "application/json": new_output("display_data", data={"application/json": {"lines": lines}}),
                  "plotly JSON": new_output("display_data", data={"application/vnd.plotly.v1+json": {
                      "data": [{"type": "bar", "y": [1], "hovertext": lines}], "layout": {"title": {"text": text}}}}),
                  "traceback": new_output("error", ename="E", evalue="x", traceback=lines)}[place]
        nb.cells.append(new_code_cell("show()", outputs=[output]))
    return nb


def planted_table(tmp_path: Path) -> list[tuple[str, str, bool]]:
    """(kind, place, removed from both the HTML page and the Markdown summary) for every kind in every place."""
    rows = []
    for place in PLACES:
        path = tmp_path / f"{place.replace('/', '_').replace(' ', '_')}.ipynb"
        nbformat.write(place_notebook(place), path)
        build_report([path], path.with_suffix(".html"))
        build_report([path], path.with_suffix(".md"), markdown=True, code=True)
        data = path.with_suffix(".html").read_text() + path.with_suffix(".md").read_text()
        rows += [(kind, place, not any(f in data for f in leak_forms(secret))) for kind, secret in S.items()]
    return rows


@pytest.mark.parametrize("place", PLACES)
def test_each_place_alone(tmp_path, place):
    """One place at a time, so a place the walk misses cannot hide behind another that holds the same text."""
    nbformat.write(place_notebook(place), tmp_path / "p.ipynb")
    assert leaks(nbformat.writes(place_notebook(place))) != []  # planted indeed
    for out in ("p.html", "p.md"):
        build_report([tmp_path / "p.ipynb"], tmp_path / out, markdown=out.endswith(".md"), code=True)
        data = (tmp_path / out).read_text()
        assert leaks(data) == [], (place, out)
    raw = (tmp_path / "p.md").read_text()
    if place in ("markdown", "code", "stream", "traceback"):  # the places the summary shows as text
        assert [s for s in SURVIVE if s not in raw] == []


def test_server_args_fields_other_than_secrets_survive():
    out, counts = redact(SERVER_ARGS)
    assert counts == {"api_key": 1, "admin_api_key": 1, "ssl_keyfile_password": 1}
    assert out == SERVER_ARGS.replace(V["server_args api_key"], "<redacted:api_key>").replace(
        V["server_args admin_api_key"], "<redacted:admin_api_key>").replace(
        V["server_args ssl_keyfile_password"], "<redacted:ssl_keyfile_password>")


MORE = {"docker": "Dk" + fake("docker", 12) + "9", "redis": "Rd" + fake("redis", 12) + "4",
        "sig": fake("azsig", 40), "amz": fake("amz", 64, HEX), "cookie": fake_jwt("setcookie"),
        "yaml": "Ym" + fake("yamlpw", 10) + "2"}


@pytest.mark.parametrize(("text", "secret", "kept"), [
    (f"docker login -u bob -p {MORE['docker']} registry.example.com", "docker", "registry.example.com"),
    (f"redis-cli -h cache.internal -p 6379 -a {MORE['redis']} ping", "redis", "-p 6379 -a"),
    (f"https://acct.blob.core.windows.net/c/f?sv=2022-11-02&sig={MORE['sig']}&se=2026", "sig", "&se=2026"),
    (f"https://s3.amazonaws.com/b/k?X-Amz-Expires=60&X-Amz-Signature={MORE['amz']}", "amz", "X-Amz-Expires=60"),
    (f"Set-Cookie: session={MORE['cookie']}; Path=/; HttpOnly", "cookie", "; Path=/; HttpOnly"),
    (f"password: {MORE['yaml']} (staging)", "yaml", "(staging)"),
])
def test_more_forms_of_the_same_kinds(text, secret, kept):
    out, counts = redact(text)
    assert not [f for f in leak_forms(MORE[secret]) if f in out] and kept in out and sum(counts.values()) == 1


@pytest.mark.parametrize("text", [
    "docker run -p 8080:80 -u 1000:1000 lmsysorg/sglang:latest",
    f"python -m sglang.launch_server --model-path Qwen/Qwen3-8B --host {HOST} --port 30000 --tp 2 --enable-metrics",
    "--max-total-tokens 65536 --tokenizer-path /models/qwen --ssl-keyfile /etc/ssl/key.pem --chunked-prefill-size 8192",
    "TOKENIZERS_PARALLELISM=false SGLANG_MAX_TOKENS=4096 CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_LEVEL=NVL",
    "The key is that the prefill graph was off; the token budget was 8192.",
    "Token: what the tokenizer returns for each word",
    "sorted(rows, key=len) and {'key': 'decode', 'value': 37.2}",
    "the password is wrong",
])
def test_what_is_no_secret_stays(text):
    assert redact(text) == (text, {})


# --- what survives is shown, and --strict removes it

UNKNOWN = "Zq" + fake("unknown-shape", 38)  # made up: a secret of no known shape, under a neutral name


def test_random_strings_no_rule_knows_are_listed_by_place_and_strict_removes_them(tmp_path, capsys):
    nb = new_notebook(cells=[new_markdown_cell("## Run"), new_code_cell("cfg", execution_count=1, outputs=[
        new_output("execute_result", execution_count=1, data={"text/plain": f"{{'endpoint': '{HOST}', 'x9': "
                                                                             f"'{UNKNOWN}'}}"})])])
    nbformat.write(nb, tmp_path / "u.ipynb")
    result = build_report([tmp_path / "u.ipynb"], tmp_path / "u.html")
    page = (tmp_path / "u.html").read_text()
    assert UNKNOWN in page  # kept (no rule knows it), and said so, by place only
    assert result.kept == ["u.ipynb cell 2 output 1 text/plain"]
    summary = result.summary()
    assert UNKNOWN not in summary and "1 long random-looking string" in summary and "--strict" in summary
    assert summary.startswith("no secret found by the rules; ") and "u.ipynb cell 2 output 1 text/plain" in page
    strict = build_report([tmp_path / "u.ipynb"], tmp_path / "s.html", strict=True)
    page = (tmp_path / "s.html").read_text()
    assert UNKNOWN not in page and not [f for f in leak_forms(UNKNOWN) if f in page]
    assert strict.counts["high_entropy"] == 1 and HOST in page and strict.kept
    assert strict.summary() == "1 secret removed: 1 high_entropy"

    from kit.cli import main
    assert main(["report", str(tmp_path / "u.ipynb"), "-o", str(tmp_path / "c.md"), "--markdown", "--strict"]) == 0
    said = capsys.readouterr().out
    assert UNKNOWN not in (tmp_path / "c.md").read_text() and "1 secret removed: 1 high_entropy" in said
    assert main(["report", str(tmp_path / "u.ipynb"), "-o", str(tmp_path / "d.md"), "--markdown"]) == 0
    said = capsys.readouterr().out
    assert said.count("no secret found by the rules") == 1 and "0 secrets" not in said
    assert "u.ipynb cell 2 output 1 text/plain" in said and UNKNOWN not in said


def test_images_and_plotly_binary_arrays_are_not_listed(tmp_path):
    png = base64.b64encode(hashlib.sha512(b"img").digest() * 20).decode()
    figure = {"data": [{"type": "scatter", "y": {"dtype": "f8", "bdata": png}}], "layout": {}}
    nb = new_notebook(cells=[new_code_cell("fig", outputs=[
        new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
        new_output("display_data", data={"application/vnd.plotly.v1+json": figure}),
        new_output("display_data", data={"text/html": f'<img src="data:image/png;base64,{png}">'}),
        new_output("stream", name="stdout", text="/opt/venv/lib/python3.11/site-packages/sglang/srt/server_args.py "
                                                 "Qwen3_5ForConditionalGeneration disable_piecewise_cuda_graph\n")])])
    nbformat.write(nb, tmp_path / "i.ipynb")
    assert build_report([tmp_path / "i.ipynb"], tmp_path / "i.html").kept == []


# --- one secret policy

def test_one_policy_for_secret_looking_names():
    for name in ("SGL_AUTH", "CREDS", "HF_TOKEN", "SGLANG_API_KEY", "api_token", "token", "apiKey", "DB_PW",
                 "ssl_keyfile_password", "admin_api_key", "PGPASSWORD", "Cookie"):
        assert is_secret_name(name), name
    for name in ("key", "max_total_tokens", "TOKENIZERS_PARALLELISM", "tokenizer_path", "ssl_keyfile",
                 "SGLANG_API_KEY_FILE", "author", "K", "CUDA_VISIBLE_DEVICES"):
        assert not is_secret_name(name), name
    env = {"SGL_AUTH": "a-made-up-value", "SGLANG_API_KEY": "another-made-up", "SGL_KIT_NOTE": "kept", "X_TOKEN": ""}
    assert redact_env(env) == {"SGL_AUTH": "<redacted>", "SGLANG_API_KEY": "<redacted>", "SGL_KIT_NOTE": "kept",
                               "X_TOKEN": ""}
    value = "sk-" + fake("sglauth-report", 24)
    assert redact(f"SGL_AUTH={value}") == ("SGL_AUTH=<redacted:env_secret>", {"env_secret": 1})


def test_the_target_masks_the_same_names_on_the_target(tmp_path):
    """A real process that discovery lists, with a made-up SGL_AUTH in its environment: masked there."""
    from kit.hosts import LocalHost
    from kit.target import discover

    env = dict(os.environ, SGL_AUTH="sk-" + fake("proc-auth", 24), SGLANG_API_KEY="sk-" + fake("proc-key", 24),
               SGL_KIT_NOTE="kept-as-is", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m",
                             "fake.sglang.launch_server", "--port", "39181"], env=env)
    try:
        deadline = time.monotonic() + 30
        mine = []
        while not mine and time.monotonic() < deadline:
            mine = [s for s in discover(LocalHost(), timeout=60) if s.pid == proc.pid]
        assert mine, "discovery did not list the process"
        shown = mine[0].env
        assert shown["SGL_AUTH"] == "<redacted>" and shown["SGLANG_API_KEY"] == "<redacted>"
        assert shown["SGL_KIT_NOTE"] == "kept-as-is"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert re.compile(SECRET_NAME_PATTERN).match("SGL_AUTH")  # the pattern is plain `re`, as the script needs


def test_the_scanner_is_the_pinned_detect_secrets():
    import tomllib

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"detect-secrets=={detect_secrets_version()}" in deps


REAL = sorted(p for p in (Path(__file__).parent / "data").rglob("*")
              if p.is_file() and p.suffix in (".log", ".json", ".txt") and p.stat().st_size < 3_000_000)


def test_real_sglang_logs_configs_and_server_info_lose_nothing():
    """Over-redaction on the real thing: sglang logs (server_args lines, decode batches), config.json, /server_info."""
    assert len(REAL) >= 20
    changed = {}
    for path in REAL:
        text = path.read_text(errors="replace")
        out, counts = redact(text)
        if out != text:
            changed[str(path.relative_to(path.parents[2]))] = dict(counts)
    assert changed == {}


def test_values_from_the_environment_and_a_netrc_line_are_removed_where_they_are_copied(tmp_path):
    """`/proc/PID/environ` (NUL-separated) and a .netrc line shown in one cell; the values pasted in others."""
    key, auth, netrc = "sk-" + fake("environ-key", 28), "au-" + fake("environ-auth", 24), "Nr" + fake("netrc2", 18)
    environ = f"SGLANG_API_KEY={key}\0SGL_AUTH={auth}\0CUDA_VISIBLE_DEVICES=0,1\0NCCL_DEBUG=INFO\0"
    nb = new_notebook(cells=[
        new_code_cell("!cat /proc/4242/environ", outputs=[new_output("stream", name="stdout", text=environ)]),
        new_code_cell("!cat ~/.netrc", outputs=[new_output("stream", name="stdout", text=(
            f"machine {HOST}\n  login bench\n  password {netrc}\n"))]),
        new_markdown_cell(f"Keys tried: {key} and {auth}; the netrc one was {netrc}."),
        new_code_cell(f"client = Client('{HOST}', 30000, '{key}')\nuse(b64='{base64.b64encode(auth.encode()).decode()}')"),
    ])
    nbformat.write(nb, tmp_path / "e.ipynb")
    build_report([tmp_path / "e.ipynb"], tmp_path / "e.html")
    page = (tmp_path / "e.html").read_text()
    assert [s[:6] for s in (key, auth, netrc) if any(f in page for f in leak_forms(s))] == []
    readable = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "CUDA_VISIBLE_DEVICES=0,1" in readable and "NCCL_DEBUG=INFO" in readable and "Keys tried:" in readable
    assert f"Client('{HOST}', 30000, '<redacted:" in readable and f"machine {HOST}" in readable


def test_a_really_executed_notebook_lists_only_the_random_string_it_printed(tmp_path):
    """Executed by a real kernel: widget model ids, plotly's arrays and uuids are no survivors; a printed token is."""
    from nbclient import NotebookClient

    token = base64.b64encode(hashlib.sha256(b"executed").digest()).decode().rstrip("=")  # made up, by the kernel too
    nb = new_notebook(cells=[
        new_code_cell("import ipywidgets as w\nw.IntProgress(value=3, max=10, description='bench')"),
        new_code_cell("import plotly.graph_objects as go\ngo.Figure([go.Scatter(y=[i * 0.5 for i in range(300)])])"),
        new_code_cell("import uuid\nprint('run', uuid.uuid4())"),
        new_code_cell("import base64, hashlib\n"
                      "print('the job printed', base64.b64encode(hashlib.sha256(b'executed').digest()).decode())"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
    nbformat.write(nb, tmp_path / "x.ipynb")
    result = build_report([tmp_path / "x.ipynb"], tmp_path / "x.html")
    assert result.kept == ["x.ipynb cell 4 output 1 (stream)"] and result.widgets == 1 and result.plots == 1
    assert token in (tmp_path / "x.html").read_text()
    build_report([tmp_path / "x.ipynb"], tmp_path / "s.html", strict=True)
    assert token not in (tmp_path / "s.html").read_text()


def test_values_under_secret_names_are_masked_and_counts_stay():
    from kit._secrets import MASK, mask_named

    data = {"server_args": {"api_key": "sk-live-1a2b3c4d", "admin_api_key": None, "tp_size": 2},
            "flags": [{"option": "--api-key", "value": "sk-live-1a2b3c4d", "origin": "launch.sh:3"},
                      {"option": "--tp-size", "value": 2}],
            "masked": {"api_key": 2}, "max_total_tokens": 16384, "tokenizer_path": "/models/x"}
    out = mask_named(data)
    assert out["server_args"] == {"api_key": MASK, "admin_api_key": None, "tp_size": 2}
    assert out["flags"][0] == {"option": "--api-key", "value": MASK, "origin": "launch.sh:3"}
    assert out["flags"][1] == {"option": "--tp-size", "value": 2}
    assert out["masked"] == {"api_key": 2}  # a count of secrets is no secret
    assert out["max_total_tokens"] == 16384 and out["tokenizer_path"] == "/models/x"


def test_the_one_policy_masks_a_secret_flag_in_argv_a_launchs_fields_and_url_passwords():
    """Written for this test: a server's command line, its fields and its environment as the kit keeps and shows them."""
    from kit._secrets import MASK, mask_argv, mask_fields, mask_named, mask_url

    key, pw = "sk-" + fake("argv-key", 24), fake("url-pw", 16)
    argv = ["python", "-m", "sglang.launch_server", "--api-key", key, f"--admin-api-key={key}", "--tp-size", "2",
            "--otlp-traces-endpoint", f"http://otel:{pw}@collector:4317", "--ssl-keyfile-password", "--port", "1"]
    assert mask_argv(argv) == ["python", "-m", "sglang.launch_server", "--api-key", MASK, f"--admin-api-key={MASK}",
                               "--tp-size", "2", "--otlp-traces-endpoint", f"http://otel:{MASK}@collector:4317",
                               "--ssl-keyfile-password", "--port", "1"]  # a secret flag with no value takes none
    fields = {"api_key": key, "tp_size": 2, "cuda_graph_bs": (1, 2), "model_path": f"https://u:{pw}@hub/m",
              "admin_api_key": None}
    masked = mask_fields(fields)
    assert masked == {"api_key": MASK, "tp_size": 2, "cuda_graph_bs": (1, 2), "model_path": f"https://u:{MASK}@hub/m",
                      "admin_api_key": None}
    assert masked["cuda_graph_bs"] is fields["cuda_graph_bs"]  # every other value is the same object
    assert mask_named({"argv": argv})["argv"] == mask_argv(argv)
    assert redact_env({"HF_ENDPOINT": f"https://m:{pw}@mirror/", "HF_TOKEN": key}) == {
        "HF_ENDPOINT": f"https://m:{MASK}@mirror/", "HF_TOKEN": MASK}
    assert mask_url("http://host:30000/v1 and http://user@host/") == "http://host:30000/v1 and http://user@host/"


def test_one_rule_says_where_a_urls_password_is():
    """The report's redactor takes the one policy's URL rule (kit/_secrets.py), and no other module has one."""
    import kit.report.redaction as redaction
    from kit._secrets import URL_PASSWORD

    assert redaction._URL_PW is URL_PASSWORD
    kit_dir = Path(__file__).resolve().parents[1] / "kit"
    others = [str(p.relative_to(kit_dir)) for p in kit_dir.rglob("*.py")
              if p.name != "_secrets.py" and "_remote" not in p.parts and re.search(r"://\[\^", p.read_text())]
    assert others == []


def test_a_netrc_password_line_printed_through_a_terminal_is_removed():
    """`!cat ~/.netrc` in a notebook: IPython runs it in a pty, so its lines end with CRLF."""
    netrc = "Nr" + fake("netrc-crlf", 18)
    text, counts = redact(f"machine {HOST}\r\n  login bench\r\n  password {netrc}\r\n")
    assert netrc not in text and counts["netrc_password"] == 1
