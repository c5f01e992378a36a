"""A minimal in-tree PEP 517 build backend for baton-sdk, standard library only, so that
``pip install ./sdk/python`` works offline (pip need not fetch setuptools into its isolated
build environment). It builds a pure-Python wheel of the ``baton`` package, an sdist, and an
editable wheel (a .pth file pointing at this folder) for ``pip install -e``."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "baton"
TAG = "py3-none-any"


def _project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml (tomllib where it exists, a small reader otherwise)."""
    path = os.path.join(ROOT, "pyproject.toml")
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
        with open(path, "rb") as f:
            return dict(tomllib.load(f)["project"])
    except ImportError:
        pass
    project: Dict[str, Any] = {}
    section = ""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for m in re.finditer(r'(?ms)^\[(?P<sec>[^\]]+)\]\s*$|^(?P<key>[A-Za-z_-]+)\s*=\s*(?P<val>\[.*?\]|".*?"|\{.*?\})\s*$', text):
        if m.group("sec"):
            section = m.group("sec").strip()
        elif section == "project":
            val = m.group("val")
            if val.startswith("["):
                project[m.group("key")] = re.findall(r'"((?:[^"\\]|\\.)*)"', val)
            elif val.startswith("{"):
                project[m.group("key")] = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', val))
            else:
                project[m.group("key")] = val[1:-1]
    return project


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    lic = p.get("license")
    if isinstance(lic, dict):
        lic = lic.get("text") or lic.get("file")
    if lic:
        lines.append(f"License: {lic}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for name, url in (p.get("urls") or {}).items():
        lines.append(f"Project-URL: {name}, {url}")
    readme = p.get("readme")
    body = ""
    if isinstance(readme, str) and os.path.exists(os.path.join(ROOT, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _dist() -> Tuple[str, str]:
    p = _project()
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def _files() -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            out.append(os.path.relpath(full, ROOT).replace(os.sep, "/"))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]]) -> str:
    name, version = _dist()
    dist_info = f"{name}-{version}.dist-info"
    wheel = f"{name}-{version}-{TAG}.whl"
    entries = list(entries) + [
        (f"{dist_info}/METADATA", _metadata().encode("utf-8")),
        (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: baton_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()),
    ]
    lic = os.path.join(ROOT, "LICENSE")
    if os.path.exists(lic):
        with open(lic, "rb") as f:
            entries.append((f"{dist_info}/LICENSE", f.read()))
    record = [_record_line(n, d) for n, d in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(directory, exist_ok=True)
    stamp = (2020, 1, 1, 0, 0, 0)
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            info = zipfile.ZipInfo(n, stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return wheel


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _dist()
    dist_info = f"{name}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    entries = []
    for rel in _files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            entries.append((rel, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    name, _ = _dist()
    return _write_wheel(wheel_directory, [(f"__editable__.{name}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    name, version = _dist()
    base = f"{name}-{version}"
    files = ["pyproject.toml", "README.md", "CHANGELOG.md", "_build/baton_build.py"] + _files()
    for extra in ("LICENSE",):
        if os.path.exists(os.path.join(ROOT, extra)):
            files.append(extra)
    os.makedirs(sdist_directory, exist_ok=True)
    out = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, out), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{base}/{arcname}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
        for rel in files:
            p = os.path.join(ROOT, rel)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    add(rel, f.read())
        add("PKG-INFO", _metadata().encode("utf-8"))
    return out
