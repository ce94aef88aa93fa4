"""Every sglang release from 0.3 on, as data: when it was published, the flags its parser accepts and the
fields its ``ServerArgs`` has (``kit/data/releases.json``).

The doctor infers the release of a paste that states none from its flags, its server_args fields and its
dates (kit.doctor.infer). Reading them against the releases whose source happens to be in the user's cache
gave two users two answers; this table is the same everywhere, and the source of the release chosen is
downloaded once afterwards, as for a release given with ``--sglang``.

The table is made from the real things, never by hand: the release list and the dates from the package
index's JSON API (``https://pypi.org/pypi/sglang/json``: the first upload of each release), the flags and
fields from each release's wheel read with the kit's own readers (``kit.server_args.flag_table`` and
``defaults``, which follow both parser layouts). Each release is stored as what changed from the one before
(flags and fields added and removed), so the file stays small.

    python -m kit.doctor.releases                # what the table holds: releases, dates, flag counts
    python -m kit.doctor.releases --write        # read the index and every wheel again (minutes; the network)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

from kit._data import DATA
from kit.errors import DataFileError, KitError

__all__ = ["INDEX_URL", "Release", "releases", "table_of"]

INDEX_URL = "https://pypi.org/pypi/sglang/json"
PATH = DATA / "releases.json"
FIRST = "0.3.0"  # the oldest release the doctor reads (the known-issues database starts there)


@dataclass(frozen=True)
class Release:
    version: str
    published: date | None  # the first upload of the release to the package index
    flags: tuple[str, ...]  # "--tp-size,--tp:tp_size": option strings, then the field the value goes to
    fields: frozenset[str]  # ServerArgs fields (and argparse dests)


def _key(version: str):
    from packaging.version import Version

    return Version(version)


@lru_cache(maxsize=1)
def releases() -> dict[str, Release]:
    """The table, oldest first. Raises DataFileError when the file is missing or unreadable (a broken install)."""
    try:
        data = json.loads(PATH.read_text())
    except (OSError, ValueError) as err:
        raise DataFileError(f"the table of sglang releases ({PATH}) could not be read: {err}",
                            hint="reinstall the kit, or make it again with `python -m kit.doctor.releases --write`") from err
    out: dict[str, Release] = {}
    flags: set[str] = set()
    fields: set[str] = set()
    for entry in data.get("releases") or []:
        flags = (flags - set(entry.get("flags_removed") or [])) | set(entry.get("flags_added") or [])
        fields = (fields - set(entry.get("fields_removed") or [])) | set(entry.get("fields_added") or [])
        when = entry.get("published")
        out[entry["version"]] = Release(entry["version"], date.fromisoformat(when) if when else None,
                                        tuple(sorted(flags)), frozenset(fields))
    return out


def table_of(release: Release):
    """The release's flags as a kit.server_args.FlagTable (argparse's lookup: exact, then unique prefix)."""
    from kit.server_args.flags import FlagSpec, FlagTable

    specs = []
    for entry in release.flags:
        options, _, dest = entry.rpartition(":")
        specs.append(FlagSpec(option_strings=tuple(options.split(",")), dest=dest))
    return FlagTable(specs, version=release.version)


# --------------------------------------------------------------------------- making the table


def _index(timeout: float = 60) -> dict[str, date]:
    """release -> the date of its first upload, for the releases with a wheel, from the package index."""
    import urllib.request

    from packaging.version import InvalidVersion, Version

    try:
        with urllib.request.urlopen(INDEX_URL, timeout=timeout) as resp:  # noqa: S310 - a fixed https URL
            data = json.load(resp)
    except (OSError, ValueError) as err:
        raise DataFileError(f"the package index could not be read ({INDEX_URL}): {err}",
                            hint="this needs the network to pypi.org; the committed table stays as it is") from err
    out = {}
    for version, files in (data.get("releases") or {}).items():
        try:
            if Version(version) < Version(FIRST) or Version(version).is_prerelease:
                continue
        except InvalidVersion:
            continue
        wheels = [f for f in files or [] if f.get("packagetype") == "bdist_wheel" and not f.get("yanked")]
        if wheels:
            out[version] = date.fromisoformat(min(f["upload_time"] for f in wheels)[:10])
    return out


def _read(version: str) -> tuple[set[str], set[str]]:
    """The flags and fields of one release, read from its wheel's source (downloaded once)."""
    from kit.launch_file import source_tree
    from kit.server_args import defaults, flag_table

    tree = source_tree(None, version)
    table = flag_table(tree)
    flags = {",".join(spec.option_strings) + ":" + (spec.field or spec.dest) for spec in table.flags
             if spec.option_strings}
    fields = set(defaults(tree)) | {spec.field for spec in table.flags if spec.field} | {
        spec.dest for spec in table.flags if spec.dest}
    return flags, fields


def make(progress=print) -> dict:
    published = _index()
    entries, failed = [], []
    flags: set[str] = set()
    fields: set[str] = set()
    versions = sorted(published, key=_key)
    for i, version in enumerate(versions, 1):
        try:
            now_flags, now_fields = _read(version)
        except (KitError, OSError, SyntaxError, ValueError) as err:
            failed.append(f"{version}: {err}")
            progress(f"[{i}/{len(versions)}] sglang {version}: not read ({err})")
            continue
        progress(f"[{i}/{len(versions)}] sglang {version}: {len(now_flags)} flags, {len(now_fields)} fields")
        entries.append({"version": version, "published": published[version].isoformat(),
                        "flags_added": sorted(now_flags - flags), "flags_removed": sorted(flags - now_flags),
                        "fields_added": sorted(now_fields - fields), "fields_removed": sorted(fields - now_fields)})
        flags, fields = now_flags, now_fields
    return {"source": INDEX_URL, "made_by": "python -m kit.doctor.releases --write",
            "how": "dates: the first wheel upload of each release on the package index; flags and fields: each "
                   "release's wheel read with kit.server_args.flag_table and defaults",
            "not_read": failed, "releases": entries}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kit.doctor.releases", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help=f"read the package index and every release's wheel again, and write {PATH.name}")
    args = parser.parse_args(argv)
    if args.write:
        data = make(progress=lambda text: print(text, file=sys.stderr, flush=True))
        PATH.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {PATH}: {len(data['releases'])} releases, {len(data['not_read'])} not read")
        return 0
    try:
        table = releases()
    except KitError as err:
        print(f"error: {err.message}" + (f"\n  -> {err.hint}" if getattr(err, "hint", None) else ""), file=sys.stderr)
        return 2
    try:
        for r in table.values():
            print(f"{r.version:<14} {r.published or '?'}  {len(r.flags):>4} flags  {len(r.fields):>4} fields")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
