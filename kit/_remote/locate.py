"""Where a package is installed for this interpreter, and which version it is, without importing it.

Run as ``python -c <this file> PACKAGE``. ``find_spec`` of a top-level name does not
import the package, so a broken or GPU-only install can still be located. The version
comes from the tree itself: the ``*.dist-info`` beside the package, else
``importlib.metadata``, else ``__version__`` in ``_version.py`` / ``version.py``.

Standard library only; kept compatible with Python 3.6.
"""

import glob
import importlib.util
import json
import os
import re
import sys

MARKER = "KIT-RESULT "
# `__version__ = "0.5.6"`, `version: str = "..."`, and setuptools-scm's `__version__ = version = '0.5.9'`.
VERSION_LINE = re.compile(
    r"""^[ \t]*(?:(?:__version__|version)[ \t]*(?::[ \t]*str[ \t]*)?=[ \t]*)+['"]([^'"]+)['"]""", re.M)
VERSION_FILES = ("_version.py", "version.py")


def norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_info(pkg, name):
    found = []
    for d in glob.glob(os.path.join(glob.escape(os.path.dirname(pkg)), "*.dist-info")):
        top = os.path.join(d, "top_level.txt")
        by_name = norm(os.path.basename(d).split("-")[0]) == norm(name)
        by_top = False
        if not by_name and os.path.isfile(top):
            with open(top, errors="replace") as f:
                by_top = name in f.read().split()
        if by_name or by_top:
            found.append((not by_name, -os.path.getmtime(d), d))
    return sorted(found)[0][2] if found else None


def metadata_version(dist):
    try:
        with open(os.path.join(dist, "METADATA"), errors="replace") as f:
            for line in f:
                if not line.strip():
                    break
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def declared_version(text):
    """The version a ``_version.py`` / ``version.py`` text declares, or None."""
    match = VERSION_LINE.search(text)
    return match.group(1) if match else None


def file_version(pkg):
    for rel in VERSION_FILES:
        try:
            with open(os.path.join(pkg, rel), errors="replace") as f:
                found = declared_version(f.read())
        except OSError:
            continue
        if found:
            return found, rel
    return None, None


def locate(name):
    out = {"executable": sys.executable, "python": sys.version.split()[0], "sys_path": sys.path}
    try:
        spec = importlib.util.find_spec(name)
    except Exception as exc:
        spec, out["error"] = None, repr(exc)
    locs = list((spec.submodule_search_locations or []) if spec else [])
    if not locs:
        out.update(found=False, is_module=bool(spec and spec.origin))
        return out
    pkg = os.path.abspath(locs[0])
    dist = dist_info(pkg, name)
    version, version_from = (metadata_version(dist), "dist-info") if dist else (None, None)
    if version is None:
        try:
            import importlib.metadata as md
            version, version_from = md.version(name), "metadata"
        except Exception:
            pass
    if version is None:
        version, version_from = file_version(pkg)
    out.update(found=True, package_dir=pkg, dist_info=dist, version=version, version_from=version_from)
    return out


def main():
    print(MARKER + json.dumps(locate(sys.argv[1] if len(sys.argv) > 1 else "sglang")))


if __name__ == "__main__":
    main()
