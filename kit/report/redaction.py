"""Secrets out of text and notebooks: what counts as a secret, and every form it may take.

A secret is replaced by ``<redacted:KIND>``; the text around it stays. The base is a
maintained scanner, detect-secrets (its pattern detectors: Slack, GitHub, GitLab, JWT,
AWS, Stripe, OpenAI, PyPI, npm, ... see ``kit/report/scanner.py``), plus the kit's rules
for what it lacks: Google ``AIza`` and NGC ``nvapi-`` keys, ``wandb login``, ``mysql -p``,
``curl -u``, ``.netrc`` lines, passwords in prose (``scanner.KIT_RULES``), and the rules
below (sglang's ``api_key``/``admin_api_key``/``ssl_keyfile_password`` in a ``server_args``
line, ``/server_info`` and argv lists; HF tokens in every form; named values). What a
secret-looking *name* is comes from one policy, ``kit/_secrets.py``. The rules, in the
order they run (a later rule leaves an earlier marker alone):

=====================  =====================================================================
kind                   what is replaced
=====================  =====================================================================
private_key            PEM private key blocks (RSA, EC, DSA, ENCRYPTED, OPENSSH, PGP), whole
                       (when the END line is missing, to the end of the key's base64)
aws_access_key         ``AKIA``/``ASIA`` + 16 upper-case letters or digits
hf_token               ``hf_`` (or ``api_org_``) + 30 or more letters or digits, wherever it is
(scanner kinds)        what detect-secrets' detectors and ``scanner.KIT_RULES`` find
bearer_token           the credentials after ``Authorization: Bearer`` (any case; header, JSON
                       or keyword form), and a bare ``Bearer <token>`` of 16+ characters
authorization          the credentials of any other ``Authorization:`` scheme (Basic, Token)
url_password           the password of ``scheme://user:PASSWORD@host`` (scheme, user and host
                       stay; it runs to the URL's last ``@``, so an unencoded ``/`` or ``@`` goes too)
api_key                the value of ``--api-key``, ``api_key``, ``apikey``, ``x-api-key``,
                       ``*_API_KEY``
admin_api_key          the value of ``--admin-api-key``, ``admin_api_key``
ssl_keyfile_password   the value of ``--ssl-keyfile-password``, ``ssl_keyfile_password``
aws_secret_key         the value of ``aws_secret_access_key`` (any case)
password, secret,      the value of any other flag or key whose name is secret-looking
token, credential,     (``kit._secrets.is_secret_name``: ``--token``, ``--hf-token``,
cookie                 ``api_token``, ``?token=``, ``"token":``, ``*password``, ``SGL_AUTH``,
                       ``CREDS``...), by its last word; a number under ``*token`` is a count
env_secret             the same for an upper-case (environment) name: ``HF_TOKEN``, ``SGL_AUTH``
secret_variable        the value of a neutral name that holds a secret (``K`` of
                       ``--api-key $K``, a variable set from ``os.environ[...]``; ``taint.py``)
=====================  =====================================================================

A key's value is found in ``name='v'``, ``name="v"``, ``name=v``, ``export NAME=v``,
``'name': 'v'``, ``"name": "v"``, ``name: v``, ``name: str = 'v'`` and ``["NAME"] = 'v'``; a
flag's in ``--flag v``, ``--flag=v`` and ``'--flag', 'v'`` (an argv list).
Quotes may be ``'``, ``"``, their backslash-escaped forms (``\\"`` inside a JSON string) or
their HTML entities (``&quot;``, ``&#39;``). An unquoted value ends at white space or one of
``'"`,;&<>()[]{}|\\`` (after ``name:`` it runs to the end of the line). A value is left alone
when it is no secret but a reference or a placeholder: ``None``/``null``/``True``/empty, ``$VAR``,
``<placeholder>``, ``{var}``, a mask (``***``), a number of 1-3 digits (a count), an upper-case
placeholder word (``PASSWORD``, ``YOUR_TOKEN``), a call or subscript (``os.environ[...]``), and
in code cells a plain Python name (``api_key=args.api_key``, ``api_key=API_KEY``).

Value tainting (``taint.py``): every value a rule removes is then removed everywhere else
it occurs, so a key copied into prose or a neutral variable goes too. What no rule knows
may stay: ``survivors.py`` lists long random-looking strings by place, and ``strict``
removes them.

No known form survives. After the rules, percent-encoded runs and base64 runs (standard or
URL-safe, padded or not, starting at any of the four character offsets) are decoded; when
the decoded text holds a secret, a percent-encoded run is replaced by its redacted decoded
text and a base64 run by one marker. Every secret value found (8+ characters, two kinds of
character) is then removed wherever else it appears: plain, HTML- or JSON-escaped,
percent-encoded, or inside base64 at any byte alignment. Text with ANSI colours and HTML is
also checked as it reads (colours and tags stripped); what is found only there replaces the
coloured or marked-up form.

With ``hosts=True`` host names and IP addresses are replaced by consistent placeholders
(see ``hostnames.py``); a host name is not a secret otherwise.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections import Counter
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from kit._secrets import URL_PASSWORD, is_secret_name

from .hostnames import HostMap
from .scanner import scan
from .taint import learn

__all__ = ["MARKER_RE", "Redactor", "redact", "redact_notebook", "secret_count"]

MARKER_RE = re.compile(r"<redacted:[a-z0-9_]+>|&lt;redacted:[a-z0-9_]+&gt;|\\u003credacted:[a-z0-9_]+\\u003e")
HOST_KINDS = frozenset({"hostname", "ip_address"})
_MAX_DEPTH = 3
_HTML_MIMES = ("text/html", "image/svg+xml")

# --- the rules

_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r"|-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=:,. \t\r\n-]|\\[nr])*",
    re.S)
_AWS_ID = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_HF = re.compile(r"(?<![A-Za-z0-9])(?:hf_|api_org_)[A-Za-z0-9]{30,}")
_OPEN_Q = r"(?:\\?[\"']|&quot;|&\#0*3[49];|&\#x0*2[27];)"
_AUTH = re.compile(
    r"(?<![\w-])(?P<keep>(?:proxy-)?authorization" + _OPEN_Q + r"?[ \t]*[:=][ \t]*(?:[fFrRbB]{0,2}" + _OPEN_Q
    + r")?[ \t]*(?:(?P<scheme>bearer|basic|token|digest|apikey)[ \t]+)?)(?P<value>[^\s'\"\\<>,;`\x00-\x1f]+)", re.I)
_BEARER = re.compile(r"(?<![\w-])(?P<keep>bearer[ \t]+)(?P<value>[A-Za-z0-9\-._~+/]{16,}=*)", re.I)
_URL_PW = URL_PASSWORD  # the one policy's (kit/_secrets.py)

_Q_VALUE = (r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|\\'(?:(?!\\').)*\\'|\\\"(?:(?!\\\").)*\\\""
            r"|&quot;(?:(?!&quot;).)*&quot;|&\#0*39;(?:(?!&\#0*39;).)*&\#0*39;"
            r"|&\#x0*27;(?:(?!&\#x0*27;).)*&\#x0*27;|&\#0*34;(?:(?!&\#0*34;).)*&\#0*34;")
_STOP = r"\s'\"`,;&<>()\[\]{}|\\\x00-\x1f"
_FLAG = re.compile(
    r"(?<![\w-])--(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*)(?![\w-])"
    r"(?:=|(?P<gap>[\s\x00]+)|(?P<listsep>[\"'][ \t]*,[ \t]*))(?P<value>" + _Q_VALUE + r"|[^\s'\"`\\\x00-\x1f|;&)\]}]+)", re.I)
_TYPE = r"[A-Za-z_][\w.]*(?:\[[\w., |]*\])?"  # an annotation: str, Optional[str], str | None
_SEP = (r"(?(q0)(?P=q0)\]?)(?:[ \t]*:[ \t]*" + _TYPE + r"(?:[ \t]*\|[ \t]*" + _TYPE + r")*[ \t]*=(?!=)[ \t]*"
        r"|[ \t]*=(?!=)[ \t]*|[ \t]*:(?![:/])[ \t]*(?P<colon>))")
_VALUE = (r"(?P<value>" + _Q_VALUE + r"|(?(colon)[^\n'\"`,;&<>()\[\]{}|\\\x00-\x08\x0a-\x1f]+|[^" + _STOP + r"=][^" + _STOP
          + r"]*))")
_KEYED = re.compile(r"(?<![A-Za-z0-9_.$-])(?P<q0>" + _OPEN_Q + r")?(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?![A-Za-z0-9_])"
                    + _SEP + _VALUE)

_PCT_RUN = re.compile(r"(?:[^\s'\"<>%]*%[0-9A-Fa-f]{2})+[^\s'\"<>%]*")
_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_B64_CHAR = re.compile(r"[A-Za-z0-9+/_=-]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_BLOCK_TAG = re.compile(r"</?(?:br|p|div|tr|td|th|li|ul|ol|table|pre|h[1-6]|section|header|footer)\b[^>]*>", re.I)
_HTML_SPLIT = re.compile(r"(<script\b.*?</script\s*>|<style\b.*?</style\s*>|<!--.*?-->|<[A-Za-z/!][^>]*>)",
                         re.S | re.I)
_REFERENCE = re.compile(r"(?:None|null|NULL|nil|undefined|True|False|true|false|\*+|x{3,}|X{3,}|\.{3,}|-+)?"
                        r"|\$.*|<.*>|\{.*|%\(.*|--.*|\d{1,3}"
                        r"|(?:YOUR_?|MY_?)?[A-Z_]*(?:PASSWORD|PASSWD|PASS|SECRET|TOKEN|KEY|VALUE|XXX+)[A-Z_]*", re.S)
_CODE_NAME = re.compile(r"[a-z_]+(?:\.[a-z_]+)*|[A-Z_]+(?:\.[A-Z_]+)*")


def _kind_for_name(name: str) -> str:
    low = name.lower().replace("-", "_")
    if low.endswith("admin_api_key"):
        return "admin_api_key"
    if low.endswith(("api_key", "apikey")):
        return "api_key"
    if low.endswith("ssl_keyfile_password"):
        return "ssl_keyfile_password"
    if low.endswith("secret_access_key"):
        return "aws_secret_key"
    if name.isupper() or not any(c.isalpha() for c in name):
        return "env_secret"
    if low.endswith(("password", "passwd")) or low.split("_")[-1] in ("pass", "pwd", "pw"):
        return "password"
    if "secret" in low:
        return "secret"
    if "cookie" in low:
        return "cookie"
    if "auth" in low.replace("authorization", "") or "cred" in low:
        return "credential"
    return "token"


def _unquote(value: str) -> tuple[str, str, str]:
    """(opening quote, inner text, closing quote) of a matched value."""
    for q in ("\\'", '\\"', "&quot;", "'", '"'):
        if len(value) >= 2 * len(q) and value.startswith(q) and value.endswith(q):
            return q, value[len(q):-len(q)], q
    m = re.fullmatch(r"(&#x?0*(?:39|34|27|22);)(.*)\1", value, re.S)
    if m:
        return m.group(1), m.group(2), m.group(1)
    return "", value, ""


def _strip_tags(text: str) -> str:
    text = re.sub(r"<script\b.*?</script\s*>|<style\b.*?</style\s*>|<!--.*?-->", "", text, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]*>", "", _BLOCK_TAG.sub("\n", text)))


# Markdown emphasis and code marks, which split `**API_KEY**=v` from its value as it reads
_MD_MARKS = re.compile(r"\*\*|__|~~|`+|(?<![\w*])[*_](?=\S)|(?<=\S)[*_](?![\w*])")
_VIEWS = {"ansi": lambda t: _ANSI.sub("", t), "html": _strip_tags, "markdown": lambda t: _MD_MARKS.sub("", t)}


def _printable(text: str) -> bool:
    good = sum(1 for c in text if c.isprintable() or c in "\n\r\t")
    return good >= 0.85 * len(text)


def _b64_cores(value: str) -> set[str]:
    """The base64 characters that depend on `value` alone, at the three byte alignments, both alphabets."""
    raw, cores = value.encode(), set()
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw).decode()
        start, end = -(-8 * pad // 6), (8 * pad + 8 * len(raw)) // 6
        core = enc[start:end]
        if len(core) >= 8:
            cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


class Redactor:
    """One redaction over several texts or notebooks: the counts, the secret values found, one host map.

    `text` redacts one string completely. For notebooks, every string is first redacted by
    the rules (`first`), then every secret value found anywhere is removed from every
    string (`second`), so a value seen once beside its key is also removed where it stands
    alone, in another cell or another notebook.
    """

    def __init__(self, hosts: bool = False) -> None:
        self.counts: Counter = Counter()
        self.values: dict[str, str] = {}
        self.secret_names: dict[str, str] = {}  # neutral names that hold a secret (K in `--api-key $K`)
        self.hosts = HostMap() if hosts else None

    # -- whole strings

    def text(self, text: str, *, mime: str = "", code: bool = False) -> str:
        learn(self, [text])
        return self.second(self.first(text, mime=mime, code=code), mime=mime, code=code)

    def first(self, text: str, *, mime: str = "", code: bool = False) -> str:
        """The rules and the decoders over one string (HTML-aware for text/html); hosts collected."""
        if mime in _HTML_MIMES:
            out = self._html(text)
        else:
            out = self._redact_plain(text, code=code)
            if "\x1b" in out:
                out = self._view_check(out, "ansi")
            if mime == "text/markdown" and _MD_MARKS.search(out):
                out = self._view_check(out, "markdown")
            out = self._embedded_json(out, code)
        if self.hosts is not None:
            self.hosts.collect(_strip_tags(out) if mime in _HTML_MIMES else out)
        return out

    def second(self, text: str, *, mime: str = "", code: bool = False) -> str:
        """Every secret value found anywhere, removed from this string in every form; then host placeholders."""
        html_mode = mime in _HTML_MIMES
        out = self._known(text, html_mode)
        if html_mode or "\x1b" in out:
            out = self._view_check(out, "html" if html_mode else "ansi")
        elif mime == "text/markdown" and _MD_MARKS.search(out):
            out = self._view_check(out, "markdown")
        elif self._detect(out, code=code):  # a value only now exposed (e.g. a neighbour's marker moved)
            out = self._redact_plain(out, code=code)
        if self.hosts is not None:
            out = self.hosts.replace(out, self.counts)
        return out

    # -- notebooks

    def notebook_first(self, nb) -> dict:
        return self._walk(nb, self.first, "", False)

    def notebook_second(self, nb) -> dict:
        out = self._walk(nb, self.second, "", False)
        _drop_broken_images(out)
        return out

    def _walk(self, obj, fn, mime: str, code: bool):
        if isinstance(obj, str):
            return fn(obj, mime=mime, code=code)
        if isinstance(obj, dict):
            cell_type = obj.get("cell_type")
            is_code_cell = cell_type == "code"
            out = {}
            for key, value in obj.items():
                sub_mime = key if "/" in key and not mime else mime
                if cell_type == "markdown" and key == "source":
                    sub_mime = "text/markdown"
                new_key = key if not isinstance(key, str) or "/" in key or len(key) < 8 else fn(key, mime="", code=False)
                out[new_key] = self._walk(value, fn, sub_mime, code or (is_code_cell and key == "source"))
            return out
        if isinstance(obj, list):
            return [self._walk(v, fn, mime, code) for v in obj]
        return obj

    # -- the rules

    def _mark(self, kind: str, value: str, found: list | None) -> str:
        if found is not None:
            found.append((kind, value))
        else:
            self._remember(kind, value)
            self.counts[kind] += 1
        return f"<redacted:{kind}>"

    def remember_value(self, kind: str, value: str) -> None:
        """A secret's value seen without a rule (tainting): removed everywhere by `second`."""
        self._remember(kind, value)

    def _remember(self, kind: str, value: str) -> None:
        if kind == "private_key":  # its lines, which a list of lines (hovertext, a traceback) keeps apart
            for line in re.split(r"\s+|\\[nr]", value):
                if len(line) >= 16 and re.fullmatch(r"[A-Za-z0-9+/=]+", line):
                    self._remember("private_key_line", line)
        kind = "private_key" if kind == "private_key_line" else kind
        value = value.strip()
        classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]", r"[^A-Za-z0-9]"))
        if len(value) >= 8 and classes >= 2 and not MARKER_RE.search(value) and not re.search(r"[\x00-\x1f]", value):
            self.values.setdefault(value, kind)

    def _redact_plain(self, text: str, *, code: bool = False, depth: int = 0, found: list | None = None) -> str:
        """The rules and the decoders over text that is not HTML (an HTML string goes through ``_html``)."""
        if not text:
            return text
        return self._decoded(self._rules(text, found, code=code), depth, found)

    def _detect(self, text: str, code: bool = False) -> list:
        found: list = []
        self._redact_plain(text, code=code, found=found)
        return found

    def _rules(self, text: str, found: list | None, code: bool = False, scanner: bool = True) -> str:
        if "PRIVATE KEY" in text:
            text = _PEM.sub(lambda m: self._mark("private_key", m.group(0), found), text)
        if "AKIA" in text or "ASIA" in text:
            text = _AWS_ID.sub(lambda m: self._mark("aws_access_key", m.group(0), found), text)
        if "hf_" in text:
            text = _HF.sub(lambda m: self._mark("hf_token", m.group(0), found), text)
        low = text.lower()
        if "authorization" in low:
            text = _AUTH.sub(lambda m: self._keep(m, "bearer_token" if (m.group("scheme") or "").lower() == "bearer"
                                                  else "authorization", found), text)
        if "bearer" in low:
            text = _BEARER.sub(lambda m: self._keep(m, "bearer_token", found, bare=True), text)
        if "://" in text:
            text = _URL_PW.sub(lambda m: self._keep(m, "url_password", found), text)
        if scanner and len(text) >= 8:  # not on the bytes of base64 that decodes to no text
            text = self._scanned(text, found)
        if "--" in text:
            text = _sub_named(_FLAG, text, lambda m: self._keyed(m, found, False))
        if "=" in text or ":" in text:
            text = _sub_named(_KEYED, text, lambda m: self._keyed(m, found, code))
        return text

    def _scanned(self, text: str, found) -> str:
        """What detect-secrets' detectors and the kit's rules for what it lacks find (kit/report/scanner.py)."""
        spans = scan(text)
        if not spans:
            return text
        markers = [m.span() for m in MARKER_RE.finditer(text)]
        out, at = [], 0
        for start, end, kind in spans:
            value = text[start:end]
            if (any(s < end and start < e for s, e in markers) or _REFERENCE.fullmatch(value)
                    or MARKER_RE.search(value)):
                continue
            out += [text[at:start], self._mark(kind, value, found)]
            at = end
        return "".join(out) + text[at:]

    def _keep(self, m: re.Match, kind: str, found, bare: bool = False) -> str:
        """Replace the `value` group of a match whose other parts stay."""
        value = m.group("value")
        if (not value or MARKER_RE.search(value) or _REFERENCE.fullmatch(value)
                or value.lower() in ("bearer", "basic", "token", "digest", "apikey")
                or (bare and not re.search(r"[0-9\-._~+/=]", value))):
            return m.group(0)
        start = m.start("value") - m.start()
        return m.group(0)[:start] + self._mark(kind, value, found) + m.group(0)[start + len(value):]

    def _keyed(self, m: re.Match, found, code: bool) -> str:
        name, value = m.group("name"), m.group("value")
        tainted = name in self.secret_names
        if not (tainted or is_secret_name(name)) or name.lower() in ("authorization", "proxy-authorization"):
            return None  # not a secret's name: what follows it is read on its own
        opening, inner, _ = _unquote(value)
        gap = m.groupdict().get("gap") or ""
        if "\n" in gap and inner.isalpha() and not m.string[:m.start("gap")].endswith("\\"):
            return None  # `--add-to-git-credential` ending a line: a switch, and the next line's first word no value
        if not opening:
            if m.groupdict().get("listsep"):  # ['--api-key', api_key]: a variable
                return m.group(0)
            if m.groupdict().get("colon") is not None:
                inner = inner.rstrip()
                if not name.isupper() and re.search(r"\s", inner.strip()):
                    return m.group(0)  # "Token: what the tokenizer returns": prose, not a value
            line = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()].lstrip()
            in_code = code and not line.startswith(("!", "%"))
            after = m.string[m.start("value") + len(value.rstrip()):][:1]
            if (after and after in "([") or (in_code and _CODE_NAME.fullmatch(inner)):
                return m.group(0)  # a call, a subscript, a Python name
        if m.string.startswith("<redacted:", m.end()):
            return m.group(0)  # `session=<marker>`: the value is what a rule already took
        stripped = inner.strip()
        if re.fullmatch(r"\d+(?:\.\d+)?", stripped) and name.lower().endswith("token"):
            return None  # a count: sglang's `#token: 3219`, `num_token=512`
        if (not stripped or MARKER_RE.fullmatch(stripped) or _REFERENCE.fullmatch(stripped)
                or stripped.lower() in ("bearer", "basic", "token", "digest", "apikey", "negotiate")):
            return m.group(0)  # `Authorization: Bearer <marker>`: the scheme stays (the _AUTH rule took the value)
        start = m.start("value") - m.start() + len(opening)
        kind = self.secret_names[name] if tainted and not is_secret_name(name) else _kind_for_name(name)
        return m.group(0)[:start] + self._mark(kind, inner, found) + m.group(0)[start + len(inner):]

    # -- encoded forms

    def _decoded(self, text: str, depth: int, found: list | None) -> str:
        if depth >= _MAX_DEPTH:
            return text
        if "%" in text:
            text = _PCT_RUN.sub(lambda m: self._pct(m.group(0), depth, found), text)
        return _B64_RUN.sub(lambda m: self._b64(m.group(0), depth, found), text)

    def _pct(self, run: str, depth: int, found) -> str:
        for decode in (unquote, unquote_plus):
            decoded = decode(run)
            if decoded == run:
                continue
            inner: list = []
            redacted = self._redact_plain(decoded, depth=depth + 1, found=inner)
            if inner:
                for kind, value in inner:
                    self._mark(kind, value, found)
                return redacted
        return run

    def _b64(self, run: str, depth: int, found) -> str:
        inner = self._b64_secrets(run, depth)
        if not inner:
            return run
        for kind, value in inner:
            self._mark(kind, value, found)
        return f"<redacted:{inner[0][0]}>"

    def _b64_secrets(self, run: str, depth: int) -> list:
        core = run.rstrip("=")
        std, url = bool(re.search(r"[+/]", core)), bool(re.search(r"[-_]", core))
        candidates = [core] if not (std and url) else (
            [p for p in re.split(r"[-_]", core) if len(p) >= 12] + [p for p in re.split(r"[+/]", core) if len(p) >= 12])
        for cand in candidates:
            urlsafe = "-" in cand or "_" in cand
            for offset in range(4 if len(cand) < 200_000 else 1):
                part = cand[offset:]
                part = part[: len(part) - (len(part) % 4 == 1)]
                if len(part) < 12:
                    break
                try:
                    raw = base64.b64decode(part + "=" * (-len(part) % 4), altchars=b"-_" if urlsafe else None,
                                           validate=True)
                except (binascii.Error, ValueError):
                    continue
                decoded = raw.decode("utf-8", "replace")
                inner: list = []
                if _printable(decoded):
                    self._redact_plain(decoded, depth=depth + 1, found=inner)
                else:
                    self._rules(decoded, inner, scanner=False)
                if inner:
                    return inner
        return []

    # -- views: what a reader sees of coloured text, markup, JSON inside a string

    def _view_check(self, text: str, kind: str) -> str:
        """Secrets that only show once ANSI colours, tags or Markdown marks are gone (`kind` says which):
        out by value, else the markup goes with them."""
        view = _VIEWS[kind]
        found = self._detect(view(text))
        if not found:
            return text
        for secret_kind, value in found:
            self._remember(secret_kind, value)
            self.counts[secret_kind] += 1
        text = self._known(text, kind == "html", force=found, count=False)
        if not self._detect(view(text)):
            return text
        plain = self._redact_plain(view(text))
        return f"<pre>{html.escape(plain, quote=False)}</pre>" if kind == "html" else plain

    def _embedded_json(self, text: str, code: bool) -> str:
        stripped = text.strip()
        if code or len(stripped) < 2 or stripped[0] + stripped[-1] not in ("{}", "[]") or len(text) > 5_000_000:
            return text
        try:
            obj = json.loads(stripped)
        except ValueError:
            return text
        before = sum(self.counts.values())
        new = self._walk(obj, self.first, "", False)
        return json.dumps(new) if sum(self.counts.values()) != before else text

    def _html(self, text: str) -> str:
        parts = _HTML_SPLIT.split(text)
        for i, part in enumerate(parts):
            if not part:
                continue
            if i % 2 == 0:  # text between tags: redact what it reads as
                plain = html.unescape(part)
                redacted = self._redact_plain(plain)
                if redacted != plain:
                    parts[i] = html.escape(redacted, quote=False)
            elif part[:7].lower().startswith(("<script", "<style")):
                parts[i] = self._redact_plain(part)
            else:  # a tag or comment: markers escaped, they sit in attribute values
                parts[i] = _ESCAPE_MARKER.sub(r"&lt;redacted:\1&gt;", self._redact_plain(part))
        return self._view_check("".join(parts), "html")

    # -- known values, everywhere

    def _known(self, text: str, html_mode: bool, force: list | None = None, count: bool = True) -> str:
        values = dict(self.values)
        for kind, value in force or ():
            values.setdefault(value.strip(), kind)
        if not values or not text:
            return text
        for value, kind in values.items():
            if len(value) < 3:
                continue
            marker = f"&lt;redacted:{kind}&gt;" if html_mode else f"<redacted:{kind}>"
            forms = {value, html.escape(value), html.escape(value, quote=False), json.dumps(value)[1:-1],
                     quote(value, safe=""), quote_plus(value), quote(value)}
            for form in sorted(forms, key=len, reverse=True):
                if form in text:
                    text = self._replace_outside_markers(text, form, marker, kind, count)
            if "%" in text:
                text = _PCT_RUN.sub(lambda m, v=value, k=kind: self._pct_known(m.group(0), v, k, count), text)
            if len(value) >= 6:
                text = self._b64_known(text, value, marker, kind, count)
        return text

    def _b64_known(self, text: str, value: str, marker: str, kind: str, count: bool) -> str:
        for core in _b64_cores(value):
            while core in text:
                i = text.index(core)
                start, end = i, i + len(core)
                while start > 0 and _B64_CHAR.match(text[start - 1]):
                    start -= 1
                while end < len(text) and _B64_CHAR.match(text[end]):
                    end += 1
                text = text[:start] + marker + text[end:]
                if count:
                    self.counts[kind] += 1
        return text

    def _pct_known(self, run: str, value: str, kind: str, count: bool) -> str:
        decoded = unquote(run)
        if value not in decoded:
            return run
        if count:
            self.counts[kind] += decoded.count(value)
        return decoded.replace(value, f"<redacted:{kind}>")

    def _replace_outside_markers(self, text: str, form: str, marker: str, kind: str, count: bool) -> str:
        pieces, markers = MARKER_RE.split(text), MARKER_RE.findall(text)
        if count:
            self.counts[kind] += sum(p.count(form) for p in pieces)
        pieces = [p.replace(form, marker) for p in pieces]
        return pieces[0] + "".join(m + p for m, p in zip(markers, pieces[1:], strict=True))


def _sub_named(pattern: re.Pattern, text: str, fn) -> str:
    """`pattern.sub(fn, text)`, except that where `fn` returns None (a name that is not a secret's)
    the search goes on right after the name, so `{'log': "api_key='v'"}` still finds `api_key`."""
    out, pos, done = [], 0, 0
    while True:
        m = pattern.search(text, pos)
        if m is None:
            break
        new = fn(m)
        if new is None:
            pos = m.end("name")
            continue
        out += [text[done:m.start()], new]
        done = pos = m.end() if m.end() > m.start() else m.end() + 1
    return "".join(out) + text[done:] if out else text


_ESCAPE_MARKER = re.compile(r"<redacted:([a-z0-9_]+)>")


def _drop_broken_images(nb: dict) -> None:
    """An image whose base64 held a secret lost it to a marker: a line of text stands in for it."""
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            for mime in [m for m in data if m.startswith("image/") and m != "image/svg+xml"]:
                if isinstance(data[mime], str) and MARKER_RE.search(data[mime]):
                    del data[mime]
                    data.setdefault("text/plain", "[image removed: it held a secret]")


def secret_count(counts: Counter) -> int:
    """How many secrets a Counter of kinds holds (host placeholders are not secrets)."""
    return sum(n for kind, n in counts.items() if kind not in HOST_KINDS)


def redact(text: str, *, hosts: bool = False) -> tuple[str, Counter]:
    """`text` with every secret replaced by ``<redacted:KIND>``, and how many of each kind (never the values)."""
    r = Redactor(hosts=hosts)
    return r.text(text), r.counts


def redact_value(value, *, hosts: bool = False):
    """A copy of a JSON-like value (dicts, lists, strings) with every string redacted, and the counts by kind."""
    r = Redactor(hosts=hosts)

    def walk(v):
        if isinstance(v, str):
            return r.text(v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        return v

    return walk(value), r.counts


def masked_note(counts: Counter) -> str:
    """``masked 2 secret values (api_key, env_secret)``, or "" when none was."""
    n = secret_count(counts)
    kinds = ", ".join(sorted(k for k in counts if k not in HOST_KINDS))
    return f"masked {n} secret value{'s' if n != 1 else ''} ({kinds})" if n else ""


def redact_notebook(nb, *, hosts: bool = False):
    """A redacted deep copy of an nbformat notebook (every string in it), and the counts by kind."""
    import nbformat

    r = Redactor(hosts=hosts)
    return nbformat.from_dict(redact_notebooks([nb], r)[0]), r.counts


def redact_notebooks(nbs: list, r: Redactor) -> list[dict]:
    """Several notebooks with one Redactor: values and hosts found in one are removed from all."""
    joined = [_joined(nb) for nb in nbs]
    learn(r, joined)
    firsts = [r.notebook_first(nb) for nb in joined]
    return [r.notebook_second(nb) for nb in firsts]


_MULTILINE = ("source", "text")


def _joined(nb) -> dict:
    """Multi-line fields stored as lists of lines (raw .ipynb JSON) joined, so a secret is one string."""
    def join(obj, key=""):
        if isinstance(obj, dict):
            return {k: join(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            if obj and all(isinstance(x, str) for x in obj) and (
                    key in _MULTILINE or key.startswith(("text/", "image/")) or key.endswith(("javascript", "latex"))):
                return "".join(obj)
            return [join(v) for v in obj]
        return obj
    return join(dict(nb))
