"""libbraid.so exports the C ABI and braid's C++ API, and nothing else (docs/embedding.md).

Checks, with binutils' nm and readelf:
  - every function braid.h declares with BRAID_API is a defined dynamic symbol;
  - every defined dynamic symbol starts with one of ALLOWED (no absl, yaml-cpp, nlohmann,
    Eigen, std:: instances, ...); TOOLCHAIN lists what the toolchain adds on its own (none
    with GNU ld 2.40 and the anonymous version script libbraid.map);
  - the SONAME is libbraid.so.<major>.
--self-test runs the checks on made-up nm / readelf output with a leak, a missing function
and a wrong SONAME, and fails unless each is reported.

usage: check_exports.py NM READELF libbraid.so braid.h MAJOR | --self-test
"""
import re
import subprocess
import sys

ALLOWED = ("braid", "_ZN5braid", "_ZNK5braid", "_ZTVN5braid", "_ZTIN5braid", "_ZTSN5braid",
           "_ZZN5braid", "_ZZNK5braid", "_ZGVZN5braid", "_ZGVZNK5braid")
TOOLCHAIN = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def declared_functions(header_text):
    """Names of the functions braid.h declares with BRAID_API."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    return sorted(set(re.findall(r"\bBRAID_API\b[^;(]*?\b(braid\w+)\s*\(", text)))


def problems(nm_output, readelf_output, header_text, major):
    defined = {}
    for line in nm_output.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            defined[parts[2].split("@")[0]] = parts[1]
    found = []
    functions = declared_functions(header_text)
    if not functions:
        found.append("no BRAID_API function found in braid.h (is the parser broken?)")
    for name in functions:
        if defined.get(name) not in ("T", "t", "W"):
            found.append(f"braid.h declares {name} but libbraid.so does not define it")
    for name in sorted(defined):
        if not name.startswith(ALLOWED) and name not in TOOLCHAIN:
            found.append(f"libbraid.so exports {name} (not braid's: expected only "
                         f"{', '.join(p + '*' for p in ALLOWED)})")
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", readelf_output)
    want = f"libbraid.so.{major}"
    if not soname or soname.group(1) != want:
        found.append(f"SONAME is {soname.group(1) if soname else 'missing'}, expected {want}")
    return found, len(functions), len(defined)


def self_test():
    header = ("/* BRAID_API int braidCommented(void); */\n"
              "BRAID_API int braidA(void);\nBRAID_API braidResult_t braidB(braidComm_t c,\n int x);\n")
    good_nm = ("0000 T braidA\n0000 T braidB\n0000 T _ZN5braid6TensorC1Ev\n"
               "0000 V _ZTVN5braid5ErrorE\n")
    good_readelf = " 0x0e (SONAME)             Library soname: [libbraid.so.0]\n"
    ok, n, _ = problems(good_nm, good_readelf, header, 0)
    assert not ok and n == 2, (ok, n)
    cases = [
        (good_nm + "0000 T _ZN4absl7StrCat\n", good_readelf, "_ZN4absl7StrCat"),
        (good_nm + "0000 W _ZNSt6vectorIiSaIiEED2Ev\n", good_readelf, "_ZNSt6vector"),
        (good_nm.replace("0000 T braidB\n", ""), good_readelf, "braidB"),
        (good_nm, good_readelf.replace(".so.0", ".so.1"), "SONAME"),
    ]
    for nm, readelf, needle in cases:
        found, _, _ = problems(nm, readelf, header, 0)
        if not any(needle in f for f in found):
            print(f"FAIL: self-test: '{needle}' was not reported: {found}", file=sys.stderr)
            return 1
    print("check_exports self-test: a leaked symbol, a missing function and a wrong SONAME are "
          "each reported")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    nm, readelf, lib, header, major = argv[1:]
    nm_out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True,
                            text=True).stdout
    readelf_out = subprocess.run([readelf, "-d", lib], check=True, capture_output=True,
                                 text=True).stdout
    with open(header, encoding="utf-8") as f:
        header_text = f.read()
    found, n_functions, n_symbols = problems(nm_out, readelf_out, header_text, major)
    for line in found:
        print(f"FAIL: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"check_exports: {lib}: all {n_functions} functions of braid.h defined; "
          f"{n_symbols} dynamic symbols, all braid's; SONAME libbraid.so.{major}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
