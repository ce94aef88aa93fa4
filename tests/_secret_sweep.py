"""The secret sweep: secrets planted in every input the kit reads, then every output it gives grepped for them.

Shared by ``tests/test_secret_sweep.py`` (0 survivors, or it fails) and ``benchmarks/secret_sweep.py`` (the
table). The planting is the kit's business only as a reader: the values, their shapes and their places
are written here, not taken from ``kit/``.

**What is planted, where** (:func:`planted`): one value per kind of secret and place, each unique and
random-looking, so a grep finds it (and finds which place it came from):

- ``launch.sh``: a launch command script with continuation lines: ``export HF_TOKEN=``, a variable before
  the command, an OpenAI-shaped ``--api-key``, ``--admin-api-key=``, ``--ssl-keyfile-password``, a password
  in the ``--otlp-traces-endpoint`` URL;
- ``server.env``: an environment file (``KEY=VALUE``) with one variable per kind detect-secrets and the
  kit's own rules know (AWS key pair, GitHub, GitLab, Slack token and webhook, Stripe, SendGrid, Twilio,
  Discord, Telegram, Mailchimp, Square, PyPI, Artifactory, Azure, IBM, Cloudant, SoftLayer, Google, NGC,
  W&B, a private key on one line, a JWT), secret-named ones (``SGLANG_API_KEY``, ``MY_SERVICE_TOKEN``,
  ``DB_PASSWORD``), URL passwords, and values under neutral ``SGLANG_`` names that only their shape gives
  away (a JWT, a bearer token, a GitHub token);
- ``server.log``: a real sglang 0.5.11 log (``tests/data/provenance/incident-0.5.11.log``) whose
  ``server_args=`` line holds an API key, an admin key, the SSL key's password and a URL password;
- ``server_info.json``: a real sglang 0.5.11 ``/server_info`` (``tests/data/real_server/
  bench-native-cpu-0.5.11.jsonl``) with the same four fields planted;
- ``lab argv``: the live lab's ``--api-key`` (OpenAI-shaped) and ``--admin-api-key``;
- ``lab env``: the live lab's environment (the server inherits the environment of ``sgl-kit lab up``): the
  named secrets, the AWS pair, a multi-line private key, URL passwords. A value under a neutral name that
  only its shape gives away is not planted there: the kit's own displays of a server (``ServerProcess``,
  ``LabStatus``) sit below the report's scanner and mask by the one name policy (``kit/_secrets.py``) and
  URL credentials; such values are planted in ``server.env``, whose readers print through the scanner;
- ``kit env``: the environment ``sgl-kit`` itself runs in (``HF_TOKEN``, ``SGL_KIT_PROMETHEUS_TOKEN``);
- ``kit argv``: a Prometheus URL with a password (``doctor --prometheus``, nothing listening there);
- ``paste.md``: an issue body (``doctor --paste``) with the forms the kit's own rules and detect-secrets'
  keyword detectors know, each in the line people write it in (``curl -u user:PW``, ``mysql -pPW``, a
  ``.netrc`` line, ``wandb login``, an npm token, a signed URL, ``Authorization: Basic``/``Bearer``, a
  password in a sentence, IBM, Cloudant and SoftLayer keys), a launch with an ``--api-key``, ``HF_TOKEN=``;
- ``notebook env``: a notebook that prints its kernel's environment (``env``, ``os.environ``), which holds
  the whole ``server.env`` set with values of its own, and ``paste.md``, executed and then given to
  ``sgl-kit report``.

**What runs** (:func:`run_all`): every ``sgl-kit`` command that reads those inputs, as a user types it,
each in its own process with a temporary ``HOME``, kit cache (``SGL_KIT_CACHE``, its downloaded wheels and
unpacked sglang trees linked in from the real cache when there), ``TMPDIR`` and working directory, so
every file the kit writes lands in the sweep's directory: ``doctor`` (files, text and ``--json`` with
``--paste``; the lab, text and ``--json`` with ``--prometheus``), ``args parse``/``diff``/``read``/``show``,
``why`` (files and the lab), ``gates`` (the lab), ``upgrade-diff --static`` (the launch's flags after
``--``; it reads no command file, and its dry-run form needs a built environment per version, left out
like ``dryrun`` and ``args diff --gpu``), ``bench`` against the lab (its run file records
``/server_info``), ``lab up``/``status``/``down``, the guided notebook ``02_config`` executed with papermill
against the lab (``kit.notebook.execute``, its baseline the planted log, sharing itself at its end) and
``sgl-kit report`` (HTML, and Markdown with ``--json``) of it and of the notebook that printed its
environment. Not run: ``run``, ``source`` and ``grep`` (they print what the user's own command or sglang's
source prints), ``timeline``/``profile``/``metrics`` (a Prometheus or the real server's profiler; the
lab's ``/metrics`` holds no flag value). The lab's commands and the files' run side by side.

**What is checked** (:func:`survivors`): each command's stdout and stderr, and every file under the
sweep's directory but the planted inputs and the lab's own directory (the target's: its server's log and
the record of its command line, which hold the planted values as sglang's own would); each value plain,
JSON- and HTML-escaped, URL-encoded (``quote``, ``quote_plus``), in base64 (standard and URL-safe, at
each of the three byte alignments), and a 12-character piece of its random part (a value cut short).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import string
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SGL_KIT = str(Path(sys.executable).parent / "sgl-kit")
SGLANG = "0.5.11"
_B62 = string.ascii_letters + string.digits
_LOWER = string.ascii_lowercase + string.digits
_HEX = "0123456789abcdef"


# --------------------------------------------------------------------------- what is planted


@dataclass(frozen=True)
class Planted:
    """One planted value: what kind of secret it is, the place it was planted, the value and its random part."""

    kind: str
    where: str
    value: str
    core: str
    name: str = ""  # the variable, flag or field it sits under


def _r(seed: str, n: int, alphabet: str = _B62) -> str:
    """n characters of `alphabet` that look random, the same on every run for the same seed."""
    out, block = [], 0
    while len(out) < n:
        digest = hashlib.sha256(f"secret-sweep/{seed}/{block}".encode()).digest()
        out += [alphabet[b % len(alphabet)] for b in digest]
        block += 1
    return "".join(out[:n])


def _pem(seed: str, sep: str = "\n") -> tuple[str, str]:
    body = base64.b64encode(hashlib.sha512(seed.encode()).digest() * 3).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return sep.join(["-----BEGIN PRIVATE KEY-----", *lines, "-----END PRIVATE KEY-----"]), body[:40]


def _shaped(kind: str, seed: str) -> tuple[str, str]:
    """(value, random part) of one secret of a kind, in the shape detect-secrets or the kit's rules know."""
    r = _r(seed, 64)
    low = _r(seed, 64, _LOWER)
    hexa = _r(seed, 64, _HEX)
    shapes = {
        "openai_api_key": (f"sk-proj-{r[:20]}T3BlbkFJ{r[20:40]}", r[:20]),
        "hf_token": (f"hf_{r[:34]}", r[:34]),
        "aws_access_key": ("AKIA" + _r(seed, 16, string.ascii_uppercase + string.digits),) * 2,
        "aws_secret_key": (f"{r[:20]}/{r[20:39]}",) * 2,
        "github_token": (f"ghp_{r[:36]}", r[:36]),
        "github_pat": (f"github_pat_{r[:22]}_{r[22:60]}", r[:22]),
        "gitlab_token": (f"glpat-{r[:20]}", r[:20]),
        "slack_token": (f"xoxb-{_r(seed, 11, string.digits)}-{_r(seed + 'b', 12, string.digits)}-{low[:24]}",
                        low[:24]),
        "slack_webhook": (f"https://hooks.slack.com/services/T{r[:8]}/B{r[8:16]}/{r[16:40]}", r[16:40]),
        "stripe_key": (f"sk_live_{r[:24]}", r[:24]),
        "sendgrid_key": (f"SG.{r[:22]}.{(r[22:] + low)[:43]}", r[:22]),
        "twilio_key": (f"SK{low[:32]}", low[:32]),
        "discord_token": (f"M{r[:23]}.{r[23:29]}.{r[29:56]}", r[:23]),
        "telegram_token": (f"{_r(seed, 9, string.digits)}:{r[:35]}", r[:35]),
        "mailchimp_key": (f"{low[:32]}-us12", low[:32]),
        "square_secret": (f"sq0csp-{r[:43]}", r[:43]),
        "pypi_token": (f"pypi-AgEIcHlwaS5vcmc{r[:64]}{low[:10]}", r[:40]),
        "artifactory_key": (f"AKC{r[:60]}", r[:60]),
        "azure_storage_key": (f"DefaultEndpointsProtocol=https;AccountName=sweep;AccountKey="
                              f"{(r + r[::-1])[:86]}==;EndpointSuffix=core.windows.net", (r + r[::-1])[:86]),
        "ibm_cloud_key": (f"{r[:44]}", r[:44]),
        "cloudant_url": (f"https://sweep:{hexa}@sweep.cloudant.com", hexa),
        "softlayer_key": (low,) * 2,
        "google_api_key": (f"AIza{r[:35]}", r[:35]),
        "ngc_api_key": (f"nvapi-{r[:40]}", r[:40]),
        "wandb_api_key": (hexa[:40],) * 2,
        "private_key": _pem(seed, "\\n"),
        "private_key_block": _pem(seed),
        "jwt": (f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{r[:24]}.{r[24:56]}", r[24:56]),
        "bearer_token": (f"Bearer {r[:40]}", r[:40]),
        "url_password": (f"pw-{r[:20]}", r[:20]),
        "named": (f"{r[:6]}-{r[6:28]}", r[6:28]),
        "hex40": (hexa[:40],) * 2,
        "hex48": (hexa[:48],) * 2,
        "hex64": (hexa,) * 2,
        "lower64": (low,) * 2,
        "npm_token": (f"npm_{r[:36]}", r[:36]),
        "basic_auth": (base64.b64encode(f"bot:{r[:24]}".encode()).decode(), r[:24]),
        "token": (r[:40],) * 2,
    }
    return shapes[kind]


# The environment set: (variable, kind). Every detect-secrets pattern detector and every kit rule that a
# variable's value can hold, under the names people give them; then secret-named variables whose value has
# no shape, URL passwords, and values under neutral SGLANG_ names that only their shape gives away.
ENV_KINDS = [
    ("HF_TOKEN", "hf_token"), ("AWS_ACCESS_KEY_ID", "aws_access_key"), ("AWS_SECRET_ACCESS_KEY", "aws_secret_key"),
    ("GITHUB_TOKEN", "github_token"), ("GH_TOKEN", "github_pat"), ("GITLAB_TOKEN", "gitlab_token"),
    ("SLACK_BOT_TOKEN", "slack_token"), ("SLACK_WEBHOOK_URL", "slack_webhook"), ("OPENAI_API_KEY", "openai_api_key"),
    ("STRIPE_SECRET_KEY", "stripe_key"), ("SENDGRID_API_KEY", "sendgrid_key"), ("TWILIO_API_KEY", "twilio_key"),
    ("DISCORD_BOT_TOKEN", "discord_token"), ("TELEGRAM_BOT_TOKEN", "telegram_token"),
    ("MAILCHIMP_API_KEY", "mailchimp_key"), ("SQUARE_OAUTH_SECRET", "square_secret"),
    ("TWINE_PASSWORD", "pypi_token"), ("ARTIFACTORY_API_KEY", "artifactory_key"),
    ("AZURE_STORAGE_CONNECTION_STRING", "azure_storage_key"), ("IBM_CLOUD_API_KEY", "ibm_cloud_key"),
    ("CLOUDANT_URL", "cloudant_url"), ("SL_API_KEY", "softlayer_key"), ("GOOGLE_API_KEY", "google_api_key"),
    ("NGC_API_KEY", "ngc_api_key"), ("WANDB_API_KEY", "wandb_api_key"), ("TLS_PRIVATE_KEY", "private_key"),
    ("SGLANG_API_KEY", "named"), ("MY_SERVICE_TOKEN", "named"), ("DB_PASSWORD", "named"),
    ("DATABASE_URL", "url_password"), ("SGLANG_HF_ENDPOINT", "url_password"),
    ("SGLANG_SESSION", "jwt"), ("SGLANG_EXTRA_HEADER", "bearer_token"), ("SGLANG_MIRROR_GH", "github_token"),
]
# What the lab's server runs with: the named secrets, the AWS pair, URL passwords and a multi-line key
# (see the module's docstring for why no neutral-named shape-only value).
LAB_ENV_KINDS = [
    ("HF_TOKEN", "hf_token"), ("AWS_ACCESS_KEY_ID", "aws_access_key"), ("AWS_SECRET_ACCESS_KEY", "aws_secret_key"),
    ("GITHUB_TOKEN", "github_token"), ("SLACK_BOT_TOKEN", "slack_token"), ("SGLANG_API_KEY", "named"),
    ("SGL_AUTH_TOKEN", "named"), ("MY_SERVICE_TOKEN", "named"), ("SGL_DB_PASSWORD", "named"),
    ("SGLANG_HF_ENDPOINT", "url_password"), ("SGL_TLS_PRIVATE_KEY", "private_key_block"),
]
# An issue body (`doctor --paste`), printed by the notebook too: the forms the kit's own rules and
# detect-secrets' keyword detectors know, each in the line people write it in (kind shown, shape, line).
PASTE_LINES = [
    ("curl -u password", "named", "curl -u deploy:{v} https://artifacts.internal/qwen.tar"),
    ("mysql -p password", "named", "mysql -u app -p{v} -h db.internal"),
    ("sshpass password", "named", "sshpass -p {v} ssh gpu-box"),
    ("docker login password", "named", "docker login -u bot -p {v} registry.internal"),
    ("redis-cli password", "named", "redis-cli -h cache.internal -a {v} ping"),
    (".netrc password", "named", "machine hub.internal login bot password {v}"),
    (".netrc password line", "named", "password {v}"),
    ("wandb key", "hex40", "wandb login {v}"),
    ("wandb.login key", "hex40", 'wandb.login(key="{v}")'),
    ("npm token", "npm_token", "//registry.npmjs.org/:_authToken={v}"),
    ("signed URL", "hex64", "https://bucket.s3.amazonaws.com/w.bin?X-Amz-Signature={v}"),
    ("Authorization: Basic", "basic_auth", "Authorization: Basic {v}"),
    ("bearer token", "token", 'curl -H "Authorization: Bearer {v}" http://gpu-box:30000/v1/models'),
    ("password in prose", "named", "the admin password is {v} until Friday"),
    ("IBM COS HMAC key", "hex48", 'cos_hmac_secret_access_key = "{v}"'),
    ("Cloudant password", "hex64", 'cloudant_password = "{v}"'),
    ("SoftLayer key", "lower64", 'softlayer_api_key = "{v}"'),
    ("IBM Cloud IAM key", "ibm_cloud_key", 'ibm_cloud_iam_key = "{v}"'),
    ("openai api key", "openai_api_key", "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --api-key {v}"),
    ("hf token", "hf_token", "HF_TOKEN={v}"),
]
# The launch's flags and the fields of sglang's server_args that hold a secret (field, kind)
LAUNCH_FIELDS = [("api_key", "openai_api_key"), ("admin_api_key", "named"), ("ssl_keyfile_password", "named"),
                 ("otlp_traces_endpoint", "url_password")]
_URLS = {"DATABASE_URL": "postgres://app:{}@db.internal:5432/app",
         "SGLANG_HF_ENDPOINT": "https://mirror:{}@hf-mirror.internal/",
         "otlp_traces_endpoint": "http://otel:{}@collector.internal:4317",
         "prometheus": "http://prom:{}@127.0.0.1:{port}/"}


def _one(kind: str, where: str, name: str) -> Planted:
    value, core = _shaped(kind, f"{where}/{name}")
    if name in _URLS:
        value = _URLS[name].format(value, port="{port}")
    shown = {"named": "secret", "url_password": "URL password"}.get(kind, kind.replace("_", " "))
    return Planted(shown, where, value, core, name)


def planted() -> list[Planted]:
    """Every planted value, in the order of the table."""
    out = [_one(kind, "launch.sh", name) for name, kind in LAUNCH_FIELDS]
    out += [_one("hf_token", "launch.sh", "HF_TOKEN"), _one("named", "launch.sh", "SGLANG_API_KEY"),
            _one("named", "launch.sh", "MY_SERVICE_TOKEN")]
    out += [_one(kind, "server.env", name) for name, kind in ENV_KINDS]
    out += [_one(kind, "server.log", name) for name, kind in LAUNCH_FIELDS]
    out += [_one(kind, "server_info.json", name) for name, kind in LAUNCH_FIELDS]
    out += [_one("openai_api_key", "lab argv", "api_key"), _one("named", "lab argv", "admin_api_key")]
    out += [_one(kind, "lab env", name) for name, kind in LAB_ENV_KINDS]
    out += [_one("hf_token", "kit env", "HF_TOKEN"), _one("jwt", "kit env", "SGL_KIT_PROMETHEUS_TOKEN"),
            _one("url_password", "kit argv", "prometheus")]
    out += [_one(kind, "notebook env", name) for name, kind in ENV_KINDS]
    for shown, kind, line in PASTE_LINES:
        value, core = _shaped(kind, f"paste.md/{shown}")
        out.append(Planted(shown, "paste.md", value, core, line.split(" {v}")[0].split("{v}")[0][:24]))
    return out


def _at(secrets: list[Planted], where: str) -> dict[str, str]:
    return {p.name: p.value for p in secrets if p.where == where}


def forms(p: Planted) -> dict[str, str]:
    """The forms a planted value may take in an output, by name (each 8 characters or more)."""
    value = p.value.replace("{port}", "")
    if p.kind == "URL password":
        value = re.search(r"://[^:]+:([^@]+)@", value).group(1)
    if p.kind == "private key":
        value = value.replace("\\n", "\n")
    out = {"plain": value, "json": json.dumps(value)[1:-1], "html": html.escape(value),
           "url": quote(value, safe=""), "url+": quote_plus(value), "piece": p.core[:12]}
    data = value.encode()
    for offset in range(3):
        chunk = data[offset:offset + (len(data) - offset) // 3 * 3]
        if len(chunk) >= 9:
            out[f"base64@{offset}"] = base64.b64encode(chunk).decode()
            out[f"base64url@{offset}"] = base64.urlsafe_b64encode(chunk).decode()
    if "\n" in value:  # a private key's lines, one by one
        out.update({f"line {i}": line for i, line in enumerate(value.splitlines()[1:-1]) if len(line) >= 16})
    return {k: v for k, v in out.items() if len(v) >= 8}


# --------------------------------------------------------------------------- the inputs


@dataclass
class Inputs:
    """The planted files, and the environments of the kit, the lab and the notebook."""

    dir: Path
    launch: Path
    environ: Path
    log: Path
    server_info: Path
    paste: Path  # an issue body
    printed: Path  # the notebook that prints its environment (not yet executed)
    kit_env: dict[str, str]
    lab_flags: list[str]
    lab_env: dict[str, str]
    notebook_env: dict[str, str]
    prometheus: str


def plant(root: Path, secrets: list[Planted], prometheus_port: int) -> Inputs:
    """Write the planted inputs under ``root/inputs``."""
    d = root / "inputs"
    d.mkdir(parents=True, exist_ok=True)
    cmd = _at(secrets, "launch.sh")
    launch = d / "launch.sh"
    launch.write_text(
        "#!/bin/sh\n"
        f"export HF_TOKEN={cmd['HF_TOKEN']}\n"
        f"SGLANG_API_KEY={cmd['SGLANG_API_KEY']} MY_SERVICE_TOKEN='{cmd['MY_SERVICE_TOKEN']}' \\\n"
        "python3 -m sglang.launch_server \\\n"
        "  --model-path /root/models/Qwen3.6-27B --tp-size 2 \\\n"
        "  --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 \\\n"
        "  --speculative-num-draft-tokens 2 --mamba-scheduler-strategy extra_buffer \\\n"
        f"  --api-key {cmd['api_key']} \\\n"
        f"  --admin-api-key={cmd['admin_api_key']} \\\n"
        f"  --ssl-keyfile-password '{cmd['ssl_keyfile_password']}' \\\n"
        f"  --otlp-traces-endpoint {cmd['otlp_traces_endpoint']} \\\n"
        "  --host 0.0.0.0 --port 30000\n")
    environ = d / "server.env"
    environ.write_text("".join(f"{k}={v}\n" for k, v in _at(secrets, "server.env").items()))
    log = d / "server.log"
    fields = _at(secrets, "server.log")
    text = (DATA / "provenance" / f"incident-{SGLANG}.log").read_text()
    for name in ("api_key", "admin_api_key", "ssl_keyfile_password"):
        text, n = re.subn(rf"\b{name}=None", f"{name}='{fields[name]}'", text)
        assert n == 1, name
    text, n = re.subn(r"\botlp_traces_endpoint='[^']*'", f"otlp_traces_endpoint='{fields['otlp_traces_endpoint']}'",
                      text)
    assert n == 1
    log.write_text(text)
    first = json.loads((DATA / "real_server" / f"bench-native-cpu-{SGLANG}.jsonl").read_text().splitlines()[0])
    info = dict(first["server_info_before"])
    info.update(_at(secrets, "server_info.json"))
    for state in info.get("internal_states") or []:  # each rank's state repeats the arguments, as sglang's does
        state.update({k: v for k, v in _at(secrets, "server_info.json").items() if k in state})
    server_info = d / "server_info.json"
    server_info.write_text(json.dumps(info, indent=2))
    paste = d / "paste.md"
    paste.write_text("Our server got slow after the upgrade. What we run, and how we fetch things:\n\n"
                     + "".join(f"    {line.format(v=p.value)}\n" for p, (_, _, line) in
                               zip([p for p in secrets if p.where == "paste.md"], PASTE_LINES, strict=True)))
    printed = d / "printed_env.ipynb"
    printed.write_text(json.dumps(_printing_notebook(), indent=1))
    lab_argv = _at(secrets, "lab argv")
    kit_env = _at(secrets, "kit env")
    return Inputs(d, launch, environ, log, server_info, paste, printed, kit_env=kit_env,
                  lab_flags=["--api-key", lab_argv["api_key"], "--admin-api-key", lab_argv["admin_api_key"]],
                  lab_env=_at(secrets, "lab env"), notebook_env=_at(secrets, "notebook env"),
                  prometheus=_at(secrets, "kit argv")["prometheus"].format(port=prometheus_port))


def _printing_notebook() -> dict:
    """A notebook whose cells print the kernel's environment: ``env`` in a shell, ``os.environ`` as a dict."""
    def cell(src: str) -> dict:
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
    names = [name for name, _ in ENV_KINDS]
    return {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# What the server's environment holds"},
                      cell("!env | sort"), cell("!cat paste.md"),
                      cell(f"import os\n{{k: os.environ.get(k) for k in {names!r}}}")],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


# --------------------------------------------------------------------------- running the kit


@dataclass
class Output:
    """One command as run: its stdout and stderr, exit status and time."""

    name: str
    argv: list[str]
    stdout: str = ""
    stderr: str = ""
    code: int | None = None
    seconds: float = 0.0


@dataclass
class Sweep:
    """The sweep's directory, its inputs and what each command gave."""

    root: Path
    secrets: list[Planted]
    inputs: Inputs
    env: dict[str, str]
    outputs: list[Output] = field(default_factory=list)
    lab_port: int = 0

    @property
    def work(self) -> Path:
        return self.root / "work"

    def sgl_kit(self, name: str, *args: str, env: dict | None = None, timeout: float = 300) -> Output:
        return self.run(name, [SGL_KIT, *args], env=env, timeout=timeout)

    def run(self, name: str, argv: list[str], env: dict | None = None, timeout: float = 300) -> Output:
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.work,
                              env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL)
        out = Output(name, argv, proc.stdout, proc.stderr, proc.returncode, time.perf_counter() - start)
        self.outputs.append(out)
        return out


def _real_cache() -> Path:
    env = os.environ.get("SGL_KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sglang-investigation-kit"


def prepare(root: Path, lab_port: int, prometheus_port: int) -> Sweep:
    """The sweep's directories, environment and planted inputs (nothing run yet)."""
    secrets = planted()
    for sub in ("home", "work", "cache", "tmp", "out", "lab", "runtime"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "runtime", 0o700)
    real = _real_cache()
    for shared in ("wheels", "trees"):  # what the kit downloads and unpacks: sglang's own wheels and source
        if (real / shared).is_dir() and not (root / "cache" / shared).exists():
            (root / "cache" / shared).symlink_to(real / shared, target_is_directory=True)
    inputs = plant(root, secrets, prometheus_port)
    keep = ("PATH", "LANG", "LC_ALL", "SGL_KIT_SSH_PERSIST", "SGL_KIT_STRICT_RULES", "PIP_INDEX_URL", "PIP_NO_INDEX")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({"HOME": str(root / "home"), "SGL_KIT_CACHE": str(root / "cache"), "TMPDIR": str(root / "tmp"),
                "SGL_KIT_LAB_DIR": str(root / "lab"), "SGL_KIT_LAB_DRYRUN": "0", "SGL_KIT_DRYRUN_WARM": "0",
                "SGL_KIT_RUNTIME_DIR": str(root / "runtime"), "XDG_RUNTIME_DIR": str(root / "runtime"),
                "XDG_CACHE_HOME": str(root / "home" / ".cache"), "XDG_CONFIG_HOME": str(root / "home" / ".config"),
                "XDG_DATA_HOME": str(root / "home" / ".local" / "share"), "COLUMNS": "160",
                "PYTHONDONTWRITEBYTECODE": "1", "JUPYTER_PLATFORM_DIRS": "1", **inputs.kit_env})
    return Sweep(root, secrets, inputs, env, lab_port=lab_port)


def _tree(sweep: Sweep) -> str:
    """The unpacked sglang source of SGLANG (the kit's cache, else unpacked into the sweep)."""
    found = sorted((sweep.root / "cache" / "trees" / f"sglang-{SGLANG}").glob("lib/python*/site-packages/sglang"))
    if found:
        return str(found[0])
    from kit.source import install_package_source

    return install_package_source(package="sglang", version=SGLANG, prefix=str(sweep.root / "tmp" / "sglang-src"))


def lab_up(sweep: Sweep) -> Output:
    """The lab, with the planted flags and environment (the server inherits `sgl-kit lab up`'s environment)."""
    out = sweep.sgl_kit("lab up", "--json", "lab", "up", "--port", str(sweep.lab_port), "--variant", "new", "--",
                        *sweep.inputs.lab_flags, env=sweep.inputs.lab_env, timeout=180)
    if out.code != 0:
        raise RuntimeError(f"the lab did not start: {out.stderr[-2000:]}")
    return out


def lab_down(sweep: Sweep) -> Output:
    return sweep.sgl_kit("lab down", "lab", "down", timeout=60)


def run_offline(sweep: Sweep) -> None:
    """The commands that read the planted files."""
    i = sweep.inputs
    tree = _tree(sweep)
    sweep.sgl_kit("doctor files", "doctor", "--command", str(i.launch), "--environ", str(i.environ), "--log", str(i.log),
                  "--sglang", SGLANG, "--gpu", "a6000")
    sweep.sgl_kit("doctor files --json", "--json", "doctor", "--server-info", str(i.server_info), "--baseline",
                  str(i.launch), "--environ", str(i.environ), "--paste", str(i.paste), "--sglang", SGLANG)
    sweep.sgl_kit("args parse", "args", "parse", str(i.log))
    sweep.sgl_kit("args parse --json", "--json", "args", "parse", str(i.log))
    sweep.sgl_kit("args diff", "args", "diff", str(i.log), str(i.server_info))
    sweep.sgl_kit("args diff command --json", "--json", "args", "diff", str(i.launch), str(i.log), "--sglang", SGLANG,
                  "--no-dryrun")
    sweep.sgl_kit("args read", "args", "read", str(i.launch), "--package-dir", tree)
    sweep.sgl_kit("why files", "why", "disable_piecewise_cuda_graph", "--log", str(i.log), "--command", str(i.launch),
                  "--package-dir", tree)
    flags = _flags_of_launch(i.launch.read_text())
    sweep.sgl_kit("upgrade-diff --static", "upgrade-diff", "--from", SGLANG, "--to", "0.5.23", "--static", "--", *flags)


def _flags_of_launch(text: str) -> list[str]:
    import shlex

    words = shlex.split(text.split("launch_server", 1)[1].replace("\\\n", " "))
    return words


def run_live(sweep: Sweep) -> None:
    """The commands that read the planted lab (and the kit's own environment and arguments)."""
    sweep.sgl_kit("lab status", "lab", "status")
    sweep.sgl_kit("lab status --json", "--json", "lab", "status")
    sweep.sgl_kit("lab up (running)", "lab", "up")
    sweep.sgl_kit("doctor lab --json", "--json", "doctor", "lab", "--prometheus", sweep.inputs.prometheus)
    sweep.sgl_kit("doctor lab", "doctor", "lab")
    sweep.sgl_kit("args show lab", "args", "show", "lab", "--all")
    sweep.sgl_kit("args show lab --json", "--json", "args", "show", "lab")
    sweep.sgl_kit("why lab", "why", "disable_piecewise_cuda_graph", "lab")
    sweep.sgl_kit("gates lab", "gates", "prefill-graph", "lab")
    sweep.sgl_kit("bench lab", "bench", "lab", "-n", "2", "--warmup", "0", "--max-tokens", "8", "--input-len", "8",
                  "--out", "runs/bench-lab.jsonl")
    case = sweep.root / "out" / "case"
    sweep.sgl_kit("capture lab", "capture", "lab", "-o", str(case), "--interval", "1")
    sweep.sgl_kit("doctor --case --compare --json", "--json", "doctor", "--case", str(case), "--compare")
    sweep.sgl_kit("case show", "case", "show", str(case))
    sweep.sgl_kit("report --case", "report", "--case", str(case), "-o", str(sweep.root / "out" / "case-report.html"))


def run_notebooks(sweep: Sweep) -> None:
    """02_config against the lab (sharing itself at its end), the notebook that prints its environment, and
    `sgl-kit report` of both."""
    out = sweep.root / "out"
    code = ("import sys, kit.notebook\n"
            "kit.notebook.execute(sys.argv[1], sys.argv[2], {k: v for k, v in (a.split('=', 1) for a in sys.argv[3:])},"
            " cwd=sys.argv[2].rsplit('/', 1)[0], timeout=300)\n")
    nb02 = out / "02_config.ipynb"
    sweep.run("notebook 02_config", [sys.executable, "-c", code, str(ROOT / "notebooks" / "02_config.ipynb"), str(nb02),
                                     "target=lab", "lab_launch=", f"baseline={sweep.inputs.log}",
                                     "share_to=02_config_shared.html"], timeout=600)
    printed = sweep.inputs.dir / "printed_env.executed.ipynb"  # what the user printed: an input, not checked
    sweep.run("notebook printed_env", [sys.executable, "-c", code, str(sweep.inputs.printed), str(printed)],
              env=sweep.inputs.notebook_env, timeout=300)
    sweep.sgl_kit("report", "report", str(nb02), str(printed), "-o", str(out / "report.html"))
    sweep.sgl_kit("report --markdown --json", "--json", "report", str(printed), str(nb02), "--markdown", "--code",
                  "-o", str(out / "report.md"))


def run_all(sweep: Sweep) -> None:
    """Every command: the lab's and the notebooks' beside the files' (two at a time), then the lab stopped."""
    from concurrent.futures import ThreadPoolExecutor

    lab_up(sweep)
    try:
        with ThreadPoolExecutor(2) as pool:
            live = pool.submit(lambda: (run_live(sweep), run_notebooks(sweep)))
            offline = pool.submit(run_offline, sweep)
            live.result()
            offline.result()
    finally:
        lab_down(sweep)


# --------------------------------------------------------------------------- the grep


PLANTED_PLACES = ("inputs", "lab")  # the planted inputs, and the lab's own directory (the target's)


def checked_files(sweep: Sweep) -> list[Path]:
    """Every file the kit (or papermill, Jupyter, pip) wrote under the sweep's directory, symlinks not followed."""
    files = []
    for dirpath, dirnames, filenames in os.walk(sweep.root):
        rel = Path(dirpath).relative_to(sweep.root)
        if rel.parts and rel.parts[0] in PLANTED_PLACES:
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        files += [Path(dirpath, f) for f in filenames if os.path.isfile(os.path.join(dirpath, f))
                  and not os.path.islink(os.path.join(dirpath, f))]
    return sorted(files)


@dataclass
class Survivor:
    planted: Planted
    place: str  # `command: stdout`, or a file's path under the sweep's directory
    form: str


def places(sweep: Sweep) -> list[tuple[str, bytes]]:
    """(place, content) of everything checked."""
    out = []
    for o in sweep.outputs:
        out += [(f"{o.name}: stdout", o.stdout.encode()), (f"{o.name}: stderr", o.stderr.encode())]
    for path in checked_files(sweep):
        out.append((str(path.relative_to(sweep.root)), path.read_bytes()))
    return out


def survivors(sweep: Sweep, checked: list[tuple[str, bytes]] | None = None) -> list[Survivor]:
    """Each planted value, in each of its forms, found in any place checked."""
    checked = places(sweep) if checked is None else checked
    found = []
    for p in sweep.secrets:
        for form, text in forms(p).items():
            needle = text.encode()
            found += [Survivor(p, place, form) for place, content in checked if needle in content]
    return found


_COUNT = re.compile(r"masked (\d+) secret value|(\d+) secrets? removed|\"masked\": \{\s*\"")
_MARKER = re.compile(r"<redacted(?::[a-z0-9_]+)?>|&lt;redacted")
# the line a command prints about the lab it found: the launch's name, which the lab masked when it started
# (`sgl-kit lab up` said how many), not something the command masked
_LAB_NOTICE = re.compile(r"^sgl-kit: the lab runs the `.*` launch, .*$", re.M)


def unsaid(sweep: Sweep) -> list[str]:
    """The commands that masked something (a marker in what they printed) without saying how many. A notebook
    says it in its report (its own share cell, `sgl-kit report`), which is checked as a command."""
    out = []
    for o in sweep.outputs:
        text = _LAB_NOTICE.sub("", o.stdout + o.stderr)
        if _MARKER.search(text) and not _COUNT.search(text) and not o.name.startswith("notebook"):
            out.append(o.name)
    return out


def table(sweep: Sweep, found: list[Survivor], n_places: int) -> str:
    """kind | where planted | places checked | survivors, one row per planted value."""
    by = Counter(id(s.planted) for s in found)
    rows = [("kind", "where planted", "under", "places checked", "survivors")]
    rows += [(p.kind, p.where, p.name, str(n_places), str(by[id(p)])) for p in sweep.secrets]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def cleanup(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
