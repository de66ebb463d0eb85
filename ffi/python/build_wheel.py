"""Builds the piw wheel: ``python3 build_wheel.py BUILD_DIR OUT_DIR`` (BUILD_DIR is a cargo
target directory with libpiw.so, piw and piw-json-worker; OUT_DIR receives the wheel, whose
name it prints).

A wheel (PEP 427) is a zip of the package plus ``METADATA``, ``WHEEL`` and ``RECORD`` (every
file with its sha256). It carries native code for one platform, so it is tagged
``py3-none-<platform>``. Only the standard library is used: building needs no network.
"""

import base64
import hashlib
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = {"libpiw.so": 0o755, "piw": 0o755, "piw-json-worker": 0o755}


def project_field(name: str) -> str:
    text = (HERE / "pyproject.toml").read_text()
    match = re.search(rf'^{name} = "([^"]*)"', text, re.M)
    if not match:
        raise SystemExit(f"pyproject.toml has no {name}")
    return match.group(1)


def main(build_dir: str, out_dir: str) -> None:
    build, out = Path(build_dir), Path(out_dir)
    name, version = project_field("name"), project_field("version")
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{platform}"
    dist_info = f"{name}-{version}.dist-info"
    files: list[tuple[str, bytes, int]] = []
    for source in sorted((HERE / "piw").rglob("*.py")):
        files.append((f"piw/{source.relative_to(HERE / 'piw')}", source.read_bytes(), 0o644))
    for native, mode in NATIVE.items():
        path = build / native
        if not path.is_file():
            raise SystemExit(f"{path} is missing: build it first (cargo build -p piw-ffi -p piw-cli)")
        files.append((f"piw/_lib/{native}", path.read_bytes(), mode))
    files.append((f"{dist_info}/METADATA", (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Summary: {project_field('description')}\n"
        f"Requires-Python: {project_field('requires-python')}\nLicense: MIT\n").encode(), 0o644))
    files.append((f"{dist_info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: piw build_wheel.py\nRoot-Is-Purelib: false\n"
        f"Tag: {tag}\n").encode(), 0o644))
    record = []
    for path, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data, mode in files:
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    print(wheel)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: build_wheel.py BUILD_DIR OUT_DIR")
    main(sys.argv[1], sys.argv[2])
