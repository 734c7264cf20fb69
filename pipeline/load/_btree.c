/* Integer columns of one SQLite table, read straight off the file's b-tree into caller's arrays.
 *
 * The loader's fast path (pipeline/load/btree.py): an export's large tables (kernels, CUDA API
 * calls) hold small integers in every column it reads, so decoding each row through SQLite's VM and
 * API costs more than reading the record itself. This walks the table's b-tree (the file format:
 * https://www.sqlite.org/fileformat2.html, sections 1.6 and 2.1) in rowid order and decodes the
 * wanted columns of each record.
 *
 * It only ever reads, with pread (a file cut short while it is read is a short read, not a fault that would
 * end the process, as a memory mapping of it would). It gives up (returns GI_GIVE_UP, the loader then reads the table through
 * SQLite as before) on anything that is not plainly an integer or NULL in a wanted column (a REAL, a
 * TEXT, a BLOB), a column a record does not hold (added later by ALTER TABLE: its default applies), a
 * record that spills onto overflow pages before its wanted values end, and on any page or offset
 * that is not what the format says (GI_MALFORMED): SQLite then reports the damage itself.
 *
 * Loaded with ctypes (the GIL is released during a call); the module init below only makes the file
 * importable like any extension module.
 */
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define GI_OK 0
#define GI_GIVE_UP 1
#define GI_MALFORMED 2
#define GI_OS_ERROR 3
#define GI_FULL 4
#define GI_WIDEN 100 /* + c: column c holds a value beyond int32 (its caller made room for int32 only) */
#define GI_NULLS 400 /* + c: column c holds a NULL and its caller gave it no NULL mask */
#define MAX_DEPTH 64

typedef struct {
    int fd;
    uint64_t size;
    uint32_t page_size, usable, pages;
    uint64_t visited;
    uint8_t *level[MAX_DEPTH + 2]; /* one interior page per depth of the walk */
    uint8_t *window;               /* WINDOW_PAGES consecutive pages read at once (leaves come in order) */
    uint32_t window_first, window_count;
} db_t;

#define WINDOW_PAGES 64

typedef struct {
    int ncols;            /* wanted columns */
    const int32_t *cids;  /* their positions in the table's records */
    int ipk;              /* the INTEGER PRIMARY KEY column (the rowid itself), -1: none */
    int max_cid;
    int32_t slot[256];    /* record position -> output column, -1: not wanted (cids < 256) */
    int64_t capacity, rows, last_rowid;
    void **out;           /* per column: int64_t[] or, where width is 4, int32_t[] */
    const int8_t *width;
    uint8_t **nulls;
    int count_only;
    int32_t first_child, end_child; /* the root's children walked: [first, end); end < 0: all of them */
    int64_t first_rowid;            /* the first row's rowid (with last_rowid: the span read) */
} job_t;

static int varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        x = (x << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) { *v = x; return i + 1; }
    }
    if (p + 8 >= end) return 0;
    *v = (x << 8) | p[8];
    return 9;
}

static int64_t serial_size(uint64_t t) {
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1};
    if (t < 12) return sizes[t];
    return (int64_t)((t - 12) / 2);
}

static int put(job_t *job, int s, int64_t r, int64_t v) {
    if (job->width[s] == 4) {
        if (v < INT32_MIN || v > INT32_MAX) return GI_WIDEN + s;
        ((int32_t *)job->out[s])[r] = (int32_t)v;
    } else {
        ((int64_t *)job->out[s])[r] = v;
    }
    return GI_OK;
}

static int64_t read_int(const uint8_t *p, int64_t n) {
    int64_t v = (int8_t)p[0]; /* sign from the first (big-endian) byte */
    for (int64_t i = 1; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Read exactly ``n`` bytes at ``off``; 0 on a short read (the file changed under us) or an error. */
static int read_at(int fd, uint8_t *buf, size_t n, uint64_t off) {
    while (n) {
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 0;
        buf += got; n -= (size_t)got; off += (uint64_t)got;
    }
    return 1;
}

/* Page ``pgno`` read with pread (never mapped: a file cut short while read gives a short read here, where
 * a mapping would kill the process), from a window of consecutive pages (an export's leaves come in order).
 * NULL when it is beyond the file or cannot be read. Valid until the next call. */
static const uint8_t *page_at(db_t *db, uint32_t pgno) {
    if (pgno == 0 || pgno > db->pages) return NULL;
    if (!(pgno >= db->window_first && pgno < db->window_first + db->window_count)) {
        uint32_t count = db->pages - pgno + 1 < WINDOW_PAGES ? db->pages - pgno + 1 : WINDOW_PAGES;
        db->window_count = 0;
        if (!read_at(db->fd, db->window, (size_t)count * db->page_size, (uint64_t)(pgno - 1) * db->page_size))
            return NULL;
        db->window_first = pgno;
        db->window_count = count;
    }
    return db->window + (size_t)(pgno - db->window_first) * db->page_size;
}

/* One leaf cell: the wanted values of its record into row job->rows. */
static int leaf_cell(db_t *db, job_t *job, const uint8_t *cell, const uint8_t *page_end) {
    uint64_t payload, rowid;
    int n = varint(cell, page_end, &payload);
    if (!n) return GI_MALFORMED;
    cell += n;
    n = varint(cell, page_end, &rowid);
    if (!n) return GI_MALFORMED;
    cell += n;
    if (job->rows > 0 && (int64_t)rowid <= job->last_rowid) return GI_MALFORMED;
    if (job->rows == 0) job->first_rowid = (int64_t)rowid;
    job->last_rowid = (int64_t)rowid;
    if (job->rows >= job->capacity) return GI_FULL; /* more rows than the caller made room for */
    uint64_t local = payload, x = db->usable - 35;
    if (payload > x) {
        uint64_t m = ((uint64_t)(db->usable - 12) * 32 / 255) - 23;
        uint64_t k = m + (payload - m) % (db->usable - 4);
        local = k <= x ? k : m;
    }
    const uint8_t *rec = cell, *rec_end = cell + local;
    if (rec_end > page_end) return GI_MALFORMED;
    uint64_t header;
    n = varint(rec, rec_end, &header);
    if (!n) return GI_MALFORMED;
    if (header > local) return GI_GIVE_UP; /* the record's header goes on onto an overflow page */
    const uint8_t *types = rec + n, *types_end = rec + header;
    uint64_t body = header;
    int64_t r = job->rows;
    int found = 0;
    for (int cid = 0; cid <= job->max_cid; cid++) {
        uint64_t t;
        if (types >= types_end) break; /* the record ends before this column */
        n = varint(types, types_end, &t);
        if (!n) return GI_MALFORMED;
        types += n;
        int64_t size = serial_size(t);
        if (size < 0) return GI_MALFORMED;
        int s = job->slot[cid];
        if (s >= 0) {
            int64_t v = 0;
            found++;
            if (cid == job->ipk) {
                if (t != 0) return GI_GIVE_UP;
                v = (int64_t)rowid;
            } else if (t >= 1 && t <= 6) {
                if (body + (uint64_t)size > local) return GI_GIVE_UP; /* on an overflow page */
                v = read_int(rec + body, size);
            } else if (t == 8 || t == 9) {
                v = (int64_t)(t - 8);
            } else if (t != 0) {
                return GI_GIVE_UP; /* REAL, TEXT or BLOB: SQLite's path says what it is */
            }
            if (job->nulls[s]) {
                job->nulls[s][r] = t == 0 && cid != job->ipk;
            } else if (t == 0 && cid != job->ipk) {
                return GI_NULLS + s; /* masks are made only for columns that need one */
            }
            int rc = put(job, s, r, v);
            if (rc) return rc;
        }
        body += (uint64_t)size;
    }
    if (found != job->ncols) return GI_GIVE_UP; /* a wanted column the record does not hold */
    job->rows++;
    return GI_OK;
}

static int walk(db_t *db, job_t *job, uint32_t pgno, int depth) {
    if (depth > MAX_DEPTH || ++db->visited > db->pages) return GI_MALFORMED;
    const uint8_t *pg = page_at(db, pgno);
    if (!pg) return GI_MALFORMED;
    if ((pg + (pgno == 1 ? 100 : 0))[0] == 0x05) { /* interior: kept in its depth's buffer while its children are read */
        if (!db->level[depth] && !(db->level[depth] = malloc(db->page_size))) return GI_OS_ERROR;
        memcpy(db->level[depth], pg, db->page_size);
        pg = db->level[depth];
    }
    const uint8_t *page_end = pg + db->usable;
    const uint8_t *hdr = pg + (pgno == 1 ? 100 : 0);
    uint8_t kind = hdr[0];
    uint32_t cells = ((uint32_t)hdr[3] << 8) | hdr[4];
    if (kind == 0x0D) { /* table leaf */
        const uint8_t *ptrs = hdr + 8;
        if (ptrs + 2 * (size_t)cells > page_end) return GI_MALFORMED;
        if (job->count_only) { job->rows += cells; return GI_OK; }
        for (uint32_t i = 0; i < cells; i++) {
            uint32_t off = ((uint32_t)ptrs[2 * i] << 8) | ptrs[2 * i + 1];
            if (off < (uint32_t)(ptrs + 2 * cells - pg) || off >= db->usable) return GI_MALFORMED;
            int rc = leaf_cell(db, job, pg + off, page_end);
            if (rc) return rc;
        }
        return GI_OK;
    }
    if (kind != 0x05) return GI_MALFORMED; /* not a table b-tree page */
    const uint8_t *ptrs = hdr + 12;
    if (ptrs + 2 * (size_t)cells > page_end) return GI_MALFORMED;
    /* the children walked: all of them, or at the root the range the caller asked for (child ``cells``: the
     * right-most pointer) */
    uint32_t first = 0, end = cells + 1;
    if (depth == 0 && job->end_child >= 0) {
        if (job->first_child < 0 || job->first_child > job->end_child || (uint32_t)job->end_child > cells + 1)
            return GI_GIVE_UP;
        first = (uint32_t)job->first_child;
        end = (uint32_t)job->end_child;
    }
    for (uint32_t i = first; i < end && i < cells; i++) {
        uint32_t off = ((uint32_t)ptrs[2 * i] << 8) | ptrs[2 * i + 1];
        if (off < (uint32_t)(ptrs + 2 * cells - pg) || off + 4 > db->usable) return GI_MALFORMED;
        const uint8_t *c = pg + off;
        uint32_t child = ((uint32_t)c[0] << 24) | ((uint32_t)c[1] << 16) | ((uint32_t)c[2] << 8) | c[3];
        int rc = walk(db, job, child, depth + 1);
        if (rc) return rc;
    }
    if (end <= cells) return GI_OK;
    uint32_t right = ((uint32_t)hdr[8] << 24) | ((uint32_t)hdr[9] << 16) | ((uint32_t)hdr[10] << 8) | hdr[11];
    return walk(db, job, right, depth + 1);
}

static void close_db(db_t *db) {
    for (int i = 0; i < MAX_DEPTH + 2; i++) free(db->level[i]);
    free(db->window);
    if (db->fd >= 0) close(db->fd);
}

static int open_db(const char *path, db_t *db) {
    memset(db, 0, sizeof(*db));
    uint8_t h[100];
    db->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (db->fd < 0) return GI_OS_ERROR;
    struct stat st;
    if (fstat(db->fd, &st) != 0) return GI_OS_ERROR;
    if (st.st_size < 100 || !read_at(db->fd, h, 100, 0) || memcmp(h, "SQLite format 3", 16) != 0) return GI_MALFORMED;
    db->size = (uint64_t)st.st_size;
    uint32_t ps = ((uint32_t)h[16] << 8) | h[17];
    db->page_size = ps == 1 ? 65536 : ps;
    if (db->page_size < 512 || (db->page_size & (db->page_size - 1)) || h[20] > db->page_size - 480) return GI_MALFORMED;
    db->usable = db->page_size - h[20];
    db->pages = (uint32_t)(db->size / db->page_size);
    db->window = malloc((size_t)WINDOW_PAGES * db->page_size);
    return db->window ? GI_OK : GI_OS_ERROR;
}

/* Rows of the table whose b-tree starts at page ``root`` of the file at ``path`` (count_only), or the
 * ``ncols`` columns at record positions ``cids`` (``ipk``: the position whose value is the rowid, -1 if
 * none) of every row, in rowid order, into ``out[c][row]`` (int64, or int32 where ``width[c]`` is 4) with
 * ``nulls[c][row]`` 1 where NULL (its ``out`` 0; ``nulls[c]`` NULL: no mask, and a NULL in column c stops the
 * read with GI_NULLS + c), at most ``capacity`` rows. ``rows`` receives the rows counted or read. Returns a GI_*
 * code (GI_WIDEN + c: column c needs int64). */
int gi_read_part(const char *path, uint32_t root, int ncols, const int32_t *cids, int ipk, int64_t capacity,
                 void **out, const int8_t *width, uint8_t **nulls, int count_only, int32_t first_child,
                 int32_t end_child, int64_t *rows, int64_t *span);

int gi_read(const char *path, uint32_t root, int ncols, const int32_t *cids, int ipk, int64_t capacity,
            void **out, const int8_t *width, uint8_t **nulls, int count_only, int64_t *rows) {
    return gi_read_part(path, root, ncols, cids, ipk, capacity, out, width, nulls, count_only, 0, -1, rows, NULL);
}

/* The root page's children (its cells and right-most pointer) into ``children``: 0 when the root is a leaf
 * (the whole table on one page). Returns a GI_* code. */
int gi_children(const char *path, uint32_t root, int64_t *children) {
    db_t db;
    *children = 0;
    int rc = open_db(path, &db);
    if (!rc) {
        const uint8_t *pg = page_at(&db, root);
        if (!pg) {
            rc = GI_MALFORMED;
        } else {
            const uint8_t *hdr = pg + (root == 1 ? 100 : 0);
            uint32_t cells = ((uint32_t)hdr[3] << 8) | hdr[4];
            if (hdr[0] == 0x05) *children = (int64_t)cells + 1;
            else if (hdr[0] != 0x0D) rc = GI_MALFORMED;
        }
    }
    close_db(&db);
    return rc;
}

/* :func:`gi_read` of the rows under the root's children ``first_child`` to ``end_child`` (exclusive; ``end_child``
 * < 0: every row), the rowids of the first and last row read into ``span[0]``, ``span[1]`` (when not NULL):
 * two such reads of adjacent ranges, on two threads, read the table in two parts. */
int gi_read_part(const char *path, uint32_t root, int ncols, const int32_t *cids, int ipk, int64_t capacity,
                 void **out, const int8_t *width, uint8_t **nulls, int count_only, int32_t first_child,
                 int32_t end_child, int64_t *rows, int64_t *span) {
    db_t db;
    *rows = 0;
    job_t job;
    memset(&job, 0, sizeof(job));
    job.ncols = ncols; job.cids = cids; job.ipk = ipk; job.capacity = capacity;
    job.first_child = first_child; job.end_child = end_child;
    job.out = out; job.width = width; job.nulls = nulls; job.count_only = count_only; job.max_cid = -1;
    for (int i = 0; i < 256; i++) job.slot[i] = -1;
    for (int c = 0; c < ncols; c++) {
        if (cids[c] < 0 || cids[c] > 255 || job.slot[cids[c]] >= 0) return GI_GIVE_UP;
        job.slot[cids[c]] = c;
        if (cids[c] > job.max_cid) job.max_cid = cids[c];
    }
    int rc = open_db(path, &db);
    if (!rc) rc = walk(&db, &job, root, 0);
    close_db(&db);
    *rows = job.rows;
    if (span) { span[0] = job.first_rowid; span[1] = job.last_rowid; }
    return rc;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_btree",
                                    "Integer columns of an SQLite table off its b-tree (called through ctypes).", -1, NULL,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__btree(void) { return PyModule_Create(&module); }
