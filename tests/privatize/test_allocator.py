"""The glibc settings stage processes run with: a freed block of tens of MB stays in the
heap for the next batch instead of going back to the kernel (and being faulted in again,
zero-filled)."""

import ctypes
import ctypes.util
import sys

import pytest

from privatize import allocator


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc():
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc only")
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc >= 2.33")
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def test_a_freed_20_mb_block_stays_in_the_heap():
    libc = _libc()
    assert allocator.tune() is True
    assert allocator.tune() is True  # once per process; later calls are free
    size = 20 << 20  # above glibc's default mmap threshold (128 KiB), below ours (32 MiB)
    before = libc.mallinfo2()
    p = libc.malloc(size)
    assert p
    during = libc.mallinfo2()
    assert during.hblks == before.hblks  # served from the heap, not a fresh mapping
    libc.free(p)
    after = libc.mallinfo2()
    assert after.fordblks >= size  # kept for reuse (the default trim threshold returns it)
