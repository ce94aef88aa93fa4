"""One replica of a fleet, as listed: where its server answers and how the kit reaches its machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Member"]


@dataclass
class Member:
    """One replica: ``name`` as the tables show it, ``url`` its sglang server's HTTP address, ``target`` the
    kit target whose process is read (None: HTTP only), ``role`` regular, prefill or decode, ``source``
    where it was listed (list, router, k8s), ``facts`` what that source already said of it (the router's
    health, load and labels; the pod's image, args, env and node)."""

    name: str
    url: str | None
    target: str | None = None
    port: int | None = None
    role: str = "regular"
    source: str = "list"
    facts: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "target": self.target, "port": self.port, "role": self.role,
                "source": self.source, "facts": self.facts}
