/* faultfs.c: LD_PRELOAD test shim: injects I/O faults and models what a power loss keeps. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/*
 * Environment (read once, at load):
 *   FAULTFS_ROOT   directory prefix; only files below it are affected.
 *   FAULTFS_CTL    control file with fault rules, re-read whenever it changes:
 *                    fail OP ERRNO GLOB COUNT [partial]    e.g. fail fdatasync EIO *.seg 1
 *                    clear                                  drops the rules above it
 *                  OP is a family (write, fsync, ftruncate, open, rename, unlink, mkdir) or
 *                  one call (pwrite, writev, fdatasync, msync, openat, ...); GLOB matches the
 *                  file's base name; COUNT is a number or `*` (until cleared). `partial`
 *                  (write only): the first hit writes half and returns a short count, the
 *                  next one fails. Each fault that fires appends a line to FAULTFS_CTL.hits.
 *   FAULTFS_IMAGE  power-loss model (a new or empty directory):
 *                    inodes/<id>  durable content of every file ever seen below the root
 *                    tree/        the durable namespace: hard links to inodes/<id>
 *                    journal      every operation not yet durable, in order, appended
 *                                 before the intercepted call returns (survives kill -9)
 *                    base/<id>    content of each file found at start (J_BASEFILE), as found
 *                  tests/faultfs/powerloss.py turns an image into a post-power-loss data dir.
 *   FAULTFS_SYNC_DELAY_US  a slow disk: every fsync/fdatasync below the root waits this long
 *                  first, so a kill more often finds writes that are not yet durable.
 *
 * The model follows POSIX and Linux: a write is durable once fsync/fdatasync of its file
 * returns 0 (or at once on an O_SYNC/O_DSYNC descriptor); ftruncate and O_TRUNC are
 * pending like writes; creating, renaming and unlinking a name is durable once its
 * directory is fsynced. A failed fsync drops the file's pending writes from the durable
 * image for good, as Linux does (the "fsyncgate" semantics). Stores through shared
 * writable mappings are not modelled (ingestd's LMDB does not use MDB_WRITEMAP).
 */

#define FD_MAX     65536
#define JMAGIC     0x4a464646u /* "FFFJ" */
#define COPY_CHUNK (1u << 20)

enum jtype {
    J_WRITE = 1,   /* id, a = offset, b = 1 when durable at once (O_DSYNC), payload = data */
    J_TRUNC = 2,   /* id, a = size */
    J_SETTLE = 3,  /* id: every earlier op of the file is settled; a = 1 when lost (failed fsync) */
    J_CREATE = 4,  /* id, payload "dir\0name" */
    J_MKDIR = 5,   /* payload "dir\0name" */
    J_RENAME = 6,  /* payload "olddir\0oldname\0newdir\0newname"; owned by newdir */
    J_UNLINK = 7,  /* a = 1 for rmdir, payload "dir\0name" */
    J_DIRSYNC = 8, /* payload "dir": every earlier op owned by dir is durable */
    J_BASEDIR = 9, /* payload "dir": existed (durably) when the process started */
    J_BASEFILE = 10, /* id, payload "path": existed when the process started */
    J_EXCHANGE = 11  /* payload "dir1\0name1\0dir2\0name2": the two names swap their objects
                        (renameat2 RENAME_EXCHANGE) in one step; owned by dir2, as a rename, so
                        an exchange within one directory is durable after that directory's
                        fsync, whole or not at all */
};

struct jhdr {
    uint32_t magic, type;
    uint64_t seq, id, a, b;
    uint32_t plen, pad;
};

enum fam { F_WRITE, F_FSYNC, F_FTRUNCATE, F_OPEN, F_RENAME, F_UNLINK, F_MKDIR };
static const char *const fam_names[] = {"write",  "fsync",  "ftruncate", "open",
                                        "rename", "unlink", "mkdir"};

struct rule {
    char fn[24];
    char glob[128];
    int err;
    long count; /* -1: until cleared */
    int partial, armed;
};

struct op {
    int type, dsync;
    uint64_t seq, off, len, jpos;
};

struct inode {
    dev_t dev;
    ino_t ino;
    uint64_t id;
    struct op *ops;
    size_t nops, cap;
};

struct dirop {
    int type;
    uint64_t id, flag;
    char *dir, *name, *dir2, *name2;
};

struct dir {
    char *rel;
    struct dirop *ops;
    size_t nops, cap;
};

struct fdent {
    int used, isdir, dsync, append;
    uint64_t id;
    dev_t dev;
    ino_t ino;
    char *rel; /* path below the root as opened ("" for the root itself) */
};

struct mapping {
    char *addr;
    size_t len;
    char *rel;
};

#define MAX_MAPS 64

static struct {
    int active;
    char root[PATH_MAX], root_real[PATH_MAX];
    char ctl[PATH_MAX];
    char img[PATH_MAX];
    int image;
    long sync_delay_us;
    pthread_mutex_t mu;
    struct fdent *fds;
    _Atomic unsigned char *tracked;
    /* fault rules */
    struct rule *rules;
    size_t nrules;
    ino_t ctl_ino;
    struct timespec ctl_mtime;
    off_t ctl_size;
    int ctl_seen;
    /* image */
    int jfd, jrfd;
    uint64_t jpos, seq, next_id;
    struct inode *inodes;
    size_t ninodes, icap;
    struct dir *dirs;
    size_t ndirs, dcap;
    struct mapping maps[MAX_MAPS];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .jfd = -1, .jrfd = -1};

/* ---- the real functions ---- */

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* dlsym returns an object pointer; copying it avoids ISO C's ban on casting it to a function. */
#define RESOLVE(name)                                                                              \
    do {                                                                                           \
        void *p_ = dlsym(RTLD_NEXT, #name);                                                        \
        memcpy(&real_##name, &p_, sizeof(p_));                                                     \
    } while (0)

static void resolve(void)
{
    RESOLVE(open);
    RESOLVE(openat);
    RESOLVE(close);
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(writev);
    RESOLVE(pwritev);
    RESOLVE(ftruncate);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(msync);
    RESOLVE(rename);
    RESOLVE(renameat);
    RESOLVE(renameat2);
    RESOLVE(linkat);
    RESOLVE(unlink);
    RESOLVE(unlinkat);
    RESOLVE(mkdir);
    RESOLVE(mkdirat);
    RESOLVE(mmap);
    RESOLVE(munmap);
}

#define REAL() pthread_once(&resolve_once, resolve)

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("faultfs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* snprintf into a path buffer; a path that does not fit is a test set-up error. */
static void pathf(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void pathf(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        die("path too long: %s", out);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q)
        die("out of memory");
    return q;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        die("out of memory");
    return p;
}

/* ---- paths ---- */

/* Lexically normalises an absolute path in place: no "//", "." or "..", no trailing '/'. */
static void normalise(char *p)
{
    char *out = p, *s = p;
    while (*s) {
        while (*s == '/')
            s++;
        if (!*s)
            break;
        char *e = s;
        while (*e && *e != '/')
            e++;
        size_t n = (size_t)(e - s);
        if (n == 1 && s[0] == '.') {
            /* skip */
        } else if (n == 2 && s[0] == '.' && s[1] == '.') {
            while (out > p && *(out - 1) != '/')
                out--;
            if (out > p)
                out--;
        } else {
            *out++ = '/';
            memmove(out, s, n);
            out += n;
        }
        s = e;
    }
    if (out == p)
        *out++ = '/';
    *out = '\0';
}

static int fd_path(int dirfd, char *out, size_t len)
{
    if (dirfd >= 0 && dirfd < FD_MAX && g.fds[dirfd].used && g.fds[dirfd].isdir) {
        const char *rel = g.fds[dirfd].rel;
        pathf(out, len, "%s%s%s", g.root, *rel ? "/" : "", rel);
        return 0;
    }
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, out, len - 1);
    if (n < 0)
        return -1;
    out[n] = '\0';
    return 0;
}

/* The path of (dirfd, path) relative to the root, or NULL when it is outside (or unknown). */
static const char *rel_path(int dirfd, const char *path, char *buf, size_t len)
{
    char base[PATH_MAX];
    if (!path)
        return NULL;
    if (path[0] == '/') {
        base[0] = '\0';
    } else if (dirfd == AT_FDCWD) {
        if (!getcwd(base, sizeof(base)))
            return NULL;
    } else if (fd_path(dirfd, base, sizeof(base)) != 0) {
        return NULL;
    }
    if ((size_t)snprintf(buf, len, "%s/%s", base, path) >= len)
        return NULL;
    normalise(buf);
    const char *roots[2] = {g.root, g.root_real};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(roots[i]);
        if (n == 0 || strncmp(buf, roots[i], n) != 0)
            continue;
        if (buf[n] == '\0')
            return "";
        if (buf[n] == '/')
            return buf + n + 1;
    }
    return NULL;
}

static const char *base_name(const char *rel)
{
    const char *s = strrchr(rel, '/');
    return s ? s + 1 : rel;
}

/* Splits rel into its directory ("" for the root) and name. */
static void split(const char *rel, char *dir, size_t dlen, const char **name)
{
    const char *s = strrchr(rel, '/');
    if (!s) {
        dir[0] = '\0';
        *name = rel;
        return;
    }
    snprintf(dir, dlen, "%.*s", (int)(s - rel), rel);
    *name = s + 1;
}

/* ---- fault rules ---- */

static const struct {
    const char *name;
    int err;
} errnames[] = {{"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS},
                {"EACCES", EACCES}, {"EPERM", EPERM},   {"EINTR", EINTR},   {"ENOMEM", ENOMEM},
                {"EFBIG", EFBIG},   {"EAGAIN", EAGAIN}, {"ENOENT", ENOENT}, {"EBADF", EBADF},
                {"EEXIST", EEXIST}, {"EMFILE", EMFILE}, {"EINVAL", EINVAL}, {"ENOSYS", ENOSYS}};

static int parse_errno(const char *s)
{
    for (size_t i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
        if (strcmp(s, errnames[i].name) == 0)
            return errnames[i].err;
    return atoi(s);
}

static const char *errno_name(int err)
{
    for (size_t i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
        if (errnames[i].err == err)
            return errnames[i].name;
    return "E?";
}

static void load_rules(void)
{
    char buf[16384];
    int fd = real_open(g.ctl, O_RDONLY | O_CLOEXEC);
    ssize_t n = 0;
    g.nrules = 0;
    if (fd < 0)
        return;
    size_t got = 0;
    while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    real_close(fd);
    buf[got] = '\0';
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char verb[16], fn[24], err[16], glob[128], count[24], extra[16];
        int k = sscanf(line, "%15s %23s %15s %127s %23s %15s", verb, fn, err, glob, count, extra);
        if (k >= 1 && strcmp(verb, "clear") == 0) {
            g.nrules = 0;
            continue;
        }
        if (k < 5 || strcmp(verb, "fail") != 0)
            continue;
        g.rules = xrealloc(g.rules, (g.nrules + 1) * sizeof(*g.rules));
        struct rule *r = &g.rules[g.nrules++];
        memset(r, 0, sizeof(*r));
        snprintf(r->fn, sizeof(r->fn), "%s", fn);
        snprintf(r->glob, sizeof(r->glob), "%s", glob);
        r->err = parse_errno(err);
        r->count = strcmp(count, "*") == 0 ? -1 : atol(count);
        r->partial = k >= 6 && strcmp(extra, "partial") == 0;
    }
}

/* Re-reads the control file when it changed (a new inode, mtime or size). Under g.mu. */
static void refresh_rules(void)
{
    struct stat st;
    if (!g.ctl[0])
        return;
    if (stat(g.ctl, &st) != 0) {
        if (g.ctl_seen) {
            g.ctl_seen = 0;
            g.nrules = 0;
        }
        return;
    }
    if (g.ctl_seen && st.st_ino == g.ctl_ino && st.st_size == g.ctl_size &&
        st.st_mtim.tv_sec == g.ctl_mtime.tv_sec && st.st_mtim.tv_nsec == g.ctl_mtime.tv_nsec)
        return;
    g.ctl_seen = 1;
    g.ctl_ino = st.st_ino;
    g.ctl_size = st.st_size;
    g.ctl_mtime = st.st_mtim;
    load_rules();
}

static void note_hit(const char *fn, int err, const char *rel)
{
    char path[PATH_MAX + 8], line[PATH_MAX + 64];
    pathf(path, sizeof(path), "%s.hits", g.ctl);
    int n = snprintf(line, sizeof(line), "%s %s %s\n", fn, errno_name(err), rel);
    int fd = real_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (real_write(fd, line, (size_t)n) < 0) {
        /* best effort: the hit itself still happens */
    }
    real_close(fd);
}

/*
 * The rule that makes call `fn` of family `fam` on `rel` fail now, consuming one count;
 * NULL when none. *partial is set when the call should write half and succeed short.
 */
static struct rule *fault(enum fam fam, const char *fn, const char *rel, int *partial)
{
    *partial = 0;
    refresh_rules();
    for (size_t i = 0; i < g.nrules; i++) {
        struct rule *r = &g.rules[i];
        if (r->count == 0)
            continue;
        if (strcmp(r->fn, fn) != 0 && strcmp(r->fn, fam_names[fam]) != 0)
            continue;
        if (fnmatch(r->glob, base_name(rel), 0) != 0)
            continue;
        if (r->partial && !r->armed) {
            r->armed = 1;
            *partial = 1;
            return r;
        }
        if (r->count > 0)
            r->count--;
        note_hit(fn, r->err, rel);
        return r;
    }
    return NULL;
}

/* ---- the image: journal ---- */

static void jwrite_all(const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = real_write(g.jfd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("writing the journal: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
        g.jpos += (uint64_t)n;
    }
}

/* Appends one record; returns the journal position of its payload. Under g.mu. */
static uint64_t journal(enum jtype type, uint64_t id, uint64_t a, uint64_t b, const void *payload,
                        size_t plen, uint64_t *seq)
{
    struct jhdr h = {.magic = JMAGIC,
                     .type = type,
                     .seq = ++g.seq,
                     .id = id,
                     .a = a,
                     .b = b,
                     .plen = (uint32_t)plen};
    if (seq)
        *seq = h.seq;
    /* One write per record where possible, so a kill tears at most the last one. */
    size_t total = sizeof(h) + plen;
    char *buf = malloc(total);
    uint64_t at = g.jpos + sizeof(h);
    if (buf) {
        memcpy(buf, &h, sizeof(h));
        if (plen)
            memcpy(buf + sizeof(h), payload, plen);
        jwrite_all(buf, total);
        free(buf);
    } else {
        jwrite_all(&h, sizeof(h));
        jwrite_all(payload, plen);
    }
    return at;
}

/* "a\0b\0..." payloads for directory records. */
static size_t pack(char *out, size_t len, const char *const *parts, int n)
{
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(parts[i]);
        if (pos + l + 1 > len)
            die("path too long");
        memcpy(out + pos, parts[i], l + 1);
        pos += l + 1;
    }
    return pos - 1; /* no trailing NUL */
}

static void inode_path(char *out, size_t len, uint64_t id)
{
    pathf(out, len, "%s/inodes/%llu", g.img, (unsigned long long)id);
}

static void tree_path(char *out, size_t len, const char *rel)
{
    pathf(out, len, "%s/tree%s%s", g.img, *rel ? "/" : "", rel);
}

static void mkdirs(const char *path)
{
    char buf[PATH_MAX];
    pathf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        real_mkdir(buf, 0755);
        *p = '/';
    }
    real_mkdir(buf, 0755);
}

/* ---- the image: inodes ---- */

static struct inode *inode_by_id(uint64_t id)
{
    for (size_t i = 0; i < g.ninodes; i++)
        if (g.inodes[i].id == id)
            return &g.inodes[i];
    return NULL;
}

static struct inode *inode_by_ino(dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < g.ninodes; i++)
        if (g.inodes[i].dev == dev && g.inodes[i].ino == ino)
            return &g.inodes[i];
    return NULL;
}

/* A new inode entry; any older entry for the same (dev, ino) is a reused number, forgotten. */
static struct inode *inode_new(dev_t dev, ino_t ino, mode_t mode)
{
    struct inode *old = inode_by_ino(dev, ino);
    if (old) {
        old->dev = 0;
        old->ino = 0;
    }
    if (g.ninodes == g.icap) {
        g.icap = g.icap ? g.icap * 2 : 32;
        g.inodes = xrealloc(g.inodes, g.icap * sizeof(*g.inodes));
    }
    struct inode *in = &g.inodes[g.ninodes++];
    memset(in, 0, sizeof(*in));
    in->dev = dev;
    in->ino = ino;
    in->id = g.next_id++;
    char path[PATH_MAX];
    inode_path(path, sizeof(path), in->id);
    int fd = real_open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0777);
    if (fd < 0)
        die("creating %s: %s", path, strerror(errno));
    real_close(fd);
    return in;
}

static void inode_add_op(struct inode *in, const struct op *op)
{
    if (in->nops == in->cap) {
        in->cap = in->cap ? in->cap * 2 : 16;
        in->ops = xrealloc(in->ops, in->cap * sizeof(*in->ops));
    }
    in->ops[in->nops++] = *op;
}

/* Copies `len` journal bytes from `jpos` to `fd` at `off`. */
static void copy_from_journal(int fd, uint64_t jpos, uint64_t off, uint64_t len)
{
    static char buf[COPY_CHUNK];
    while (len > 0) {
        size_t n = len > sizeof(buf) ? sizeof(buf) : (size_t)len;
        ssize_t r = pread(g.jrfd, buf, n, (off_t)jpos);
        if (r <= 0)
            die("reading the journal: %s", r < 0 ? strerror(errno) : "short");
        if (real_pwrite(fd, buf, (size_t)r, (off_t)off) != r)
            die("writing an inode image: %s", strerror(errno));
        jpos += (uint64_t)r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
}

/*
 * Settles a file's pending operations: applies them to its durable image (all of them after
 * a successful fsync; after a failed one only the O_DSYNC writes, which were durable already,
 * the rest being lost for good) and records that in the journal.
 */
static void settle(struct inode *in, int lost)
{
    if (!g.image)
        return;
    if (in->nops > 0) {
        char path[PATH_MAX];
        inode_path(path, sizeof(path), in->id);
        int fd = real_open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            die("opening %s: %s", path, strerror(errno));
        for (size_t i = 0; i < in->nops; i++) {
            const struct op *op = &in->ops[i];
            if (lost && !op->dsync)
                continue;
            if (op->type == J_WRITE)
                copy_from_journal(fd, op->jpos, op->off, op->len);
            else if (real_ftruncate(fd, (off_t)op->off) != 0)
                die("truncating %s: %s", path, strerror(errno));
        }
        real_close(fd);
    }
    journal(J_SETTLE, in->id, (uint64_t)lost, 0, NULL, 0, NULL);
    in->nops = 0;
}

/* ---- the image: directories ---- */

static struct dir *dir_get(const char *rel)
{
    for (size_t i = 0; i < g.ndirs; i++)
        if (strcmp(g.dirs[i].rel, rel) == 0)
            return &g.dirs[i];
    if (g.ndirs == g.dcap) {
        g.dcap = g.dcap ? g.dcap * 2 : 16;
        g.dirs = xrealloc(g.dirs, g.dcap * sizeof(*g.dirs));
    }
    struct dir *d = &g.dirs[g.ndirs++];
    memset(d, 0, sizeof(*d));
    d->rel = xstrdup(rel);
    return d;
}

static void dir_op(enum jtype type, uint64_t id, uint64_t flag, const char *dir, const char *name,
                   const char *dir2, const char *name2)
{
    char payload[4 * PATH_MAX];
    const char *parts[4] = {dir, name, dir2, name2};
    size_t plen = pack(payload, sizeof(payload), parts, dir2 ? 4 : 2);
    journal(type, id, flag, 0, payload, plen, NULL);
    struct dir *d = dir_get(dir2 ? dir2 : dir);
    if (d->nops == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 8;
        d->ops = xrealloc(d->ops, d->cap * sizeof(*d->ops));
    }
    struct dirop *o = &d->ops[d->nops++];
    o->type = type;
    o->id = id;
    o->flag = flag;
    o->dir = xstrdup(dir);
    o->name = xstrdup(name);
    o->dir2 = dir2 ? xstrdup(dir2) : NULL;
    o->name2 = name2 ? xstrdup(name2) : NULL;
}

static void join_rel(char *out, size_t len, const char *dir, const char *name)
{
    pathf(out, len, "%s%s%s", dir, *dir ? "/" : "", name);
}

/* Applies one directory operation to the durable tree. */
static void tree_apply(const struct dirop *o)
{
    char rel[PATH_MAX], path[PATH_MAX], path2[PATH_MAX], dpath[PATH_MAX];
    join_rel(rel, sizeof(rel), o->dir, o->name);
    tree_path(path, sizeof(path), rel);
    tree_path(dpath, sizeof(dpath), o->dir);
    mkdirs(dpath); /* a directory may hold durable entries before it is durably linked */
    switch (o->type) {
    case J_CREATE: {
        char ipath[PATH_MAX];
        inode_path(ipath, sizeof(ipath), o->id);
        real_unlinkat(AT_FDCWD, path, 0);
        if (real_linkat(AT_FDCWD, ipath, AT_FDCWD, path, 0) != 0)
            die("linking %s: %s", path, strerror(errno));
        break;
    }
    case J_MKDIR:
        real_mkdir(path, 0755);
        break;
    case J_RENAME: {
        char rel2[PATH_MAX], dpath2[PATH_MAX];
        join_rel(rel2, sizeof(rel2), o->dir2, o->name2);
        tree_path(path2, sizeof(path2), rel2);
        tree_path(dpath2, sizeof(dpath2), o->dir2);
        mkdirs(dpath2);
        real_renameat(AT_FDCWD, path, AT_FDCWD, path2);
        break;
    }
    case J_EXCHANGE: { /* the model's own tree: three renames do (nothing else looks at it) */
        char rel2[PATH_MAX], dpath2[PATH_MAX], tmp[PATH_MAX];
        struct stat s1, s2;
        join_rel(rel2, sizeof(rel2), o->dir2, o->name2);
        tree_path(path2, sizeof(path2), rel2);
        tree_path(dpath2, sizeof(dpath2), o->dir2);
        mkdirs(dpath2);
        int have1 = lstat(path, &s1) == 0, have2 = lstat(path2, &s2) == 0;
        if (have1 && have2) {
            pathf(tmp, sizeof(tmp), "%s.faultfs-exchange", path);
            if (real_renameat(AT_FDCWD, path, AT_FDCWD, tmp) != 0 ||
                real_renameat(AT_FDCWD, path2, AT_FDCWD, path) != 0 ||
                real_renameat(AT_FDCWD, tmp, AT_FDCWD, path2) != 0)
                die("exchanging %s and %s: %s", path, path2, strerror(errno));
        } else if (have1) {
            real_renameat(AT_FDCWD, path, AT_FDCWD, path2);
        } else if (have2) {
            real_renameat(AT_FDCWD, path2, AT_FDCWD, path);
        }
        break;
    }
    case J_UNLINK:
        real_unlinkat(AT_FDCWD, path, o->flag ? AT_REMOVEDIR : 0);
        break;
    default:
        break;
    }
}

static void dir_settle(const char *rel)
{
    struct dir *d = dir_get(rel);
    for (size_t i = 0; i < d->nops; i++) {
        struct dirop *o = &d->ops[i];
        tree_apply(o);
        free(o->dir);
        free(o->name);
        free(o->dir2);
        free(o->name2);
    }
    d->nops = 0;
    journal(J_DIRSYNC, 0, 0, 0, rel, strlen(rel), NULL);
}

/* A file found on disk that the model has not seen: taken as durable as it is now. */
static struct inode *adopt(const char *rel, const struct stat *st)
{
    char src[PATH_MAX], ipath[PATH_MAX], tpath[PATH_MAX], dpath[PATH_MAX], dir[PATH_MAX];
    const char *name;
    struct inode *in = inode_by_ino(st->st_dev, st->st_ino);
    if (in)
        return in;
    in = inode_new(st->st_dev, st->st_ino, st->st_mode);
    pathf(src, sizeof(src), "%s%s%s", g.root, *rel ? "/" : "", rel);
    inode_path(ipath, sizeof(ipath), in->id);
    /* base/<id> keeps the content as found, which settles never change: powerloss.py --at
     * rebuilds the durable state at any journal position from it and the journal. */
    char bdir[PATH_MAX], bpath[PATH_MAX];
    pathf(bdir, sizeof(bdir), "%s/base", g.img);
    mkdirs(bdir);
    pathf(bpath, sizeof(bpath), "%s/%llu", bdir, (unsigned long long)in->id);
    int s = real_open(src, O_RDONLY | O_CLOEXEC);
    int d = real_open(ipath, O_WRONLY | O_CLOEXEC);
    int b = real_open(bpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st->st_mode & 0777);
    if (s < 0 || d < 0 || b < 0)
        die("copying %s: %s", src, strerror(errno));
    static char buf[COPY_CHUNK];
    ssize_t n;
    off_t off = 0;
    while ((n = read(s, buf, sizeof(buf))) > 0) {
        if (real_pwrite(d, buf, (size_t)n, off) != n || real_pwrite(b, buf, (size_t)n, off) != n)
            die("copying %s: %s", src, strerror(errno));
        off += n;
    }
    real_close(s);
    real_close(d);
    real_close(b);
    split(rel, dir, sizeof(dir), &name);
    tree_path(dpath, sizeof(dpath), dir);
    mkdirs(dpath);
    tree_path(tpath, sizeof(tpath), rel);
    real_unlinkat(AT_FDCWD, tpath, 0);
    if (real_linkat(AT_FDCWD, ipath, AT_FDCWD, tpath, 0) != 0)
        die("linking %s: %s", tpath, strerror(errno));
    journal(J_BASEFILE, in->id, 0, 0, rel, strlen(rel), NULL);
    return in;
}

static void baseline(const char *rel)
{
    char path[PATH_MAX], tpath[PATH_MAX];
    pathf(path, sizeof(path), "%s%s%s", g.root, *rel ? "/" : "", rel);
    tree_path(tpath, sizeof(tpath), rel);
    mkdirs(tpath);
    journal(J_BASEDIR, 0, 0, 0, rel, strlen(rel), NULL);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char child[PATH_MAX], cpath[PATH_MAX];
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        join_rel(child, sizeof(child), rel, e->d_name);
        pathf(cpath, sizeof(cpath), "%s/%s", path, e->d_name);
        if (lstat(cpath, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            baseline(child);
        else if (S_ISREG(st.st_mode))
            adopt(child, &st);
    }
    closedir(d);
}

__attribute__((constructor)) static void faultfs_init(void)
{
    const char *root = getenv("FAULTFS_ROOT");
    const char *ctl = getenv("FAULTFS_CTL");
    const char *img = getenv("FAULTFS_IMAGE");
    const char *delay = getenv("FAULTFS_SYNC_DELAY_US");
    REAL();
    if (!root || !*root)
        return;
    if (root[0] != '/' || strlen(root) >= sizeof(g.root))
        die("FAULTFS_ROOT must be an absolute path");
    pathf(g.root, sizeof(g.root), "%s", root);
    normalise(g.root);
    if (!realpath(g.root, g.root_real))
        g.root_real[0] = '\0';
    if (delay)
        g.sync_delay_us = atol(delay);
    if (ctl && *ctl)
        pathf(g.ctl, sizeof(g.ctl), "%s", ctl);
    g.fds = calloc(FD_MAX, sizeof(*g.fds));
    g.tracked = calloc(FD_MAX, sizeof(*g.tracked));
    if (!g.fds || !g.tracked)
        die("out of memory");
    if (img && *img) {
        char path[PATH_MAX];
        pathf(g.img, sizeof(g.img), "%s", img);
        mkdirs(g.img);
        pathf(path, sizeof(path), "%s/journal", g.img);
        g.jfd = real_open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (g.jfd < 0)
            die("FAULTFS_IMAGE %s: %s (it must be a new directory per process)", path,
                strerror(errno));
        g.jrfd = real_open(path, O_RDONLY | O_CLOEXEC);
        pathf(path, sizeof(path), "%s/inodes", g.img);
        mkdirs(path);
        g.image = 1;
        g.next_id = 1;
        baseline("");
    }
    g.active = 1;
}

/* ---- descriptor table ---- */

static struct fdent *tracked(int fd)
{
    if (!g.active || fd < 0 || fd >= FD_MAX ||
        !atomic_load_explicit(&g.tracked[fd], memory_order_relaxed))
        return NULL;
    return &g.fds[fd];
}

static void untrack(int fd)
{
    struct fdent *e = &g.fds[fd];
    free(e->rel);
    memset(e, 0, sizeof(*e));
    atomic_store_explicit(&g.tracked[fd], 0, memory_order_relaxed);
}

/* Under g.mu: is the entry still the file it was opened as (not a reused fd number)? */
static struct fdent *valid(int fd)
{
    struct fdent *e = &g.fds[fd];
    struct stat st;
    if (!e->used)
        return NULL;
    if (fstat(fd, &st) != 0 || st.st_dev != e->dev || st.st_ino != e->ino) {
        untrack(fd);
        return NULL;
    }
    return e;
}

/* Records a descriptor just opened on `rel`; `created`: the open made the file. */
static void track_open(int fd, const char *rel, int flags, mode_t mode, int created)
{
    struct stat st;
    if (fd < 0 || fd >= FD_MAX || fstat(fd, &st) != 0)
        return;
    struct fdent *e = &g.fds[fd];
    free(e->rel);
    memset(e, 0, sizeof(*e));
    e->used = 1;
    e->rel = xstrdup(rel);
    e->dev = st.st_dev;
    e->ino = st.st_ino;
    e->isdir = S_ISDIR(st.st_mode);
    e->dsync = (flags & O_DSYNC) != 0; /* O_SYNC includes O_DSYNC on Linux */
    e->append = (flags & O_APPEND) != 0;
    atomic_store_explicit(&g.tracked[fd], 1, memory_order_relaxed);
    if (!g.image || e->isdir || !S_ISREG(st.st_mode))
        return;
    struct inode *in;
    if (created) {
        char dir[PATH_MAX];
        const char *name;
        in = inode_new(st.st_dev, st.st_ino, mode);
        split(rel, dir, sizeof(dir), &name);
        dir_op(J_CREATE, in->id, 0, dir, name, NULL, NULL);
    } else {
        in = inode_by_ino(st.st_dev, st.st_ino);
        if (!in)
            in = adopt(rel, &st);
        if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
            struct op op = {.type = J_TRUNC, .off = 0};
            journal(J_TRUNC, in->id, 0, 0, NULL, 0, &op.seq);
            inode_add_op(in, &op);
        }
    }
    e->id = in->id;
}

/* ---- writes ---- */

/* Journals `n` bytes just written through `e` at `off`, gathered from `iov`. Under g.mu. */
static void record_write(struct fdent *e, const struct iovec *iov, int iovcnt, size_t n,
                         uint64_t off)
{
    if (!g.image || e->isdir || n == 0)
        return;
    struct inode *in = inode_by_id(e->id);
    if (!in)
        return;
    char *buf = malloc(n ? n : 1);
    if (!buf)
        die("out of memory");
    size_t pos = 0;
    for (int i = 0; i < iovcnt && pos < n; i++) {
        size_t k = iov[i].iov_len < n - pos ? iov[i].iov_len : n - pos;
        memcpy(buf + pos, iov[i].iov_base, k);
        pos += k;
    }
    struct op op = {.type = J_WRITE, .dsync = e->dsync, .off = off, .len = n};
    op.jpos = journal(J_WRITE, in->id, off, (uint64_t)e->dsync, buf, n, &op.seq);
    free(buf);
    inode_add_op(in, &op);
    /* A synchronous write with nothing older pending is durable at once. */
    if (e->dsync && in->nops == 1)
        settle(in, 0);
}

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
    size_t t = 0;
    for (int i = 0; i < iovcnt; i++)
        t += iov[i].iov_len;
    return t;
}

/*
 * The common path of every write-family call. `off` < 0: at the file position.
 * `call` performs the real write of up to `limit` bytes.
 */
static ssize_t do_write(int fd, const char *fn, const struct iovec *iov, int iovcnt, off_t off,
                        ssize_t (*call)(int, const struct iovec *, int, off_t))
{
    struct fdent *e;
    REAL();
    if (!tracked(fd))
        return call(fd, iov, iovcnt, off);
    pthread_mutex_lock(&g.mu);
    e = valid(fd);
    if (!e) {
        pthread_mutex_unlock(&g.mu);
        return call(fd, iov, iovcnt, off);
    }
    int partial;
    struct rule *r = fault(F_WRITE, fn, e->rel, &partial);
    struct iovec half[1];
    const struct iovec *use = iov;
    int usecnt = iovcnt;
    if (r && !partial) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    size_t total = iov_total(iov, iovcnt);
    if (partial) {
        /* The first half of the first buffer: a short write, as a filling disk gives. */
        half[0].iov_base = iov[0].iov_base;
        half[0].iov_len = total / 2 < iov[0].iov_len ? total / 2 : iov[0].iov_len;
        use = half;
        usecnt = 1;
    }
    uint64_t at;
    if (off >= 0) {
        at = (uint64_t)off;
    } else if (e->append) {
        struct stat st;
        at = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    } else {
        off_t cur = lseek(fd, 0, SEEK_CUR);
        at = cur < 0 ? 0 : (uint64_t)cur;
    }
    ssize_t n = call(fd, use, usecnt, off);
    int saved = errno;
    if (n > 0)
        record_write(e, use, usecnt, (size_t)n, at);
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return n;
}

static ssize_t call_write(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
    (void)off;
    if (iovcnt == 1)
        return real_write(fd, iov[0].iov_base, iov[0].iov_len);
    return real_writev(fd, iov, iovcnt);
}

static ssize_t call_writev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
    (void)off;
    return real_writev(fd, iov, iovcnt);
}

static ssize_t call_pwrite(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
    if (iovcnt == 1)
        return real_pwrite(fd, iov[0].iov_base, iov[0].iov_len, off);
    return real_pwritev(fd, iov, iovcnt, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = n};
    return do_write(fd, "write", &v, 1, -1, call_write);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = n};
    return do_write(fd, "pwrite", &v, 1, off, call_pwrite);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = n};
    return do_write(fd, "pwrite64", &v, 1, (off_t)off, call_pwrite);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    return do_write(fd, "writev", iov, iovcnt, -1, call_writev);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
    return do_write(fd, "pwritev", iov, iovcnt, off, call_pwrite);
}

/* ---- truncate and sync ---- */

static int do_ftruncate(int fd, const char *fn, off_t len)
{
    REAL();
    if (!tracked(fd))
        return real_ftruncate(fd, len);
    pthread_mutex_lock(&g.mu);
    struct fdent *e = valid(fd);
    if (!e) {
        pthread_mutex_unlock(&g.mu);
        return real_ftruncate(fd, len);
    }
    int partial;
    struct rule *r = fault(F_FTRUNCATE, fn, e->rel, &partial);
    if (r) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    int rc = real_ftruncate(fd, len);
    int saved = errno;
    if (rc == 0 && g.image && !e->isdir) {
        struct inode *in = inode_by_id(e->id);
        if (in) {
            struct op op = {.type = J_TRUNC, .off = (uint64_t)len};
            journal(J_TRUNC, in->id, (uint64_t)len, 0, NULL, 0, &op.seq);
            inode_add_op(in, &op);
        }
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int ftruncate(int fd, off_t len)
{
    return do_ftruncate(fd, "ftruncate", len);
}

int ftruncate64(int fd, off64_t len)
{
    return do_ftruncate(fd, "ftruncate64", (off_t)len);
}

static int do_sync(int fd, const char *fn, int (*call)(int))
{
    REAL();
    if (!tracked(fd))
        return call(fd);
    if (g.sync_delay_us > 0) {
        struct timespec ts = {.tv_sec = g.sync_delay_us / 1000000,
                              .tv_nsec = (g.sync_delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&g.mu);
    struct fdent *e = valid(fd);
    if (!e) {
        pthread_mutex_unlock(&g.mu);
        return call(fd);
    }
    int partial;
    struct rule *r = fault(F_FSYNC, fn, e->rel, &partial);
    struct inode *in = g.image && !e->isdir ? inode_by_id(e->id) : NULL;
    if (r) {
        /* Linux marks the failed pages clean: what they held never reaches the disk. */
        int err = r->err;
        if (in)
            settle(in, 1);
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    int rc = call(fd);
    int saved = errno;
    if (rc == 0 && g.image) {
        if (e->isdir)
            dir_settle(e->rel);
        else if (in)
            settle(in, 0);
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int fsync(int fd)
{
    REAL();
    return do_sync(fd, "fsync", real_fsync);
}

int fdatasync(int fd)
{
    REAL();
    return do_sync(fd, "fdatasync", real_fdatasync);
}

/* Shared mappings of tracked files, so msync faults can match the file's name. */
static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    REAL();
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED || !tracked(fd) || !(flags & MAP_SHARED))
        return p;
    pthread_mutex_lock(&g.mu);
    struct fdent *e = valid(fd);
    for (int i = 0; e && i < MAX_MAPS; i++) {
        if (!g.maps[i].addr) {
            g.maps[i].addr = p;
            g.maps[i].len = len;
            g.maps[i].rel = xstrdup(e->rel);
            break;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return do_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    return do_mmap(addr, len, prot, flags, fd, (off_t)off);
}

int munmap(void *addr, size_t len)
{
    REAL();
    if (g.active) {
        pthread_mutex_lock(&g.mu);
        for (int i = 0; i < MAX_MAPS; i++) {
            if (g.maps[i].addr == addr) {
                free(g.maps[i].rel);
                memset(&g.maps[i], 0, sizeof(g.maps[i]));
            }
        }
        pthread_mutex_unlock(&g.mu);
    }
    return real_munmap(addr, len);
}

int msync(void *addr, size_t len, int flags)
{
    REAL();
    if (!g.active)
        return real_msync(addr, len, flags);
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < MAX_MAPS; i++) {
        struct mapping *m = &g.maps[i];
        if (!m->addr || (char *)addr < m->addr || (char *)addr >= m->addr + m->len)
            continue;
        int partial;
        struct rule *r = fault(F_FSYNC, "msync", m->rel, &partial);
        if (r) {
            int err = r->err;
            pthread_mutex_unlock(&g.mu);
            errno = err;
            return -1;
        }
        break;
    }
    pthread_mutex_unlock(&g.mu);
    return real_msync(addr, len, flags);
}

/* ---- open and close ---- */

static int do_open(int dirfd, const char *path, int flags, mode_t mode, const char *fn)
{
    char buf[PATH_MAX];
    REAL();
    if (!g.active)
        return real_openat(dirfd, path, flags, mode);
    pthread_mutex_lock(&g.mu);
    const char *rel = rel_path(dirfd, path, buf, sizeof(buf));
    if (!rel) {
        pthread_mutex_unlock(&g.mu);
        return real_openat(dirfd, path, flags, mode);
    }
    int partial;
    struct rule *r = fault(F_OPEN, fn, rel, &partial);
    if (r) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    struct stat st;
    int existed = (flags & O_CREAT) ? stat(buf, &st) == 0 : 1;
    int fd = real_openat(dirfd, path, flags, mode);
    int saved = errno;
    if (fd >= 0)
        track_open(fd, rel, flags, mode, !existed);
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, mode, "open");
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, mode, "open");
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, mode, "openat");
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, mode, "openat");
}

/* The _FORTIFY_SOURCE entry points; glibc declares them only in its fortify headers. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

int __open_2(const char *path, int flags)
{
    return do_open(AT_FDCWD, path, flags, 0, "open");
}

int __open64_2(const char *path, int flags)
{
    return do_open(AT_FDCWD, path, flags, 0, "open");
}

int __openat_2(int dirfd, const char *path, int flags)
{
    return do_open(dirfd, path, flags, 0, "openat");
}

int __openat64_2(int dirfd, const char *path, int flags)
{
    return do_open(dirfd, path, flags, 0, "openat");
}

int creat(const char *path, mode_t mode)
{
    return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, "creat");
}

int creat64(const char *path, mode_t mode)
{
    return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, "creat");
}

int close(int fd)
{
    REAL();
    if (tracked(fd)) {
        pthread_mutex_lock(&g.mu);
        if (g.fds[fd].used)
            untrack(fd);
        pthread_mutex_unlock(&g.mu);
    }
    return real_close(fd);
}

/* ---- names ---- */

/* rename/renameat (flags 0) and renameat2: RENAME_EXCHANGE is journalled as J_EXCHANGE; any
 * other flags (RENAME_NOREPLACE) only decide whether it happens: then it is a plain rename. */
static int call_rename(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                       unsigned int flags)
{
    if (flags == 0)
        return real_renameat(olddirfd, oldpath, newdirfd, newpath);
    if (!real_renameat2) {
        errno = ENOSYS;
        return -1;
    }
    return real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

static int do_rename(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
                     unsigned int flags, const char *fn)
{
    char b1[PATH_MAX], b2[PATH_MAX];
    REAL();
    if (!g.active)
        return call_rename(olddirfd, oldpath, newdirfd, newpath, flags);
    pthread_mutex_lock(&g.mu);
    const char *r1 = rel_path(olddirfd, oldpath, b1, sizeof(b1));
    const char *r2 = rel_path(newdirfd, newpath, b2, sizeof(b2));
    if (!r1 && !r2) {
        pthread_mutex_unlock(&g.mu);
        return call_rename(olddirfd, oldpath, newdirfd, newpath, flags);
    }
    int partial;
    struct rule *r = fault(F_RENAME, fn, r2 ? r2 : r1, &partial);
    if (r) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    int rc = call_rename(olddirfd, oldpath, newdirfd, newpath, flags);
    int saved = errno;
    if (rc == 0 && g.image && r1 && r2) {
        char d1[PATH_MAX], d2[PATH_MAX];
        const char *n1, *n2;
        split(r1, d1, sizeof(d1), &n1);
        split(r2, d2, sizeof(d2), &n2);
        dir_op((flags & RENAME_EXCHANGE) ? J_EXCHANGE : J_RENAME, 0, 0, d1, n1, d2, n2);
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int rename(const char *oldpath, const char *newpath)
{
    return do_rename(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0, "rename");
}

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    return do_rename(olddirfd, oldpath, newdirfd, newpath, 0, "renameat");
}

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned int flags)
{
    return do_rename(olddirfd, oldpath, newdirfd, newpath, flags, "renameat2");
}

/* A hard link is a new name for a file that exists: recorded as a create of that name for the
 * file's inode, durable (as any name) only after its directory's fsync. */
static int do_link(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
    char b1[PATH_MAX], b2[PATH_MAX];
    REAL();
    int rc = real_linkat(olddirfd, oldpath, newdirfd, newpath, flags);
    if (rc != 0 || !g.active)
        return rc;
    int saved = errno;
    pthread_mutex_lock(&g.mu);
    const char *r1 = rel_path(olddirfd, oldpath, b1, sizeof(b1));
    const char *r2 = rel_path(newdirfd, newpath, b2, sizeof(b2));
    struct stat st;
    if (g.image && r1 && r2 && fstatat(newdirfd, newpath, &st, 0) == 0 && S_ISREG(st.st_mode)) {
        struct inode *in = inode_by_ino(st.st_dev, st.st_ino);
        if (!in)
            in = adopt(r1, &st);
        char dir[PATH_MAX];
        const char *name;
        split(r2, dir, sizeof(dir), &name);
        dir_op(J_CREATE, in->id, 0, dir, name, NULL, NULL);
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int link(const char *oldpath, const char *newpath)
{
    return do_link(AT_FDCWD, oldpath, AT_FDCWD, newpath, 0);
}

int linkat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags)
{
    return do_link(olddirfd, oldpath, newdirfd, newpath, flags);
}

static int do_unlink(int dirfd, const char *path, int flags, const char *fn)
{
    char buf[PATH_MAX];
    REAL();
    if (!g.active)
        return real_unlinkat(dirfd, path, flags);
    pthread_mutex_lock(&g.mu);
    const char *rel = rel_path(dirfd, path, buf, sizeof(buf));
    if (!rel) {
        pthread_mutex_unlock(&g.mu);
        return real_unlinkat(dirfd, path, flags);
    }
    int partial;
    struct rule *r = fault(F_UNLINK, fn, rel, &partial);
    if (r) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    int rc = real_unlinkat(dirfd, path, flags);
    int saved = errno;
    if (rc == 0 && g.image) {
        char d[PATH_MAX];
        const char *n;
        split(rel, d, sizeof(d), &n);
        dir_op(J_UNLINK, 0, (flags & AT_REMOVEDIR) ? 1 : 0, d, n, NULL, NULL);
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int unlink(const char *path)
{
    return do_unlink(AT_FDCWD, path, 0, "unlink");
}

int unlinkat(int dirfd, const char *path, int flags)
{
    return do_unlink(dirfd, path, flags, "unlinkat");
}

/* rmdir is unlinkat(AT_REMOVEDIR): `rebuild` removes the store it moved aside with it. */
int rmdir(const char *path)
{
    return do_unlink(AT_FDCWD, path, AT_REMOVEDIR, "rmdir");
}

static int do_mkdir(int dirfd, const char *path, mode_t mode, const char *fn)
{
    char buf[PATH_MAX];
    REAL();
    if (!g.active)
        return real_mkdirat(dirfd, path, mode);
    pthread_mutex_lock(&g.mu);
    const char *rel = rel_path(dirfd, path, buf, sizeof(buf));
    if (!rel || !*rel) {
        pthread_mutex_unlock(&g.mu);
        return real_mkdirat(dirfd, path, mode);
    }
    int partial;
    struct rule *r = fault(F_MKDIR, fn, rel, &partial);
    if (r) {
        int err = r->err;
        pthread_mutex_unlock(&g.mu);
        errno = err;
        return -1;
    }
    int rc = real_mkdirat(dirfd, path, mode);
    int saved = errno;
    if (rc == 0 && g.image) {
        char d[PATH_MAX];
        const char *n;
        split(rel, d, sizeof(d), &n);
        dir_op(J_MKDIR, 0, 0, d, n, NULL, NULL);
    }
    pthread_mutex_unlock(&g.mu);
    errno = saved;
    return rc;
}

int mkdir(const char *path, mode_t mode)
{
    return do_mkdir(AT_FDCWD, path, mode, "mkdir");
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
    return do_mkdir(dirfd, path, mode, "mkdirat");
}
