"""Host names and IP addresses to consistent placeholders, for ``--redact-hosts``.

A host name is not a secret, so this is off unless asked for. When it is on, the same
host becomes the same placeholder everywhere in a report: ``host-1``, ``host-2`` for names,
``10.x.x.1``, ``10.x.x.2`` for IPv4 addresses, ``ipv6-1`` for IPv6 ones. Loopback
(``localhost``, ``127.*``, ``::1``), ``0.0.0.0`` and the kit's own target words (``lab``,
``local``) stay.

IP addresses are found anywhere. Names are found where they are certainly hosts: the host
of a URL, the host of ``user@host``, the value of ``host``/``hostname``/``--host``, names
given with `HostMap.add` (the notebooks' targets), and dotted names ending in a common
domain (``.com``, ``.net``, ``.org``, ``.io``, ``.ai``, ``.internal``...). A name seen once
is then replaced everywhere when it has a dot, a dash or a digit (``gpu-box-17``); a
one-word alias (``prod``) only where it stands as a host, so ordinary words stay.
"""

from __future__ import annotations

import re
from collections import Counter

__all__ = ["HostMap"]

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(r"(?<![\w.])(?<!==)" + rf"{_OCTET}(?:\.{_OCTET}){{3}}" + r"(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?=[0-9A-Fa-f:]*[A-Fa-f])(?:(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}"
                   r"|(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4})(?![\w:])")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NAME = rf"{_LABEL}(?:\.{_LABEL})*"
_URL_HOST = re.compile(rf"\b[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s/?#@'\"\\]*@)?(?P<h>{_NAME})"
                       r"(?=:\d|[/?#\s'\")\]>,;|]|$)")
_USER_HOST = re.compile(rf"(?<![\w.+/@-])[A-Za-z_][\w.-]*@(?P<h>{_NAME})(?![\w-])")
_KEYED_HOST = re.compile(rf"(?i)(?<![\w-])(?:--host(?:[ \t]+|=)|(?:hostname|host_name|host|nodename)(?:\\?[\"'])?"
                         rf"[ \t]*[:=][ \t]*)(?:(?P<q>\\?[\"'])(?P<h>{_NAME})(?P=q)|(?=[\w.-]*[\d-])(?P<h2>{_NAME})(?![\w(-]))")
_TLDS = ("com", "net", "org", "io", "ai", "co", "cloud", "internal", "corp", "intra", "intranet", "lan", "edu",
         "gov")
_FQDN = re.compile(rf"(?<![\w.@/-])(?<!import )(?<!from )(?P<h>(?:{_LABEL}\.)+(?:{'|'.join(_TLDS)}))(?![\w-]|\.\w)")
_KEEP = {"localhost", "localhost.localdomain", "lab", "local", "ip6-localhost", "0.0.0.0", "::", "::1",
         # words that stand for a host in examples and help text
         "host", "hostname", "server", "box", "machine", "remote", "target", "example.com", "your-host"}


def _host(m: re.Match) -> tuple[str, int]:
    """The host a context match found, and where it starts."""
    group = "h" if m.group("h") is not None else "h2"
    return m.group(group), m.start(group)


def _kept(name: str) -> bool:
    low = name.lower()
    return low in _KEEP or low.startswith("127.") or low.startswith("255.") or low.startswith("0.")


class HostMap:
    """Names and addresses seen, each with its placeholder, in order of first sight."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # host name (lower case) -> host-N
        self.global_names: set[str] = set()
        self.ips: dict[str, str] = {}
        self._pattern: re.Pattern | None = None

    def add(self, name: str) -> None:
        """Remember a host name (a target), if it is one."""
        name = name.strip().strip(".").lower()
        if _IPV4.fullmatch(name):
            return self._add_ip(name)
        if not name or _kept(name) or not re.fullmatch(_NAME, name) or not re.search(r"[a-z]", name):
            return
        if name not in self.names:
            self.names[name] = f"host-{len(self.names) + 1}"
            self._pattern = None
        if re.search(r"[.\-0-9]", name) and len(name) >= 3:
            if name not in self.global_names:
                self.global_names.add(name)
                self._pattern = None

    def add_target(self, target: str) -> None:
        """A kit target string: ``ssh://user@host:port``, ``user@host``, an alias, ``lab`` or ``local``."""
        t = re.sub(r"^[a-z]+://", "", target.strip())
        t = t.rsplit("@", 1)[-1]
        t = re.sub(r":\d+$", "", t).strip("[]")
        if _IPV4.fullmatch(t) or _IPV6.fullmatch(t):
            self._add_ip(t)
        else:
            self.add(t)

    def _add_ip(self, ip: str) -> None:
        ip = ip.lower()
        if _kept(ip) or ip in self.ips:
            return
        if ":" in ip:
            self.ips[ip] = f"ipv6-{sum(':' in k for k in self.ips) + 1}"
        else:
            self.ips[ip] = f"10.x.x.{sum(':' not in k for k in self.ips) + 1}"
        self._pattern = None

    def collect(self, text: str) -> None:
        for m in _IPV4.finditer(text):
            self._add_ip(m.group(0))
        if ":" in text:
            for m in _IPV6.finditer(text):
                self._add_ip(m.group(0))
        for regex in (_URL_HOST, _USER_HOST, _KEYED_HOST, _FQDN):
            for m in regex.finditer(text):
                self.add(_host(m)[0])

    def replace(self, text: str, counts: Counter | None = None) -> str:
        """Every known host in `text` by its placeholder."""
        if not (self.names or self.ips) or not text:
            return text
        counts = counts if counts is not None else Counter()

        def sub(m: re.Match) -> str:
            found = m.group(0)
            if found.lower() in self.ips:
                counts["ip_address"] += 1
                return self.ips[found.lower()]
            counts["hostname"] += 1
            return self.names[found.lower()]

        text = self._global().sub(sub, text)
        for regex in (_URL_HOST, _USER_HOST, _KEYED_HOST):
            text = regex.sub(lambda m: self._in_context(m, counts), text)
        return text

    def _in_context(self, m: re.Match, counts: Counter) -> str:
        host, start = _host(m)
        placeholder = self.names.get(host.lower())
        if placeholder is None or host.lower() in self.global_names:
            return m.group(0)
        counts["hostname"] += 1
        start -= m.start()
        return m.group(0)[:start] + placeholder + m.group(0)[start + len(host):]

    def _global(self) -> re.Pattern:
        if self._pattern is None:
            names = sorted(self.global_names, key=len, reverse=True)
            ips = sorted(self.ips, key=len, reverse=True)
            alternatives = []
            if names:
                alternatives.append(r"(?<![\w.-])(?:" + "|".join(map(re.escape, names)) + r")(?![\w-]|\.\w)")
            v4 = [ip for ip in ips if ":" not in ip]
            v6 = [ip for ip in ips if ":" in ip]
            if v4:
                alternatives.append(r"(?<![\w.])(?:" + "|".join(map(re.escape, v4)) + r")(?!\w|\.\d)")
            if v6:
                alternatives.append(r"(?<![\w:.])(?:" + "|".join(map(re.escape, v6)) + r")(?![\w:])")
            self._pattern = re.compile("|".join(alternatives) or r"(?!)", re.I)
        return self._pattern
