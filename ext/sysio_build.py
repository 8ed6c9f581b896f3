"""cffi builder (out-of-line, API mode) for ``qosmanager._native._sysio``.

Built by ``setup.py`` through ``cffi_modules``; the C lives in ``sysio.c``.
"""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

ffibuilder = FFI()
ffibuilder.cdef(
    """
    long long qm_statfs_magic(const char *path);
    long long qm_fstatfs_magic(int fd);
    int qm_open_batch(int n, const char *data, const int64_t *off, int flags, int32_t *fds_out);
    int qm_pwrite_batch(int n, const int32_t *fds, const char *data, const int64_t *off,
                        const int64_t *len, const uint8_t *trunc, int32_t *err);
    int qm_pread_batch(int n, const int32_t *fds, char *out, int64_t stride, int64_t *lens);
    int qm_pread_compare(int n, const int32_t *fds, const char *data, const int64_t *off,
                         const int64_t *len, uint8_t *same);
    void qm_close_batch(int n, const int32_t *fds);
    """
)
ffibuilder.set_source(
    "qosmanager._native._sysio",
    '#include "sysio.h"',
    sources=[os.path.relpath(os.path.join(HERE, "sysio.c"))],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-O2", "-std=c99"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
