"""Launch commands (`python -m sglang.launch_server ...`, `sglang serve`, `--config`) as explicit fields."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from kit.errors import ParseError, RemoteFileError

from .flags import FlagSpec, FlagTable

_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")

__all__ = ["parse_command", "server_flags"]


_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def parse_command(
    argv: str | Iterable[str],
    flags: FlagTable,
    *,
    cwd: str | None = None,
    read_text: Any = None,
    strict: bool = True,
) -> dict[str, Any]:
    """The fields a launch command sets explicitly, by dest, with values typed like argparse would.

    Takes `python -m sglang.launch_server ...`, `sglang serve ...` (also as the
    `/proc/PID/cmdline` of a console script) or bare flags. `--config file.yaml` is merged
    the way sglang's ConfigArgumentMerger does it: the file's options go first, so flags on
    the command line win. The file is read with `read_text(path)`, else on the host of
    `flags.tree`, else locally; relative paths are taken from `cwd`.
    Unknown flags raise ParseError (position = index in argv) unless strict=False.
    """
    tokens = list(shlex.split(argv) if isinstance(argv, str) else argv)
    args = _server_args_tokens(tokens)
    args = _merge_config(args, flags, cwd, read_text)
    return _parse_tokens(args, flags, strict)


def server_flags(argv: str | Iterable[str]) -> list[str]:
    """The sglang flags of a launch command, without the interpreter, launcher or env assignments."""
    tokens = list(shlex.split(argv) if isinstance(argv, str) else argv)
    return [tok for tok, _ in _server_args_tokens(tokens)]


def _server_args_tokens(tokens: list[str]) -> list[tuple[str, int]]:
    indexed = list(zip(tokens, range(len(tokens)), strict=False))
    start = 0
    while start < len(tokens) and _ENV_ASSIGN.match(tokens[start]):
        start += 1  # `VAR=1 python -m ...`
    if start < len(tokens) and tokens[start].startswith("-") and tokens[start] != "-m":
        return indexed[start:]
    for j in range(start, len(tokens)):
        tok, nxt = tokens[j], tokens[j + 1 : j + 3]
        if tok == "-m" and nxt and nxt[0].endswith("launch_server"):
            return indexed[j + 2 :]
        if tok == "-m" and nxt[:1] in (["sglang"], ["sglang.cli.main"]) and nxt[1:] == ["serve"]:
            return _drop_model_type(indexed[j + 3 :])
        if posixpath.basename(tok) == "sglang" and nxt[:1] == ["serve"]:
            return _drop_model_type(indexed[j + 2 :])
        if posixpath.basename(tok) == "launch_server.py":
            return indexed[j + 1 :]
    raise ParseError(
        "not an SGLang launch command: no `-m sglang.launch_server` or `sglang serve` in it",
        position=0,
        hint="pass the server's argv (e.g. /proc/PID/cmdline split on NUL), or just its flags",
    )


def _drop_model_type(args: list[tuple[str, int]]) -> list[tuple[str, int]]:
    # `sglang serve` consumes --model-type before ServerArgs sees the rest (sglang/cli/serve.py).
    out, i = [], 0
    while i < len(args):
        tok = args[i][0]
        if tok == "--model-type":
            i += 2
            continue
        if not tok.startswith("--model-type="):
            out.append(args[i])
        i += 1
    return out


def _looks_like_option(tok: str, flags: FlagTable) -> bool:
    # argparse's _parse_optional: what is not an option is a value.
    if not tok.startswith("-") or len(tok) == 1:
        return False
    if flags.has_option(tok) or flags.has_option(tok.partition("=")[0]):
        return True
    if _NEGATIVE.match(tok):
        return False
    return " " not in tok


def _parse_tokens(args: list[tuple[str, int]], flags: FlagTable, strict: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        tok, pos = args[i]
        if tok == "--":
            break
        hit = _match(flags, tok, pos) if _looks_like_option(tok, flags) else None
        if hit is None:
            if strict:
                what = "unknown flag" if _looks_like_option(tok, flags) else "unexpected value"
                raise ParseError(
                    f"{what} {tok!r} at argv[{pos}] for sglang {flags.version or '?'}",
                    position=pos,
                    hint="is the flag table from the same sglang version as the server? strict=False skips it",
                )
            i += 1
            continue
        spec, opt, explicit = hit
        values, i = _take_values(spec, opt, explicit, args, i + 1, flags)
        _store(spec, opt, values, out, pos)
    return out


def _match(flags: FlagTable, tok: str, pos: int) -> tuple[FlagSpec, str, str | None] | None:
    try:
        return flags.match(tok)
    except ParseError as err:
        raise ParseError(err.message, position=pos, hint="argparse rejects ambiguous abbreviations") from None


def _take_values(
    spec: FlagSpec, opt: str, explicit: str | None, args: list, i: int, flags: FlagTable
) -> tuple[list, int]:
    fewest, most = spec.arity
    if explicit is not None:
        if most == 0:
            raise ParseError(f"{opt} takes no value, got {opt}={explicit}", position=args[i - 1][1])
        return [explicit], i
    values = []
    while i < len(args) and len(values) < most and not _looks_like_option(args[i][0], flags):
        values.append(args[i][0])
        i += 1
    if len(values) < fewest:
        raise ParseError(
            f"{opt} expects {'a value' if fewest == 1 else f'{fewest}+ values'}", position=args[i - 1][1]
        )
    return values, i


def _store(spec: FlagSpec, opt: str, values: list[str], out: dict[str, Any], pos: int) -> None:
    kind, dest = spec.kind, spec.field
    if kind in ("ignore", "help", "version"):
        return
    if kind == "boolean_optional":
        out[dest] = not opt.startswith("--no-")
    elif kind in ("store_true", "store_false", "store_const"):
        out[dest] = spec.const
    elif kind == "count":
        out[dest] = (out.get(dest) or 0) + 1
    elif kind == "append_const":
        out[dest] = [*_as_list(out.get(dest)), spec.const]
    else:
        value = _typed(spec, opt, values, pos)
        if kind == "append":
            out[dest] = [*_as_list(out.get(dest)), value]
        elif kind == "extend":
            out[dest] = [*_as_list(out.get(dest)), *value]
        else:
            out[dest] = value


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _typed(spec: FlagSpec, opt: str, values: list[str], pos: int) -> Any:
    convert = _CONVERTERS.get((spec.type or "str").rsplit(".", 1)[-1], str)
    try:
        typed = [convert(v) for v in values]
    except (ValueError, TypeError, ArithmeticError, InvalidOperation) as err:
        raise ParseError(f"{opt}: {values!r} is not a valid {spec.type}: {err}", position=pos) from None
    if spec.nargs is None:
        return typed[0]
    if spec.nargs == "?":
        return typed[0] if typed else spec.const
    return typed


def _nullable_str(text: str) -> str | None:
    return None if not text or text == "None" else text


def _human_readable_int(text: str) -> int:
    # sglang.srt.utils.common.human_readable_int: SI (k, M, G, T) and IEC (Ki, Mi, Gi, Ti) suffixes.
    text = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if not m:
        return int(text)
    number, suffix = m.groups()
    if suffix.endswith("i"):
        return int(number) * 2 ** (10 * ("KMGT".index(suffix[0]) + 1))
    return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))


_CONVERTERS = {
    "str": str,
    "int": int,
    "float": float,
    "loads": json.loads,
    "json_list_type": json.loads,
    "nullable_str": _nullable_str,
    "human_readable_int": _human_readable_int,
}


def _merge_config(args: list[tuple[str, int]], flags: FlagTable, cwd: str | None, read_text: Any) -> list:
    # sglang 0.5.11 prepare_server_args + ConfigArgumentMerger (srt/server_args_config_parser.py):
    # only a literal `--config PATH` token triggers it; the file's options are placed before
    # the command line's, so the command line wins; `--config PATH` itself is removed.
    at = [i for i, (tok, _) in enumerate(args) if tok == "--config"]
    if not at:
        return args
    if len(at) > 1 or at[0] == len(args) - 1:
        why = "several --config options" if len(at) > 1 else "--config without a file"
        raise ParseError(f"{why}; sglang refuses to start with it", position=args[at[-1]][1])
    i = at[0]
    path, pos = args[i + 1][0], args[i][1]
    data = _read_config(path, pos, flags, cwd, read_text)
    return [(tok, pos) for tok in _config_args(data, flags, pos)] + args[:i] + args[i + 2 :]


def _read_config(path: str, pos: int, flags: FlagTable, cwd: str | None, read_text: Any) -> dict:
    import yaml  # PyYAML; sglang reads the file with yaml.safe_load as well

    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ParseError(f"config file must be YAML (.yaml/.yml), got {path}", position=pos)
    full = path if posixpath.isabs(path) or not cwd else posixpath.join(cwd, path)
    reader = read_text or getattr(getattr(flags.tree, "host", None), "read_text", None) or _read_local
    try:
        data = yaml.safe_load(reader(full))
    except yaml.YAMLError as err:
        raise ParseError(f"config file {full} is not valid YAML: {err}", position=pos) from None
    except (OSError, RemoteFileError) as err:
        raise ParseError(
            f"cannot read config file {full}: {err}",
            position=pos,
            hint="relative paths are taken from cwd= (the server's /proc/PID/cwd)",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParseError(f"config file {full} must hold a mapping at its top level", position=pos)
    return data


def _read_local(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _config_args(data: dict, flags: FlagTable, pos: int) -> list[str]:
    out: list[str] = []
    for key, value in data.items():
        spec, opt = _config_flag(str(key), flags, pos)
        if spec.kind not in ("store", "store_true"):
            raise ParseError(
                f"config option {key!r} has action {spec.action or spec.kind}, which sglang's config "
                "merger refuses",
                position=pos,
            )
        if isinstance(value, bool):
            out += ([opt] if value else []) if spec.kind == "store_true" else [opt, str(value).lower()]
        elif isinstance(value, list):
            out += [opt, *map(str, value)] if value else []
        elif isinstance(value, dict):
            out += [opt, json.dumps(value)]
        else:
            out += [opt, str(value)]
    return out


def _config_flag(key: str, flags: FlagTable, pos: int) -> tuple[FlagSpec, str]:
    # sglang 0.5.11 turns each key into `--{key}`; newer versions also accept any long
    # spelling written with underscores, so a field such as `tp_size` is taken too.
    hit = _match(flags, "--" + key, pos)
    if hit is not None:
        return hit[0], hit[1]
    spec = flags.get(key.replace("-", "_"))
    if spec is None:
        raise ParseError(f"config key {key!r} is not a flag of sglang {flags.version or '?'}", position=pos)
    return spec, spec.name
