"""A runtime's CUDA libraries are replaced by stand-ins the dynamic linker loads as it loaded them (same
file, soname, symbol versions and the names torch needs), whose every function stops the process with
one line naming itself; names the library exports beyond what torch needs (a statically linked
libstdc++) are not taken. Shown on a library and an importer built here with the C compiler, as PyPI's
nvidia packages and torch are laid out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainstack_local import cuda_stubs

LIBRARY = """
#include <string.h>
int cublasLikeVersion(void) { return 12; }
int cublasLikeUnused(void) { return 1; }
double cublasLikeTable[4] = {1, 2, 3, 4};
size_t strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }  /* a C runtime function it carries */
"""
IMPORTER = """
extern int cublasLikeVersion(void);
extern double cublasLikeTable[4];
int importer_version(void) { return cublasLikeVersion(); }
double importer_table(void) { return cublasLikeTable[3]; }
"""
LOAD = """
import ctypes, sys
importer = ctypes.CDLL(sys.argv[1])
print("loaded", flush=True)
if sys.argv[2] == "table":
    importer.importer_table.restype = ctypes.c_double
    print(importer.importer_table(), flush=True)
else:
    print(importer.importer_version(), flush=True)
"""


def _cc(*arguments: str | Path) -> None:
    subprocess.run(["cc", "-shared", "-fPIC", "-w", *map(str, arguments)], check=True, capture_output=True)


@pytest.fixture
def site_packages(tmp_path) -> Path:
    """A runtime's site-packages: nvidia/cublaslike/lib/libcublasLike.so.12 (versioned, large enough to be
    replaced) and torch/lib/libimporter.so, which needs a function and a table of it."""
    site = tmp_path / "site-packages"
    library_dir, torch_dir = site / "nvidia" / "cublaslike" / "lib", site / "torch" / "lib"
    library_dir.mkdir(parents=True)
    torch_dir.mkdir(parents=True)
    (tmp_path / "library.c").write_text(LIBRARY)
    (tmp_path / "importer.c").write_text(IMPORTER)
    (tmp_path / "versions.map").write_text("libcublasLike.so.12 { global: *; };\n")
    library = library_dir / "libcublasLike.so.12"
    _cc(
        "-o",
        library,
        tmp_path / "library.c",
        "-Wl,-soname,libcublasLike.so.12",
        f"-Wl,--version-script={tmp_path / 'versions.map'}",
    )
    _cc(
        "-o",
        torch_dir / "libimporter.so",
        tmp_path / "importer.c",
        f"-L{library_dir}",
        "-l:libcublasLike.so.12",
        f"-Wl,-rpath,{library_dir}",
    )
    with library.open("ab") as padded:  # as large as a CUDA library is, as far as the size rule sees
        padded.truncate(cuda_stubs.STUBBED_OVER_BYTES + 1)
    return site


def _load(site: Path, call: str) -> subprocess.CompletedProcess[str]:
    importer = site / "torch" / "lib" / "libimporter.so"
    return subprocess.run([sys.executable, "-c", LOAD, str(importer), call], capture_output=True, text=True, check=False)


def test_the_stand_in_loads_where_the_library_did_and_keeps_its_file_soname_and_versions(site_packages):
    library = site_packages / "nvidia" / "cublaslike" / "lib" / "libcublasLike.so.12"
    real = cuda_stubs.read_interface(library, frozenset({"cublasLikeVersion", "cublasLikeTable"}))

    freed = cuda_stubs.replace_cuda_libraries(site_packages)

    assert freed > cuda_stubs.STUBBED_OVER_BYTES - 100_000
    stand_in = cuda_stubs.read_interface(library, frozenset({"cublasLikeVersion", "cublasLikeTable", "cublasLikeUnused"}))
    assert (
        (stand_in.soname, stand_in.versions) == (real.soname, real.versions) == ("libcublasLike.so.12", ("libcublasLike.so.12",))
    )
    assert [(s.name, s.kind, s.version) for s in stand_in.symbols] == [(s.name, s.kind, s.version) for s in real.symbols]
    assert _load(site_packages, "table").stdout.split() == ["loaded", "0.0"]  # the importer links; its data is zeroed


def test_a_call_into_a_stand_in_stops_the_process_naming_the_function_and_library(site_packages):
    cuda_stubs.replace_cuda_libraries(site_packages)

    called = _load(site_packages, "version")

    assert called.returncode != 0 and called.stdout.split() == ["loaded"]
    assert called.stderr.strip() == (
        "trainstack twin: cublasLikeVersion of libcublasLike.so.12 was called; this runtime holds a stand-in "
        "for this CUDA library, which no job on a CPU should reach"
    )


def test_the_stand_in_exports_only_what_the_importers_need_never_a_c_runtime_function(site_packages):
    library = site_packages / "nvidia" / "cublaslike" / "lib" / "libcublasLike.so.12"
    assert {"strlen", "cublasLikeUnused"} <= {
        s.name for s in cuda_stubs.read_interface(library, frozenset({"strlen", "cublasLikeUnused"})).symbols
    }

    cuda_stubs.replace_cuda_libraries(site_packages)

    everything = frozenset({"strlen", "cublasLikeUnused", "cublasLikeVersion", "cublasLikeTable"})
    assert {s.name for s in cuda_stubs.read_interface(library, everything).symbols} == {"cublasLikeVersion", "cublasLikeTable"}


def test_the_cuda_runtime_and_small_libraries_stay_real(tmp_path):
    lib = tmp_path / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    for name, size in (
        ("libcudart.so.12", cuda_stubs.STUBBED_OVER_BYTES * 2),
        ("libnvToolsExt.so.1", 1000),
        ("libcufft.so.11", cuda_stubs.STUBBED_OVER_BYTES * 2),
    ):
        with (lib / name).open("wb") as file:
            file.truncate(size)

    assert [path.name for path in cuda_stubs.replaced_libraries(tmp_path)] == ["libcufft.so.11"]


def test_readelfs_listing_gives_the_defined_default_version_symbols():
    listing = """
Symbol table '.dynsym' contains 6 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     0: 0000000000000000     0 NOTYPE  LOCAL  DEFAULT  UND
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND memcpy@GLIBC_2.14 (2)
     2: 0000000000000000     0 OBJECT  GLOBAL DEFAULT  ABS libcublas.so.12
     3: 0000000000001100    42 FUNC    GLOBAL DEFAULT   12 cublasCreate_v2@@libcublas.so.12
     4: 0000000000001200    42 FUNC    GLOBAL DEFAULT   12 cublasOld@libcublas.so.11
     5: 0000000000004000    64 OBJECT  GLOBAL DEFAULT   22 cublasTable
"""
    assert cuda_stubs.parse_symbols(listing) == (
        cuda_stubs.Exported("cublasCreate_v2", "function", 42, "libcublas.so.12"),
        cuda_stubs.Exported("cublasTable", "data", 64, None),
    )
    assert cuda_stubs.parse_imports(listing) == frozenset({"memcpy"})
