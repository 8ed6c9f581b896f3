/* qosmanager._native._sysio -- small syscall helpers for the executor and the host layer.
 *
 * Every batch call takes parallel arrays and reports one result per element, so
 * one failing file never hides the others.  No call allocates.
 */
#include <stdint.h>

/* Filesystem magic (statfs f_type) of a path or descriptor; -errno on failure. */
long long qm_statfs_magic(const char *path);
long long qm_fstatfs_magic(int fd);

/* Open n paths, packed NUL-terminated in data at the given offsets.
 * fds_out[i] is the descriptor or -errno.  Returns the number of failures. */
int qm_open_batch(int n, const char *data, const int64_t *off, int flags, int32_t *fds_out);

/* For each i: pwrite(fds[i], data + off[i], len[i], 0), retrying EINTR; when
 * trunc[i] is set, ftruncate the file to len[i] afterwards (regular files).
 * err[i] is 0 or the errno.  Returns the number of failures. */
int qm_pwrite_batch(int n, const int32_t *fds, const char *data, const int64_t *off,
                    const int64_t *len, const uint8_t *trunc, int32_t *err);

/* For each i: pread(fds[i], out + i * stride, stride, 0).  lens[i] is the byte
 * count or -errno.  Returns the number of failures. */
int qm_pread_batch(int n, const int32_t *fds, char *out, int64_t stride, int64_t *lens);

/* For each i: does fds[i] hold exactly the len[i] bytes at data + off[i] (read from offset 0,
 * retrying EINTR)?  same[i] is 1 or 0 (a failed read, or more or fewer bytes, is 0); an expected
 * length of QM_COMPARE_MAX or more never matches.  Returns the number of files that differ. */
#define QM_COMPARE_MAX 4096
int qm_pread_compare(int n, const int32_t *fds, const char *data, const int64_t *off,
                     const int64_t *len, uint8_t *same);

/* Close n descriptors (negative entries are skipped). */
void qm_close_batch(int n, const int32_t *fds);
