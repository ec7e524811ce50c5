/* tests/util/fault_shim.c: an LD_PRELOAD library that makes the writes of a
 * process fail the way a full or broken disk does, for the fault-injection
 * tests (built with the tests only, never linked into normgate).
 *
 * Which files: those whose path contains NG_FAULT_PATH (a substring; unset or
 * empty: the shim does nothing). A file descriptor is watched from the open()
 * that names such a path (open, open64, openat, openat64, creat) to its
 * close(); rename() is watched when either of its paths contains it.
 *
 * What fails, with errno NG_FAULT_ERRNO ("ENOSPC", the default, or "EIO"):
 *   NG_FAULT_BYTES=N  the disk holds N more bytes of watched writes: the write
 *                     that crosses N writes what fits (a short write), every
 *                     later one fails (write, pwrite, writev and their 64
 *                     forms); fsync and rename are left alone.
 *   NG_FAULT_CALL=N   the N-th watched call (1-based) fails, and so does every
 *                     later one of its kind; NG_FAULT_ON picks the kind
 *                     counted: "write" (write, pwrite, writev), "fsync"
 *                     (fsync, fdatasync) or "rename"; unset: all three.
 * Memory: NG_FAULT_MALLOC_BYTES=N makes every malloc of exactly N bytes
 * (operator new's too) return NULL with ENOMEM: an out-of-memory in the
 * middle of a run, where an up-front check has passed.
 * Each injected failure prints one line "fault_shim: ..." on stderr, so a
 * test can tell that the fault was reached.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 4096

static unsigned char watched[MAX_FD];
static long long bytes_left = -1; /* -1: no byte budget */
static long long call_n = -1;     /* -1: no call count */
static long long calls = 0;
static int fail_errno = ENOSPC;
static int failed_kind[3]; /* write, fsync, rename: failing from now on */
static const char* on = NULL;
static const char* needle = NULL;
static int ready = 0;

enum { K_WRITE = 0, K_FSYNC = 1, K_RENAME = 2 };
static const char* kind_name[3] = {"write", "fsync", "rename"};

static void setup(void) {
  if (ready) return;
  ready = 1;
  needle = getenv("NG_FAULT_PATH");
  if (needle && !*needle) needle = NULL;
  const char* b = getenv("NG_FAULT_BYTES");
  if (b && *b) bytes_left = atoll(b);
  const char* c = getenv("NG_FAULT_CALL");
  if (c && *c) call_n = atoll(c);
  const char* e = getenv("NG_FAULT_ERRNO");
  if (e && strcmp(e, "EIO") == 0) fail_errno = EIO;
  on = getenv("NG_FAULT_ON");
  if (on && !*on) on = NULL;
}

static int matches(const char* path) { return needle && path && strstr(path, needle) != NULL; }

static void say(int kind, const char* what) {
  char line[512];
  const int n = snprintf(line, sizeof line, "fault_shim: %s failed with %s (%s)\n", kind_name[kind],
                         fail_errno == EIO ? "EIO" : "ENOSPC", what);
  if (n > 0) {
    ssize_t (*real_write)(int, const void*, size_t) = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
    (void)real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
  }
}

/* A watched call of `kind`: 1 when it must fail (errno set). */
static int call_fails(int kind, const char* what) {
  if (call_n < 0) return 0;
  if (on && strcmp(on, kind_name[kind]) != 0) return 0;
  if (failed_kind[kind]) {
    errno = fail_errno;
    return 1;
  }
  if (++calls < call_n) return 0;
  failed_kind[kind] = 1;
  say(kind, what);
  errno = fail_errno;
  return 1;
}

/* How many of `n` bytes a watched write may write: n, fewer, or -1 (fail). */
static ssize_t budget(int fd, size_t n) {
  if (fd < 0 || fd >= MAX_FD || !watched[fd]) return (ssize_t)n;
  if (call_fails(K_WRITE, "call count")) return -1;
  if (bytes_left < 0) return (ssize_t)n;
  if (bytes_left == 0) {
    if (!failed_kind[K_WRITE]) say(K_WRITE, "byte budget spent");
    failed_kind[K_WRITE] = 1;
    errno = fail_errno;
    return -1;
  }
  const ssize_t ok = (long long)n <= bytes_left ? (ssize_t)n : (ssize_t)bytes_left;
  bytes_left -= ok;
  return ok;
}

static void track(int fd, const char* path) {
  if (fd >= 0 && fd < MAX_FD) watched[fd] = (unsigned char)matches(path);
}

#define REAL(ret, name, ...)                                   \
  static ret (*real_##name)(__VA_ARGS__) = NULL;               \
  if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  setup();
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  REAL(int, open, const char*, int, ...);
  const int fd = real_open(path, flags, m);
  track(fd, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  setup();
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  REAL(int, open64, const char*, int, ...);
  const int fd = real_open64(path, flags, m);
  track(fd, path);
  return fd;
}

int openat(int dirfd, const char* path, int flags, ...) {
  setup();
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  REAL(int, openat, int, const char*, int, ...);
  const int fd = real_openat(dirfd, path, flags, m);
  track(fd, path);
  return fd;
}

int openat64(int dirfd, const char* path, int flags, ...) {
  setup();
  va_list ap;
  va_start(ap, flags);
  const mode_t m = mode_arg(flags, ap);
  va_end(ap);
  REAL(int, openat64, int, const char*, int, ...);
  const int fd = real_openat64(dirfd, path, flags, m);
  track(fd, path);
  return fd;
}

int creat(const char* path, mode_t mode) {
  setup();
  REAL(int, creat, const char*, mode_t);
  const int fd = real_creat(path, mode);
  track(fd, path);
  return fd;
}

int close(int fd) {
  REAL(int, close, int);
  if (fd >= 0 && fd < MAX_FD) watched[fd] = 0;
  return real_close(fd);
}

ssize_t write(int fd, const void* buf, size_t n) {
  setup();
  REAL(ssize_t, write, int, const void*, size_t);
  const ssize_t ok = budget(fd, n);
  if (ok < 0) return -1;
  return real_write(fd, buf, (size_t)ok);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  setup();
  REAL(ssize_t, pwrite, int, const void*, size_t, off_t);
  const ssize_t ok = budget(fd, n);
  if (ok < 0) return -1;
  return real_pwrite(fd, buf, (size_t)ok, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t off) {
  setup();
  REAL(ssize_t, pwrite64, int, const void*, size_t, off64_t);
  const ssize_t ok = budget(fd, n);
  if (ok < 0) return -1;
  return real_pwrite64(fd, buf, (size_t)ok, off);
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  setup();
  REAL(ssize_t, writev, int, const struct iovec*, int);
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += iov[i].iov_len;
  const ssize_t ok = budget(fd, total);
  if (ok < 0) return -1;
  if ((size_t)ok == total) return real_writev(fd, iov, cnt);
  /* a short write: the first `ok` bytes */
  REAL(ssize_t, write, int, const void*, size_t);
  ssize_t done = 0;
  for (int i = 0; i < cnt && done < ok; ++i) {
    const size_t part = iov[i].iov_len < (size_t)(ok - done) ? iov[i].iov_len : (size_t)(ok - done);
    const ssize_t w = real_write(fd, iov[i].iov_base, part);
    if (w < 0) return done ? done : -1;
    done += w;
  }
  return done;
}

int fsync(int fd) {
  setup();
  REAL(int, fsync, int);
  if (fd >= 0 && fd < MAX_FD && watched[fd] && call_fails(K_FSYNC, "call count")) return -1;
  return real_fsync(fd);
}

int fdatasync(int fd) {
  setup();
  REAL(int, fdatasync, int);
  if (fd >= 0 && fd < MAX_FD && watched[fd] && call_fails(K_FSYNC, "call count")) return -1;
  return real_fdatasync(fd);
}

int rename(const char* from, const char* to) {
  setup();
  REAL(int, rename, const char*, const char*);
  if ((matches(from) || matches(to)) && call_fails(K_RENAME, to)) return -1;
  return real_rename(from, to);
}

/* NG_FAULT_MALLOC_BYTES (file comment). glibc's own entry point serves every
 * other size, so no dlsym (which may itself allocate) is needed here. */
extern void* __libc_malloc(size_t n);
static long long malloc_fail = -2; /* -2: not read yet; -1: off */

void* malloc(size_t n) {
  if (malloc_fail == -2) {
    const char* m = getenv("NG_FAULT_MALLOC_BYTES");
    malloc_fail = m && *m ? atoll(m) : -1;
  }
  if (malloc_fail >= 0 && (long long)n == malloc_fail) {
    static const char msg[] = "fault_shim: malloc of the chosen size failed (ENOMEM)\n";
    (void)!write(2, msg, sizeof msg - 1);
    errno = ENOMEM;
    return NULL;
  }
  return __libc_malloc(n);
}
