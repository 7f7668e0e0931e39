/* Fast path for bulk ingest: scans a buffer of complete log lines in one pass and extracts the
 * common SGLang `Decode batch` / `Prefill batch` shapes straight into Arrow-layout column buffers.
 *
 * It is an accelerator, not a second parser: a line is taken here only when it is printable ASCII,
 * its prefix is `[capture prefix][docker/k8s timestamp [CRI stdout|stderr F]][(process tag)]`
 * `[YYYY-MM-DD HH:MM:SS(.ffffff)( DPn| TPn| PPn| EPn)*] `, and every fragment is a known
 * `key: value` whose value has a canonical shape and fits its column. The capture prefix (any text,
 * e.g. `sglang-1  | `) is returned as printed; fastscan.py asks the Python parser how it reads
 * that text once per distinct prefix and hands back the rows whose prefix it reads otherwise.
 * Anything else that carries a line anchor is handed back to the Python parser (specwatch.logs.
 * parse, the definition); tests/test_fastscan.py, tests/test_fuzz.py and tests/test_capture.py
 * check that both store identical rows.
 *
 * Values are parsed, range-checked and re-printed from the parsed value (ints as int64, floats in
 * Python's repr), never copied as text into JSON, so a stored row is always valid for its column.
 *
 * configure(reserved_keys)          normalised keys that must not land in the `fields` JSON
 * scan(data, base_off, base_line, decode_bufs, prefill_bufs, slow_idx)
 *   -> (n_decode, n_prefill, n_slow, first_bad_utf8, n_bad_utf8, first_binary, n_binary,
 *       decode_str_lens, prefill_str_lens, n_lines)
 * Each *_bufs is a tuple of caller-allocated writable buffers (see fastscan.py `_Kind`):
 *   i64[N_I64][cap], i32[N_I32][cap], f64[N_F64][cap], i8[3][cap] (graph flag, graph device,
 *   prefix shape: bit 0 docker timestamp, bit 1 CRI stream, bit 2 process tag),
 *   str_off[6][cap + 1] (int32), str_data0..5 (ts_text, rank, fields JSON, capture prefix,
 *   docker timestamp, process tag).
 * Integer NULL is INT64_MIN / INT32_MIN, float NULL is NaN, int8 NULL is -1, string NULL is "".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NULL_I64 INT64_MIN
#define NULL_I32 INT32_MIN

/* decode column slots (fastscan.py keeps the same order) */
enum { D_OFF, D_LINE, D_ITER, D_TOK, D_TS, D_NI64 };
enum { D_DP, D_TP, D_PP, D_EP, D_RUN, D_QUEUE, D_MAMBA, D_NI32 };
enum { D_USAGE, D_AL, D_AR, D_GEN, D_MUSAGE, D_NF64 };
/* prefill column slots */
enum { P_OFF, P_LINE, P_ITER, P_NEW, P_CACHED, P_TS, P_NI64 };
enum { P_DP, P_TP, P_PP, P_EP, P_SEQ, P_RUN, P_QUEUE, P_NI32 };
enum { P_USAGE, P_INPUT, P_HIT, P_MUSAGE, P_NF64 };
enum { G_FLAG, G_DEV, G_SHAPE, G_N };
enum { S_TS, S_RANK, S_FIELDS, S_PREFIX, S_OUTER, S_PROC, S_N };
#define N_BUFS (5 + S_N)

/* Every header specwatch.logs.parse routes by (parse.ANCHORS, tests/test_parse.py checks they agree):
 * a line holding one of these and not taken here goes to the Python parser. */
static const char *ANCHORS[] = {" batch", "server_args=", "metrics: ", "Avg prompt throughput:",
                                "fired up and ready to roll", "Initialization failed.",
                                "Scheduler hit an exception", "KV cache pool is full",
                                "Received sigquit", "LLM engine (v",
                                "non-default args:", "auxiliary layers from ", "SpecDecoding timing",
                                "SGLANG_SIMULATE_ACC_LEN=", "Error: ", ": error: ", NULL};

#define MAX_RESERVED 128
static char reserved[MAX_RESERVED][64];
static int n_reserved = 0;

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

/* canonical int: -?(0|[1-9][0-9]{0,17}) (parse.py's int is -?digits: `+3` is not one); anything
 * longer goes to Python (which range-checks) */
static int parse_int(const char *s, Py_ssize_t n, int64_t *out) {
    Py_ssize_t i = 0;
    int neg = 0;
    if (n > 0 && s[0] == '-') { neg = 1; i = 1; }
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

static int fits_i32(int64_t v) { return v >= -2147483647LL && v <= 2147483647LL; }

/* plain decimal: [+-]?digits(.digits)? (no exponent, so always finite); `need_dot` for values
 * whose digits-only form Python reads as an int. Up to 15 digits and 22 decimals the value is one
 * exact division (Clinger's fast path: the correctly rounded result, as strtod and Python give);
 * longer ones go through strtod. */
static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int parse_float(const char *s, Py_ssize_t n, double *out, int need_dot) {
    if (n <= 0 || n > 30) return 0;
    int dot = 0, digits = 0, frac = 0, neg = 0;
    uint64_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') {
            digits++;
            frac += dot;
            if (digits <= 19) m = m * 10 + (uint64_t)(c - '0');
        }
        else if (c == '.' && !dot && digits) dot = 1;
        else if ((c == '-' || c == '+') && i == 0) neg = c == '-';
        else return 0;
    }
    if (!digits || s[n - 1] == '.' || (need_dot && !dot)) return 0;
    if (digits <= 15 && frac <= 22) {
        double v = (double)m / POW10[frac];
        *out = neg ? -v : v;
        return 1;
    }
    char buf[32];
    memcpy(buf, s, n);
    buf[n] = 0;
    *out = strtod(buf, NULL);
    return isfinite(*out);
}

/* Python's repr(float) (shortest round-trip digits; fixed notation for 1e-4 <= |v| < 1e16). */
static int repr_double(double v, char *out, int cap) {
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = 0;
    const char *q = e;
    if (*q == '-') { neg = 1; q++; }
    while (*q && *q != 'e') { if (*q != '.') digits[nd++] = *q; q++; }
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char tmp[64];
    int o = 0;
    if (neg) tmp[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) tmp[o++] = i < nd ? digits[i] : '0';
            tmp[o++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) tmp[o++] = digits[i];
            else tmp[o++] = '0';
        } else {
            tmp[o++] = '0'; tmp[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) tmp[o++] = '0';
            for (int i = 0; i < nd; i++) tmp[o++] = digits[i];
        }
    } else {
        tmp[o++] = digits[0];
        if (nd > 1) { tmp[o++] = '.'; for (int i = 1; i < nd; i++) tmp[o++] = digits[i]; }
        o += snprintf(tmp + o, sizeof tmp - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    if (o > cap) return -1;
    memcpy(out, tmp, o);
    return o;
}

/* the fragment's key equals a literal (constant length: compiled to a few compares) */
#define KEQ(lit) (klen == (Py_ssize_t)sizeof(lit) - 1 && memcmp(frag, lit, sizeof(lit) - 1) == 0)

static int span_eq(const char *s, Py_ssize_t n, const char *lit) {
    size_t m = strlen(lit);
    return (size_t)n == m && memcmp(s, lit, m) == 0;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Is `dddd-dd-dd?dd:dd:dd` at p (digits checked) a real date and time? Else the line goes to
 * Python, which rejects it with the reason (logs/clock.py). */
static int real_time(const char *p) {
    int y = (p[0] - '0') * 1000 + (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
    int mo = (p[5] - '0') * 10 + (p[6] - '0'), d = (p[8] - '0') * 10 + (p[9] - '0');
    int h = (p[11] - '0') * 10 + (p[12] - '0'), mi = (p[14] - '0') * 10 + (p[15] - '0');
    int se = (p[17] - '0') * 10 + (p[18] - '0');
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return !(y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) ||
             h > 23 || mi > 59 || se > 59);
}

/* Parse `[YYYY-MM-DD HH:MM:SS(.f{1,6})?( TAG)*] ` at the start; fills ts span, µs and rank tags. */
static Py_ssize_t parse_prefix(const char *s, Py_ssize_t n, Py_ssize_t *ts_len, int64_t *ts_us,
                               Py_ssize_t *rank_start, Py_ssize_t *rank_len, int64_t tags[4]) {
    if (n < 22 || s[0] != '[') return -1;
    const char *p = s + 1;
    static const char pat[] = "dddd-dd-dd dd:dd:dd";
    for (int i = 0; i < 19; i++) {
        if (pat[i] == 'd') { if (p[i] < '0' || p[i] > '9') return -1; }
        else if (p[i] != pat[i]) return -1;
    }
    if (!real_time(p)) return -1; /* not a real time: the Python parser decides */
    int y = (p[0] - '0') * 1000 + (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
    int mo = (p[5] - '0') * 10 + (p[6] - '0'), d = (p[8] - '0') * 10 + (p[9] - '0');
    int h = (p[11] - '0') * 10 + (p[12] - '0'), mi = (p[14] - '0') * 10 + (p[15] - '0');
    int se = (p[17] - '0') * 10 + (p[18] - '0');
    Py_ssize_t i = 1 + 19;
    int64_t frac = 0;
    if (i < n && s[i] == '.') {
        Py_ssize_t j = i + 1;
        while (j < n && s[j] >= '0' && s[j] <= '9') { frac = frac * 10 + (s[j] - '0'); j++; }
        if (j == i + 1 || j - i - 1 > 6) return -1;
        for (Py_ssize_t k = j - i - 1; k < 6; k++) frac *= 10;
        i = j;
    }
    *ts_len = i - 1;
    *ts_us = ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se) * 1000000) + frac;
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


static int isd(char c) { return c >= '0' && c <= '9'; }

/* A whole token [s, s + n) that prefix.OUTER_TS matches (docker/kubectl --timestamps):
 * dddd-dd-ddTdd:dd:dd(.d+)?(Z|[+-]dd:?dd)? */
static int outer_ts_token(const char *s, Py_ssize_t n) {
    static const char pat[] = "dddd-dd-ddTdd:dd:dd";
    if (n < 19) return 0;
    for (int i = 0; i < 19; i++) {
        if (pat[i] == 'd') { if (!isd(s[i])) return 0; }
        else if (s[i] != pat[i]) return 0;
    }
    Py_ssize_t i = 19;
    if (i < n && s[i] == '.') {
        Py_ssize_t j = i + 1;
        while (j < n && isd(s[j])) j++;
        if (j == i + 1) return 0;
        i = j;
    }
    if (i < n && s[i] == 'Z') i++;
    else if (i < n && (s[i] == '+' || s[i] == '-')) {
        Py_ssize_t j = i + 1;
        if (j + 2 > n || !isd(s[j]) || !isd(s[j + 1])) return 0;
        j += 2;
        if (j < n && s[j] == ':') j++;
        if (j + 2 > n || !isd(s[j]) || !isd(s[j + 1])) return 0;
        i = j + 2;
    }
    return i == n;
}

static int real_date(int y, int mo, int d, int h, int mi, int se) {
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return y >= 1 && mo >= 1 && mo <= 12 && d >= 1 && d <= mdays[mo - 1] + (mo == 2 && leap) &&
           h <= 23 && mi <= 59 && se <= 59;
}

/* An OUTER_TS token that is a real date and time as datetime.fromisoformat reads it
 * (clock.not_a_date): fields in range, a zone offset under 24 h. */
static int outer_ts_valid(const char *s, Py_ssize_t n) {
#define D2(i) ((s[i] - '0') * 10 + (s[(i) + 1] - '0'))
    int y = D2(0) * 100 + D2(2);
    if (!real_date(y, D2(5), D2(8), D2(11), D2(14), D2(17))) return 0;
    Py_ssize_t i = 19;
    while (i < n && s[i] != '+' && s[i] != '-') i++;
    if (i < n) {
        int hh = D2(i + 1), mm = s[i + 3] == ':' ? D2(i + 4) : D2(i + 3);
        if (hh * 60 + mm >= 24 * 60) return 0;
    }
    return 1;
#undef D2
}

/* The length of an OUTER_TS token followed by a space at q, else 0. */
static Py_ssize_t outer_ts_at(const char *q, Py_ssize_t m) {
    const char *sp = memchr(q, ' ', m < 48 ? m : 48);
    return sp && outer_ts_token(q, sp - q) ? sp - q : 0;
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || isd(c) || c == '_' || c == '.' || c == '-';
}

/* prefix._PROC on [s, s + n) with s[0] == '(' and s[n - 1] == ')':
 * ((name )?pid=N(, ip=[0-9.:a-fA-F]+)?) */
static int proc_tag(const char *s, Py_ssize_t n) {
    Py_ssize_t i = 1, e = n - 1, j = 1;
    while (j < e && name_char(s[j])) j++;
    if (j > i && j < e && s[j] == ' ') i = j + 1;
    if (e - i < 5 || memcmp(s + i, "pid=", 4) != 0) return 0;
    i += 4;
    Py_ssize_t d = i;
    while (i < e && isd(s[i])) i++;
    if (i == d) return 0;
    if (i == e) return 1;
    if (e - i < 6 || memcmp(s + i, ", ip=", 5) != 0) return 0;
    i += 5;
    d = i;
    while (i < e && (isd(s[i]) || s[i] == '.' || s[i] == ':' || (s[i] >= 'a' && s[i] <= 'f') ||
                     (s[i] >= 'A' && s[i] <= 'F'))) i++;
    return i > d && i == e;
}

/* `[dddd-dd-dd` followed by ' ' or 'T' at q (reassemble.STARTS_RECORD's SGLang bracket). */
static int starts_bracket(const char *q, Py_ssize_t m) {
    if (m < 12 || q[0] != '[' || q[5] != '-' || q[8] != '-' || (q[11] != ' ' && q[11] != 'T'))
        return 0;
    for (int k = 1; k <= 10; k++)
        if (k != 5 && k != 8 && !isd(q[k])) return 0;
    return 1;
}

/* reassemble._OWN_RECORD: somewhere in the line an SGLang bracket
 * `[dddd-dd-dd[ T]dd:dd:dd([.,]d+)?( [A-Z][A-Z_]*d+)*] ` followed by `Decode batch` / `Prefill batch`. */
static int own_record(const char *q, Py_ssize_t m) {
    for (Py_ssize_t i = 0; i + 14 <= m; i++) {
        const char *h = memchr(q + i, ']', m - i);
        if (!h) return 0;
        i = h - q;
        if (!((m - i >= 14 && memcmp(h, "] Decode batch", 14) == 0) ||
              (m - i >= 15 && memcmp(h, "] Prefill batch", 15) == 0)))
            continue;
        Py_ssize_t k = i - 1;
        while (k >= 0 && i - k < 96 && q[k] != '[') k--;
        if (k < 0 || q[k] != '[' || !starts_bracket(q + k, m - k)) continue;
        const char *t = q + k + 12;
        Py_ssize_t r = i - (k + 12);   /* bytes between the date and ']' */
        if (r < 8 || !isd(t[0]) || !isd(t[1]) || t[2] != ':' || !isd(t[3]) || !isd(t[4]) ||
            t[5] != ':' || !isd(t[6]) || !isd(t[7]))
            continue;
        Py_ssize_t j = 8;
        if (j < r && (t[j] == '.' || t[j] == ',')) {
            Py_ssize_t d = ++j;
            while (j < r && isd(t[j])) j++;
            if (j == d) continue;
        }
        int good = 1;
        while (good && j < r) {  /* ( [A-Z][A-Z_]*\d+)* */
            if (t[j] != ' ' || j + 1 >= r || !(t[j + 1] >= 'A' && t[j + 1] <= 'Z')) { good = 0; break; }
            j += 2;
            while (j < r && ((t[j] >= 'A' && t[j] <= 'Z') || t[j] == '_')) j++;
            Py_ssize_t d = j;
            while (j < r && isd(t[j])) j++;
            if (j == d) good = 0;
        }
        if (good) return 1;
    }
    return 0;
}

/* One pass: is the line printable ASCII (the only lines the scanner takes itself)? */
static inline int printable_ascii(const char *L, Py_ssize_t len) {
    int plain = 1;
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)L[i];
        plain &= (c >= 0x20) & (c < 0x7f);
    }
    return plain;
}

/* Can the line at q (of the `avail` bytes left in the buffer) not continue the record before it
 * (reassemble.Reassembler._continue returns "no" for it)? `docker`: that record's line starts with
 * a docker timestamp; `lp`: its capture prefix (a line that starts with the same prefix and then a
 * record starts its own). The buffer's last line is never judged here (Python holds it). */
static int next_starts_own(const char *q, Py_ssize_t avail, int docker, const char *lp,
                           Py_ssize_t lp_len) {
    const char *nl = memchr(q, '\n', avail);
    if (!nl) return 0;
    Py_ssize_t m = nl - q;
    if (m == 0) return 1;
    if (memchr(q, '\r', m)) return 0;   /* the terminal shows what follows a carriage return */
    if (starts_bracket(q, m)) return 1;
    if (lp_len > 0 && !docker && lp[0] != '{' && m > lp_len && memcmp(q, lp, lp_len) == 0 &&
        starts_bracket(q + lp_len, m - lp_len))
        return 1;
    Py_ssize_t t = outer_ts_at(q, m);
    if (t) {
        if (!docker) return 1;
        const char *r = q + t + 1;
        Py_ssize_t rm = m - t - 1;
        if (rm >= 9 && (memcmp(r, "stdout ", 7) == 0 || memcmp(r, "stderr ", 7) == 0) &&
            (r[7] == 'F' || r[7] == 'P') && r[8] == ' ') { r += 9; rm -= 9; }
        if (starts_bracket(r, rm)) return 1;
    }
    return !memchr(q, 0x1b, m) && own_record(q, m);
}

/* Normalise a printed key like specwatch.logs.parse.normalize_key; returns length written, -1 if odd. */
static Py_ssize_t norm_key(const char *k, Py_ssize_t n, char *out, Py_ssize_t cap) {
    Py_ssize_t o = 0;
    int paren = 0, pending_sep = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = k[i];
        if (c == '(') { paren = 1; continue; }
        if (paren) { if (c == ')') paren = 0; continue; }
        if (c == ')') return -1; /* unbalanced: let Python decide */
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

static int is_reserved(const char *k, Py_ssize_t n) {
    for (int i = 0; i < n_reserved; i++)
        if (span_eq(k, n, reserved[i])) return 1;
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

/* An extra key's value as JSON, printed from its parsed value the way json.dumps prints what
 * parse._infer returns; 0 if its shape needs the Python parser (strings, exponents, ...). */
static int json_value(jbuf *j, const char *v, Py_ssize_t n) {
    int64_t iv;
    double fv;
    char tmp[48];
    if (span_eq(v, n, "True")) return jput(j, "true", 4);
    if (span_eq(v, n, "False")) return jput(j, "false", 5);
    if (parse_int(v, n, &iv)) {
        int m = snprintf(tmp, sizeof tmp, "%lld", (long long)iv);
        return jput(j, tmp, m);
    }
    int pct = n > 1 && v[n - 1] == '%';
    if (parse_float(v, pct ? n - 1 : n, &fv, !pct)) {
        int m = repr_double(fv, tmp, sizeof tmp);
        return m > 0 && jput(j, tmp, m);
    }
    return 0;
}

/* One output table: column buffers in Arrow layout (see fastscan.py). */
typedef struct {
    Py_buffer views[N_BUFS];
    int64_t *i64; int32_t *i32; double *f64; int8_t *i8; int32_t *soff;
    jbuf str[S_N];
    Py_ssize_t cap, n;
} table_t;

static int table_open(table_t *t, PyObject *tup, int ni64, int ni32, int nf64) {
    memset(t, 0, sizeof *t);
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != N_BUFS) {
        PyErr_SetString(PyExc_TypeError, "expected a tuple of 11 buffers");
        return 0;
    }
    for (int i = 0; i < N_BUFS; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tup, i), &t->views[i], PyBUF_WRITABLE) < 0) {
            for (int k = 0; k < i; k++) PyBuffer_Release(&t->views[k]);
            return 0;
        }
    }
    t->cap = t->views[0].len / (Py_ssize_t)(ni64 * sizeof(int64_t));
    if (t->views[1].len < t->cap * ni32 * (Py_ssize_t)sizeof(int32_t) ||
        t->views[2].len < t->cap * nf64 * (Py_ssize_t)sizeof(double) ||
        t->views[3].len < t->cap * G_N || t->views[4].len < (t->cap + 1) * S_N * (Py_ssize_t)sizeof(int32_t)) {
        for (int k = 0; k < N_BUFS; k++) PyBuffer_Release(&t->views[k]);
        PyErr_SetString(PyExc_ValueError, "column buffers are smaller than the capacity");
        return 0;
    }
    t->i64 = t->views[0].buf; t->i32 = t->views[1].buf; t->f64 = t->views[2].buf;
    t->i8 = t->views[3].buf; t->soff = t->views[4].buf;
    for (int s = 0; s < S_N; s++) {
        t->str[s].buf = t->views[5 + s].buf;
        t->str[s].cap = t->views[5 + s].len;
        t->str[s].len = 0;
        t->soff[s * (t->cap + 1)] = 0;
    }
    return 1;
}

static void table_close(table_t *t) {
    for (int k = 0; k < N_BUFS; k++) PyBuffer_Release(&t->views[k]);
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "O", &keys)) return NULL;
    PyObject *seq = PySequence_Fast(keys, "reserved keys must be a sequence of str");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_RESERVED) { Py_DECREF(seq); PyErr_SetString(PyExc_ValueError, "too many keys"); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(seq, i), &len);
        if (!s || len >= 64) {
            Py_DECREF(seq);
            if (s) PyErr_SetString(PyExc_ValueError, "reserved key too long");
            return NULL;
        }
        memcpy(reserved[i], s, len + 1);
    }
    n_reserved = (int)n;
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer data, sl;
    long long base_off, base_line;
    PyObject *dtup, *ptup;
    if (!PyArg_ParseTuple(args, "y*LLOOw*", &data, &base_off, &base_line, &dtup, &ptup, &sl))
        return NULL;
    table_t D, P;
    if (!table_open(&D, dtup, D_NI64, D_NI32, D_NF64)) { PyBuffer_Release(&data); PyBuffer_Release(&sl); return NULL; }
    if (!table_open(&P, ptup, P_NI64, P_NI32, P_NF64)) {
        table_close(&D); PyBuffer_Release(&data); PyBuffer_Release(&sl); return NULL;
    }
    const char *s = data.buf;
    Py_ssize_t n = data.len;
    int64_t *SL = sl.buf;
    Py_ssize_t scap = sl.len / (Py_ssize_t)(2 * sizeof(int64_t));
    Py_ssize_t ns = 0;
    long long first_bad = -1, n_bad = 0, first_bin = -1, n_bin = 0;
    int overflow = 0;
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
        int plain = printable_ascii(L, len);
        if (!plain && memchr(L, 0, len)) {
            /* NUL bytes are never text a logger wrote (a copytruncate hole under a writer without
             * O_APPEND, a crash before the data reached the disk): what follows the last one is
             * the line, at its own offset (reassemble.feed_chunk does the same) */
            if (first_bin < 0) first_bin = line_no;
            n_bin++;
            Py_ssize_t z = len;
            while (z > 0 && L[z - 1] != 0) z--;
            L += z; len -= z; off += z;
            if (len == 0) continue;
            plain = printable_ascii(L, len);
        }
        if (!plain) {
            int ascii = 1;
            for (Py_ssize_t i = 0; i < len; i++) if ((unsigned char)L[i] >= 0x80) { ascii = 0; break; }
            if (!ascii && !utf8_valid((const unsigned char *)L, len)) {
                if (first_bad < 0) first_bad = line_no;
                n_bad++;
            }
        }
        Py_ssize_t ts_len = 0, rank_start = 0, rank_len = 0;
        int64_t tags[4], ts_us = 0;
        Py_ssize_t b = plain ? parse_prefix(L, len, &ts_len, &ts_us, &rank_start, &rank_len, tags) : -1;
        int kind = 0; /* 1 decode, 2 prefill */
        int cut = 0;  /* a CRI partial line: the reassembler joins it with the next */
        Py_ssize_t lb = 0, lp_len = 0, ots = 0, ots_len = 0, pr = 0, pr_len = 0;
        int shape = 0;
        if (b > 0) {
            if (len - b > 13 && memcmp(L + b, "Decode batch", 12) == 0) { kind = 1; b += 12; }
            else if (len - b > 14 && memcmp(L + b, "Prefill batch", 13) == 0) { kind = 2; b += 13; }
        }
        if (!kind && plain && len > 60 && memmem(L, len, " batch", 6) && !memchr(L, '`', len)) {
            /* the message after a capture prefix: `... [ts ranks] Decode batch` */
            const char *h1 = memmem(L, len, "] Decode batch", 14);
            const char *h2 = memmem(L, len, "] Prefill batch", 15);
            const char *h = h1 && (!h2 || h1 < h2) ? h1 : h2;
            if (h) {
                Py_ssize_t hi = h - L, k = hi - 1;
                while (k >= 0 && hi - k < 64 && L[k] != '[') k--;
                Py_ssize_t bb = k >= 0 && L[k] == '[' ?
                    parse_prefix(L + k, len - k, &ts_len, &ts_us, &rank_start, &rank_len, tags) : -1;
                if (bb == hi - k + 2) {
                    lb = k;
                    rank_start += lb;
                    b = lb + bb;
                    kind = L[b] == 'D' ? 1 : 2;
                    b += kind == 1 ? 12 : 13;
                    /* before the bracket: [P'][TS [stdout|stderr F] ][(process) ] */
                    Py_ssize_t e = lb;
                    if (e >= 2 && L[e - 1] == ' ' && L[e - 2] == ')') {
                        Py_ssize_t q = e - 3;
                        while (q >= 0 && e - q < 128 && L[q] != '(') q--;
                        if (q >= 0 && L[q] == '(' && proc_tag(L + q, e - 1 - q)) {
                            pr = q + 1; pr_len = e - 2 - pr; shape |= 4; e = q;
                        }
                    }
                    if (e >= 2 && L[e - 1] == ' ') {
                        if (e >= 11 && L[e - 10] == ' ' && L[e - 3] == ' ' &&
                            (memcmp(L + e - 9, "stdout", 6) == 0 || memcmp(L + e - 9, "stderr", 6) == 0) &&
                            (L[e - 2] == 'F' || L[e - 2] == 'P')) {
                            Py_ssize_t te = e - 10, q = te;
                            while (q > 0 && L[q - 1] != ' ') q--;
                            if (outer_ts_token(L + q, te - q)) {
                                cut = L[e - 2] == 'P' || !outer_ts_valid(L + q, te - q);
                                ots = q; ots_len = te - q; shape |= 3; e = q;
                            }
                        }
                        if (!(shape & 1)) {
                            Py_ssize_t te = e - 1, q = te;
                            while (q > 0 && L[q - 1] != ' ') q--;
                            if (outer_ts_token(L + q, te - q)) {
                                cut = !outer_ts_valid(L + q, te - q);  /* Python rejects it */
                                ots = q; ots_len = te - q; shape |= 1; e = q;
                            }
                        }
                    }
                    lp_len = e;
                }
            }
        }
        if (!kind && !has_anchor(L, len)) continue;
        table_t *T = kind == 1 ? &D : &P;
        int ok = kind != 0 && !cut && (!ots_len || real_time(L + ots)) && T->n < T->cap;
        int64_t iter = NULL_I64;
        if (ok && L[b] == ' ' && b + 1 < len && L[b + 1] == '[') {
            Py_ssize_t k = b + 2;
            int64_t v = 0;
            Py_ssize_t d0 = k;
            while (k < len && L[k] >= '0' && L[k] <= '9' && k - d0 < 18) { v = v * 10 + (L[k] - '0'); k++; }
            if (k == d0 || k >= len || L[k] != ']') ok = 0;
            else { iter = v; b = k + 1; }
        }
        if (ok && !(b + 1 < len && (L[b] == ',' || L[b] == '.') && L[b + 1] == ' ')) ok = 0;
        b += 2;
        int64_t ints[8];
        double flts[5];
        int8_t graph = -1, dev = -1;
        for (int i = 0; i < 8; i++) ints[i] = NULL_I64;
        for (int i = 0; i < 5; i++) flts[i] = NAN;
        jbuf *J = &T->str[S_FIELDS];
        Py_ssize_t json_start = J->len;
        int nextra = 0;
        /* body as parse.py cuts it: trailing spaces, then one ',' dropped; split on ", " */
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
        while (ok) {
            const char *frag = L + p;
            /* one pass: the first ": " (key end) and the first ", " (fragment end) */
            const char *colon = NULL, *sep = NULL;
            for (const char *q = frag, *qe = L + end - 1; q < qe; q++) {
                if (q[1] != ' ') continue;
                if (*q == ',') { sep = q; break; }
                if (*q == ':' && !colon) colon = q;
            }
            Py_ssize_t flen = sep ? sep - frag : end - p;
            if (!colon) { ok = 0; break; } /* includes an empty fragment (", , ") */
            Py_ssize_t klen = colon - frag;
            const char *v = colon + 2;
            Py_ssize_t vlen = flen - klen - 2;
            while (vlen > 0 && v[vlen - 1] == ' ') vlen--;
            if (vlen <= 0 || v[0] == ' ') { ok = 0; break; }
            int64_t iv;
            double fv;
            int slot = -1, fslot = -1, isbool = 0, is32 = 0;
            if (kind == 1) {
                if (KEQ("#running-req")) { slot = 0; is32 = 1; }
                else if (KEQ("#token") || KEQ("#full token")) slot = 1;  /* hybrid pools: same count */
                else if (KEQ("#queue-req")) { slot = 2; is32 = 1; }
                else if (KEQ("mamba num")) { slot = 3; is32 = 1; }
                else if (KEQ("token usage") || KEQ("full token usage")) fslot = 0;
                else if (KEQ("accept len")) fslot = 1;
                else if (KEQ("accept rate")) fslot = 2;
                else if (KEQ("gen throughput (token/s)")) fslot = 3;
                else if (KEQ("mamba usage")) fslot = 4;
            } else {
                if (KEQ("#new-seq")) { slot = 0; is32 = 1; }
                else if (KEQ("#new-token")) slot = 1;
                else if (KEQ("#cached-token")) slot = 2;
                else if (KEQ("#running-req")) { slot = 3; is32 = 1; }
                else if (KEQ("#queue-req")) { slot = 4; is32 = 1; }
                else if (KEQ("token usage") || KEQ("full token usage")) fslot = 0;
                else if (KEQ("input throughput (token/s)")) fslot = 1;
                else if (KEQ("mamba usage")) fslot = 3;
            }
            if (KEQ("cuda graph")) { isbool = 1; dev = 0; }
            else if (KEQ("cpu graph")) { isbool = 1; dev = 1; }
            else if (KEQ("npu graph")) { isbool = 1; dev = 2; }
            else if (KEQ("musa graph")) { isbool = 1; dev = 3; }
            if (slot >= 0) {
                if (ints[slot] != NULL_I64 || !parse_int(v, vlen, &iv) || (is32 && !fits_i32(iv))) {
                    ok = 0; break;
                }
                ints[slot] = iv;
            } else if (fslot >= 0) {
                if (!isnan(flts[fslot]) || !parse_float(v, vlen, &fv, 0)) { ok = 0; break; }
                flts[fslot] = fv;
            } else if (isbool) {
                if (graph != -1) { ok = 0; break; }
                if (vlen == 4 && memcmp(v, "True", 4) == 0) graph = 1;
                else if (vlen == 5 && memcmp(v, "False", 5) == 0) graph = 0;
                else { ok = 0; break; }
            } else if (kind == 2 && KEQ("cache hit rate")) {
                if (vlen < 2 || v[vlen - 1] != '%' || !parse_float(v, vlen - 1, &fv, 0) || !isnan(flts[2])) {
                    ok = 0; break;
                }
                flts[2] = fv;
            } else {
                /* an extra key: kept in the `fields` JSON, by its normalised name. TokenSpeed's
                 * format goes to Python (which rejects it): `avg_accept_len: ` can only occur in
                 * such a fragment, since known keys are literals and their values numbers. */
                if (memmem(frag, flen, "avg_accept_len: ", 16)) { ok = 0; break; }
                /* No SGLang key holds a bracket: a key that does is another record glued on
                 * (`..., #queue-req: 0, [ts TP0] Cache flushed: 3`, `INFO ... file.py:N] ...`,
                 * `[pod/p/c] ...`), which Python cuts off or rejects (logs/glued.py). */
                if (memchr(frag, '[', klen) || memchr(frag, ']', klen)) { ok = 0; break; }
                Py_ssize_t kn = norm_key(frag, klen, key, sizeof key);
                if (kn <= 0 || is_reserved(key, kn)) { ok = 0; break; }
                /* a duplicate (or a key that contains an earlier one) goes to Python */
                if (memmem(J->buf + json_start, J->len - json_start, key, kn)) { ok = 0; break; }
                if (!jput(J, nextra ? ",\"" : "{\"", 2) || !jput(J, key, kn) ||
                    !jput(J, "\":", 2) || !json_value(J, v, vlen)) { ok = 0; break; }
                nextra++;
            }
            if (!sep) break;
            p += flen + 2;
            if (p >= end) { ok = 0; break; } /* a trailing empty fragment: Python rejects it */
        }
        if (ok) {
            /* required fields, as declared in formats/lines.toml */
            if (kind == 1 && (ints[0] == NULL_I64 || isnan(flts[3]) || ints[2] == NULL_I64)) ok = 0;
            if (kind == 2 && (ints[0] == NULL_I64 || ints[1] == NULL_I64 || ints[4] == NULL_I64)) ok = 0;
        }
        if (ok && nextra && !jput(J, "}", 1)) ok = 0;
        /* A record is only complete when the next line cannot continue it (reassemble.py holds
         * every record for one line): take it only when the next line starts a record of its
         * own (`[YYYY-MM-DD ` / `[YYYY-MM-DDT`, a strict part of STARTS_RECORD) or is empty. The
         * last line of the buffer goes to Python, which holds it until the next chunk. */
        if (ok) ok = pos < n && next_starts_own(s + pos, n - pos, outer_ts_at(L, len) > 0, L, lp_len);
        if (ok && (!jput(&T->str[S_TS], L + lb + 1, ts_len) ||
                   !jput(&T->str[S_RANK], L + rank_start, rank_len) ||
                   !jput(&T->str[S_PREFIX], L, lp_len) || !jput(&T->str[S_OUTER], L + ots, ots_len) ||
                   !jput(&T->str[S_PROC], L + pr, pr_len)))
            ok = 0;
        if (!ok) {
            if (kind) {
                /* undo this row's partial string output */
                for (int k = 0; k < S_N; k++) T->str[k].len = T->soff[k * (T->cap + 1) + T->n];
            }
            if (ns >= scap) { overflow = 1; break; }
            SL[2 * ns] = off - base_off; SL[2 * ns + 1] = line_no; ns++;
            continue;
        }
        Py_ssize_t r = T->n, C = T->cap;
        for (int k = 0; k < S_N; k++) T->soff[k * (C + 1) + r + 1] = (int32_t)T->str[k].len;
        int32_t rk[4];
        for (int k = 0; k < 4; k++) rk[k] = tags[k] == NULL_I64 ? NULL_I32 : (int32_t)tags[k];
        if (kind == 1) {
            T->i64[D_OFF * C + r] = off; T->i64[D_LINE * C + r] = line_no;
            T->i64[D_ITER * C + r] = iter; T->i64[D_TOK * C + r] = ints[1]; T->i64[D_TS * C + r] = ts_us;
            T->i32[D_DP * C + r] = rk[0]; T->i32[D_TP * C + r] = rk[1];
            T->i32[D_PP * C + r] = rk[2]; T->i32[D_EP * C + r] = rk[3];
            T->i32[D_RUN * C + r] = (int32_t)ints[0];
            T->i32[D_QUEUE * C + r] = (int32_t)ints[2];
            T->i32[D_MAMBA * C + r] = ints[3] == NULL_I64 ? NULL_I32 : (int32_t)ints[3];
            T->f64[D_USAGE * C + r] = flts[0]; T->f64[D_AL * C + r] = flts[1];
            T->f64[D_AR * C + r] = flts[2]; T->f64[D_GEN * C + r] = flts[3];
            T->f64[D_MUSAGE * C + r] = flts[4];
        } else {
            T->i64[P_OFF * C + r] = off; T->i64[P_LINE * C + r] = line_no;
            T->i64[P_ITER * C + r] = iter; T->i64[P_NEW * C + r] = ints[1];
            T->i64[P_CACHED * C + r] = ints[2]; T->i64[P_TS * C + r] = ts_us;
            T->i32[P_DP * C + r] = rk[0]; T->i32[P_TP * C + r] = rk[1];
            T->i32[P_PP * C + r] = rk[2]; T->i32[P_EP * C + r] = rk[3];
            T->i32[P_SEQ * C + r] = (int32_t)ints[0];
            T->i32[P_RUN * C + r] = ints[3] == NULL_I64 ? NULL_I32 : (int32_t)ints[3];
            T->i32[P_QUEUE * C + r] = (int32_t)ints[4];
            T->f64[P_USAGE * C + r] = flts[0]; T->f64[P_INPUT * C + r] = flts[1];
            T->f64[P_HIT * C + r] = flts[2]; T->f64[P_MUSAGE * C + r] = flts[3];
        }
        T->i8[G_FLAG * C + r] = graph;
        T->i8[G_DEV * C + r] = graph >= 0 ? dev : -1;
        T->i8[G_SHAPE * C + r] = (int8_t)shape;
        T->n++;
    }
    Py_END_ALLOW_THREADS
    PyObject *res = NULL;
    if (overflow) PyErr_SetString(PyExc_ValueError, "slow-line index is smaller than the line count");
    else
        res = Py_BuildValue("nnnLLLL(nnnnnn)(nnnnnn)L", D.n, P.n, ns, first_bad, n_bad, first_bin,
                            n_bin, D.str[0].len, D.str[1].len, D.str[2].len, D.str[3].len,
                            D.str[4].len, D.str[5].len, P.str[0].len, P.str[1].len, P.str[2].len,
                            P.str[3].len, P.str[4].len, P.str[5].len,
                            (long long)(line_no - base_line));
    table_close(&D); table_close(&P);
    PyBuffer_Release(&data); PyBuffer_Release(&sl);
    return res;
}

/* A bytearray of n bytes whose contents are not set (bytearray(n) in Python writes n zeros while
   holding the GIL: 0.15 s per 256 MB where page faults are slow, the other threads stopped), and
   a bytearray's size changed without writing the bytes it gains: for read buffers that pread
   fills (the kernel touches the pages then, the GIL released). */
static PyObject *new_buffer(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "negative size"); return NULL; }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyObject *resize_buffer(PyObject *self, PyObject *args) {
    PyObject *b;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyByteArray_Type, &b, &n)) return NULL;
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "negative size"); return NULL; }
    if (PyByteArray_Resize(b, n) < 0) return NULL;   /* BufferError while exported */
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Scan complete log lines; see the module source for the layout."},
    {"new_buffer", new_buffer, METH_VARARGS, "bytearray of n bytes, contents not set."},
    {"resize_buffer", resize_buffer, METH_VARARGS, "Resize a bytearray; bytes gained not set."},
    {"configure", configure, METH_VARARGS, "Set the normalised keys that never go to `fields`."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_fastscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastscan(void) { return PyModule_Create(&mod); }
