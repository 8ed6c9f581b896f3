/* See sysio.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "sysio.h"

long long qm_statfs_magic(const char *path)
{
    struct statfs st;
    if (statfs(path, &st) != 0)
        return -(long long)errno;
    return (long long)(unsigned long)st.f_type;
}

long long qm_fstatfs_magic(int fd)
{
    struct statfs st;
    if (fstatfs(fd, &st) != 0)
        return -(long long)errno;
    return (long long)(unsigned long)st.f_type;
}

int qm_open_batch(int n, const char *data, const int64_t *off, int flags, int32_t *fds_out)
{
    int failures = 0;
    for (int i = 0; i < n; i++) {
        int fd = open(data + off[i], flags | O_CLOEXEC);
        if (fd < 0) {
            fds_out[i] = -errno;
            failures++;
        } else {
            fds_out[i] = fd;
        }
    }
    return failures;
}

int qm_pwrite_batch(int n, const int32_t *fds, const char *data, const int64_t *off,
                    const int64_t *len, const uint8_t *trunc, int32_t *err)
{
    int failures = 0;
    for (int i = 0; i < n; i++) {
        ssize_t r;
        do {
            r = pwrite(fds[i], data + off[i], (size_t)len[i], 0);
        } while (r < 0 && errno == EINTR);
        if (r < 0) {
            err[i] = errno;
            failures++;
            continue;
        }
        if (r != (ssize_t)len[i]) {
            err[i] = EIO; /* a short write to a control file is a failed write */
            failures++;
            continue;
        }
        if (trunc != NULL && trunc[i] && ftruncate(fds[i], (off_t)len[i]) != 0) {
            err[i] = errno;
            failures++;
            continue;
        }
        err[i] = 0;
    }
    return failures;
}

int qm_pread_batch(int n, const int32_t *fds, char *out, int64_t stride, int64_t *lens)
{
    int failures = 0;
    for (int i = 0; i < n; i++) {
        ssize_t r;
        do {
            r = pread(fds[i], out + (int64_t)i * stride, (size_t)stride, 0);
        } while (r < 0 && errno == EINTR);
        if (r < 0) {
            lens[i] = -(int64_t)errno;
            failures++;
        } else {
            lens[i] = (int64_t)r;
        }
    }
    return failures;
}

int qm_pread_compare(int n, const int32_t *fds, const char *data, const int64_t *off,
                     const int64_t *len, uint8_t *same)
{
    char buf[QM_COMPARE_MAX];
    int differ = 0;
    for (int i = 0; i < n; i++) {
        ssize_t r = -1;
        if (len[i] >= 0 && len[i] < QM_COMPARE_MAX) {
            do {
                r = pread(fds[i], buf, (size_t)len[i] + 1, 0);  /* one byte more: a longer file differs */
            } while (r < 0 && errno == EINTR);
        }
        same[i] = (uint8_t)(r == (ssize_t)len[i] && memcmp(buf, data + off[i], (size_t)len[i]) == 0);
        differ += !same[i];
    }
    return differ;
}

void qm_close_batch(int n, const int32_t *fds)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}
