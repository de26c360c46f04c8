/* One pass over a chunk of log bytes: split it into lines and settle the common ones.
 *
 * The Polars cascade in logs.py routes every line with a dozen probes. Most lines of a busy
 * server are plain: a uvicorn access line, a request-lifecycle line, an ordinary vLLM record.
 * This scanner looks at each byte once and gives each line a code:
 *
 *   0 UNDECIDED  anything it is not sure about: the Polars cascade routes it, as before
 *   1 ACCESS     what the cascade would claim as an access line
 *   2 REQUEST    ... as a request-lifecycle line
 *   3 OTHER      ... as an "other" record (exactly one vLLM header)
 *   4 BLANK      ... as a blank line
 *
 * It knows no format itself: the literals and what each one means (flag bits) come from the
 * catalogue through compile(). It decides only pure-ASCII lines without control bytes that do
 * not start with '{' (so no ANSI, no tqdm '\r', no JSON, no Unicode digit or space that the
 * cascade's regexes would read differently; a CRLF line ending is fine); everything else stays
 * UNDECIDED.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { F_HTTP = 1, F_INFO = 2, F_DASH = 4, F_PY = 8, F_STATS = 16, F_REQ_START = 32,
       F_REQ = 64, F_UNUSUAL = 128 };
enum { C_UNDECIDED = 0, C_ACCESS = 1, C_REQUEST = 2, C_OTHER = 3, C_BLANK = 4, N_CODES = 5 };

#define MAX_LITERALS 256

typedef struct {
    int count;
    unsigned char *text[MAX_LITERALS];
    Py_ssize_t len[MAX_LITERALS];
    int flags[MAX_LITERALS];
    Py_ssize_t anchor[MAX_LITERALS]; /* offset of the two-byte fingerprint in the literal */
    /* literals by their fingerprint: head[bigram] .. chained through next[] */
    int16_t head[65536];
    int16_t next[MAX_LITERALS];
    uint8_t bigram[65536 / 8];
    /* Teddy masks: bit b of lo0[x] is set when a literal of bucket b has a fingerprint whose
     * first byte has low nibble x (hi0: high nibble; lo1/hi1, lo2/hi2: second and third
     * byte; a literal's fingerprint is 3 bytes, its chain key the first 2). */
    uint8_t lo0[16], hi0[16], lo1[16], hi1[16], lo2[16], hi2[16];
} Table;

static const char *CAPSULE = "preemptscope._scan.Table";

static void table_free(PyObject *capsule) {
    Table *t = (Table *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (t == NULL) return;
    for (int i = 0; i < t->count; i++) PyMem_Free(t->text[i]);
    PyMem_Free(t);
}

static PyObject *compile_table(PyObject *self, PyObject *args) {
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O", &items)) return NULL;
    PyObject *seq = PySequence_Fast(items, "literals must be a sequence of (bytes, int)");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_LITERALS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many literals");
        return NULL;
    }
    Table *t = (Table *)PyMem_Calloc(1, sizeof(Table));
    if (t == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    memset(t->head, 0xff, sizeof(t->head));
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *text;
        Py_ssize_t len, anchor;
        int flags;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#in", &text, &len, &flags,
                              &anchor)) {
            goto fail;
        }
        if (len < 3 || anchor < 0 || anchor > len - 3) {
            PyErr_SetString(PyExc_ValueError, "literals need three bytes at their anchor");
            goto fail;
        }
        int k = t->count;
        t->text[k] = (unsigned char *)PyMem_Malloc(len);
        if (t->text[k] == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(t->text[k], text, len);
        t->len[k] = len;
        t->flags[k] = flags;
        t->anchor[k] = anchor;
        unsigned char a = (unsigned char)text[anchor], b = (unsigned char)text[anchor + 1];
        unsigned key = ((unsigned)a << 8) | b;
        /* Neighbours in table order share a bucket (the caller sorts by fingerprint, so a
         * bucket's literals share nibbles and its sets stay small). */
        uint8_t bucket = (uint8_t)(1u << (k * 8 / n));
        unsigned char c = (unsigned char)text[anchor + 2];
        t->lo2[c & 15] |= bucket;
        t->hi2[c >> 4] |= bucket;
        t->lo0[a & 15] |= bucket;
        t->hi0[a >> 4] |= bucket;
        t->lo1[b & 15] |= bucket;
        t->hi1[b >> 4] |= bucket;
        t->next[k] = t->head[key];
        t->head[key] = (int16_t)k;
        t->bigram[key >> 3] |= (uint8_t)(1u << (key & 7));
        t->count++;
    }
    Py_DECREF(seq);
    PyObject *capsule = PyCapsule_New(t, CAPSULE, table_free);
    if (capsule == NULL) goto fail_nodecref;
    return capsule;
fail:
    Py_DECREF(seq);
fail_nodecref:
    for (int i = 0; i < t->count; i++) PyMem_Free(t->text[i]);
    PyMem_Free(t);
    return NULL;
}

#define DIGIT(c) ((unsigned char)((c) - '0') <= 9)
#define SPACE(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r' || (c) == '\f' || (c) == '\v')

/* Does the vLLM header `MM-DD HH:MM:SS location:NNN] ` start at p?  (catalogue HEADER_CORE:
 * [01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9] \[?[^\]\s:]+:\d+\] ) */
static int header_at(const unsigned char *p, const unsigned char *end) {
    if (end - p < 20) return 0;
    if (!(p[0] == '0' || p[0] == '1') || !DIGIT(p[1]) || p[2] != '-') return 0;
    if (!(p[3] >= '0' && p[3] <= '3') || !DIGIT(p[4]) || p[5] != ' ') return 0;
    if (!(p[6] >= '0' && p[6] <= '2') || !DIGIT(p[7]) || p[8] != ':') return 0;
    if (!(p[9] >= '0' && p[9] <= '5') || !DIGIT(p[10]) || p[11] != ':') return 0;
    if (!(p[12] >= '0' && p[12] <= '6') || !DIGIT(p[13]) || p[14] != ' ') return 0;
    /* '[' is also in the location class, so the optional '[' changes nothing. */
    const unsigned char *q = p + 15;
    const unsigned char *loc = q;
    while (q < end && *q != ']' && *q != ':' && !SPACE(*q)) q++;
    if (q == loc || q >= end || *q != ':') return 0;
    q++;
    const unsigned char *digits = q;
    while (q < end && DIGIT(*q)) q++;
    if (q == digits || end - q < 2 || q[0] != ']' || q[1] != ' ') return 0;
    return 1;
}

/* Flags of the literals whose fingerprint starts at q (q + 1 < limit) and that lie in
 * [start, limit). */
static inline __attribute__((always_inline)) int literals_at(const Table *t, const unsigned char *q, const unsigned char *start,
                              const unsigned char *limit) {
    unsigned key = ((unsigned)q[0] << 8) | q[1];
    if (__builtin_expect(!(t->bigram[key >> 3] & (1u << (key & 7))), 1)) return 0;
    int flags = 0;
    for (int k = t->head[key]; k >= 0; k = t->next[k]) {
        const unsigned char *s0 = q - t->anchor[k];
        if (s0 >= start && limit - s0 >= t->len[k] &&
            memcmp(s0, t->text[k], (size_t)t->len[k]) == 0) {
            flags |= t->flags[k];
        }
    }
    return flags;
}

/* The cascade of logs.py, for a clean line with these literal flags and header count. */
static int decide(int flags, int headers, int blank) {
    if (flags & F_UNUSUAL) return C_UNDECIDED;
    if ((flags & (F_HTTP | F_INFO | F_DASH)) == (F_HTTP | F_INFO | F_DASH)) return C_ACCESS;
    if (flags & (F_PY | F_STATS)) return C_UNDECIDED;
    if (flags & F_REQ_START) return headers == 1 ? C_REQUEST : C_UNDECIDED;
    if (flags & F_REQ) return C_UNDECIDED;
    if (blank) return C_BLANK;
    return headers == 1 ? C_OTHER : C_UNDECIDED;
}

/* The code of one line [p, end) (end excludes the newline), byte by byte. */
static int classify(const Table *t, const unsigned char *p, const unsigned char *end,
                    int newline) {
    if (p < end && *p == '{') return C_UNDECIDED;
    int flags = 0;
    int headers = 0;
    int blank = 1;
    for (const unsigned char *q = p; q < end; q++) {
        unsigned char c = *q;
        /* CRLF: a '\r' right before the newline is ordinary to the cascade too */
        if (c >= 0x80 || (c < 0x20 && c != '\t' && !(c == '\r' && newline && q + 1 == end))) {
            return C_UNDECIDED;
        }
        if (c != ' ' && c != '\t') blank = 0;
        if (c == '-' && q - p >= 2 && headers < 2 && header_at(q - 2, end)) headers++;
        if (q + 1 < end) flags |= literals_at(t, q, p, end);
    }
    return decide(flags, headers, blank);
}

typedef struct {
    int64_t *starts; /* n + 1 line starts */
    uint8_t *codes;
    Py_ssize_t n, cap;
} Lines;

static int grow(Lines *lines) {
    Py_ssize_t cap = lines->cap ? lines->cap * 2 : 1 << 16;
    int64_t *starts = (int64_t *)realloc(lines->starts, (size_t)(cap + 1) * sizeof(int64_t));
    if (starts == NULL) return -1;
    lines->starts = starts;
    uint8_t *codes = (uint8_t *)realloc(lines->codes, (size_t)cap);
    if (codes == NULL) return -1;
    lines->codes = codes;
    lines->cap = cap;
    return 0;
}

static int push_line(Lines *lines, Py_ssize_t start, int code) {
    if (lines->n == lines->cap && grow(lines) < 0) return -1;
    lines->starts[lines->n] = start;
    lines->codes[lines->n] = (uint8_t)code;
    lines->n++;
    return 0;
}

/* After the last line: starts[n] = size, so line i is [starts[i], starts[i + 1]). */
static int close_lines(Lines *lines, Py_ssize_t size) {
    if (lines->n == lines->cap && grow(lines) < 0) return -1;
    lines->starts[lines->n] = size;
    return 0;
}

/* Split and classify; no Python calls (runs without the GIL). */
static int scan_lines(const Table *t, const unsigned char *data, Py_ssize_t size, Lines *lines) {
    Py_ssize_t pos = 0;
    while (pos < size) {
        const unsigned char *nl = memchr(data + pos, '\n', (size_t)(size - pos));
        Py_ssize_t stop = nl ? (Py_ssize_t)(nl - data) : size;
        if (push_line(lines, pos, classify(t, data + pos, data + stop, nl != NULL)) < 0) return -1;
        pos = nl ? stop + 1 : size;
    }
    return close_lines(lines, size);
}

static int is_blank(const unsigned char *p, const unsigned char *end) {
    for (; p < end; p++) {
        if (*p != ' ' && *p != '\t') return 0;
    }
    return 1;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SIMD 1

/* The SIMD loops find, per block, newlines, bytes that make a line UNDECIDED, the '-' of a
 * possible header and Teddy candidates for the literal fingerprints; only those positions are
 * looked at one by one, here, in order. Same codes as scan_lines. */
typedef struct {
    Lines *lines;
    Py_ssize_t start; /* current line */
    int flags, headers, bad;
} State;

static int end_line(State *st, const unsigned char *data, Py_ssize_t stop) {
    int code = C_UNDECIDED;
    if (!st->bad && !(stop > st->start && data[st->start] == '{')) {
        int blank = st->headers != 1 && is_blank(data + st->start, data + stop);
        code = decide(st->flags, st->headers, blank);
    }
    if (push_line(st->lines, st->start, code) < 0) return -1;
    st->start = stop + 1;
    st->flags = st->headers = st->bad = 0;
    return 0;
}

static inline __attribute__((always_inline)) int events(State *st, const Table *t,
                                                         const unsigned char *data,
                                                         Py_ssize_t size, Py_ssize_t o,
                                                         uint64_t nl, uint64_t ctl,
                                                         uint64_t dash, uint64_t cand) {
    uint64_t todo = nl | ctl | dash | cand;
    while (todo) {
        int i = __builtin_ctzll(todo);
        uint64_t bit = 1ull << i;
        todo &= todo - 1;
        Py_ssize_t pos = o + i;
        if (nl & bit) {
            if (end_line(st, data, pos) < 0) return -1;
            continue;
        }
        if (st->bad) continue;
        if (ctl & bit) {
            st->bad = 1;
            continue;
        }
        if ((dash & bit) && st->headers < 2 && pos - st->start >= 2 &&
            header_at(data + pos - 2, data + size)) {
            st->headers++;
        }
        /* a literal cannot span a newline, so the buffer's end bounds it like the line's */
        if ((cand & bit) && pos + 1 < size) {
            st->flags |= literals_at(t, data + pos, data + st->start, data + size);
        }
    }
    return 0;
}

static int finish_scan(State *st, const unsigned char *data, Py_ssize_t size) {
    if (st->start < size && end_line(st, data, size) < 0) return -1; /* no final newline */
    return close_lines(st->lines, size);
}

/* Loads read up to 22 bytes past a block's start (the fingerprint's 3rd byte, the header's
 * ':' 6 bytes after its '-'), so the last blocks are scanned from a zero-padded copy, their
 * masks cut to the real bytes. */
#define TAIL_MARGIN 24

#define TEDDY(lo, hi, x) V_AND(V_SHUF(lo, V_AND(x, nib)), V_SHUF(hi, V_AND(V_SRLI4(x), nib)))

/* One loop for both widths; the V_* operations are defined before each instance. */
#define SCAN_BODY(W)                                                                          \
    const VEC lo0 = V_BCAST(t->lo0), hi0 = V_BCAST(t->hi0);                                   \
    const VEC lo1 = V_BCAST(t->lo1), hi1 = V_BCAST(t->hi1);                                   \
    const VEC lo2 = V_BCAST(t->lo2), hi2 = V_BCAST(t->hi2);                                   \
    const VEC nib = V_SET1(0x0f), newline = V_SET1('\n'), tab = V_SET1('\t');                 \
    const VEC dashes = V_SET1('-'), space = V_SET1(0x20), colons = V_SET1(':');               \
    const VEC zero = V_SET1(0), cr = V_SET1('\r');                                            \
    State st = {lines, 0, 0, 0, 0};                                                           \
    unsigned char pad[W + TAIL_MARGIN + 8];                                                   \
    for (Py_ssize_t o = 0; o < size; o += W) {                                                \
        const unsigned char *block = data + o;                                                \
        uint64_t valid = (1ull << W) - 1;                                                     \
        if (size - o < W + TAIL_MARGIN) {                                                     \
            memset(pad, 0, sizeof(pad));                                                      \
            memcpy(pad, data + o, (size_t)(size - o));                                        \
            block = pad;                                                                      \
            if (size - o < W) valid = (1ull << (size - o)) - 1;                               \
        }                                                                                     \
        VEC v = V_LOAD(block), w = V_LOAD(block + 1), x = V_LOAD(block + 2);                  \
        VEC r = V_AND(V_AND(TEDDY(lo0, hi0, v), TEDDY(lo1, hi1, w)), TEDDY(lo2, hi2, x));     \
        uint64_t cand = ~V_MASK(V_EQ(r, zero)) & valid;                                       \
        uint64_t nl = V_MASK(V_EQ(v, newline)) & valid;                                       \
        /* signed compare: bytes >= 0x80 are negative, so "< 0x20" also catches non-ASCII */ \
        uint64_t crlf = V_MASK(V_AND(V_EQ(v, cr), V_EQ(w, newline)));                         \
        uint64_t ctl = V_MASK(V_LT(v, space)) & ~(V_MASK(V_EQ(v, tab)) | nl | crlf) & valid;  \
        /* a header's '-' has ' ' 3 bytes and ':' 6 bytes after it (MM-DD HH:MM:SS) */        \
        VEC shape = V_AND(V_EQ(V_LOAD(block + 3), space), V_EQ(V_LOAD(block + 6), colons));   \
        uint64_t dash = V_MASK(V_AND(V_EQ(v, dashes), shape)) & valid;                        \
        if (events(&st, t, data, size, o, nl, ctl, dash, cand) < 0) return -1;                \
    }                                                                                         \
    return finish_scan(&st, data, size);

#define VEC __m128i
#define V_LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define V_BCAST(p) V_LOAD(p)
#define V_SET1 _mm_set1_epi8
#define V_SHUF _mm_shuffle_epi8
#define V_AND _mm_and_si128
#define V_SRLI4(x) _mm_srli_epi16(x, 4)
#define V_EQ _mm_cmpeq_epi8
#define V_LT _mm_cmplt_epi8
#define V_MASK(x) ((uint64_t)(uint32_t)_mm_movemask_epi8(x))
__attribute__((target("ssse3")))
static int scan_lines_ssse3(const Table *t, const unsigned char *data, Py_ssize_t size,
                            Lines *lines) {
    SCAN_BODY(16)
}
#undef VEC
#undef V_LOAD
#undef V_BCAST
#undef V_SET1
#undef V_SHUF
#undef V_AND
#undef V_SRLI4
#undef V_EQ
#undef V_LT
#undef V_MASK

#define VEC __m256i
#define V_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define V_BCAST(p) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p)))
#define V_SET1 _mm256_set1_epi8
#define V_SHUF _mm256_shuffle_epi8 /* per 128-bit lane: the tables are in both lanes */
#define V_AND _mm256_and_si256
#define V_SRLI4(x) _mm256_srli_epi16(x, 4)
#define V_EQ _mm256_cmpeq_epi8
#define V_LT(a, b) _mm256_cmpgt_epi8(b, a) /* AVX2 has no signed "less than" */
#define V_MASK(x) ((uint64_t)(uint32_t)_mm256_movemask_epi8(x))
__attribute__((target("avx2")))
static int scan_lines_avx2(const Table *t, const unsigned char *data, Py_ssize_t size,
                           Lines *lines) {
    SCAN_BODY(32)
}
#endif

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *capsule;
    int keep, simd = 1;
    if (!PyArg_ParseTuple(args, "y*Oi|i", &view, &capsule, &keep, &simd)) return NULL;
    Table *t = (Table *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (t == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    Lines lines = {NULL, NULL, 0, 0};
    int failed;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_SIMD
    /* simd: 0 byte loop, 1 best available, 2 SSSE3 even where AVX2 is there (for tests) */
    if (simd == 1 && __builtin_cpu_supports("avx2")) {
        failed = scan_lines_avx2(t, data, view.len, &lines);
    } else if (simd && __builtin_cpu_supports("ssse3")) {
        failed = scan_lines_ssse3(t, data, view.len, &lines);
    } else {
        failed = scan_lines(t, data, view.len, &lines);
    }
#else
    (void)simd;
    failed = scan_lines(t, data, view.len, &lines);
#endif
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *groups = NULL, *counts = NULL, *starts = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count[N_CODES] = {0}, bytes[N_CODES] = {0};
    for (Py_ssize_t i = 0; i < lines.n; i++) {
        count[lines.codes[i]]++;
        bytes[lines.codes[i]] += lines.starts[i + 1] - lines.starts[i];
    }
    counts = PyTuple_New(N_CODES);
    groups = PyTuple_New(N_CODES);
    if (counts == NULL || groups == NULL) goto done;
    /* A group is (text bytes, int64 offsets into it, int64 line indexes in the chunk). */
    char *out_text[N_CODES] = {0};
    int64_t *out_offsets[N_CODES] = {0}, *out_index[N_CODES] = {0};
    for (int c = 0; c < N_CODES; c++) {
        PyTuple_SET_ITEM(counts, c, PyLong_FromSsize_t(count[c]));
        if (!(keep & (1 << c))) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(groups, c, Py_None);
            continue;
        }
        PyObject *text = PyBytes_FromStringAndSize(NULL, bytes[c]);
        PyObject *offsets = PyBytes_FromStringAndSize(NULL, (count[c] + 1) * 8);
        PyObject *index = PyBytes_FromStringAndSize(NULL, count[c] * 8);
        if (text == NULL || offsets == NULL || index == NULL) {
            Py_XDECREF(text);
            Py_XDECREF(offsets);
            Py_XDECREF(index);
            goto done;
        }
        out_text[c] = PyBytes_AS_STRING(text);
        out_offsets[c] = (int64_t *)PyBytes_AS_STRING(offsets);
        out_index[c] = (int64_t *)PyBytes_AS_STRING(index);
        PyObject *group = PyTuple_Pack(3, text, offsets, index);
        Py_DECREF(text);
        Py_DECREF(offsets);
        Py_DECREF(index);
        if (group == NULL) goto done;
        PyTuple_SET_ITEM(groups, c, group);
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t filled[N_CODES] = {0};
    int64_t used[N_CODES] = {0};
    for (Py_ssize_t i = 0; i < lines.n; i++) {
        int c = lines.codes[i];
        if (out_text[c] == NULL) continue;
        int64_t len = lines.starts[i + 1] - lines.starts[i];
        memcpy(out_text[c] + used[c], data + lines.starts[i], (size_t)len);
        out_offsets[c][filled[c]] = used[c];
        out_index[c][filled[c]] = i;
        used[c] += len;
        filled[c]++;
    }
    for (int c = 0; c < N_CODES; c++) {
        if (out_offsets[c] != NULL) out_offsets[c][filled[c]] = used[c];
    }
    Py_END_ALLOW_THREADS
    starts = PyBytes_FromStringAndSize((const char *)lines.starts, (lines.n + 1) * 8);
    if (starts == NULL) goto done;
    result = Py_BuildValue("nOOO", lines.n, counts, groups, starts);
done:
    Py_XDECREF(counts);
    Py_XDECREF(groups);
    Py_XDECREF(starts);
    free(lines.starts);
    free(lines.codes);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"compile", compile_table, METH_VARARGS,
     "compile([(literal bytes, flag bits), ...]) -> table for scan()"},
    {"scan", scan, METH_VARARGS,
     "scan(buffer, table, keep) -> (lines, counts per code, groups per code or None, starts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "One-pass line splitter and classifier for vLLM logs.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
