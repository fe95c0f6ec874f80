"""Stand-ins for the CUDA libraries in an image runtime, which no job in the twin can reach.

PyPI's torch for Linux x86_64 is the CUDA build: `libtorch_cuda.so` lists cuBLAS, cuDNN, cuFFT, cuSPARSE,
NCCL and others as NEEDED, so `import torch` fails without them, yet on a machine without a GPU nothing
calls into them (every tensor is on the CPU; `torch.cuda.is_available()` asks the CUDA runtime, kept
real, which answers that there is no device). They are 4 of a runtime's 7 GB. The CPU builds of torch,
which need none of them, are published only on download.pytorch.org, which the package registries this
project installs from do not mirror. So each library over STUBBED_OVER_BYTES is replaced by a stand-in
built here: the same file name, soname, exported names and symbol versions, so the dynamic linker loads
it as it loaded the real one; every function in it stops the process with one line naming the function
and the library, so a call the twin was wrong to think unreachable fails loudly, never silently.

No tool makes such a library from another (`implib.so` writes lazy-loading shims that still need the
real library at the first call), hence this: `readelf` lists what the real one exports, the C compiler
builds the stand-in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STUBBED_OVER_BYTES = 20 * 2**20
# libcudart answers torch.cuda.is_available() (cudaGetDeviceCount: no device) on a CPU: kept real.
KEPT = re.compile(r"libcudart\.")
LIBRARY = re.compile(r"\.so(\.\d+)*$")
# readelf --dyn-syms -W: "Num: Value Size Type Bind Vis Ndx Name[@[@]version]"
SYMBOL = re.compile(r"^\s*\d+:\s+[0-9a-f]+\s+(\d+|0x[0-9a-f]+)\s+(\w+)\s+(\w+)\s+\w+\s+(\w+)\s+(\S+)")
KINDS = {"FUNC": "function", "IFUNC": "function", "OBJECT": "data", "TLS": "thread-local"}
MARKER = ".trainstack-stand-in"
SYSTEM_RUNTIMES = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1")
TOOLS = ("cc", "readelf")
INSTALL_TOOLS = "apt-get install gcc binutils"


def missing_tools() -> list[str]:
    """The tools a stand-in is built with that this machine lacks."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


class StubError(RuntimeError):
    """A stand-in could not be built (no C compiler or readelf, or a library it cannot read)."""


@dataclass(frozen=True)
class Exported:
    """A symbol a library defines for others: its name, kind, size and symbol version (None: unversioned)."""

    name: str
    kind: str  # "function", "data" or "thread-local"
    size: int
    version: str | None


@dataclass(frozen=True)
class Interface:
    """What importers of a library see: its soname, its version nodes, and its exported symbols."""

    soname: str
    versions: tuple[str, ...]
    symbols: tuple[Exported, ...]


def parse_symbols(listing: str) -> tuple[Exported, ...]:
    """The defined, global, default-version symbols of `readelf --dyn-syms -W` output. A symbol's
    non-default versions (`name@V`, kept for programs linked against older releases) are left out: torch
    links against the libraries it ships with, whose default versions (`name@@V`) these are."""
    found = {}
    for line in listing.splitlines():
        matched = SYMBOL.match(line)
        if not matched:
            continue
        size, kind, bind, section, full = matched.groups()
        if section in ("UND", "ABS") or bind not in ("GLOBAL", "WEAK") or kind not in KINDS:
            continue
        name, at, version = full.partition("@@")
        if not at and "@" in name:
            continue
        found[name] = Exported(name, KINDS[kind], int(size, 0), version or None)
    return tuple(found[name] for name in sorted(found))


def parse_imports(listing: str) -> frozenset[str]:
    """The names `readelf --dyn-syms -W` output lists as undefined: what that file needs from others."""
    names = set()
    for line in listing.splitlines():
        matched = SYMBOL.match(line)
        if matched and matched[4] == "UND":
            names.add(matched[5].split("@", 1)[0])
    return frozenset(names)


def parse_versions(listing: str) -> tuple[str, ...]:
    """The version nodes `readelf -V -W` lists as defined (the BASE entry, the soname itself, aside)."""
    section = (
        listing.split("Version definition section", 1)[1].split("Version needs section", 1)[0]
        if "Version definition section" in listing
        else ""
    )
    return tuple(re.findall(r"Flags: none\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", section))


def c_source(library: str, symbols: tuple[Exported, ...]) -> str:
    """The stand-in's C: each function stops the process naming itself; data is zeroed storage of the
    real size. Each symbol is given its exact name with an asm label (C++ names are not C identifiers)."""
    lines = [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "static void reached(const char *name) {",
        f'    fprintf(stderr, "trainstack twin: %s of {library} was called; this runtime holds a stand-in for '
        'this CUDA library, which no job on a CPU should reach\\n", name);',
        "    abort();",
        "}",
    ]
    for number, symbol in enumerate(symbols):
        label = f'__asm__("{symbol.name}")'
        if symbol.kind == "function":
            lines.append(f'void f{number}(void) {label}; void f{number}(void) {{ reached("{symbol.name}"); }}')
        else:
            storage = "__thread " if symbol.kind == "thread-local" else ""
            lines.append(f"{storage}char d{number}[{max(symbol.size, 1)}] {label} = {{0}};")
    return "\n".join(lines) + "\n"


def version_script(interface: Interface) -> str | None:
    """The linker's version script: each node the real library defines, with the symbols it versions."""
    if not interface.versions:
        return None
    nodes = []
    for node in interface.versions:
        names = [symbol.name for symbol in interface.symbols if symbol.version == node]
        listed = "".join(f'    "{name}";\n' for name in names)
        nodes.append(f"{node} {{\n" + (f"  global:\n{listed}" if listed else "") + "};")
    # An unversioned symbol of a versioned library is listed in no node: it stays global, unversioned.
    return "\n".join(nodes) + "\n"


def read_interface(library: Path, wanted: frozenset[str]) -> Interface:
    """What `library` exports of the names in `wanted`. Only what torch needs of it: besides its API a CUDA
    library may export what it links in statically (libstdc++, zlib), and a stand-in exporting those
    would take calls meant for the real ones (seen: cuSPARSELt's std::string::_M_replace_aux, reached
    by `import torch` when every export was kept)."""
    dynamic = _readelf("-d", "-W", library)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic)
    symbols = parse_symbols(_readelf("--dyn-syms", "-W", library))
    return Interface(
        soname=soname[1] if soname else library.name,
        versions=parse_versions(_readelf("-V", "-W", library)),
        symbols=tuple(symbol for symbol in symbols if symbol.name in wanted),
    )


def imported_names(site_packages: Path, replaced: list[Path]) -> frozenset[str]:
    """What torch's libraries and the CUDA libraries kept real need from other libraries, less what the C
    and C++ runtimes define (no stand-in may take those)."""
    importers = [*_library_files(site_packages / "torch"), *_library_files(site_packages / "nvidia")]
    needed: set[str] = set()
    for importer in importers:
        if importer not in replaced:
            needed |= parse_imports(_readelf("--dyn-syms", "-W", importer))
    for runtime in SYSTEM_RUNTIMES:
        located = _tool(["cc", f"-print-file-name={runtime}"]).stdout.strip()
        if not Path(located).is_absolute():  # cc prints the bare name when it finds no such file
            raise StubError(f"cc does not find {runtime}: apt-get install gcc g++")
        needed -= {symbol.name for symbol in parse_symbols(_readelf("--dyn-syms", "-W", located))}
    return frozenset(needed)


def build_stand_in(library: Path, interface: Interface, into: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        source, script = Path(scratch) / "stand_in.c", Path(scratch) / "versions.map"
        source.write_text(c_source(library.name, interface.symbols))
        command = ["cc", "-shared", "-fPIC", "-O0", "-w", "-o", str(into), str(source), f"-Wl,-soname,{interface.soname}"]
        if (text := version_script(interface)) is not None:
            script.write_text(text)
            command.append(f"-Wl,--version-script={script}")
        built = _tool(command)
        if built.returncode != 0:
            raise StubError(f"cc could not build a stand-in for {library.name}: {built.stderr.strip()[-500:]}")


def replaced_libraries(site_packages: Path) -> Iterator[Path]:
    """The CUDA libraries (PyPI's nvidia-* packages) of a runtime that stand-ins replace."""
    for path in _library_files(site_packages / "nvidia"):
        if not KEPT.match(path.name) and path.stat().st_size > STUBBED_OVER_BYTES:
            yield path


def _library_files(folder: Path) -> Iterator[Path]:
    """The shared libraries under `folder`, each file once (a link to one is not another library)."""
    for path in sorted(folder.glob("**/*.so*")):
        if path.is_file() and not path.is_symlink() and LIBRARY.search(path.name):
            yield path


def replace_cuda_libraries(site_packages: Path) -> int:
    """Replace each large CUDA library of a runtime with its stand-in; the bytes freed."""
    replaced = list(replaced_libraries(site_packages))
    wanted, freed = imported_names(site_packages, replaced), 0
    for library in replaced:
        interface = read_interface(library, wanted)
        stand_in = library.with_name(library.name + MARKER)
        build_stand_in(library, interface, stand_in)
        freed += library.stat().st_size - stand_in.stat().st_size
        stand_in.replace(library)
    return freed


def _readelf(*arguments: str | Path) -> str:
    ran = _tool(["readelf", *map(str, arguments)])
    if ran.returncode != 0:
        raise StubError(f"readelf {' '.join(map(str, arguments))} failed: {ran.stderr.strip()[-300:]}")
    return ran.stdout


def _tool(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise StubError(f"{command[0]} is not installed: {INSTALL_TOOLS}") from None
