"""What survives the rules: long random-looking strings no rule removed, by place (never by value).

A secret whose shape no rule knows, under a name no policy calls secret, stays in the
report. Many such secrets are long and random, so after the rules every string of the
redacted notebooks is read once more with detect-secrets' entropy measure
(``scanner.high_entropy``): each hit is listed by where it is (notebook, cell, output,
MIME type), so the person who shares the page can look there first. ``strict`` removes
them too (``<redacted:high_entropy>``, and every other form of them, as for any secret).
Images, plotly's binary arrays (``bdata``), ``data:`` URIs and widget model ids
(``model_id``, ``IPY_MODEL_...``) are not read: they are random by nature and hold no text.
"""

from __future__ import annotations

from collections import Counter

from .redaction import MARKER_RE, Redactor
from .scanner import high_entropy

__all__ = ["survivors"]

_SKIP_KEYS = {"bdata", "image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "model_id"}


def survivors(nbs: list[dict], names: list[str], redactor: Redactor, *, strict: bool = False) -> tuple[list[str], int]:
    """The places of long random-looking strings in the redacted notebooks, in order (each once, with
    `` (N strings)`` when it holds more than one), and how many strings in all.

    With `strict` they are replaced in place by ``<redacted:high_entropy>`` and become
    secrets of the redactor (so `Redactor.second` removes their other forms).
    """
    places: Counter = Counter()
    for nb, name in zip(nbs, names, strict=True):
        for i, cell in enumerate(nb.get("cells") or []):
            where = f"{name} cell {i + 1}"
            for key in ("source", "metadata", "attachments"):
                if key in cell:
                    cell[key] = _walk(cell[key], f"{where} {key}", places, redactor, strict)
            for k, output in enumerate(cell.get("outputs") or []):
                kind = "" if output.get("data") else f" ({output.get('output_type', 'output')})"
                cell["outputs"][k] = _walk(output, f"{where} output {k + 1}{kind}", places, redactor, strict)
        if "metadata" in nb:
            nb["metadata"] = _walk(nb["metadata"], f"{name} notebook metadata", places, redactor, strict)
    return [f"{place} ({n} strings)" if n > 1 else place for place, n in places.items()], sum(places.values())


def _walk(obj, place: str, places: Counter, redactor: Redactor, strict: bool, mime: str = ""):
    if isinstance(obj, str):
        return _check(obj, f"{place} {mime}".rstrip(), places, redactor, strict)
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in _SKIP_KEYS:
                out[key] = value
                continue
            sub = key if isinstance(key, str) and "/" in key and not mime else mime
            out[key] = _walk(value, place, places, redactor, strict, sub)
        return out
    if isinstance(obj, list):
        return [_walk(v, place, places, redactor, strict, mime) for v in obj]
    return obj


def _check(text: str, place: str, places: Counter, redactor: Redactor, strict: bool) -> str:
    if len(text) < 20 or (text.startswith("IPY_MODEL_") and len(text) < 64):  # a widget's reference to another
        return text
    markers = [m.span() for m in MARKER_RE.finditer(text)]
    spans = [(s, e) for s, e in high_entropy(text)
             if "base64," not in text[max(0, s - 12):s] and not any(a < e and s < b for a, b in markers)]
    if not spans:
        return text
    places[place] += len(spans)
    if not strict:
        return text
    out, at = [], 0
    for s, e in spans:
        redactor.remember_value("high_entropy", text[s:e])
        redactor.counts["high_entropy"] += 1
        out += [text[at:s], "<redacted:high_entropy>"]
        at = e
    return "".join(out) + text[at:]
