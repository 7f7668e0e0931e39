/* Fast path for bulk ingest: scans a buffer of complete log lines in one pass and extracts the
 * common SGLang `Decode batch` / `Prefill batch` shapes into column arrays.
 *
 * It is an accelerator, not a second parser: a line is taken here only when every fragment is a
 * known `key: value` with a canonical value and the prefix is a plain `[YYYY-MM-DD HH:MM:SS(.mmm)
 * TAG...] `. Anything else that contains a line anchor is handed back to the Python parser
 * (specwatch.parse), which stays the definition; tests check both give identical rows.
 *
 * scan(data, dec_i64, dec_f64, dec_i8, pre_i64, pre_f64, pre_i8, text_buf, text_off, slow_idx,
 *      flags) -> (n_decode, n_prefill, n_slow, n_text_bytes, first_bad_utf8, n_bad_utf8,
 *                 first_binary, n_binary)
 * All arrays are caller-allocated (numpy) with capacity >= number of lines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NULL_I64 INT64_MIN

/* decode int64 columns */
enum { D_OFF, D_LINE, D_DP, D_TP, D_PP, D_EP, D_ITER, D_RUN, D_TOK, D_QUEUE, D_NI };
/* decode double columns */
enum { D_USAGE, D_AL, D_AR, D_GEN, D_NF };
/* prefill int64 columns */
enum { P_OFF, P_LINE, P_DP, P_TP, P_PP, P_EP, P_ITER, P_SEQ, P_NEW, P_CACHED, P_RUN, P_QUEUE, P_NI };
enum { P_USAGE, P_INPUT, P_HIT, P_NF };
/* int8 columns (both kinds): graph flag, graph device code */
enum { G_FLAG, G_DEV, G_N };

static const char *ANCHORS[] = {" batch", "server_args=", "metrics: ", "Avg prompt throughput:",
                                "fired up and ready to roll", "Initialization failed.",
                                "Scheduler hit an exception", "KV cache pool is full",
                                "Received sigquit", NULL};

static int has_anchor(const char *s, Py_ssize_t n) {
    for (int i = 0; ANCHORS[i]; i++)
        if (memmem(s, n, ANCHORS[i], strlen(ANCHORS[i]))) return 1;
    return 0;
}

static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        if ((c & 0xE0) == 0xC0) { if (c < 0xC2) return 0; k = 1; }
        else if ((c & 0xF0) == 0xE0) k = 2;
        else if ((c & 0xF8) == 0xF0) { if (c > 0xF4) return 0; k = 3; }
        else return 0;
        for (int j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
        }
        if (k == 2) {
            unsigned int cp = ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        } else if (k == 3) {
            unsigned int cp = ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) |
                              ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            if (cp < 0x10000 || cp > 0x10FFFF) return 0;
        }
        i += k + 1;
    }
    return 1;
}

/* canonical int: -?(0|[1-9][0-9]*) */
static int parse_int(const char *s, Py_ssize_t n, int64_t *out) {
    Py_ssize_t i = 0;
    int neg = 0;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) { neg = s[0] == '-'; i = 1; }
    if (i >= n || n - i > 18) return 0;
    if (s[i] == '0' && n - i > 1) return 0;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* plain decimal: digits '.' digits, or digits (a float field printed as an int) */
static int parse_float(const char *s, Py_ssize_t n, double *out) {
    if (n <= 0 || n > 30) return 0;
    char buf[32];
    int dot = 0, digits = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') digits++;
        else if (c == '.' && !dot && i > 0) dot = 1;
        else if ((c == '-' || c == '+') && i == 0) ;
        else return 0;
    }
    if (!digits || s[n - 1] == '.') return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    *out = strtod(buf, NULL);
    return 1;
}

static int span_eq(const char *s, Py_ssize_t n, const char *lit) {
    size_t m = strlen(lit);
    return (size_t)n == m && memcmp(s, lit, m) == 0;
}

/* Parse `[YYYY-MM-DD HH:MM:SS(.ddd)?( TAG)*] ` at the start; fills ts span and rank tags. */
static Py_ssize_t parse_prefix(const char *s, Py_ssize_t n, Py_ssize_t *ts_len, Py_ssize_t *rank_start,
                               Py_ssize_t *rank_len, int64_t tags[4]) {
    if (n < 22 || s[0] != '[') return -1;
    const char *p = s + 1;
    static const char pat[] = "dddd-dd-dd dd:dd:dd";
    for (int i = 0; i < 19; i++) {
        if (pat[i] == 'd') { if (p[i] < '0' || p[i] > '9') return -1; }
        else if (p[i] != pat[i]) return -1;
    }
    {
        int y = (p[0] - '0') * 1000 + (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
        int mo = (p[5] - '0') * 10 + (p[6] - '0'), d = (p[8] - '0') * 10 + (p[9] - '0');
        int h = (p[11] - '0') * 10 + (p[12] - '0'), mi = (p[14] - '0') * 10 + (p[15] - '0');
        int se = (p[17] - '0') * 10 + (p[18] - '0');
        static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) ||
            h > 23 || mi > 59 || se > 59)
            return -1; /* not a real time: the Python parser decides */
    }
    Py_ssize_t i = 1 + 19;
    if (i < n && s[i] == '.') {
        Py_ssize_t j = i + 1;
        while (j < n && s[j] >= '0' && s[j] <= '9') j++;
        if (j == i + 1 || j - i - 1 > 6) return -1;
        i = j;
    }
    *ts_len = i - 1;
    tags[0] = tags[1] = tags[2] = tags[3] = NULL_I64;
    *rank_start = i;
    while (i < n && s[i] == ' ') {
        Py_ssize_t j = i + 1, k;
        int which;
        if (j + 2 < n && s[j] == 'D' && s[j + 1] == 'P') which = 0;
        else if (j + 2 < n && s[j] == 'T' && s[j + 1] == 'P') which = 1;
        else if (j + 2 < n && s[j] == 'P' && s[j + 1] == 'P') which = 2;
        else if (j + 2 < n && s[j] == 'E' && s[j + 1] == 'P') which = 3;
        else return -1; /* ATTN_CP, MOE_DP, ...: the Python parser handles them */
        k = j + 2;
        int64_t v = 0;
        Py_ssize_t d0 = k;
        while (k < n && s[k] >= '0' && s[k] <= '9') { v = v * 10 + (s[k] - '0'); k++; }
        if (k == d0 || k - d0 > 9 || tags[which] != NULL_I64) return -1;
        tags[which] = v;
        i = k;
    }
    *rank_len = i - *rank_start;
    if (*rank_len > 0) { (*rank_start)++; (*rank_len)--; }
    if (i + 1 >= n || s[i] != ']' || s[i + 1] != ' ') return -1;
    return i + 2;
}

/* Normalise a printed key like specwatch.parse.normalize_key; returns length written. */
static Py_ssize_t norm_key(const char *k, Py_ssize_t n, char *out, Py_ssize_t cap) {
    Py_ssize_t o = 0;
    int paren = 0, pending_sep = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = k[i];
        if (c == '(') { paren = 1; continue; }
        if (paren) { if (c == ')') paren = 0; continue; }
        if (c == '#') continue;
        if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            if (pending_sep && o > 0) { if (o >= cap) return -1; out[o++] = '_'; }
            pending_sep = 0;
            if (o >= cap) return -1;
            out[o++] = c;
        } else {
            pending_sep = 1;
        }
    }
    return paren ? -1 : o;
}

/* Normalised names that feed typed columns (formats/lines.toml) or that the fast path does not
 * type itself: a line carrying one of them under an unusual spelling goes to the Python parser. */
static const char *RESERVED[] = {"running_req", "token", "token_usage", "accept_len", "accept_rate",
                                 "cuda_graph", "cpu_graph", "npu_graph", "musa_graph",
                                 "gen_throughput", "queue_req", "retracted_req", "fwd_occupancy",
                                 "new_seq", "new_token", "cached_token", "input_throughput",
                                 "cache_hit_rate", "forward_iter", NULL};

static int is_reserved(const char *k, Py_ssize_t n) {
    for (int i = 0; RESERVED[i]; i++)
        if (span_eq(k, n, RESERVED[i])) return 1;
    return 0;
}

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} jbuf;

static int jput(jbuf *j, const char *s, Py_ssize_t n) {
    if (j->len + n > j->cap) return 0;
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    return 1;
}

/* An unknown (extra) key's value, appended as JSON; 0 if its shape needs the Python parser. */
static int json_value(jbuf *j, const char *v, Py_ssize_t n) {
    int64_t iv;
    double fv;
    if (span_eq(v, n, "True")) return jput(j, "true", 4);
    if (span_eq(v, n, "False")) return jput(j, "false", 5);
    if (parse_int(v, n, &iv)) return jput(j, v, n);
    Py_ssize_t m = n;
    if (m > 1 && v[m - 1] == '%') m--;
    if (v[0] != '-' && v[0] != '+' && parse_float(v, m, &fv) && memchr(v, '.', m)) {
        /* Python prints floats without trailing zeros in the fraction; keep the same value */
        return jput(j, v, m);
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data, di, df, dg, pi, pf, pg, tb, to, sl;
    long long base_off, base_line;
    if (!PyArg_ParseTuple(args, "y*LLw*w*w*w*w*w*w*w*w*", &data, &base_off, &base_line, &di, &df,
                          &dg, &pi, &pf, &pg, &tb, &to, &sl))
        return NULL;
    const char *s = data.buf;
    Py_ssize_t n = data.len;
    int64_t *DI = di.buf, *PI = pi.buf, *SL = sl.buf, *TO = to.buf;
    double *DF = df.buf, *PF = pf.buf;
    int8_t *DG = dg.buf, *PG = pg.buf;
    Py_ssize_t cap = sl.len / (Py_ssize_t)(2 * sizeof(int64_t));
    jbuf text = {tb.buf, 0, tb.len};
    Py_ssize_t nd = 0, np_ = 0, ns = 0, ntext = 0;
    long long first_bad = -1, n_bad = 0, first_bin = -1, n_bin = 0;
    Py_ssize_t pos = 0;
    int64_t line_no = base_line;
    char key[96];
    Py_BEGIN_ALLOW_THREADS
    while (pos < n) {
        const char *nl = memchr(s + pos, '\n', n - pos);
        if (!nl) break;
        Py_ssize_t len = nl - (s + pos);
        const char *L = s + pos;
        int64_t off = base_off + pos;
        pos += len + 1;
        line_no++;
        if (memchr(L, 0, len)) {
            if (first_bin < 0) first_bin = line_no;
            n_bin++;
            continue;
        }
        int ascii = 1;
        for (Py_ssize_t i = 0; i < len; i++) if ((unsigned char)L[i] >= 0x80) { ascii = 0; break; }
        if (!ascii && !utf8_valid((const unsigned char *)L, len)) {
            if (first_bad < 0) first_bad = line_no;
            n_bad++;
        }
        Py_ssize_t ts_len = 0, rank_start = 0, rank_len = 0;
        int64_t tags[4];
        /* the common case first: a bracketed SGLang batch line; the anchor scan only otherwise */
        Py_ssize_t b = parse_prefix(L, len, &ts_len, &rank_start, &rank_len, tags);
        int kind = 0; /* 1 decode, 2 prefill */
        if (b > 0) {
            if (len - b > 13 && memcmp(L + b, "Decode batch", 12) == 0) { kind = 1; b += 12; }
            else if (len - b > 14 && memcmp(L + b, "Prefill batch", 13) == 0) { kind = 2; b += 13; }
        }
        if (kind && (memchr(L, '\r', len) || memchr(L, 0x1b, len))) kind = 0;
        if (!kind && !has_anchor(L, len)) continue;
        int ok = kind != 0 && ntext + 2 < cap && nd < cap && np_ < cap;
        int64_t iter = NULL_I64;
        if (ok && L[b] == ' ' && b + 1 < len && L[b + 1] == '[') {
            Py_ssize_t k = b + 2;
            int64_t v = 0;
            Py_ssize_t d0 = k;
            while (k < len && L[k] >= '0' && L[k] <= '9') { v = v * 10 + (L[k] - '0'); k++; }
            if (k == d0 || k >= len || L[k] != ']') ok = 0;
            else { iter = v; b = k + 1; }
        }
        if (ok && !(b + 1 < len && (L[b] == ',' || L[b] == '.') && L[b + 1] == ' ')) ok = 0;
        b += 2;
        int64_t ints[8];
        double flts[4];
        int8_t graph = -1, dev = -1;
        for (int i = 0; i < 8; i++) ints[i] = NULL_I64;
        for (int i = 0; i < 4; i++) flts[i] = NAN;
        Py_ssize_t json_start = text.len;
        int nextra = 0, first = 1;
        /* body: fragments separated by ", " up to the end (a trailing ", " is allowed) */
        Py_ssize_t end = len;
        while (end > b && L[end - 1] == ' ') end--;
        if (end > b && L[end - 1] == ',') end--;
        Py_ssize_t p = b;
        if (ok) {
            const char *fk = kind == 1 ? "#running-req: " : "#new-seq: ";
            size_t fkl = strlen(fk);
            if ((size_t)(end - p) < fkl || memcmp(L + p, fk, fkl) != 0) ok = 0;
            if (memmem(L + p, end - p, " batch", 6)) ok = 0; /* pasted lines: Python rejects */
        }
        while (ok && p < end) {
            const char *frag = L + p;
            const char *sep = memmem(frag, end - p, ", ", 2);
            Py_ssize_t flen = sep ? sep - frag : end - p;
            const char *colon = memmem(frag, flen, ": ", 2);
            if (!colon) { ok = 0; break; }
            Py_ssize_t klen = colon - frag;
            const char *v = colon + 2;
            Py_ssize_t vlen = flen - klen - 2;
            while (vlen > 0 && v[vlen - 1] == ' ') vlen--;
            if (vlen <= 0) { ok = 0; break; }
            int64_t iv;
            double fv;
            int slot = -1, fslot = -1, isbool = 0;
            if (kind == 1) {
                if (span_eq(frag, klen, "#running-req")) slot = 0;
                else if (span_eq(frag, klen, "#token")) slot = 1;
                else if (span_eq(frag, klen, "#queue-req")) slot = 2;
                else if (span_eq(frag, klen, "token usage")) fslot = 0;
                else if (span_eq(frag, klen, "accept len")) fslot = 1;
                else if (span_eq(frag, klen, "accept rate")) fslot = 2;
                else if (span_eq(frag, klen, "gen throughput (token/s)")) fslot = 3;
            } else {
                if (span_eq(frag, klen, "#new-seq")) slot = 0;
                else if (span_eq(frag, klen, "#new-token")) slot = 1;
                else if (span_eq(frag, klen, "#cached-token")) slot = 2;
                else if (span_eq(frag, klen, "#running-req")) slot = 3;
                else if (span_eq(frag, klen, "#queue-req")) slot = 4;
                else if (span_eq(frag, klen, "token usage")) fslot = 0;
                else if (span_eq(frag, klen, "input throughput (token/s)")) fslot = 1;
            }
            if (span_eq(frag, klen, "cuda graph")) { isbool = 1; dev = 0; }
            else if (span_eq(frag, klen, "cpu graph")) { isbool = 1; dev = 1; }
            else if (span_eq(frag, klen, "npu graph")) { isbool = 1; dev = 2; }
            else if (span_eq(frag, klen, "musa graph")) { isbool = 1; dev = 3; }
            if (slot >= 0) {
                if (ints[slot] != NULL_I64 || !parse_int(v, vlen, &iv)) { ok = 0; break; }
                ints[slot] = iv;
            } else if (fslot >= 0) {
                if (!isnan(flts[fslot]) || !parse_float(v, vlen, &fv)) { ok = 0; break; }
                flts[fslot] = fv;
            } else if (isbool) {
                if (graph != -1) { ok = 0; break; }
                if (span_eq(v, vlen, "True")) graph = 1;
                else if (span_eq(v, vlen, "False")) graph = 0;
                else { ok = 0; break; }
            } else if (kind == 2 && span_eq(frag, klen, "cache hit rate")) {
                if (vlen < 2 || v[vlen - 1] != '%' || !parse_float(v, vlen - 1, &fv) || !isnan(flts[2])) {
                    ok = 0; break;
                }
                flts[2] = fv;
            } else {
                /* an extra key: kept in the `fields` JSON, by its normalised name */
                Py_ssize_t kn = norm_key(frag, klen, key, sizeof key);
                if (kn <= 0 || is_reserved(key, kn)) { ok = 0; break; }
                if (memmem(text.buf + json_start, text.len - json_start, key, kn)) { ok = 0; break; }
                if (!jput(&text, first ? "{\"" : ",\"", 2) || !jput(&text, key, kn) ||
                    !jput(&text, "\":", 2) || !json_value(&text, v, vlen)) { ok = 0; break; }
                first = 0;
                nextra++;
            }
            p += flen + 2;
        }
        if (ok) {
            /* required fields, as declared in formats/lines.toml */
            if (kind == 1 && (ints[0] == NULL_I64 || isnan(flts[3]) || ints[2] == NULL_I64)) ok = 0;
            if (kind == 2 && (ints[0] == NULL_I64 || ints[1] == NULL_I64 || ints[4] == NULL_I64)) ok = 0;
        }
        if (ok && nextra && !jput(&text, "}", 1)) ok = 0;
        if (!ok) {
            text.len = json_start;
            SL[2 * ns] = off - base_off; SL[2 * ns + 1] = line_no; ns++;
            continue;
        }
        /* text: [json] then ts then rank, offsets recorded as 3 spans per row */
        Py_ssize_t jlen = text.len - json_start;
        if (!jput(&text, L + 1, ts_len) || !jput(&text, L + rank_start, rank_len)) {
            text.len = json_start;
            SL[2 * ns] = off - base_off; SL[2 * ns + 1] = line_no; ns++;
            continue;
        }
        int64_t *row_off = TO + 3 * ntext;
        row_off[0] = json_start;
        row_off[1] = json_start + jlen;
        row_off[2] = json_start + jlen + ts_len;
        ntext++;
        if (kind == 1) {
            int64_t *r = DI + D_NI * nd;
            double *f = DF + D_NF * nd;
            int8_t *g = DG + G_N * nd;
            r[D_OFF] = off; r[D_LINE] = line_no;
            r[D_DP] = tags[0]; r[D_TP] = tags[1]; r[D_PP] = tags[2]; r[D_EP] = tags[3];
            r[D_ITER] = iter; r[D_RUN] = ints[0]; r[D_TOK] = ints[1]; r[D_QUEUE] = ints[2];
            f[D_USAGE] = flts[0]; f[D_AL] = flts[1]; f[D_AR] = flts[2]; f[D_GEN] = flts[3];
            g[G_FLAG] = graph; g[G_DEV] = graph >= 0 ? dev : -1;
            nd++;
        } else {
            int64_t *r = PI + P_NI * np_;
            double *f = PF + P_NF * np_;
            int8_t *g = PG + G_N * np_;
            r[P_OFF] = off; r[P_LINE] = line_no;
            r[P_DP] = tags[0]; r[P_TP] = tags[1]; r[P_PP] = tags[2]; r[P_EP] = tags[3];
            r[P_ITER] = iter; r[P_SEQ] = ints[0]; r[P_NEW] = ints[1]; r[P_CACHED] = ints[2];
            r[P_RUN] = ints[3]; r[P_QUEUE] = ints[4];
            f[P_USAGE] = flts[0]; f[P_INPUT] = flts[1]; f[P_HIT] = flts[2];
            g[G_FLAG] = graph; g[G_DEV] = graph >= 0 ? dev : -1;
            np_++;
        }
        /* the kind of each text row, so Python can split them: encode in the sign of offsets */
        if (kind == 2) row_off[0] = -1 - row_off[0];
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data); PyBuffer_Release(&di); PyBuffer_Release(&df); PyBuffer_Release(&dg);
    PyBuffer_Release(&pi); PyBuffer_Release(&pf); PyBuffer_Release(&pg); PyBuffer_Release(&tb);
    PyBuffer_Release(&to); PyBuffer_Release(&sl);
    return Py_BuildValue("nnnnLLLL", nd, np_, ns, text.len, first_bad, n_bad, first_bin, n_bin);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Scan complete log lines; see the module source for the layout."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_fastscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastscan(void) { return PyModule_Create(&mod); }
