"""Build script for the native parts of qosmanager.

Three extensions are built from ``ext/``:

* ``qosmanager._native.reader`` (Cython): the collector's stat reader. It keeps one
  file descriptor per stat file, ``pread``s them all in one call per tick, parses
  only the keys it needs and computes usage deltas into numpy arrays.
* ``qosmanager._native.sampler`` (Cython): the fast path's counter sampler. Its thread samples
  three counters every 50 ms in C, without the GIL, and returns to Python only when LS demand
  reaches the level at which BE's limit may have to fall.
* ``qosmanager._native.jsonl`` (Cython): the audit's write records of a batch as JSON lines.
* ``qosmanager._native._sysio`` (cffi, out-of-line API mode): small syscall helpers
  (statfs magic, batch pread/pwrite with per-file errno).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

reader = Extension(
    "qosmanager._native.reader",
    sources=["ext/reader.pyx"],
    extra_compile_args=["-O2"],
)

jsonl = Extension(
    "qosmanager._native.jsonl",
    sources=["ext/jsonl.pyx"],
    extra_compile_args=["-O2"],
)

sampler = Extension(
    "qosmanager._native.sampler",
    sources=["ext/sampler.pyx"],
    extra_compile_args=["-O2"],
)

setup(
    ext_modules=cythonize(
        [reader, sampler, jsonl],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
    cffi_modules=["ext/sysio_build.py:ffibuilder"],
)
