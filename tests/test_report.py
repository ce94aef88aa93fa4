"""kit.report: executed notebooks to a shareable page that never leaks a secret, and opens offline.

Every secret below is generated for these tests (fake keys, fake tokens, fake private keys);
the notebooks are built here with nbformat, with every kind of secret planted in every
place a notebook keeps text, then plain, base64- and URL-encoded. The checks read the
written bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import quote, quote_plus

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from kit._version import __version__
from kit.errors import KitError
from kit.report import build_report, redact, redact_notebook, redaction_summary


def _fake(seed: str, n: int = 20) -> str:
    """A token-looking string: lower, upper and digits, from a seed (so it is stable and fake)."""
    raw = base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode()
    body = re.sub(r"[^A-Za-z0-9]", "", raw)[: n - 3]
    return f"{body}a7Q"


def _pem(label: str, seed: str, lines: int = 4) -> tuple[str, list[str]]:
    body = [base64.b64encode(hashlib.sha512(f"{seed}{i}".encode()).digest()[:48]).decode() for i in range(lines)]
    return f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----", body


# --- every kind of secret, in its context, with the non-secret text around it

API = [f"sk-{_fake(f'api{i}')}" for i in range(8)]
ADMIN = [f"adm-{_fake(f'admin{i}')}" for i in range(3)]
SSL_PW = f"Ssl-{_fake('sslpw', 14)}"
HF = "hf_" + _fake("hf", 34)
BEARER = ["eyJhbGciOiJIUzI1NiJ9." + _fake(f"jwt{i}", 24) for i in range(3)]
URL_PW = [f"Pw-{_fake(f'urlpw{i}', 14)}" for i in range(2)]
AWS_ID = "AKIA" + "Q3ZV7XK2MB9TLR4W"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + _fake("awssecret", 18)
ENV = [f"env-{_fake(f'env{i}', 16)}" for i in range(6)]
HTML_ONLY = f"sk-{_fake('html-only')}"  # split from its key by <span>s: only the as-it-reads check finds it
ANSI_ONLY = f"sk-{_fake('ansi-only')}"  # split from its key by ANSI colours
PEMS = [_pem("RSA PRIVATE KEY", "rsa"), _pem("EC PRIVATE KEY", "ec"), _pem("ENCRYPTED PRIVATE KEY", "enc"),
        _pem("PRIVATE KEY", "pkcs8"), _pem("OPENSSH PRIVATE KEY", "openssh")]

SNIPPETS: list[tuple[str, list[str], list[str]]] = [
    (f"server_args=ServerArgs(model_path='/models/qwen', api_key='{API[0]}', admin_api_key='{ADMIN[0]}', "
     f"ssl_keyfile_password='{SSL_PW}', tp_size=2)", [API[0], ADMIN[0], SSL_PW],
     ["server_args=ServerArgs(model_path='/models/qwen', api_key='", "tp_size=2)"]),
    (f"{{'api_key': '{API[1]}', 'port': 30000}}", [API[1]], ["{'api_key': '", "'port': 30000}"]),
    (f'{{"api_key": "{API[2]}", "context_length": 8192}}', [API[2]], ['"context_length": 8192']),
    (f"api_key={API[3]} mode=fast", [API[3]], ["api_key=", " mode=fast"]),
    (f"python -m sglang.launch_server --port 30000 --api-key {API[4]} --tp 2", [API[4]],
     ["python -m sglang.launch_server --port 30000 --api-key ", " --tp 2"]),
    (f"--api-key={API[5]} --admin-api-key {ADMIN[1]} --admin-api-key={ADMIN[2]} --enable-metrics",
     [API[5], ADMIN[1], ADMIN[2]], ["--api-key=", "--enable-metrics"]),
    (f"argv ['--model-path', '/m', '--api-key', '{API[6]}', '--tp-size', '2']", [API[6]],
     ["argv ['--model-path', '/m', '--api-key', '", "'--tp-size', '2']"]),
    (f"huggingface-cli login --token {HF} --add-to-git-credential", [HF],
     ["huggingface-cli login --token", "--add-to-git-credential"]),
    (f"curl -H 'Authorization: Bearer {BEARER[0]}' -H 'x-trace: 7' http://127.0.0.1:30000/v1/models",
     [BEARER[0]], ["curl -H 'Authorization: Bearer ", "-H 'x-trace: 7' http://127.0.0.1:30000/v1/models"]),
    (f'headers {{"Authorization": "Bearer {BEARER[1]}", "Accept": "application/json"}}', [BEARER[1]],
     ['"Accept": "application/json"']),
    (f"AUTHORIZATION: bearer {BEARER[2]} (lower-case scheme)", [BEARER[2]], ["(lower-case scheme)"]),
    (f"metrics db postgres://grafana:{URL_PW[0]}@db.internal:5432/metrics ok", [URL_PW[0]],
     ["postgres://grafana:", "@db.internal:5432/metrics ok"]),
    (f"aws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\nregion = us-east-1",
     [AWS_ID, AWS_SECRET], ["aws_access_key_id = ", "region = us-east-1"]),
    (f"export HF_TOKEN={ENV[0]}\nWANDB_API_KEY={ENV[1]} nohup python -m sglang.launch_server &",
     [ENV[0], ENV[1]], ["export HF_TOKEN=", "nohup python -m sglang.launch_server &"]),
    (f"env {{'DB_PASSWORD': '{ENV[2]}', 'CUDA_VISIBLE_DEVICES': '0,1'}}", [ENV[2]],
     ["'CUDA_VISIBLE_DEVICES': '0,1'"]),
    (f'{{"MY_SECRET": "{ENV[3]}", "NCCL_DEBUG": "INFO"}}', [ENV[3]], ['"NCCL_DEBUG": "INFO"']),
    (f"SERVICE_KEY: {ENV[4]}\nTOKENIZERS_PARALLELISM=false", [ENV[4]], ["SERVICE_KEY: ", "TOKENIZERS_PARALLELISM=false"]),
    (f"OPENAI_API_TOKEN={ENV[5]} MAX_TOTAL_TOKENS=4096", [ENV[5]], ["MAX_TOTAL_TOKENS=4096"]),
] + [(f"key file follows\n{pem}\nend of key file", body, ["key file follows", "end of key file"])
     for pem, body in PEMS]

PLAIN_TEXT = "\n".join(text for text, _, _ in SNIPPETS)


def _b64_forms(data: bytes) -> list[str]:
    std, url = base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()
    return [std, std.rstrip("="), url, url.rstrip("=")]


def _encoded_lines() -> tuple[str, list[str]]:
    """Sentences holding secrets, base64-encoded at byte offsets 0, 1, 2 of a larger blob, and URL-encoded."""
    sentences = [f"launch --api-key {API[7]} --tp 2", f"HF_TOKEN={ENV[0]} set", f"token {HF} here",
                 f"Authorization: Bearer {BEARER[0]}", f"db postgres://u:{URL_PW[1]}@db:5432/x"]
    lines, blobs = [], []
    for n, sentence in enumerate(sentences):
        for offset in range(3):
            blob = b"#" * offset + f"log line {n}: {sentence} -- end of the line\n".encode() + b"tail" * 8
            for form in _b64_forms(blob):
                lines.append(f"blob{n}.{offset} = {form} ;")
                blobs.append(form)
        lines.append(f"query?q={quote(sentence, safe='')}&page=2")
        lines.append(f"form={quote_plus(sentence)}&page=3")
    for secret in (API[0], HF, AWS_SECRET):  # alone, with no key: removed because it was seen beside one
        lines += [f"bare {form} ." for form in _b64_forms(secret.encode())]
    return "\n".join(lines), blobs


ENCODED_TEXT, BLOBS = _encoded_lines()
ALL_TEXT = PLAIN_TEXT + "\n" + ENCODED_TEXT
SECRETS = sorted({s for _, secrets, _ in SNIPPETS for s in secrets} | {API[7], URL_PW[1], HTML_ONLY, ANSI_ONLY})
SURVIVORS = [s for _, _, survivors in SNIPPETS for s in survivors]


def _b64_core(secret: bytes, offset: int) -> str:
    """The base64 characters that depend on `secret` alone when it starts `offset` bytes into a blob."""
    a = base64.b64encode(b"A" * offset + secret + b"ZZ").decode()
    b = base64.b64encode(b"\xff" * offset + secret + b"\x00\x00").decode()
    runs = re.findall(r"=+", "".join("=" if x == y else "." for x, y in zip(a, b, strict=True)))
    longest = max(runs, key=len)
    start = "".join("=" if x == y else "." for x, y in zip(a, b, strict=True)).index(longest)
    return a[start:start + len(longest)]


def leak_forms(secret: str) -> set[str]:
    """Every form in which a secret must not appear in a report: plain, escaped, base64, URL-encoded."""
    raw = secret.encode()
    forms = {secret, html.escape(secret), json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret),
             *_b64_forms(raw)}
    for offset in range(3):
        core = _b64_core(raw, offset)
        forms |= {core, core.replace("+", "-").replace("/", "_")}
    return {f for f in forms if len(f) >= 8}


def assert_no_leak(data: bytes, secrets=SECRETS) -> None:
    leaks = [(s[:12], f[:24]) for s in secrets for f in leak_forms(s) if f.encode() in data]
    assert leaks == []
    assert [b[:24] for b in BLOBS if b.encode() in data] == []


def as_it_reads(page: str) -> str:
    page = re.sub(r"<script\b.*?</script\s*>|<style\b.*?</style\s*>", "", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


# --- a notebook with every secret in every place


def _coloured(text: str) -> str:
    return "".join(f"\x1b[38;5;{i % 200}m{word}\x1b[39m" for i, word in enumerate(re.split(r"(\s+)", text)))


def planted_notebook(target: str = f"ssh://root:{URL_PW[1]}@gpu-box-17.prod.example.com:22") -> nbformat.NotebookNode:
    lines = ALL_TEXT.splitlines()
    figure = {"data": [{"type": "scatter", "x": [1, 2, 3], "y": [3, 1, 2], "name": SNIPPETS[0][0],
                        "hovertext": lines, "text": lines[:5]}],
              "layout": {"title": {"text": "throughput " + SNIPPETS[4][0]}, "height": 320,
                         "annotations": [{"text": ALL_TEXT, "x": 1, "y": 1}]},
              "config": {"plotlyServerURL": "https://plot.ly"}}
    widget_state = {"state": {"m1": {"model_name": "TextareaModel", "model_module": "@jupyter-widgets/controls",
                                     "model_module_version": "2.0.0",
                                     "state": {"value": ALL_TEXT, "description": SNIPPETS[13][0]}}},
                    "version_major": 2, "version_minor": 0}
    pygments_like = (f'<span class="n">api_key</span><span class="o">=</span>'
                     f'<span class="s1">&#39;{HTML_ONLY}&#39;</span>')
    nb = new_notebook()
    nb.metadata.update({
        "papermill": {"parameters": {"target": target, "api_key": API[0], "hf_token": HF, "notes": ALL_TEXT},
                      "end_time": "2026-05-01T10:00:00.000000+00:00"},
        "widgets": {"application/vnd.jupyter.widget-state+json": widget_state},
        "kit_notes": ALL_TEXT,
    })
    nb.cells = [
        new_markdown_cell(f"# Incident\n\nWhat we saw:\n\n{ALL_TEXT}\n", metadata={"kit_note": ALL_TEXT}),
        new_code_cell(ALL_TEXT.replace("\n", "\n# ").join(["# ", ""]) + "\nprint(server.command)",
                      metadata={"tags": [SNIPPETS[3][0]], "kit_note": ALL_TEXT}, execution_count=1, outputs=[
                          new_output("stream", name="stdout", text=f"sglang 0.5.11 at /opt/venv/sglang\n{ALL_TEXT}\n"),
                          new_output("execute_result", execution_count=1, data={"text/plain": ALL_TEXT}),
                          new_output("display_data", data={
                              "text/html": f"<pre>{html.escape(ALL_TEXT)}</pre><div>{pygments_like}</div>",
                              "text/plain": "a table"}),
                          new_output("display_data", data={"application/json": {
                              "lines": lines, "env": {"HF_TOKEN": ENV[0], "MY_SECRET": ENV[3]},
                              "nested": json.dumps({"api_key": API[1], "argv": ["--api-key", API[4]]})}}),
                          new_output("display_data", data={"application/vnd.plotly.v1+json": figure,
                                                           "text/html": "<div>a figure</div>"}),
                          new_output("display_data", data={
                              "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2,
                                                                            "version_minor": 0, "note": ALL_TEXT},
                              "text/plain": "Textarea(value=" + repr(ALL_TEXT[:400]) + ")"}),
                          new_output("display_data", data={
                              "application/vnd.jupyter.widget-state+json": widget_state, "text/plain": "state"}),
                          new_output("error", ename="RuntimeError", evalue=SNIPPETS[5][0], traceback=[
                              "\x1b[0;31m----> 1\x1b[0m launch(" + _coloured(ALL_TEXT) + ")",
                              f"\x1b[38;5;124mapi_key\x1b[39m\x1b[38;5;241m=\x1b[39m\x1b[38;5;124m'{ANSI_ONLY}'\x1b[39m",
                              "RuntimeError: " + ALL_TEXT]),
                      ]),
    ]
    return nb


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("planted") / "incident.ipynb"
    nbformat.write(planted_notebook(), path)
    return path


@pytest.mark.parametrize("mode", ["html", "html-no-input", "markdown", "markdown-code"])
def test_no_secret_survives_in_any_form_anywhere(planted, tmp_path, mode):
    out = tmp_path / ("r.md" if mode.startswith("markdown") else "r.html")
    result = build_report([planted], out, no_input=mode == "html-no-input", markdown=mode.startswith("markdown"),
                          code=mode == "markdown-code")
    data = out.read_bytes()
    assert result.bytes == len(data) and result.path == out
    assert_no_leak(data)
    text = data.decode()
    readable = as_it_reads(text) if mode.startswith("html") else text
    missing = [s for s in SURVIVORS if s not in readable]
    assert missing == []
    for kind in ("api_key", "admin_api_key", "ssl_keyfile_password", "hf_token", "bearer_token", "url_password",
                 "private_key", "aws_access_key", "aws_secret_key", "env_secret"):
        assert result.counts[kind] > 0, kind
        assert f"<redacted:{kind}>" in readable, kind
    assert "-----BEGIN" not in readable  # a key's body went with it (assert_no_leak); a lone END line may stay


def test_redact_notebook_covers_every_place_and_leaves_the_original(planted):
    nb = nbformat.read(planted, as_version=4)
    before = json.dumps(nb, sort_keys=True)
    redacted, counts = redact_notebook(nb)
    assert json.dumps(nb, sort_keys=True) == before
    assert isinstance(redacted, nbformat.NotebookNode)
    assert_no_leak(json.dumps(redacted).encode())
    assert_no_leak(nbformat.writes(redacted).encode())
    params = redacted.metadata.papermill.parameters
    assert params.api_key == "<redacted:api_key>" and params.hf_token == "<redacted:hf_token>"
    assert params.target == "ssh://root:<redacted:url_password>@gpu-box-17.prod.example.com:22"
    state = redacted.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]["m1"]["state"]
    assert "<redacted:env_secret>" in state["description"] and "nohup python" in state["description"]
    nested = json.loads(redacted.cells[1].outputs[3].data["application/json"]["nested"])
    assert nested == {"api_key": "<redacted:api_key>", "argv": ["--api-key", "<redacted:api_key>"]}
    assert all(isinstance(k, str) and isinstance(n, int) and n > 0 for k, n in counts.items())


def test_counts_name_kinds_never_values():
    text, counts = redact(f"--api-key {API[0]} and {HF} and api_key='{API[1]}'")
    assert text == "--api-key <redacted:api_key> and <redacted:hf_token> and api_key='<redacted:api_key>'"
    assert counts == Counter({"api_key": 2, "hf_token": 1})


# --- the rules, one form at a time

@pytest.mark.parametrize(("text", "expected"), [
    (f"--port 30000 --api-key {API[0]} --tp 2", "--port 30000 --api-key <redacted:api_key> --tp 2"),
    (f"x --api-key='{API[0]}' y", "x --api-key='<redacted:api_key>' y"),
    (f"api_key: str = '{API[0]}'", "api_key: str = '<redacted:api_key>'"),
    (f'os.environ["HF_TOKEN"] = "{ENV[0]}"', 'os.environ["HF_TOKEN"] = "<redacted:env_secret>"'),
    (f"PGPASSWORD={ENV[1]} psql", "PGPASSWORD=<redacted:env_secret> psql"),
    (f"x-api-key: {API[2]}", "x-api-key: <redacted:api_key>"),
    (f"Authorization: Basic {ENV[2]}", "Authorization: Basic <redacted:authorization>"),
    (f"-H 'Authorization: Bearer {BEARER[0]}'", "-H 'Authorization: Bearer <redacted:bearer_token>'"),
    (f"redis://:{URL_PW[0]}@cache:6379/0", "redis://:<redacted:url_password>@cache:6379/0"),
    (f"https://bob:p@ss{URL_PW[0]}@h.example.com/x", "https://bob:<redacted:url_password>@h.example.com/x"),
    (f"HF_TOKEN={HF}", "HF_TOKEN=<redacted:hf_token>"),
    (f'{{\\"api_key\\": \\"{API[0]}\\"}}', '{\\"api_key\\": \\"<redacted:api_key>\\"}'),
    (f"api_key=&quot;{API[0]}&quot;", "api_key=&quot;<redacted:api_key>&quot;"),
])
def test_each_form_is_redacted_and_its_surroundings_kept(text, expected):
    assert redact(text)[0] == expected


@pytest.mark.parametrize("text", [
    "api_key=None", "api_key=''", "--api-key $SGLANG_API_KEY", "api_key = os.environ['API_KEY']",
    "TOKENIZERS_PARALLELISM=false", "MAX_TOTAL_TOKENS=4096", "--max-total-tokens 4096", "--tokenizer-path /m",
    "the server_args line", "Authorization: Bearer", "https://user@host.example.com/x",
    "ssl_keyfile=/etc/ssl/key.pem", "--api-key <your-key>", "headers = {'Authorization': f'Bearer {token}'}",
])
def test_what_is_not_a_secret_stays(text):
    assert redact(text) == (text, Counter())


def test_python_names_in_code_are_references_not_secrets():
    from kit.report import Redactor

    r = Redactor()
    code = "client = Client(api_key=args.api_key, password=PASSWORD)\n!export HF_TOKEN=abcdefghijk"
    assert r.text(code, code=True) == ("client = Client(api_key=args.api_key, password=PASSWORD)\n"
                                       "!export HF_TOKEN=<redacted:env_secret>")


# --- Hypothesis: secret shapes, quotes, JSON strings, surrounding text

_SECRET = st.text(st.sampled_from("abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ0123456789-_.~+/"),
                  min_size=8, max_size=64).filter(
    lambda s: s[0].isalnum() and re.search(r"[a-z]", s) and re.search(r"[A-Z]", s) and re.search(r"[0-9]", s))
_WORDS = st.lists(st.sampled_from(["latency", "throughput", "the", "server", "was", "slow", "after", "restart",
                                   "tp", "2", "ok", "port", "30000", "graph"]), min_size=0, max_size=6).map(" ".join)
_NAMES = ["api_key", "admin_api_key", "ssl_keyfile_password", "aws_secret_access_key", "HF_TOKEN", "MY_SECRET",
          "DB_PASSWORD", "OPENAI_API_KEY", "SERVICE_KEY", "password"]


@st.composite
def _planted(draw):
    secret, name, quote_char = draw(_SECRET), draw(st.sampled_from(_NAMES)), draw(st.sampled_from(["'", '"', ""]))
    value = f"{quote_char}{secret}{quote_char}"
    form = draw(st.sampled_from(["{n}={v}", "{n} = {v}", "export {n}={v}", "'{n}': {v}", '"{n}": {v}', "{n}: {v}",
                                 "--api-key {v}", "--api-key={v}", "--admin-api-key {v}",
                                 "Authorization: Bearer {s}", "postgres://user:{s}@db.example.com:5432/x",
                                 "token {hf}"]))
    if form == "token {hf}":
        secret = "hf_" + re.sub(r"[^A-Za-z0-9]", "", secret).ljust(30, "x") + "9"
    expr = form.format(n=name if not name.islower() or "export" not in form else name.upper(), v=value, s=secret,
                       hf=secret)
    before, after = draw(_WORDS), draw(_WORDS)
    # after `name:` an unquoted value runs to the end of its line, so what follows goes on the next line
    gap = "\n" if form.endswith(": {v}") and not quote_char else " "
    text = f"{before} {expr}{gap}{after}".strip(" ")
    placement = draw(st.sampled_from(["plain", "json", "repr", "html", "base64", "urlencoded"]))
    return secret, before, after, text, placement


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_planted())
def test_generated_secrets_are_removed_and_their_surroundings_kept(planted_case):
    secret, before, after, text, placement = planted_case
    if placement == "json":
        text = json.dumps({"log": text, "n": 1})
    elif placement == "repr":
        text = repr({"log": text})
    elif placement == "html":
        text = f"<td>{html.escape(text)}</td>"
    elif placement == "base64":
        text = f"{before} payload {base64.b64encode(text.encode()).decode()} end {after}"
    elif placement == "urlencoded":
        text = f"{before} https://example.com/?q={quote(text, safe='')}&x=1 {after}"
    out, counts = redact(text)
    assert_no_leak(out.encode(), [secret])
    assert sum(counts.values()) >= 1 and "redacted:" in out
    for words in (before, after):
        assert words in (html.unescape(out) if placement == "html" else out).replace("\\n", "\n")


@settings(max_examples=60, deadline=None)
@given(_SECRET, st.integers(0, 2), st.sampled_from(["std", "url"]), st.booleans())
def test_base64_at_any_alignment_inside_a_larger_blob(secret, offset, alphabet, padded):
    blob = b"\x00\x01" * 5 + b"#" * offset + f"export HF_TOKEN={secret} done".encode() + bytes(range(40))
    enc = (base64.b64encode if alphabet == "std" else base64.urlsafe_b64encode)(blob).decode()
    enc = enc if padded else enc.rstrip("=")
    out, counts = redact(f"before {enc} after")
    assert out == "before <redacted:env_secret> after" and counts == Counter({"env_secret": 1})


# --- the HTML page: self-contained, plotly drawn, widgets as text

NETWORK = re.compile(rb"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|@import\s+url\(\s*["']?https?|<script[^>]+src=""",
                     re.I)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("page")
    nb = planted_notebook()
    nb.cells.append(new_markdown_cell("![remote](https://example.com/diagram.png) and [docs](https://docs.sglang.ai)"))
    nb.cells.append(new_code_cell("show()", outputs=[new_output("display_data", data={"text/html": (
        '<script src="https://cdn.plot.ly/plotly-2.35.2.min.js"></script>'
        '<link rel="stylesheet" href="//cdn.example.com/x.css">'
        "<style>@import url(https://fonts.example.com/css); .a { background: url('http://x.example/y.png') }</style>"
        '<img src="http://example.com/i.png" srcset="https://example.com/i2.png 2x">'
        '<div style="background-image:url(https://example.com/bg.png)">styled</div>'
        "<script>require.config({paths: {plotly: 'https://cdn.plot.ly/plotly-2.35.2.min'}});</script>"
        '<script>var paths = {"vega": "https://cdn.jsdelivr.net/npm/vega@5?noext"};'
        "var s = document.createElement('script'); s.src = paths.vega; document.head.appendChild(s);</script>"
        "<script>var ns = 'http://www.w3.org/2000/svg'; window.kitInline = 1;</script>")})]))
    path = tmp / "page.ipynb"
    nbformat.write(nb, path)
    out = tmp / "page.html"
    build_report([path, path], out)  # two notebooks, one page
    return out.read_text()


def test_the_page_loads_nothing_from_the_network(page):
    assert NETWORK.findall(page.encode()) == []
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", page, re.I)
    assert "window.kitInline = 1" in page  # a script that fetches nothing stays
    # plotly.js names map tile and icon servers it uses only for map traces; the rest of the page names none
    outside = re.sub(r"<script[^>]*>/\*\*\n\* plotly\.js v.*?</script>", "", page, flags=re.S)
    assert len(outside) < len(page) - 4_000_000
    for cdn in ("cdnjs.cloudflare.com", "unpkg.com", "require.min.js", "MathJax.js", "mermaid", "cdn.jsdelivr.net",
                "cdn.plot.ly"):
        assert cdn not in outside, cdn
    assert "this page loads nothing from the network" in page


def test_plotly_is_inlined_once_and_figures_are_drawn(page):
    assert page.count("* plotly.js v") == 1
    assert page.count("Plotly.newPlot(") >= 2  # one figure per notebook, both drawn with the one library
    assert page.index("* plotly.js v") < page.index('class="kit-plot"')


def test_two_notebooks_make_one_page_with_a_title_block_and_the_summary(page):
    readable = as_it_reads(page)
    assert page.count("<html") == 1 and page.count("</main>") == 1
    assert readable.count("page.ipynb") >= 2
    assert f"sgl-kit {__version__}" in readable and "0.5.11" in readable and "2026-05-01 10:00 UTC" in readable
    assert "target" in readable and "gpu-box-17.prod.example.com" in readable
    summary = re.search(r"(\d+) secrets removed: ([^<]+)", page)
    assert summary and int(summary.group(1)) > 20
    assert re.fullmatch(r"(?:\d+ [a-z_]+)(?:, \d+ [a-z_]+)*", summary.group(2).strip())
    assert "interactive widget output(s) are shown as text" in page


def test_widgets_show_their_text_fallback(tmp_path):
    nb = new_notebook()
    state = {"state": {"w": {"model_name": "IntProgressModel", "state": {"value": 7, "max": 10,
                                                                        "description": "bench"}}},
             "version_major": 2, "version_minor": 0}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": state}
    nb.cells = [new_code_cell("bar", outputs=[new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "w", "version_major": 2, "version_minor": 0}})])]
    nbformat.write(nb, tmp_path / "w.ipynb")
    result = build_report([tmp_path / "w.ipynb"], tmp_path / "w.html")
    page = (tmp_path / "w.html").read_text()
    assert result.widgets == 1 and "IntProgress widget: description='bench', value=7, max=10" in page
    assert "widget-view+json" not in page and "widget-state+json" not in page
    assert "needs the Jupyter widgets JavaScript from a CDN" in page
    assert "plotly.js v" not in page  # no figure, no library


def test_title_block_says_unknown_when_the_notebook_does_not_say(tmp_path):
    nb = new_notebook(cells=[new_markdown_cell("# notes")])
    nbformat.write(nb, tmp_path / "n.ipynb")
    build_report([tmp_path / "n.ipynb"], tmp_path / "n.md", markdown=True)
    text = (tmp_path / "n.md").read_text()
    assert "| target | unknown |" in text and "| sglang | unknown |" in text and "| date | unknown |" in text
    assert f"| kit | sgl-kit {__version__} |" in text and "\n\nno secret found by the rules.\n\n" in text
    assert text.count("no secret found") == 1 and "0 secrets removed" not in text and "every secret" not in text


def test_markdown_summary_is_prose_text_and_tables_without_code(tmp_path):
    nb = new_notebook(cells=[
        new_markdown_cell("## Finding\n\nThe graph was **off**."),
        new_code_cell("df = load()\ndf", outputs=[new_output("execute_result", execution_count=1, data={
            "text/html": "<table><tr><th>flag</th><th>value</th></tr><tr><td>tp</td><td>2</td></tr></table>",
            "text/plain": "<pandas.io.formats.style.Styler object at 0x7f>"})]),
        new_code_cell("print('tok/s 37.1')", outputs=[new_output("stream", name="stdout", text="tok/s 37.1\n")]),
    ])
    nbformat.write(nb, tmp_path / "m.ipynb")
    build_report([tmp_path / "m.ipynb"], tmp_path / "m.md", markdown=True)
    text = (tmp_path / "m.md").read_text()
    assert "## Finding\n\nThe graph was **off**." in text and "```text\ntok/s 37.1\n```" in text
    assert "| flag | value |\n| --- | --- |\n| tp | 2 |" in text
    assert "df = load()" not in text and "print(" not in text
    build_report([tmp_path / "m.ipynb"], tmp_path / "c.md", markdown=True, code=True)
    assert "```python\ndf = load()\ndf\n```" in (tmp_path / "c.md").read_text()


# --- host names

def _hosts_notebook(path: Path) -> Path:
    nb = new_notebook(cells=[
        new_markdown_cell("The box gpu-box-17.prod.example.com (10.20.30.40) was slow; localhost stays."),
        new_code_cell("connect('ssh://root@gpu-box-17.prod.example.com:22')", outputs=[
            new_output("stream", name="stdout", text="url http://10.20.30.40:30000 and 10.20.30.41, 127.0.0.1\n"),
            new_output("execute_result", execution_count=1,
                       data={"text/plain": "<SSHHost root@gpu-box-17.prod.example.com:22> via bastion.example.com"})]),
    ])
    nb.metadata["papermill"] = {"parameters": {"target": "ssh://root@gpu-box-17.prod.example.com:22"}}
    nbformat.write(nb, path)
    return path


def test_redact_hosts_maps_each_host_to_one_placeholder_everywhere(tmp_path):
    nb = _hosts_notebook(tmp_path / "h.ipynb")
    result = build_report([nb, nb], tmp_path / "h.md", markdown=True, hosts=True)
    text = (tmp_path / "h.md").read_text()
    for host in ("gpu-box-17", "10.20.30.40", "10.20.30.41", "bastion.example.com"):
        assert host not in text, host
    assert text.count("host-1") >= 4 and "host-2" in text  # the same box, the same name, in both notebooks
    assert "10.x.x.1 was" not in text and "(10.x.x.1)" in text and "http://10.x.x.1:30000" in text
    assert "10.x.x.2" in text and "127.0.0.1" in text and "localhost stays" in text
    assert "SGLang investigation: ssh://root@host-1:22" in text
    assert result.counts["hostname"] >= 4 and result.counts["ip_address"] >= 3
    assert "no secret found by the rules." in text and "Host names and IP addresses replaced" in text


def test_hosts_stay_by_default(tmp_path):
    nb = _hosts_notebook(tmp_path / "h.ipynb")
    build_report([nb], tmp_path / "h.html")
    page = (tmp_path / "h.html").read_text()
    assert "gpu-box-17.prod.example.com" in page and "10.20.30.40" in page and "host-1" not in page
    assert redact("ssh root@10.0.0.5", hosts=False)[0] == "ssh root@10.0.0.5"
    assert redact("ssh root@10.0.0.5 and 10.0.0.5", hosts=True)[0] == "ssh root@10.x.x.1 and 10.x.x.1"


# --- the command line (registered in kit/cli/__init__.py by its owner: built here by hand)

def _cli(argv: list[str]):
    from kit.cli import report
    from kit.cli.common import common_options

    parser = argparse.ArgumentParser(prog="sgl-kit")
    common_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command")
    report.register(sub)
    args = parser.parse_args(["report", *argv])
    return args.func(args)


def test_cli_writes_the_report_and_says_where_how_big_and_what_it_removed(planted, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert _cli([str(planted), "-o", str(out), "--no-input", "--redact-hosts"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out} (") and " MB): HTML report of 1 notebook" in said
    assert re.search(r"\d+ secrets removed: \d+ api_key", said) and "Host names and IP addresses" in said
    assert_no_leak(said.encode())
    assert_no_leak(out.read_bytes())
    assert "gpu-box-17" not in out.read_text()


def test_cli_json(planted, tmp_path, capsys):
    out = tmp_path / "r.md"
    assert _cli([str(planted), "-o", str(out), "--markdown", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["path"] == str(out) and said["format"] == "markdown" and said["bytes"] == out.stat().st_size
    assert said["secrets_removed"] == sum(said["redacted"].values()) > 0
    assert said["summary"].startswith(f"{said['secrets_removed']} secrets removed: ")


@pytest.mark.parametrize(("make", "argv", "message"), [
    (lambda t: None, ["{t}/missing.ipynb"], "no such notebook: {t}/missing.ipynb"),
    (lambda t: (t / "notes.txt").write_text("just text"), ["{t}/notes.txt"],
     "{t}/notes.txt is not a Jupyter notebook: it is not JSON"),
    (lambda t: (t / "data.json").write_text('{"rows": [1, 2]}'), ["{t}/data.json"],
     "{t}/data.json is not a Jupyter notebook: its JSON has no cells or nbformat"),
    (lambda t: (t / "bin.ipynb").write_bytes(b"\xff\xfe\x00binary"), ["{t}/bin.ipynb"],
     "{t}/bin.ipynb is not a Jupyter notebook: it is not text (UTF-8)"),
    (lambda t: None, ["{nb}", "-o", "{t}/no/such/dir/r.html"],
     "cannot write the report to {t}/no/such/dir/r.html: {t}/no/such/dir does not exist"),
    (lambda t: (t / "file").write_text("x"), ["{nb}", "-o", "{t}/file/r.html"],
     "cannot write the report to {t}/file/r.html: {t}/file is a file, not a directory"),
    (lambda t: None, ["{nb}", "-o", "{t}"], "cannot write the report to {t}: it is a directory"),
    (lambda t: None, ["{nb}", "-o", "{nb}"], "the report would overwrite its input notebook {nb}"),
])
def test_cli_bad_inputs_are_one_line_errors_naming_the_file(planted, tmp_path, make, argv, message):
    make(tmp_path)
    fill = {"t": str(tmp_path), "nb": str(planted)}
    with pytest.raises(KitError) as caught:
        _cli([a.format(**fill) for a in argv])
    exc = caught.value
    assert exc.message == message.format(**fill)
    assert "\n" not in exc.message and (exc.cli_hint or exc.hint)


def test_summary_wording():
    assert redaction_summary(Counter({"api_key": 2, "hf_token": 1, "hostname": 4})) == \
        "3 secrets removed: 2 api_key, 1 hf_token"
    assert redaction_summary(Counter({"url_password": 1})) == "1 secret removed: 1 url_password"
    assert redaction_summary(Counter()) == "no secret found by the rules"


def test_every_inline_script_is_valid_javascript(page, tmp_path):
    """plotly.js has its URLs rewritten (http:\\/\\/); the page's scripts must still parse."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script\s*>", page, re.S | re.I)
    assert len(scripts) >= 3
    for i, script in enumerate(scripts):
        path = tmp_path / f"s{i}.js"
        path.write_text(script)
        proc = subprocess.run([node, "--check", str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[:400]


def test_plotly_notebook_mode_outputs_draw_with_the_one_inlined_library(tmp_path):
    """plotly's 'notebook' renderer stores plotly.js itself in an output and `require(["plotly"], ...)` calls."""
    library = "/**\n* plotly.js v9.9.9\n*/ define('plotly', function(require, exports, module) {" + "x" * 1_100_000 + "});"
    figure = ('<div id="f1" class="plotly-graph-div" style="height:300px"></div><script type="text/javascript">'
              'require(["plotly"], function(Plotly) { Plotly.newPlot("f1", [{"type": "bar", "y": [1, 2]}], {}); });'
              "</script>")
    connected = ("<script type=\"text/javascript\">require.config({paths: {'plotly': "
                 "'https://cdn.plot.ly/plotly-2.35.2.min'}});</script>")
    nb = new_notebook(cells=[new_code_cell("fig", outputs=[
        new_output("display_data", data={"text/html": library}),
        new_output("display_data", data={"text/html": connected}),
        new_output("display_data", data={"text/html": figure})])])
    nbformat.write(nb, tmp_path / "nm.ipynb")
    result = build_report([tmp_path / "nm.ipynb"], tmp_path / "nm.html")
    page = (tmp_path / "nm.html").read_text()
    assert "plotly.js v9.9.9" not in page and page.count("* plotly.js v") == 1
    assert 'require(["plotly"]' in page and "window.require = function" in page and "require.config({paths" not in page
    assert result.plots == 1 and NETWORK.findall(page.encode()) == []


def test_styles_are_inline_and_a_given_title_is_redacted_too(tmp_path):
    nb = new_notebook(cells=[new_markdown_cell("# x")])
    nbformat.write(nb, tmp_path / "t.ipynb")
    build_report([tmp_path / "t.ipynb"], tmp_path / "t.html", title=f"incident --api-key {API[0]}")
    page = (tmp_path / "t.html").read_text()
    assert "<link" not in page and page.count("<style") >= 2 and ".jp-Notebook" in page
    assert "<title>incident --api-key &lt;redacted:api_key&gt;</title>" in page
    assert "<h1>incident --api-key &lt;redacted:api_key&gt;</h1>" in page
    assert_no_leak(page.encode(), [API[0]])


def test_a_secret_split_by_markup_goes_and_only_its_own_output_loses_the_markup(tmp_path):
    """Markdown marks or tags between a key and its value, or inside the value, hide it from the rules."""
    nb = new_notebook(cells=[
        new_markdown_cell(f"## Setup\n\nSet **HF_TOKEN**=`{ENV[0]}` and `API_KEY`: {ENV[1]} first."),
        new_code_cell("show()", outputs=[new_output("display_data", data={
            "text/html": f"<p>api_key=<b>{API[0][:9]}</b><i>{API[0][9:]}</i></p>"})]),
        new_markdown_cell("## Next step\n\nThe *graph* stays **bold**."),
    ])
    nbformat.write(nb, tmp_path / "s.ipynb")
    build_report([tmp_path / "s.ipynb"], tmp_path / "s.html")
    build_report([tmp_path / "s.ipynb"], tmp_path / "s.md", markdown=True)
    page, text = (tmp_path / "s.html").read_text(), (tmp_path / "s.md").read_text()
    for data in (page, text):
        assert_no_leak(data.encode(), [ENV[0], ENV[1], API[0]])
    assert "The <em>graph</em> stays <strong>bold</strong>." in page and '<h2 id="Next-step">' in page
    assert "The *graph* stays **bold**." in text and "Set **HF_TOKEN**=`<redacted:env_secret>`" in text


def test_cli_unwritable_output(planted, tmp_path):
    import os

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(KitError) as caught:  # root included: nobody writes below a file
        _cli([str(planted), "-o", str(blocker / "r.html")])
    assert caught.value.message == f"cannot write the report to {blocker / 'r.html'}: {blocker} is a file, not a directory"
    if os.geteuid() == 0:
        return  # root writes into a read-only directory; the file case above is the check that runs here
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(KitError) as caught:
        _cli([str(planted), "-o", str(locked / "r.html")])
    assert caught.value.message == f"cannot write the report to {locked / 'r.html'}: permission denied"


def test_a_page_links_the_pages_beside_it(tmp_path):
    """`make demo` links the case's page (out/case.html) from the notebooks' page: a relative link, kept offline."""
    nb = new_notebook(cells=[new_markdown_cell("# notes")])
    nbformat.write(nb, tmp_path / "n.ipynb")
    build_report([tmp_path / "n.ipynb"], tmp_path / "n.html", links=[("the server's case", "case.html")])
    page = (tmp_path / "n.html").read_text()
    assert '<th>see also</th><td><a href="case.html">the server&#x27;s case</a></td>' in page
    build_report([tmp_path / "n.ipynb"], tmp_path / "plain.html")
    assert "see also" not in (tmp_path / "plain.html").read_text()
