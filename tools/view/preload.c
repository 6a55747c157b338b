// libsoftverbs-view.so: shows a program the device view `softverbs run` rendered
// (docs/ecosystem.md#the-device-view). Paths under /sys/class/infiniband, /sys/class/infiniband_verbs
// and /dev/infiniband are looked up under $SOFTVERBS_VIEW instead; everything else is untouched.
//
// Why an LD_PRELOAD and not a user + mount namespace with bind mounts: a process in a child user
// namespace fails the kernel's ptrace access check towards a peer of the same uid in the parent
// namespace (security/commoncap.c cap_ptrace_access_check: different user_ns and no
// CAP_SYS_PTRACE there), so its process_vm_writev and pidfd_getfd to programs outside
// `softverbs run` fail with EPERM, and the two could no longer meet as one host.
//
// Written in C against libc only: it is loaded into every program `softverbs run` starts.
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SV_EXPORT __attribute__((visibility("default")))

static const char* const kPrefixes[] = {"/sys/class/infiniband_verbs", "/sys/class/infiniband",
                                        "/dev/infiniband"};

// The view's root, or NULL when the view is off ($SOFTVERBS_VIEW unset or not absolute).
static const char* ViewRoot(void) {
  const char* root = getenv("SOFTVERBS_VIEW");
  return root != NULL && root[0] == '/' ? root : NULL;
}

// Whether `path` is one of the prefixes or lies below one (a boundary at '/' or the end).
static int InView(const char* path) {
  if (path == NULL || path[0] != '/') return 0;
  for (size_t i = 0; i < sizeof(kPrefixes) / sizeof(kPrefixes[0]); ++i) {
    size_t n = strlen(kPrefixes[i]);
    if (strncmp(path, kPrefixes[i], n) == 0 && (path[n] == '\0' || path[n] == '/')) return 1;
  }
  return 0;
}

// `path` itself, or the same path under the view's root written into `buf`.
static const char* Map(const char* path, char* buf) {
  const char* root = ViewRoot();
  if (root == NULL || !InView(path)) return path;
  if (snprintf(buf, PATH_MAX, "%s%s", root, path) >= PATH_MAX) return path;
  return buf;
}

// The next definition of `name` (libc's), looked up once: every open and stat comes through here.
// A race between two first calls only looks it up twice.
#define REAL(name)                                                          \
  ({                                                                        \
    static __typeof__(&name) real_;                                         \
    __typeof__(&name) f = __atomic_load_n(&real_, __ATOMIC_RELAXED);        \
    if (f == NULL) {                                                        \
      f = (__typeof__(&name))dlsym(RTLD_NEXT, #name);                       \
      __atomic_store_n(&real_, f, __ATOMIC_RELAXED);                        \
    }                                                                       \
    f;                                                                      \
  })

// open(2) and friends carry a mode only with O_CREAT / O_TMPFILE.
#define MODE_ARG(flags, mode)                         \
  mode_t mode = 0;                                    \
  if ((flags) & (O_CREAT | O_TMPFILE)) {              \
    va_list ap;                                       \
    va_start(ap, flags);                              \
    mode = (mode_t)va_arg(ap, int);                   \
    va_end(ap);                                       \
  }

SV_EXPORT int open(const char* path, int flags, ...) {
  char b[PATH_MAX];
  MODE_ARG(flags, mode);
  return REAL(open)(Map(path, b), flags, mode);
}
SV_EXPORT int open64(const char* path, int flags, ...) {
  char b[PATH_MAX];
  MODE_ARG(flags, mode);
  return REAL(open64)(Map(path, b), flags, mode);
}
SV_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  char b[PATH_MAX];
  MODE_ARG(flags, mode);
  return REAL(openat)(dirfd, Map(path, b), flags, mode);
}
SV_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  char b[PATH_MAX];
  MODE_ARG(flags, mode);
  return REAL(openat64)(dirfd, Map(path, b), flags, mode);
}
// The _FORTIFY_SOURCE entry points programs built with it call instead.
int __open_2(const char*, int);
int __open64_2(const char*, int);
int __openat_2(int, const char*, int);
int __openat64_2(int, const char*, int);
SV_EXPORT int __open_2(const char* path, int flags) {
  char b[PATH_MAX];
  return REAL(__open_2)(Map(path, b), flags);
}
SV_EXPORT int __open64_2(const char* path, int flags) {
  char b[PATH_MAX];
  return REAL(__open64_2)(Map(path, b), flags);
}
SV_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  char b[PATH_MAX];
  return REAL(__openat_2)(dirfd, Map(path, b), flags);
}
SV_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  char b[PATH_MAX];
  return REAL(__openat64_2)(dirfd, Map(path, b), flags);
}
SV_EXPORT FILE* fopen(const char* path, const char* mode) {
  char b[PATH_MAX];
  return REAL(fopen)(Map(path, b), mode);
}
SV_EXPORT FILE* fopen64(const char* path, const char* mode) {
  char b[PATH_MAX];
  return REAL(fopen64)(Map(path, b), mode);
}
SV_EXPORT DIR* opendir(const char* path) {
  char b[PATH_MAX];
  return REAL(opendir)(Map(path, b));
}
typedef int (*DirFilter)(const struct dirent*);
typedef int (*DirCompare)(const struct dirent**, const struct dirent**);
SV_EXPORT int scandir(const char* path, struct dirent*** list, DirFilter filter, DirCompare cmp) {
  char b[PATH_MAX];
  return REAL(scandir)(Map(path, b), list, filter, cmp);
}
SV_EXPORT int stat(const char* path, struct stat* st) {
  char b[PATH_MAX];
  return REAL(stat)(Map(path, b), st);
}
SV_EXPORT int stat64(const char* path, struct stat64* st) {
  char b[PATH_MAX];
  return REAL(stat64)(Map(path, b), st);
}
SV_EXPORT int lstat(const char* path, struct stat* st) {
  char b[PATH_MAX];
  return REAL(lstat)(Map(path, b), st);
}
SV_EXPORT int lstat64(const char* path, struct stat64* st) {
  char b[PATH_MAX];
  return REAL(lstat64)(Map(path, b), st);
}
SV_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  char b[PATH_MAX];
  return REAL(fstatat)(dirfd, Map(path, b), st, flags);
}
SV_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  char b[PATH_MAX];
  return REAL(fstatat64)(dirfd, Map(path, b), st, flags);
}
SV_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* st) {
  char b[PATH_MAX];
  return REAL(statx)(dirfd, Map(path, b), flags, mask, st);
}
// Programs built against glibc < 2.33 call the versioned stat wrappers.
int __xstat(int, const char*, struct stat*);
int __xstat64(int, const char*, struct stat64*);
int __lxstat(int, const char*, struct stat*);
int __lxstat64(int, const char*, struct stat64*);
int __fxstatat(int, int, const char*, struct stat*, int);
int __fxstatat64(int, int, const char*, struct stat64*, int);
SV_EXPORT int __xstat(int ver, const char* path, struct stat* st) {
  char b[PATH_MAX];
  return REAL(__xstat)(ver, Map(path, b), st);
}
SV_EXPORT int __xstat64(int ver, const char* path, struct stat64* st) {
  char b[PATH_MAX];
  return REAL(__xstat64)(ver, Map(path, b), st);
}
SV_EXPORT int __lxstat(int ver, const char* path, struct stat* st) {
  char b[PATH_MAX];
  return REAL(__lxstat)(ver, Map(path, b), st);
}
SV_EXPORT int __lxstat64(int ver, const char* path, struct stat64* st) {
  char b[PATH_MAX];
  return REAL(__lxstat64)(ver, Map(path, b), st);
}
SV_EXPORT int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  char b[PATH_MAX];
  return REAL(__fxstatat)(ver, dirfd, Map(path, b), st, flags);
}
SV_EXPORT int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  char b[PATH_MAX];
  return REAL(__fxstatat64)(ver, dirfd, Map(path, b), st, flags);
}
SV_EXPORT int access(const char* path, int mode) {
  char b[PATH_MAX];
  return REAL(access)(Map(path, b), mode);
}
SV_EXPORT int faccessat(int dirfd, const char* path, int mode, int flags) {
  char b[PATH_MAX];
  return REAL(faccessat)(dirfd, Map(path, b), mode, flags);
}
SV_EXPORT int euidaccess(const char* path, int mode) {
  char b[PATH_MAX];
  return REAL(euidaccess)(Map(path, b), mode);
}
SV_EXPORT int eaccess(const char* path, int mode) {
  char b[PATH_MAX];
  return REAL(eaccess)(Map(path, b), mode);
}
SV_EXPORT ssize_t readlink(const char* path, char* out, size_t size) {
  char b[PATH_MAX];
  return REAL(readlink)(Map(path, b), out, size);
}
SV_EXPORT ssize_t readlinkat(int dirfd, const char* path, char* out, size_t size) {
  char b[PATH_MAX];
  return REAL(readlinkat)(dirfd, Map(path, b), out, size);
}
// realpath resolves inside libc (its lstat/readlink calls are not interposable), so map first.
SV_EXPORT char* realpath(const char* path, char* resolved) {
  char b[PATH_MAX];
  return REAL(realpath)(Map(path, b), resolved);
}
SV_EXPORT char* canonicalize_file_name(const char* path) {
  char b[PATH_MAX];
  return REAL(canonicalize_file_name)(Map(path, b));
}
SV_EXPORT int chdir(const char* path) {
  char b[PATH_MAX];
  return REAL(chdir)(Map(path, b));
}
char* __realpath_chk(const char*, char*, size_t);
ssize_t __readlink_chk(const char*, char*, size_t, size_t);
SV_EXPORT char* __realpath_chk(const char* path, char* resolved, size_t resolved_len) {
  char b[PATH_MAX];
  return REAL(__realpath_chk)(Map(path, b), resolved, resolved_len);
}
SV_EXPORT ssize_t __readlink_chk(const char* path, char* out, size_t size, size_t out_len) {
  char b[PATH_MAX];
  return REAL(__readlink_chk)(Map(path, b), out, size, out_len);
}
