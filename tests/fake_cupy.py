"""A stand-in for CuPy that runs ort_roi's CUDA source on the host.

``tests/cuda_host.cpp`` builds ``roi_ops.cu`` with g++; this module offers the few CuPy calls
``ort_roi.kernels.cuda.backend`` makes (arrays are NumPy arrays, RawModule functions are the host
build), so the GPU backend's own code and its CUDA arithmetic are tested without a GPU.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import types

import numpy as np

HERE = os.path.dirname(__file__)


class DeviceArray(np.ndarray):
    """A NumPy array that ort_roi takes for a CuPy array (its type's module is "cupy")."""

    def set(self, arr, stream=None):  # cupy.ndarray.set: host -> device
        assert arr.shape == self.shape and arr.dtype == self.dtype
        np.copyto(self, arr)

    def get(self, stream=None, order="C", out=None, blocking=True):  # device -> host
        if out is None:
            return np.array(self)
        assert out.shape == self.shape and out.dtype == self.dtype and out.flags.c_contiguous
        np.copyto(out, self)
        return out


class Stream:
    """The current stream: counts its synchronisations."""

    synchronized = 0

    def synchronize(self):
        Stream.synchronized += 1


#: Pinned host buffers handed out (cupy.cuda.alloc_pinned_memory): their sizes.
PINNED: list = []


def alloc_pinned_memory(n: int) -> bytearray:
    PINNED.append(n)
    return bytearray(n)


DeviceArray.__module__ = "cupy"


def build(tmpdir: str) -> str:
    lib = os.path.join(tmpdir, "ort_roi_cuda_host.so")
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", lib,
                    os.path.join(HERE, "cuda_host.cpp")], check=True, capture_output=True)
    return lib


_CTYPES = {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float32: ctypes.c_float,
           np.float64: ctypes.c_double}


def module(lib_path: str) -> types.ModuleType:
    lib = ctypes.CDLL(lib_path)

    class RawModule:
        def __init__(self, code, options=(), name_expressions=()):
            assert "--fmad=false" in options  # the device build must not contract a*b+c
            self.names = list(name_expressions)

        def get_function(self, name):
            assert name in self.names, name
            kernel, args = name[:-1].split("<")
            t, cb = (a.strip() for a in args.split(","))
            f = getattr(lib, f"{kernel}_{'f' if t == 'float' else 'd'}_{cb}")

            def launch(grid, block, args):
                conv, types_ = [], []
                for a in args:
                    if isinstance(a, np.ndarray):
                        assert a.flags.c_contiguous
                        conv.append(ctypes.c_void_p(a.ctypes.data))
                        types_.append(ctypes.c_void_p)
                    else:
                        ct = _CTYPES[type(a)]
                        conv.append(ct(a))
                        types_.append(ct)
                f.argtypes, f.restype = types_, None
                f(*conv)
            return launch

    m = types.ModuleType("cupy")
    m.RawModule = RawModule
    m.ndarray = DeviceArray
    m.asarray = lambda a, dtype=None: np.ascontiguousarray(np.asarray(a, dtype)).view(DeviceArray)
    m.ascontiguousarray = lambda a: np.ascontiguousarray(a).view(type(a))
    m.asnumpy = np.asarray
    m.empty = lambda *a, **k: np.empty(*a, **k).view(DeviceArray)
    m.zeros = lambda *a, **k: np.zeros(*a, **k).view(DeviceArray)
    m.int64 = np.int64
    m.matmul = np.matmul
    stream = Stream()
    m.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
                                   alloc_pinned_memory=alloc_pinned_memory,
                                   get_current_stream=lambda: stream)
    return m
