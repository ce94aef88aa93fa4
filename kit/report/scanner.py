"""The secret scanner under the report: detect-secrets' detectors, and the kit's rules for what it lacks.

**detect-secrets** (Yelp, pinned in pyproject.toml) gives the patterns of the secrets it
knows by shape, and its entropy measure. Every pattern detector of its plugin set runs on
every string the report holds: AWS access keys, Artifactory, Azure storage keys,
basic-auth URLs, Cloudant, Discord bot tokens, GitHub tokens (``ghp_``/``gho_``/...), GitLab
tokens, IBM Cloud IAM and COS HMAC keys, JSON Web Tokens, Mailchimp, npm, OpenAI, private
key headers, PyPI, SendGrid, Slack tokens (``xoxb-``...) and webhook URLs, SoftLayer,
Square, Stripe, Telegram and Twilio keys. Its Public-IP detector is not used (host
addresses are no secret; ``--redact-hosts`` replaces them), nor its keyword detector (the
kit's named-value rules, with the one name policy of ``kit/_secrets.py``, cover the same
names in more forms: argv lists, escaped quotes, HTML entities).

**The kit's own rules** (:data:`KIT_RULES`), for what detect-secrets does not know:

====================  ==================================================================
kind                  what is replaced
====================  ==================================================================
google_api_key        ``AIza`` + 35 characters (Google Cloud / Gemini keys)
ngc_api_key           ``nvapi-`` + 20 or more characters (NVIDIA NGC)
github_token          ``github_pat_`` + 22 or more characters (fine-grained tokens)
wandb_api_key         the key of ``wandb login KEY`` and ``wandb.login(key="KEY")``
password              ``mysql ... -pPASSWORD`` (mysql, mysqldump, mysqladmin, mariadb),
                      the password of ``-u``/``--user user:PASSWORD`` (curl, wget, ...),
                      of ``sshpass -p``, ``docker login ... -p`` and ``redis-cli -a``
url_signature         a signed URL's ``sig=``/``signature=``/``X-Amz-Signature=`` (16+ chars)
netrc_password        ``password X`` in a ``.netrc`` line (``machine H login U password X``)
                      or on a ``.netrc`` line of its own
prose_secret          a password or token written in a sentence: ``the password is X``,
                      ``token was X``, ``set the API key to X`` (X: 6+ characters, letters
                      and digits or symbols)
====================  ==================================================================

JWTs are removed whole (detect-secrets' pattern stops before the signature; the kit
takes the token to its end). :func:`high_entropy` finds long random-looking strings with
detect-secrets' Shannon entropy: the report lists those no rule removed, by place.

:data:`COST` adds up the CPU time spent in detect-secrets' code (its patterns and its
entropy measure), so a benchmark can set it apart from the kit's own
(``benchmarks/report_redaction.py``).
"""

from __future__ import annotations

import math
import re
import time
from functools import cache

__all__ = ["COST", "KIT_RULES", "detect_secrets_version", "high_entropy", "scan"]

COST = {"seconds": 0.0, "calls": 0}
_SKIPPED = {"Public IP (ipv4)"}
_VALUE_OK = re.compile(r"(?=.*[A-Za-z])(?=.*[^A-Za-z]).{6,}", re.S)

KIT_RULES: list[tuple[str, re.Pattern]] = [
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9_-])(?P<value>AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])")),
    ("ngc_api_key", re.compile(r"(?<![A-Za-z0-9_-])(?P<value>nvapi-[A-Za-z0-9_-]{20,})")),
    ("github_token", re.compile(r"(?<![A-Za-z0-9_])(?P<value>github_pat_[A-Za-z0-9_]{22,})")),
    ("wandb_api_key", re.compile(r"\bwandb[ \t]+login(?:[ \t]+--?[a-z][\w-]*(?:=\S+)?)*[ \t]+['\"]?"
                                 r"(?P<value>[A-Za-z0-9_-]{20,})")),
    ("wandb_api_key", re.compile(r"\bwandb\.login\([^)]*?\bkey[ \t]*=[ \t]*['\"](?P<value>[^'\"\s]{8,})['\"]")),
    ("password", re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mysqlsh)\b[^\n|;&]*?[ \t]-p"
                            r"(?P<value>[^\s'\"`|;&]+)")),
    ("password", re.compile(r"(?<![\w-])(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)['\"]?[^\s:'\"/@]+:"
                            r"(?P<value>[^\s'\"@`|;&]+)")),
    ("password", re.compile(r"\bsshpass[ \t]+-p[ \t]*['\"]?(?P<value>[^\s'\"]+)")),
    ("password", re.compile(r"\b(?:docker|podman|helm|oras)[ \t]+(?:registry[ \t]+)?login\b[^\n|;&]*?[ \t]-p[ \t]+['\"]?"
                            r"(?P<value>[^\s'\"`|;&]+)")),
    ("password", re.compile(r"\bredis-cli\b[^\n|;&]*?[ \t]-a[ \t]+['\"]?(?P<value>[^\s'\"`|;&]+)")),
    ("url_signature", re.compile(r"[?&](?i:sig|signature|x-amz-signature|x-goog-signature|x-goog-credential)="
                                 r"(?P<value>[^&\s'\"#<>]{16,})")),
    ("netrc_password", re.compile(r"\b(?:machine[ \t]+\S+|default)(?:[ \t]+(?:login|account)[ \t]+\S+)*[ \t]+"
                                  r"password[ \t]+(?P<value>\S+)")),
    ("netrc_password", re.compile(r"^[ \t]*password[ \t]+(?P<value>\S+)[ \t]*\r?$", re.M)),  # `!cat`: CRLF
    ("prose_secret", re.compile(
        r"(?i:\b(?:password|passwd|passphrase|pass ?word|secret|token|api[ -]?key|access[ -]key))[ \t]+"
        r"(?i:is|was|=|to|would be|will be|reads|of [\w.@-]+ is)[ \t]*[:\"'\u201c`]?[ \t]*"
        r"(?P<value>[^\s\"'\u201d`<>]+?)[.,;:)\"'\u201d`]*(?=\s|$|<)")),
]

# words one of which a text must hold for each rule of KIT_RULES to apply (a fast check first)
_RULE_WORDS = [("aiza",), ("nvapi-",), ("github_pat_",), ("wandb",), ("wandb",), ("mysql", "mariadb"),
               ("-u", "--user"), ("sshpass",), ("login",), ("redis-cli",), ("sig",), ("password",), ("password",),
               ("pass", "secret", "token", "key")]


@cache
def detect_secrets_version() -> str:
    from importlib.metadata import version

    return version("detect-secrets")


@cache
def _detectors() -> list[tuple[str, re.Pattern]]:
    """detect-secrets' pattern detectors, (kind, pattern), each run on its own (an alternation of all is slower)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    out = []
    for secret_type, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        if secret_type in _SKIPPED or not issubclass(cls, RegexBasedDetector):
            continue
        kind = re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")
        kind = {"json_web_token": "jwt", "private_key": "private_key_header"}.get(kind, kind)
        out += [(kind, pattern) for pattern in cls().denylist]
    return out


def scan(text: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each secret detect-secrets or the kit's own rules find in `text`, in order."""
    start_clock = time.process_time()
    spans: list[tuple[int, int, str]] = []
    for kind, pattern in _detectors():  # detect-secrets' patterns: timed in COST
        for inner in pattern.finditer(text):
            start, end = inner.span()
            groups = [g for g in range(1, (pattern.groups or 0) + 1) if inner.group(g) and len(inner.group(g)) >= 8]
            if groups:
                start, end = inner.span(groups[-1])
            while start < end and text[start] in " \t\r\n=:\"'":  # a pattern's delimiters (Artifactory's) stay
                start += 1
            while end > start and text[end - 1] in " \t\r\n\"'":
                end -= 1
            if kind == "jwt":  # the signature too
                while end < len(text) and re.match(r"[A-Za-z0-9_\-.+/=]", text[end]):
                    end += 1
            spans.append((start, end, kind))
    COST["seconds"] += time.process_time() - start_clock
    COST["calls"] += 1
    low = text.lower()
    for (kind, pattern), words in zip(KIT_RULES, _RULE_WORDS, strict=True):
        if not any(w in low for w in words):
            continue
        for m in pattern.finditer(text):
            value = m.group("value")
            if kind in ("prose_secret", "password", "netrc_password") and not _VALUE_OK.fullmatch(value):
                continue
            spans.append((m.start("value"), m.end("value"), kind))
    return _disjoint(spans)


def _disjoint(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The longest of overlapping spans, earliest first."""
    out: list[tuple[int, int, str]] = []
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -(s[1] - s[0]))):
        if out and start < out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end, out[-1][2])
            continue
        out.append((start, end, kind))
    return out


# --- what survives: long strings that look random

_RUN = re.compile(r"(?<![A-Za-z0-9+/_=-])/*(?P<run>[A-Za-z0-9+/_-]{20,}={0,2})")
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-="
_HEX = "0123456789abcdefABCDEF"


@cache
def _entropy():
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString

    return Base64HighEntropyString(), HexHighEntropyString()


def high_entropy(text: str, min_length: int = 20) -> list[tuple[int, int]]:
    """Spans of long strings that look random (detect-secrets' Shannon entropy): candidates, not proof.

    A run of base64 characters of `min_length` or more counts when it mixes letters and
    digits and its entropy per character (base64 alphabet) is at least 0.8 of the most a
    string of its length and alphabet can have (``log2`` of the smaller), or 3.0 bits for
    hexadecimal of 32+ characters; names made of words and file paths do not.
    """
    b64, hexa = _entropy()
    spans = []
    for m in _RUN.finditer(text):
        run = m.group("run").rstrip("=")
        if len(run) < min_length or not re.search(r"[0-9]", run) or not re.search(r"[A-Za-z]", run):
            continue
        if "/" in run and all(_wordy(p) or _plain_word(p) for p in run.split("/")):
            continue  # a path: internal/captures/linux-x86_64
        hexadecimal = all(c in _HEX for c in run)
        classes = sum(bool(re.search(p, run)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
        if (len(run) < 32 if hexadecimal else classes < 2 or _wordy(run)):
            continue
        start_clock = time.process_time()  # detect-secrets' entropy: timed in COST
        hit = (hexa.calculate_shannon_entropy(run) >= 3.0 if hexadecimal
               else b64.calculate_shannon_entropy(run) >= 0.8 * math.log2(min(len(run), _alphabet(run))))
        COST["seconds"] += time.process_time() - start_clock
        if hit:
            spans.append((m.start("run"), m.start("run") + len(run)))
    return spans


def _alphabet(run: str) -> int:
    """How many characters the run's kinds of character allow (lower, upper, digits, symbols)."""
    return sum(n for pattern, n in ((r"[a-z]", 26), (r"[A-Z]", 26), (r"[0-9]", 10), (r"[+/_-]", 4))
               if re.search(pattern, run))


def _plain_word(part: str) -> bool:
    """A lower-case path part (``site-packages``, ``sgl-project``, ``linux-x86_64``), or a short one."""
    return len(part) < 4 or part == part.lower()


_TOKEN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _wordy(run: str) -> bool:
    """Names made of words (``DeepSeek-R1-Distill-Llama-70B``, ``disable_piecewise_cuda_graph``), not random.

    Most of the run is words of 4+ letters (random base62 has few: its case changes cut
    them), and its letters have the vowels of words (about 0.35; random letters about 0.19).
    """
    parts = run.split("_")
    if run.islower() and len(parts) >= 3 and sum(p.isalpha() and len(p) >= 4 for p in parts) >= 2:
        return True  # a snake_case identifier: dsv4_prefill_backend, smi_kmd_1x_rtx2080super_window
    tokens = _TOKEN.findall(run)
    total = sum(len(t) for t in tokens) or 1
    in_words = sum(len(t) for t in tokens if len(t) >= 4 and not t.isdigit() and not t.isupper())
    letters = [c for c in run.lower() if c.isalpha()]
    vowels = sum(c in "aeiou" for c in letters) / (len(letters) or 1)
    return in_words / total >= 0.6 and vowels >= 0.24
