"""Process-wide settings that make eager PyTorch on CPU faster without changing any number.

glibc's malloc serves a block above its mmap threshold (128 kB at first, adapting upwards) from
fresh pages of the kernel, and gives memory at the top of the heap back once more than the trim
threshold is free. Eager PyTorch allocates every op's output and frees it soon after, so at the CPU
runs' shapes most activations landed on new pages: a page fault per 4 kB, 20–30 % of a forward at
width 256–384 (issue 20). ``tune_malloc`` raises the mmap threshold to glibc's maximum (32 MiB) and
the trim threshold to 1 GiB, so freed blocks are reused; the cost is up to that much freed memory
kept by the process. ``import elf`` calls it; ``ELF_MALLOC_TUNING=0`` turns it off. It does nothing
off glibc (and is irrelevant to CUDA memory, which has its own caching allocator).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's <malloc.h>
MMAP_THRESHOLD = 32 * 1024 * 1024              # glibc's upper bound on 64-bit systems
TRIM_THRESHOLD = 1024 * 1024 * 1024


def tune_malloc() -> bool:
    """Set the thresholds above; True if glibc accepted them."""
    if os.environ.get("ELF_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
