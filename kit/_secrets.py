"""What a secret-looking name is: the one policy the whole kit uses.

A variable, key, field or flag name is *secret-looking* when its last word (words split at
anything that is not a letter or digit; ``apiKey`` is one word) is

- or ends with ``token``, ``secret``, ``password``, ``passwd``, ``apikey`` (``HF_TOKEN``,
  ``api_token``, ``PGPASSWORD``, ``ssl_keyfile_password``, ``x-apikey``);
- ``pass``, ``pwd``, ``pw``, ``auth``, ``authorization``, ``authn``, ``authz``, ``cred``,
  ``creds``, ``credential``, ``credentials`` or ``cookie`` (``SGL_AUTH``, ``CREDS``, ``DB_PW``);
- ``key`` after ``api``, ``secret``, ``private``, ``access``, ``service``, ``ssh``,
  ``license``, ``master``, ``client``, ``signing``, ``encryption``, ``auth``, ``admin``,
  ``app``, ``account``, ``session`` or ``deploy`` (``admin_api_key``, ``x-api-key``,
  ``AWS_SECRET_ACCESS_KEY``), or any upper-case ``KEY`` (``SERVICE_KEY``, ``NGC_KEY``): a
  lower-case ``sort_key`` or ``cache_key`` is no secret;

optionally followed by a number or ``value``/``val``/``str``/``b64`` (``API_KEY_2``).
A last word that says what the value is about is no secret: ``SGLANG_API_KEY_FILE``,
``hf_token_path``, ``bos_token_id``, ``tbo_token_distribution_threshold``; nor are counts
and tokenizers (``max_total_tokens``, ``TOKENIZERS_PARALLELISM``, ``tokenizer_path``,
``tiktoken``) or ``ssl_keyfile``.

The same policy masks the value of a secret-named flag in an argv list (``--api-key V``,
``--api-key=V``: :func:`mask_argv`) and the password of a URL (``scheme://user:PASSWORD@host``:
:data:`URL_PASSWORD`, :func:`mask_url`), wherever the kit keeps or shows them.

Users: :func:`mask_named` (a server's ``/server_info``, what the CLI prints as JSON), :func:`mask_fields`
(the ``server_args`` of a log or a saved ``/server_info``, the flags of a launch command), :func:`mask_argv`
(a server's command line as the kit shows it), the target's environment reader (``kit/target.py`` sends :data:`SECRET_NAME_PATTERN`
to ``kit/_remote/processes.py``, which masks there, so the value never leaves the target),
the hardware reader and the doctor's evidence (:func:`redact_env`), and the report
(``kit/report/redaction.py``).
"""

from __future__ import annotations

import re

__all__ = ["MASK", "SECRET_NAME_PATTERN", "URL_PASSWORD", "is_secret_name", "mask_argv", "mask_fields", "mask_named",
           "mask_url", "redact_env"]

_KEY_AFTER = "api|secret|private|access|service|ssh|license|master|client|signing|encryption|auth|admin|app|account" \
    "|session|deploy"
_LAST_WORD = (r"(?:[a-z0-9]*(?:token|secret|password|passwd|apikey)|pass|pwd|pw|auth|authorization|authn|authz"
              r"|creds?|credentials?|cookie|(?-i:[A-Z0-9]*KEY)|(?:" + _KEY_AFTER + r")[^a-z0-9]?key)")
# standard-library `re`, Python 3.6 compatible: kit/_remote scripts receive it in their request
SECRET_NAME_PATTERN = (r"(?i)^(?!(?:.*[^a-z0-9])?(?:tiktoken|monkey|hotkey|turkey|donkey)$)(?:.*[^a-z0-9])?"
                       + _LAST_WORD + r"(?:[^a-z0-9]+(?:value|val|str|b64|\d+))?$")
_SECRET_NAME = re.compile(SECRET_NAME_PATTERN, re.S)
MASK = "<redacted>"
# scheme://user:PASSWORD@host: `keep` stays, `value` is the password (to the URL's last `@`, so an unencoded
# `/` or `@` in it goes too)
URL_PASSWORD = re.compile(r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@'\"<>\\]*:)(?P<value>[^\s'\"<>\\\x00-\x1f]*)@"
                          r"(?=[A-Za-z0-9\[])")


def is_secret_name(name: str) -> bool:
    """Whether a value kept under `name` is to be treated as a secret (see the module's docstring)."""
    return bool(name) and len(name) <= 200 and _SECRET_NAME.match(name) is not None


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """The variables, with the value of every secret-looking name (``SGLANG_API_KEY``) replaced by ``<redacted>``
    and the password of every URL in the others (``HF_ENDPOINT=https://user:<redacted>@mirror``)."""
    return {k: (MASK if v and is_secret_name(k) else mask_url(v)) for k, v in env.items()}


def mask_url(text: str) -> str:
    """`text` with the password of each ``scheme://user:PASSWORD@host`` replaced by ``<redacted>``."""
    if not isinstance(text, str) or "://" not in text:
        return text
    return URL_PASSWORD.sub(lambda m: m.group("keep") + MASK + "@" if m.group("value") else m.group(0), text)


def mask_fields(fields: dict) -> dict:
    """A flat mapping of fields (a server's arguments, a launch's flags) with the text under each secret-looking
    name ``<redacted>`` and URL passwords masked; every other value is the same object."""
    return {k: (MASK if isinstance(v, str) and v and isinstance(k, str) and is_secret_name(k) else mask_url(v))
            for k, v in fields.items()}


def mask_argv(argv: list[str]) -> list[str]:
    """A command line with the value of every secret-named flag (``--api-key V``, ``--api-key=V``,
    ``--admin-api-key``, ``--ssl-keyfile-password``) replaced by ``<redacted>``, and URL passwords masked."""
    out: list[str] = []
    hide = False
    for word in argv:
        if not isinstance(word, str):
            out.append(word)
            hide = False
            continue
        if hide and word and not (word.startswith("-") and len(word) > 1):
            out.append(MASK)
            hide = False
            continue
        name, eq, value = word.partition("=")
        hide = word.startswith("-") and not eq and is_secret_name(name.lstrip("-"))
        if word.startswith("-") and eq and value and is_secret_name(name.lstrip("-")):
            word = f"{name}={MASK}"
        out.append(mask_url(word))
    return out


# A mapping that names a flag, field or variable under one key and holds its value under another
# ({"option": "--api-key", "value": "sk-..."}): these keys name it, those hold the value.
_NAMING_KEYS = ("option", "flag", "name", "field", "dest", "key", "variable")
_VALUE_KEYS = ("value", "text", "raw", "values", "default")


def mask_named(value):
    """A copy of a JSON-like value in which every value kept under a secret-looking name is ``<redacted>``:
    a key (``{"api_key": "sk-..."}``), a mapping that names a secret flag beside its value
    (``{"option": "--api-key", "value": "sk-..."}``), or the word after a secret flag in a list of words
    (``["--api-key", "sk-..."]``); and every URL's password. Only text is a secret: None, numbers and booleans stay."""
    if isinstance(value, dict):
        named = any(isinstance(value.get(k), str) and is_secret_name(value[k].lstrip("-")) for k in _NAMING_KEYS)
        out = {}
        for k, v in value.items():
            secret = (isinstance(k, str) and is_secret_name(k)) or (named and k in _VALUE_KEYS)
            out[k] = MASK if secret and isinstance(v, str) and v else mask_named(v)  # a count stays a count
        return out
    if isinstance(value, (list, tuple)):
        return [mask_named(v) for v in mask_argv(list(value))]
    return mask_url(value)
