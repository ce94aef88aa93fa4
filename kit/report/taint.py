"""Value tainting: names and values that hold a secret although nothing in their own text says so.

Before the rules run, every string of every notebook of a report is read once for

- **neutral names that hold a secret**: a variable given to a secret-looking flag or key
  by reference, ``--api-key $K``, ``--api-key "${SGL_AUTH}"``, ``API_KEY=$CREDS``,
  ``Client(api_key=K)``, ``["--api-key", K]``, ``f"--api-key {K}"``,
  ``os.environ["HF_TOKEN"] = K``; and a variable assigned from a secret-looking
  environment variable, ``key = os.environ["SGLANG_API_KEY"]`` (also ``.get(...)``,
  ``os.getenv(...)``). The rules then treat ``K`` like a secret-looking name: its value in
  ``K=...``, ``export K=...``, ``K = "..."`` goes, and from there everywhere (below);
- **a secret shown by itself**: a code cell whose last line is such a variable, or
  ``print(it)`` / ``display(it)``: its output is the value.

Every value a rule removes is *tainted*: ``Redactor`` then removes it wherever else it
occurs, in prose, in a neutral variable, in another cell or notebook, plain, HTML- or
JSON-escaped, percent-encoded or inside base64. The values come from wherever a rule saw
them beside a secret-looking name: the server's environment as a notebook shows it
(``env``, ``/proc/PID/environ``, ``os.environ``), argv ``--api-key``, the ``server_args``
``api_key``, ``/server_info``, a ``.netrc`` line. (The target's environment reader,
``kit/_remote/processes.py``, masks such values on the target, so the kit itself never
carries them.)
"""

from __future__ import annotations

import keyword
import re

from kit._secrets import is_secret_name

__all__ = ["learn"]

_VAR = r"[A-Za-z_][A-Za-z0-9_]*"
_SHELL_REF = re.compile(
    r"(?:(?<![\w-])--(?P<flag>[A-Za-z0-9][\w-]*)(?:=|[ \t]+)|(?<![\w.$-])(?P<name>[A-Za-z_][\w.-]*)[ \t]*[:=][ \t]*)"
    r"[\"']?\$\{?(?P<var>" + _VAR + r")\}?")
_CODE_REF = re.compile(
    r"(?:(?<![\w.])(?P<name>" + _VAR + r")[ \t]*=(?!=)[ \t]*"
    r"|[\"']--(?P<flag>[A-Za-z0-9][\w-]*)[\"'][ \t]*,[ \t]*"
    r"|\[[ \t]*[\"'](?P<key>\w+)[\"'][ \t]*\][ \t]*=(?!=)[ \t]*"
    r"|--(?P<fflag>[A-Za-z0-9][\w-]*)(?:=|[ \t]+)\{)"
    r"(?P<var>" + _VAR + r")(?![\w.(\[])")
_FROM_ENV = re.compile(
    r"(?<![\w.])(?P<var>" + _VAR + r")[ \t]*=[ \t]*os\.(?:environ[ \t]*\[|environ\.get[ \t]*\(|getenv[ \t]*\()"
    r"[ \t]*[\"'](?P<name>\w+)[\"']")
_NOT_VARS = {"None", "True", "False", "self", "args", "kwargs", "os", "env", "environ"}


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def learn(redactor, objs) -> None:
    """Add the neutral names that hold a secret, and the secrets shown alone, of these notebooks or strings."""
    names = redactor.secret_names
    for obj in objs:
        for text in _strings(obj):
            if "$" in text:
                for m in _SHELL_REF.finditer(text):
                    _add(names, m.group("var"), m.group("flag") or m.group("name"))
            if "=" in text or "," in text or "{" in text:
                for m in _CODE_REF.finditer(text):
                    _add(names, m.group("var"), m.group("name") or m.group("flag") or m.group("key")
                         or m.group("fflag"))
            if "os." in text:
                for m in _FROM_ENV.finditer(text):
                    _add(names, m.group("var"), m.group("name"))
    for obj in objs:
        if isinstance(obj, dict):
            for cell in obj.get("cells") or []:
                _shown(redactor, cell)


def _add(names: dict, var: str, holder: str | None) -> None:
    if (holder and is_secret_name(holder) and var not in _NOT_VARS and not keyword.iskeyword(var)
            and not is_secret_name(var) and len(var) <= 64):
        names.setdefault(var, "secret_variable")


_SHOWN = re.compile(r"(?:print|display)?\(?[ \t]*(?P<var>" + _VAR + r")[ \t]*\)?[ \t]*;?")


def _shown(redactor, cell: dict) -> None:
    """A code cell that shows a secret variable by itself: its output is the secret's value."""
    if cell.get("cell_type") != "code" or not isinstance(cell.get("source"), str):
        return
    lines = [ln for ln in cell["source"].splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    m = _SHOWN.fullmatch(lines[-1].strip()) if lines else None
    if not m or not (m.group("var") in redactor.secret_names or is_secret_name(m.group("var"))):
        return
    for output in cell.get("outputs") or []:
        texts = [output.get("text")] + [(output.get("data") or {}).get("text/plain")]
        for text in texts:
            if isinstance(text, list):
                text = "".join(text)
            if isinstance(text, str) and text.strip():
                value = text.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                if "\n" not in value:
                    redactor.remember_value("secret_variable", value)
