/* tests/audit/h5_fault_shim.c: an LD_PRELOAD library that simulates a full
 * disk for the files a test names, to check that writers fail cleanly (exit
 * 3 naming the path, no half-written file, no crash at exit).
 *
 *   H5_FAULT_MATCH=SUBSTRING  only files whose path (readlink of
 *                             /proc/self/fd/N) contains SUBSTRING are affected
 *   H5_FAULT_AFTER=N          bytes those files may take in all (default 0);
 *                             a write past that writes what fits, then fails
 *                             with ENOSPC; fsync/fdatasync fail with ENOSPC
 *                             once the budget is spent
 *
 * Wrapped: write, pwrite, pwrite64, writev, fsync, fdatasync. Without
 * H5_FAULT_MATCH every call passes through unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long g_used = 0;
static int g_spent = 0;

static int matches(int fd) {
  const char *m = getenv("H5_FAULT_MATCH");
  if (m == NULL || *m == '\0') return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strstr(path, m) != NULL;
}

static long long budget(void) {
  const char *a = getenv("H5_FAULT_AFTER");
  return a ? atoll(a) : 0;
}

/* How many of n bytes may go to fd: n when it is not affected, else what is
 * left of the budget (-1 with errno ENOSPC when nothing is). */
static ssize_t allowed(int fd, size_t n) {
  if (!matches(fd)) return (ssize_t)n;
  const long long left = budget() - g_used;
  if (left <= 0) {
    g_spent = 1;
    errno = ENOSPC;
    return -1;
  }
  return (ssize_t)((long long)n < left ? (long long)n : left);
}

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

ssize_t write(int fd, const void *buf, size_t n) {
  static ssize_t (*f)(int, const void *, size_t);
  if (!f) f = (ssize_t (*)(int, const void *, size_t))real("write");
  const ssize_t k = allowed(fd, n);
  if (k < 0) return -1;
  const ssize_t r = f(fd, buf, (size_t)k);
  if (r > 0 && matches(fd)) g_used += r;
  return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
  static ssize_t (*f)(int, const void *, size_t, off_t);
  if (!f) f = (ssize_t (*)(int, const void *, size_t, off_t))real("pwrite");
  const ssize_t k = allowed(fd, n);
  if (k < 0) return -1;
  const ssize_t r = f(fd, buf, (size_t)k, off);
  if (r > 0 && matches(fd)) g_used += r;
  return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  static ssize_t (*f)(int, const struct iovec *, int);
  if (!f) f = (ssize_t (*)(int, const struct iovec *, int))real("writev");
  if (!matches(fd)) return f(fd, iov, cnt);
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += iov[i].iov_len;
  const ssize_t k = allowed(fd, total);
  if (k < 0) return -1;
  /* Write only the first k bytes, iovec by iovec. */
  ssize_t done = 0;
  for (int i = 0; i < cnt && done < k; ++i) {
    const size_t want = iov[i].iov_len < (size_t)(k - done) ? iov[i].iov_len : (size_t)(k - done);
    const ssize_t r = write(fd, iov[i].iov_base, want);
    if (r < 0) return done > 0 ? done : -1;
    done += r;
    if ((size_t)r < want) break;
  }
  return done;
}

static int sync_common(int fd, const char *name) {
  int (*f)(int) = (int (*)(int))real(name);
  if (matches(fd) && (g_spent || g_used >= budget())) {
    errno = ENOSPC;
    return -1;
  }
  return f(fd);
}

int fsync(int fd) { return sync_common(fd, "fsync"); }
int fdatasync(int fd) { return sync_common(fd, "fdatasync"); }
