#!/usr/bin/env python3
"""ptxas statistics for kernel files in seconds, no GPU: NVRTC compiles the prelude (in
kernels/src/lib.rs's PRELUDE order) followed by the named files, as the loader does, with
--ptxas-options=-v, and prints the log (registers, spills, ptxas's wgmma notes C7514-C7517).

    LD_LIBRARY_PATH=/tmp/nvrtc/nvidia/cu13/lib python3 scripts/nvrtc_stats.py sm_90a \\
        moe_mma.cu moe_mma_fp4.cu moe_pipe.cu moe_wg.cu moe_wg8.cu [--ptx F] [--cubin F]

Files are kernels/src paths; name every file of the module (lib.rs's Module::source) when one
uses another's helpers. --ptx writes the PTX (the line numbers in C7517 notes are its lines),
--cubin the image for `cuobjdump -sass` (with nvdisasm on PATH). NVRTC from
`pip install --target /tmp/nvrtc "nvidia-cuda-nvrtc==13.0.*"` (docs/cuda.md). The kernels
crate's test every_module_compiles_with_nvrtc is the full check (every module, four targets).
"""
import argparse
import ctypes
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "kernels" / "src"


def prelude() -> str:
    lib = (SRC / "lib.rs").read_text()
    block = re.search(r"PRELUDE: &str = concat!\((.*?)\);", lib, re.S)
    if not block:
        sys.exit("kernels/src/lib.rs: no PRELUDE concat! found")
    heads = re.findall(r'include_str!\("([^"]+)"\)', block.group(1))
    return "".join((SRC / h).read_text() for h in heads)


def check(lib, rc: int, what: str) -> None:
    if rc != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what}: {lib.nvrtcGetErrorString(rc).decode()}")


def fetch(lib, prog, size_fn: str, get_fn: str) -> bytes:
    n = ctypes.c_size_t()
    check(lib, getattr(lib, size_fn)(prog, ctypes.byref(n)), size_fn)
    buf = ctypes.create_string_buffer(n.value)
    check(lib, getattr(lib, get_fn)(prog, buf), get_fn)
    return buf.raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arch", help="e.g. sm_90a, sm_120a, sm_80")
    ap.add_argument("files", nargs="+", help="kernels/src files, in the module's order")
    ap.add_argument("--ptx", help="write the PTX here")
    ap.add_argument("--cubin", help="write the cubin here")
    args = ap.parse_args()
    try:
        lib = ctypes.CDLL("libnvrtc.so.13")
    except OSError as e:
        sys.exit(f"{e}: install NVRTC (see the header) and set LD_LIBRARY_PATH to its lib folder")
    text = prelude()
    for f in args.files:
        path = SRC / f
        if not path.is_file():
            sys.exit(f"{path}: no such kernel file")
        text += f"\n// {f}\n" + path.read_text()
    prog = ctypes.c_void_p()
    check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b"module.cu", 0, None, None),
          "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={args.arch}", "--std=c++17", "--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    print(fetch(lib, prog, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog").rstrip(b"\0").decode())
    check(lib, rc, "nvrtcCompileProgram")
    if args.ptx:
        pathlib.Path(args.ptx).write_bytes(fetch(lib, prog, "nvrtcGetPTXSize", "nvrtcGetPTX").rstrip(b"\0"))
    if args.cubin:
        pathlib.Path(args.cubin).write_bytes(fetch(lib, prog, "nvrtcGetCUBINSize", "nvrtcGetCUBIN"))


if __name__ == "__main__":
    main()
