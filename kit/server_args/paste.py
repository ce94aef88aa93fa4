"""A whole issue body, chat message or runbook dump, split into the pieces of evidence it holds.

``split_paste(text)`` strips Markdown (keeping line numbers), then finds, each with its lines:
``server_args`` lines, ``launch`` commands (shell, docker, YAML, systemd, ``Engine(...)``),
``decode`` / ``prefill`` batch lines, sglang's ``notice`` lines, other ``log`` lines,
``nvidia_smi`` (the table) and ``nvidia_smi_csv``, ``topo`` (``topo -m``) and ``p2p``
(``topo -p2p``), ``check_env`` (``python -m sglang.check_env``), ``environ`` (``env``
dumps), ``config_json`` (a model's config.json), ``server_info`` (a saved /server_info) and
``bench_serving`` results. Lines inside code blocks that fit none are ``not_understood``.
A shell prompt line right above a piece (``$ nvidia-smi``, ``# nvidia-smi``,
``user@host:~$ nvidia-smi``) is the command that printed it: the piece's ``command``. ``versions``
are the sglang versions the text states (kit.server_args.stated).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .decode_stats import parse_decode_stats
from .log import log_notices
from .markdown import strip_markdown
from .stated import VersionStatement, stated_versions

__all__ = ["LOG_KINDS", "Paste", "Piece", "split_paste"]

LOG_KINDS = ("server_args", "decode", "prefill", "notice", "log")

_LAUNCH = re.compile(r"sglang[. ]launch_server|-m\s+sglang(?:\.cli\.main)?\s+serve\b|\bsglang\s+serve\b|launch_server\.py|"
                     r"(?<![\w.])(?:sgl|sglang)\.Engine\s*\(|-m\s+sglang\.bench_(?:one_batch|offline_throughput)")
_SHELLISH = re.compile(r"^\s*(?:#!|export\s|[A-Za-z_]\w*=|#|cd\s|source\s|set\s|exec\s|docker\s|kubectl\s)")
_CONTINUED = re.compile(r"\\\s*$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?[A-Z][A-Z0-9_]*=\S*")
# Python's own warning or error line (`.../launch_server.py:54: UserWarning: 'python -m sglang.launch_server' is
# still supported ...`): a log line that quotes a launch, not one
_PY_WARNING = re.compile(r"^\s*\S+\.py:\d+: \w*(?:Warning|Error)\b")
# ... and its usage line with placeholders (`  Example: sglang serve --model-path <model> [options]`)
_USAGE = re.compile(r"^\s*(?:Example|Usage)\s*:.*<[\w-]+>", re.I)
_LOG_LINE = re.compile(r"^\s*\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|^\s*\[\d\d:\d\d:\d\d|^\s*(?:INFO|WARNING|ERROR)[ :]")
_CHECK_ENV_KEYS = re.compile(r"^(?:Python|CUDA available|GPU [\d,]+(?: Compute Capability)?|CUDA_HOME|NVCC|"
                             r"CUDA Driver Version|PyTorch|sglang|sgl_kernel|sgl-kernel|flashinfer(?:_python)?|triton|"
                             r"transformers|torchao|numpy|aiohttp|fastapi|hf_transfer|huggingface_hub|interegular|"
                             r"modelscope|orjson|outlines|packaging|psutil|pydantic|python-multipart|multipart|zmq|"
                             r"pyzmq|uvicorn|uvloop|vllm|xgrammar|openai|tiktoken|anthropic|litellm|decord|"
                             r"NVIDIA Topology|Hypervisor vendor|ulimit soft|ROCM_HOME|HIPCC|ROCM Driver Version|"
                             r"flashinfer_cubin|flashinfer_jit_cache|torch_memory_saver|xformers|sentencepiece|"
                             r"nvidia-cudnn-frontend|cuda-python|apache-tvm-ffi|Mooncake|nixl|einops|tqdm)\s*:")
_TOPO_HEAD = re.compile(r"^\s*GPU0(?:\s+GPU\d+)*(?:\s+NIC\d+)*\s+(?:CPU Affinity|NUMA Affinity)?")
_BENCH_HEAD = re.compile(r"=+\s*Serving Benchmark Result\s*=+|^\s*(?:Successful requests|Benchmark duration \(s\)|"
                         r"Output token throughput \(tok/s\)|Median TPOT \(ms\)|Request throughput \(req/s\))\s*:")
_CSV_HEAD = re.compile(r"^\s*(?:index|name|pci\.bus_id|uuid|memory\.total)(?:\s*,\s*[\w.\[\] ()/]+)+\s*$")
# A shell prompt and the command after it: `$ nvidia-smi`, `# nvidia-smi` (root), `% cmd` (zsh),
# `user@host:~$ cmd`, `(venv) root@box:/# cmd`, `PS C:\> cmd`.
_PROMPT_LINE = re.compile(r"^\s*(?:\([\w.@-]+\)\s*)?(?:[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s*[$#]|[$#%]|PS [^>\n]*>)\s+"
                          r"([\w./~-][^\n]*?)\s*$")


@dataclass
class Piece:
    kind: str
    start: int  # first line (1-based, in the paste)
    end: int  # last line
    text: str
    command: str | None = None  # the shell command a prompt line above it ran (`nvidia-smi`)
    prompt: int | None = None  # that prompt line

    @property
    def where(self) -> str:
        first = self.prompt or self.start
        return f"line {first}" if first == self.end else f"lines {first}-{self.end}"

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "start": self.start, "end": self.end}
        if self.command is not None:
            out.update(command=self.command, prompt=self.prompt)
        return out


@dataclass
class Paste:
    pieces: list[Piece] = field(default_factory=list)
    not_understood: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, first line)
    lines: int = 0
    text: str = ""  # the paste with Markdown stripped (same line numbers)
    versions: list[VersionStatement] = field(default_factory=list)  # the sglang versions it states

    def of(self, kind: str) -> list[Piece]:
        return [p for p in self.pieces if p.kind == kind]

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(p.kind for p in self.pieces))

    def several(self) -> bool:
        """Whether the text holds more than one kind of evidence (log lines count as one kind, and so
        do a launch and the variable assignments around it)."""
        family = {"environ": "launch", **{k: "log" for k in LOG_KINDS}}
        return len({family.get(k, k) for k in self.kinds}) > 1

    def log_text(self) -> str:
        """The paste with every line that is not a log line blanked (line numbers stay)."""
        keep = {n for p in self.pieces if p.kind in LOG_KINDS for n in range(p.start, p.end + 1)}
        return "\n".join(line if n in keep else "" for n, line in enumerate(self.text.split("\n"), 1))

    def summary(self) -> list[str]:
        """One line per piece found, then what was not understood."""
        out = [f"{p.kind} at {p.where}" for p in self.pieces]
        out += [f"not understood: {f'line {a}' if a == b else f'lines {a}-{b}'} ({first[:60]!r})"
                for a, b, first in self.not_understood]
        return out

    def to_dict(self) -> dict:
        return {"pieces": [p.to_dict() for p in self.pieces],
                "not_understood": [{"start": a, "end": b, "text": t} for a, b, t in self.not_understood],
                "versions": [v.to_dict() for v in self.versions]}


def split_paste(text: str) -> Paste:
    raw_lines = text.split("\n")
    fenced = _fenced_lines(raw_lines)
    clean = strip_markdown(text)
    lines = clean.split("\n")
    kind: list[str | None] = [None] * len(lines)
    _blocks(lines, kind, _fence_blocks(raw_lines))
    notices = {n.line for n in log_notices(clean)}
    for i, line in enumerate(lines):
        if kind[i] is not None or not line.strip():
            continue
        if "server_args=" in line:
            kind[i] = "server_args"
        elif "Decode batch" in line or ("#token:" in line and parse_decode_stats(line)):
            kind[i] = "decode"
        elif re.search(r"Prefill batch", line):
            kind[i] = "prefill"
        elif i + 1 in notices:
            kind[i] = "notice"
        elif _LOG_LINE.match(line):
            kind[i] = "log"
        elif _ENV_LINE.match(line) and not _CONTINUED.search(line):
            kind[i] = "environ"
    paste = Paste(lines=len(lines), text=clean, versions=stated_versions(clean))
    i = 0
    while i < len(lines):
        k = kind[i]
        if k is None:
            i += 1
            continue
        j = i
        while j + 1 < len(lines) and (kind[j + 1] == k and k not in ("server_args",)):
            j += 1
        paste.pieces.append(Piece(k, i + 1, j + 1, "\n".join(lines[i:j + 1])))
        i = j + 1
    _prompts(paste, lines, kind)
    _not_understood(paste, lines, kind, fenced)
    return paste


def _prompts(paste: Paste, lines: list[str], kind: list) -> None:
    """A prompt line right above a piece of output (a blank line may sit between) is the command
    that printed it. A launch is its own command line, so a prompt is never taken from it."""
    for piece in paste.pieces:
        if piece.kind == "launch":
            continue
        up = piece.start - 2  # the index of the line above
        if up >= 0 and not lines[up].strip() and kind[up] is None:
            up -= 1
        m = _PROMPT_LINE.match(lines[up]) if up >= 0 and kind[up] is None else None
        if m:
            piece.command, piece.prompt = m.group(1), up + 1
            kind[up] = "prompt"


def _fence_blocks(lines: list[str]) -> dict[int, int]:
    """Line index -> the index of the first line inside its code fence."""
    out, start = {}, None
    for i, line in enumerate(lines):
        if re.match(r"^\s{0,3}(?:>\s?)*(`{3,}|~{3,})", line):
            start = i + 1 if start is None else None
            continue
        if start is not None:
            out[i] = start
    return out


def _fenced_lines(lines: list[str]) -> set[int]:
    out, inside = set(), False
    for i, line in enumerate(lines):
        if re.match(r"^\s{0,3}(?:>\s?)*(`{3,}|~{3,})", line):
            inside = not inside
            continue
        if inside:
            out.add(i)
    return out


def _not_understood(paste: Paste, lines: list[str], kind: list, fenced: set[int]) -> None:
    i = 0
    while i < len(lines):
        if kind[i] is None and i in fenced and lines[i].strip():
            j = i
            while j + 1 < len(lines) and kind[j + 1] is None and (j + 1) in fenced:
                j += 1
            paste.not_understood.append((i + 1, j + 1, lines[i].strip()))
            i = j + 1
        else:
            i += 1


def _blocks(lines: list[str], kind: list, fences: dict[int, int]) -> None:
    """Multi-line pieces first: tables, JSON, benchmark results, check_env, launch commands."""
    n = len(lines)
    i = 0
    while i < n:
        line = lines[i]
        if "NVIDIA-SMI" in line and "Driver Version" in line:
            a = i - 1 if i and lines[i - 1].lstrip().startswith("+") else i
            a = a - 1 if a and re.search(r"\d\d:\d\d:\d\d \d{4}\s*$", lines[a - 1]) else a
            j = i
            while j + 1 < n and (lines[j + 1].lstrip().startswith(("|", "+")) or
                                 (not lines[j + 1].strip() and j + 2 < n and lines[j + 2].lstrip().startswith("+"))):
                j += 1
            _mark(kind, a, j, "nvidia_smi")
            i = j + 1
            continue
        if _CSV_HEAD.match(line):
            j = i
            while j + 1 < n and lines[j + 1].count(",") >= line.count(",") and lines[j + 1].strip():
                j += 1
            if j > i:
                _mark(kind, i, j, "nvidia_smi_csv")
                i = j + 1
                continue
        if _TOPO_HEAD.match(line) and re.search(r"GPU0\s+GPU1|GPU0\s+(?:X|CPU)", line + " " + (lines[i + 1] if i + 1 < n else "")):
            j = i
            while j + 1 < n and (re.match(r"^\s*(?:GPU|NIC|mlx)\w*\s", lines[j + 1]) or
                                 lines[j + 1].strip().startswith(("Legend", "X ", "SYS", "NODE", "PHB", "PXB", "PIX",
                                                                  "NV#", "OK", "CNS", "GNS", "TNS", "NS", "U ",
                                                                  "NIC Legend", "NIC", "X    =")) or
                                 (not lines[j + 1].strip() and j + 2 < n and lines[j + 2].strip().startswith(
                                     ("Legend", "X ", "NIC Legend", "NIC"))) or
                                 re.match(r"^\s+\w+\s+=", lines[j + 1])):
                j += 1
            block = "\n".join(lines[i:j + 1])
            p2p = re.search(r"^\s*GPU0\b.*\b(OK|CNS|GNS|TNS|NS)\b", block, re.M) and "NV" not in block.split()
            _mark(kind, i, j, "p2p" if p2p else "topo")
            i = j + 1
            continue
        if _BENCH_HEAD.search(line):
            j = i
            while j + 1 < n and (re.match(r"^\s*[\w ()/%.\-]+:\s*[\d.]+\s*$", lines[j + 1]) or
                                 re.match(r"^\s*[-=]{3,}", lines[j + 1]) or re.match(r"^\s*(?:Traffic|Max) ", lines[j + 1])):
                j += 1
            _mark(kind, i, j, "bench_serving")
            i = j + 1
            continue
        if _CHECK_ENV_KEYS.match(line.strip()) and i + 1 < n and _CHECK_ENV_KEYS.match(lines[i + 1].strip()):
            j = i
            while j + 1 < n and (_CHECK_ENV_KEYS.match(lines[j + 1].strip()) or
                                 (kind[j + 1] is None and lines[j + 1].strip() and
                                  re.match(r"^[\w .-]+: \S", lines[j + 1].strip()))):
                j += 1
            _mark(kind, i, j, "check_env")
            i = j + 1
            continue
        if line.lstrip().startswith("{"):
            end = _json_end(lines, i)
            if end is not None:
                try:
                    data = json.loads("\n".join(lines[i:end + 1]))
                except ValueError:
                    data = None
                if isinstance(data, dict):
                    k = "config_json" if ("architectures" in data or "model_type" in data) else \
                        "server_info" if ("tp_size" in data or "model_path" in data) else None
                    if k:
                        _mark(kind, i, end, k)
                        i = end + 1
                        continue
        if _LAUNCH.search(line) and "server_args=" not in line and not _LOG_LINE.match(line) \
                and not _PY_WARNING.match(line) and not _USAGE.match(line):
            a, j = _launch_extent(lines, i, kind, fences)
            _mark(kind, a, j, "launch")
            i = j + 1
            continue
        if re.match(r"^\s*(?:apiVersion|kind|services)\s*:", line):
            j = i
            while j + 1 < n and (not lines[j + 1].strip() or lines[j + 1].startswith((" ", "-", "\t")) or
                                 re.match(r"^[\w-]+\s*:", lines[j + 1]) or lines[j + 1].strip() == "---"):
                j += 1
            if re.search(r"\b(?:command|args)\s*:", "\n".join(lines[i:j + 1])):
                _mark(kind, i, j, "launch")
                i = j + 1
                continue
        if re.match(r"^\s*\[Service\]\s*$", line):
            j = i
            while j + 1 < n and lines[j + 1].strip() and not lines[j + 1].startswith("["):
                j += 1
            _mark(kind, i, j, "launch")
            i = j + 1
            continue
        i += 1


def _mark(kind: list, a: int, b: int, what: str) -> None:
    for k in range(a, b + 1):
        kind[k] = what


def _json_end(lines: list[str], i: int) -> int | None:
    depth, quote, esc = 0, False, False
    for j in range(i, min(len(lines), i + 5000)):
        for ch in lines[j]:
            if quote:
                esc, quote = (False, quote) if esc else (ch == "\\", ch != '"')
                continue
            if ch == '"':
                quote = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return j
    return None


_ARRAY_OPEN = re.compile(r"^\s*(?:(?:declare|local|readonly)\s+-a\s+)?[A-Za-z_]\w*\+?=\(")


def _array_above(lines: list[str], end: int, kind: list) -> int | None:
    """The line that opens the bash array whose assignment ends at line ``end`` (``)``), or None."""
    if not lines[end].rstrip().endswith(")"):
        return None
    for k in range(end, max(-1, end - 200), -1):
        if _ARRAY_OPEN.match(lines[k]):
            return k
        if kind[k] not in (None, "environ") or not lines[k].strip():
            return None
    return None


def _launch_extent(lines: list[str], i: int, kind: list, fences: dict[int, int]) -> tuple[int, int]:
    a = i
    if i in fences:  # inside a code block: the script is the block up to here
        a = fences[i]
        while a < i and kind[a] is not None:
            a += 1
    while a > 0 and kind[a - 1] in (None, "environ") and (a - 1 in fences) == (i in fences):
        opened = _array_above(lines, a - 1, kind)
        if opened is not None:  # a bash array (`ARGS=(` ... `)`) the command may expand
            a = opened
            continue
        if kind[a - 1] is not None:
            break
        if _CONTINUED.search(lines[a - 1]) or _SHELLISH.match(lines[a - 1]):
            a -= 1
            continue
        up = a - 1
        while up >= 0 and not lines[up].strip() and kind[up] is None:
            up -= 1  # blank lines inside a script: go on if a script line is above them
        if up < a - 1 and up >= 0 and kind[up] is None and _SHELLISH.match(lines[up]):
            a = up
            continue
        break
    while a < i and not lines[a].strip():
        a += 1
    j = i
    if "Engine(" in lines[i] or "Engine (" in lines[i]:
        depth = 0
        for j in range(i, len(lines)):
            depth += lines[j].count("(") - lines[j].count(")")
            if depth <= 0:
                break
        return a, j
    while j + 1 < len(lines) and (_CONTINUED.search(lines[j]) or re.match(r"^\s+--[\w-]", lines[j + 1]) or
                                  re.match(r"^\s*#\s*--", lines[j + 1])):
        j += 1
    return a, j
