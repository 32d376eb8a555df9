"""Placeholder libraries that let PyPI's torch import on a machine without
the CUDA libraries it is linked against.

PyPI's torch for Linux x86_64 is the CUDA build: `torch._C` links
`libtorch_cuda.so`, which links cuBLAS, cuDNN, NCCL, cuFFT, ... (several GB
of nvidia-* wheels). None of their functions run on CPU, but the loader
must find every library and bind every function whose address is taken
when the module loads. Run by the Python that has torch installed, this
script asks `ldd` which libraries `torch._C` needs and the loader does not
find, collects from `readelf` the symbols the torch libraries import from
them (with their symbol versions), and compiles one small library per
missing name into OUT_DIR, defining each symbol as a function that reports
its name and aborts. Put OUT_DIR on LD_LIBRARY_PATH to import torch; a call
into a placeholder means a GPU code path ran, which this environment does
not support.

Usage: python scripts/cuda_stubs.py OUT_DIR   (what scripts/native runs)
Needs: ldd, readelf and a C compiler (cc), as the torch-sys build does.
"""

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def ldd(path: str) -> tuple[dict[str, str], list[str]]:
    """The libraries the loader finds for `path` (name -> file) and the
    names it does not find, in its order."""
    found, missing = {}, []
    for line in run("ldd", path).splitlines():
        if m := re.match(r"\s*(\S+) => not found", line):
            if m[1] not in missing:
                missing.append(m[1])
        elif m := re.match(r"\s*(\S+) => (/\S+) \(0x", line):
            found[m[1]] = os.path.realpath(m[2])
        elif m := re.match(r"\s*(/\S+) \(0x", line):
            found[m[1]] = os.path.realpath(m[1])
    return found, missing


def dynamic_symbols(path: str):
    """(bind, section, name, version) of each dynamic symbol; the version is
    None where the symbol has none."""
    for line in run("readelf", "--dyn-syms", "--wide", path).splitlines():
        fields = line.split()
        if len(fields) < 8 or not re.fullmatch(r"\d+:", fields[0]):
            continue
        name, _, version = fields[7].partition("@")
        yield fields[4], fields[6], name, version.lstrip("@") or None


def needed(path: str) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", path))


def version_needs(path: str) -> dict[str, str]:
    """Version name -> the library that must define it, from the
    object's version-needs section."""
    owner, file = {}, None
    for line in run("readelf", "--version-info", "--wide", path).splitlines():
        if m := re.search(r"File: (\S+)", line):
            file = m[1]
        elif file and (m := re.search(r"Name: (\S+)", line)):
            owner[m[1]] = file
    return owner


def main() -> None:
    out_dir = Path(sys.argv[1])
    # Found without importing it: that is what needs these libraries.
    torch_dir = Path(importlib.util.find_spec("torch").submodule_search_locations[0]).resolve()
    roots = [str(p) for p in torch_dir.glob("_C*.so")]
    roots += [str(torch_dir / "lib/libtorch_global_deps.so")]
    # The interpreter and libpython define the Python API torch imports.
    roots += [os.path.realpath(sys.executable)]
    found, missing = {}, []
    for root in roots:
        f, m = ldd(root)
        found.update(f)
        missing += [name for name in m if name not in missing]
    if not missing:
        print("the loader finds every library torch._C needs; no placeholders")
        return
    objects = sorted(set(found.values()) | set(roots))

    defined = set()
    for path in objects:
        defined.update(n for _, section, n, _ in dynamic_symbols(path) if section != "UND")

    # Missing library -> version name (None: unversioned) -> symbols.
    stubs: dict[str, dict[str | None, set[str]]] = {name: {} for name in missing}
    for path in objects:
        if not Path(path).is_relative_to(torch_dir.parent):
            continue  # only torch and the nvidia packages import from what is missing
        owners = version_needs(path)
        for version, file in owners.items():
            if file in stubs:  # a version the library must define
                stubs[file].setdefault(version, set())
        own_missing = [n for n in needed(path) if n in stubs] or missing
        for bind, section, name, version in dynamic_symbols(path):
            if section != "UND" or bind == "WEAK":
                continue
            if version is not None and owners.get(version) in stubs:
                stubs[owners[version]].setdefault(version, set()).add(name)
            elif version is None and name not in defined:
                # Unversioned: any library in torch._C's load scope serves.
                stubs[own_missing[0]].setdefault(None, set()).add(name)

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for soname, versions in stubs.items():
            write_stub(Path(tmp), out_dir, soname, versions)
    total = sum(len(s) for v in stubs.values() for s in v.values())
    print(f"{len(stubs)} placeholder libraries, {total} symbols: {' '.join(stubs)}")


def write_stub(tmp: Path, out_dir: Path, soname: str, versions) -> None:
    symbols = sorted(set().union(*versions.values()))
    source = [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "static void missing(const char *name) {",
        f'    fprintf(stderr, "{soname} is a placeholder (torch without its GPU libraries): '
        '%s was called\\n", name);',
        "    abort();",
        "}",
    ]
    for i, name in enumerate(symbols):
        source.append(f'void f{i}(void) __asm__("{name}");')
        source.append(f'void f{i}(void) {{ missing("{name}"); }}')
    c_file = tmp / f"{soname}.c"
    c_file.write_text("\n".join(source) + "\n")
    command = ["cc", "-shared", "-fPIC", "-O1", f"-Wl,-soname,{soname}"]
    command += ["-o", str(out_dir / soname)]
    named = [v for v in versions if v is not None]
    if named:
        # Unversioned symbols join the first version node; an unversioned
        # reference binds to a symbol's default version.
        nodes = []
        for i, version in enumerate(named):
            names = versions[version] | (versions.get(None, set()) if i == 0 else set())
            body = " global:" + "".join(f" {n};" for n in sorted(names)) if names else ""
            body += " local: *;" if i == 0 else ""
            nodes.append(f"{version} {{{body} }};")
        script = tmp / f"{soname}.map"
        script.write_text("\n".join(nodes) + "\n")
        command.append(f"-Wl,--version-script={script}")
    subprocess.run(command + [str(c_file)], check=True)


if __name__ == "__main__":
    main()
