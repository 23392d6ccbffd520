"""libbraid.so needs no transport or CUDA library; each component is a plugin beside it
(docs/layout.md, "Components"; ctest bindings.plugins).

Checks, with binutils' readelf and nm:
  - libbraid.so NEEDs none of OUTSIDE (libmpi, libucp, libucs, libuct, libcudart, libcublas,
    libnccl);
  - every component the build has (COMPONENT arguments) has its plugin libbraid_<name>.so in
    the same folder, which NEEDs libbraid.so.<major> and its outside library (EXPECTED_NEEDS);
  - the plugin exports its entry point alone (plugin.map);
  - every symbol the plugin leaves undefined that is braid's (braid*, _Z*5braid*) is a defined
    dynamic symbol of libbraid.so: it resolves there, not from a copy;
  - the plugin carries no copy of the layers: none of its own symbols (its symbol table) is one
    that libbraid.so defines out of line (nm -D type T, D, B or R; weak inline and template
    instances, W / V / u, may be in both), nor a static local of an inline function that
    libbraid.so has too (_ZZ / _ZGVZ: two copies of an object that must be one).
--self-test runs the checks on made-up output with each fault, and fails unless each is
reported.

usage: check_plugins.py READELF NM libbraid.so MAJOR COMPONENT=ENTRY... | --self-test
"""
import os
import re
import subprocess
import sys

OUTSIDE = ("libmpi", "libucp", "libucs", "libuct", "libcudart", "libcublas", "libnccl")
EXPECTED_NEEDS = {
    "comm_mpi": ("libmpi",),
    "comm_ucx": ("libucp", "libucs"),
    "comm_nccl": ("libnccl", "libcudart"),
    "core_cuda": ("libcudart",),
    "kernels_cuda": ("libcudart", "libcublasLt"),
}
BRAIDS = re.compile(r"^(braid|_Z\w*5braid)")


def needed(readelf_d):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf_d)


def symbols(nm_output):
    """{name: type} from `nm` lines 'ADDRESS TYPE NAME' or 'TYPE NAME' (undefined)."""
    out = {}
    for line in nm_output.splitlines():
        parts = line.split()
        if len(parts) >= 2 and len(parts[-2]) == 1:
            out[parts[-1].split("@")[0]] = parts[-2]
    return out


def library_problems(lib_needed):
    return [f"libbraid.so NEEDs {n}: a component's outside library is linked into it"
            for n in lib_needed if n.startswith(OUTSIDE)]


def plugin_problems(name, entry, major, plugin_needed, exported, undefined, own, lib_defined):
    found = []
    want = [f"libbraid.so.{major}"] + list(EXPECTED_NEEDS.get(name, ()))
    for w in want:
        if not any(n.startswith(w) for n in plugin_needed):
            found.append(f"{name}: the plugin does not NEED {w}* (NEEDED: {', '.join(plugin_needed)})")
    extra = sorted(set(exported) - {entry})
    if entry not in exported:
        found.append(f"{name}: the plugin does not export its entry point {entry}")
    if extra:
        found.append(f"{name}: the plugin exports more than its entry point: {', '.join(extra[:5])}")
    for sym in sorted(undefined):
        if BRAIDS.match(sym) and sym not in lib_defined:
            found.append(f"{name}: the plugin needs {sym}, which libbraid.so does not export "
                         "(extend bindings/c/libbraid.map)")
    copies = sorted(s for s, t in own.items()
                    if t.upper() in "TDBR" and lib_defined.get(s, "") in ("T", "D", "B", "R"))
    if copies:
        found.append(f"{name}: the plugin carries its own copy of {len(copies)} symbol(s) "
                     f"libbraid.so defines, e.g. {copies[0]}")
    statics = sorted(s for s in own if s.startswith(("_ZZ", "_ZGVZ")) and s in lib_defined)
    if statics:
        found.append(f"{name}: the plugin has its own copy of {len(statics)} static local(s) "
                     f"libbraid.so has too, e.g. {statics[0]}")
    return found


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main(argv):
    readelf, nm, lib, major = argv[:4]
    components = [a.split("=", 1) for a in argv[4:]]
    found = library_problems(needed(run([readelf, "-d", lib])))
    lib_defined = symbols(run([nm, "-D", "--defined-only", lib]))
    folder = os.path.dirname(os.path.abspath(lib))
    for name, entry in components:
        plugin = os.path.join(folder, f"libbraid_{name}.so")
        if not os.path.exists(plugin):
            found.append(f"{name}: no plugin {plugin} beside libbraid.so")
            continue
        found += plugin_problems(
            name, entry, major, needed(run([readelf, "-d", plugin])),
            symbols(run([nm, "-D", "--defined-only", plugin])),
            symbols(run([nm, "-D", "--undefined-only", plugin])),
            symbols(run([nm, "--defined-only", plugin])), lib_defined)
        print(f"{name}: {plugin}: NEEDED {', '.join(needed(run([readelf, '-d', plugin])))}")
    for f in found:
        print("FAIL:", f)
    if not found:
        print(f"ok: libbraid.so NEEDs none of {', '.join(OUTSIDE)}; {len(components)} plugin(s) "
              "beside it, each resolving braid's symbols from it")
    return 1 if found else 0


def self_test():
    lib_defined = {"_ZN5braid5ErrorC1Ev": "T", "_ZN5braid6inlineEv": "W", "braidInit": "T"}
    good = dict(name="comm_mpi", entry="braid_comm_register_mpi", major="0",
                plugin_needed=["libbraid.so.0", "libmpi.so.40", "libc.so.6"],
                exported={"braid_comm_register_mpi": "T"},
                undefined={"_ZN5braid5ErrorC1Ev": "U", "malloc": "U"},
                own={"braid_comm_register_mpi": "T", "_ZN5braid6inlineEv": "t"},
                lib_defined=lib_defined)
    cases = {
        "good": ({}, 0),
        "no libmpi": ({"plugin_needed": ["libbraid.so.0"]}, 1),
        "no libbraid": ({"plugin_needed": ["libmpi.so.40"]}, 1),
        "exports more": ({"exported": {"braid_comm_register_mpi": "T", "_ZN5braid1xEv": "T"}}, 1),
        "no entry": ({"exported": {}}, 1),
        "unexported need": ({"undefined": {"_ZN5braid7missingEv": "U"}}, 1),
        "a copy": ({"own": {"_ZN5braid5ErrorC1Ev": "t"}}, 1),
        "a static twice": ({"own": {"_ZZN5braid3logEvE5level": "b"},
                            "lib_defined": {**lib_defined, "_ZZN5braid3logEvE5level": "u"}}, 1),
        "own static": ({"own": {"_ZZN5braid3mpiEvE2mu": "b"}}, 0),
    }
    bad = []
    for label, (change, want) in cases.items():
        got = len(plugin_problems(**{**good, **change}))
        if got != want:
            bad.append(f"{label}: {got} problem(s), expected {want}")
    if len(library_problems(["libc.so.6", "libcudart.so.13"])) != 1:
        bad.append("libbraid.so NEEDing libcudart is not reported")
    if library_problems(["libyaml-cpp.so.0.7", "libstdc++.so.6"]):
        bad.append("libbraid.so NEEDing yaml-cpp is reported")
    for b in bad:
        print("SELF-TEST FAIL:", b)
    if not bad:
        print(f"self-test: {len(cases) + 2} cases ok")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) < 5:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
