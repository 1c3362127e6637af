/*
 * safetensors.c — strict safetensors header parser, bounds-checked tensor reads, atomic writer.
 *
 * The JSON parser accepts exactly what safetensors headers contain: one top-level object whose
 * values are tensor objects {dtype: string, shape: [ints], data_offsets: [int, int]} or the
 * "__metadata__" object of string values. Anything else is an error naming the byte position.
 * Memory stays linear in the header: strings are allocated at their own length, the tensor count
 * is capped and names go into a hash index (duplicates found in linear time).
 */
#include "safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* ------------------------------------------------------------------------------------------ */
/* JSON subset parser                                                                          */

typedef struct {
    const char *text;
    size_t len, pos;
    const char *path;
} json_cursor;

static void skip_ws(json_cursor *j) {
    while (j->pos < j->len && (j->text[j->pos] == ' ' || j->text[j->pos] == '\t' ||
                               j->text[j->pos] == '\n' || j->text[j->pos] == '\r'))
        j->pos++;
}

static int json_error(const json_cursor *j, const char *what) {
    return gt_set_error(GT_EINPUT, "%s: invalid safetensors header: %s at byte %zu", j->path, what,
                        j->pos);
}

static int expect(json_cursor *j, char c) {
    skip_ws(j);
    if (j->pos >= j->len || j->text[j->pos] != c) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", c);
        return json_error(j, what);
    }
    j->pos++;
    return GT_OK;
}

/* Peeks the next non-space character (0 at the end). */
static char peek(json_cursor *j) {
    skip_ws(j);
    return j->pos < j->len ? j->text[j->pos] : 0;
}

/* Opens an array or object: consumes `open`; *empty = 1 (and the `close` consumed too) when
 * nothing is inside. */
static int open_container(json_cursor *j, char open, char close, int *empty) {
    int rc = GT_OK;
    *empty = 0;
    GT_CHECK(expect(j, open));
    if (peek(j) == close) {
        j->pos++;
        *empty = 1;
    }
cleanup:
    return rc;
}

/* After an item of an array or object: consumes ',' (another item follows) or `close`
 * (*done = 1); anything else is the error `what` at that character. */
static int next_item(json_cursor *j, char close, const char *what, int *done) {
    char c = peek(j);
    *done = c == close;
    if (c != close && c != ',') return json_error(j, what);
    j->pos++;
    return GT_OK;
}

/* Parses a JSON string into a malloc'ed UTF-8 C string. */
static int parse_string(json_cursor *j, char **out) {
    int rc = GT_OK;
    char *buf = NULL;
    size_t n = 0;
    *out = NULL;
    GT_CHECK(expect(j, '"'));
    /* Decoded, a string is never longer than its JSON text up to the closing quote. */
    size_t end = j->pos;
    while (end < j->len && j->text[end] != '"') end += j->text[end] == '\\' ? 2 : 1;
    GT_CALLOC(buf, (end < j->len ? end : j->len) - j->pos + 1);
    for (;;) {
        if (j->pos >= j->len) {
            rc = json_error(j, "unterminated string");
            goto cleanup;
        }
        unsigned char c = (unsigned char)j->text[j->pos++];
        if (c == '"') break;
        if (c < 0x20) {
            rc = json_error(j, "control character in string");
            goto cleanup;
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        if (j->pos >= j->len) {
            rc = json_error(j, "unterminated escape");
            goto cleanup;
        }
        char e = j->text[j->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned code = 0;
            for (int k = 0; k < 4; k++) {
                char h = j->pos < j->len ? j->text[j->pos++] : 0;
                unsigned d = (h >= '0' && h <= '9')   ? (unsigned)(h - '0')
                             : (h >= 'a' && h <= 'f') ? (unsigned)(h - 'a' + 10)
                             : (h >= 'A' && h <= 'F') ? (unsigned)(h - 'A' + 10)
                                                      : 16u;
                if (d == 16u) {
                    rc = json_error(j, "bad \\u escape");
                    goto cleanup;
                }
                code = code * 16 + d;
            }
            /* BMP code point as UTF-8 (surrogates are kept as-is: names are ASCII in practice) */
            if (code < 0x80) {
                buf[n++] = (char)code;
            } else if (code < 0x800) {
                buf[n++] = (char)(0xC0 | (code >> 6));
                buf[n++] = (char)(0x80 | (code & 0x3F));
            } else {
                buf[n++] = (char)(0xE0 | (code >> 12));
                buf[n++] = (char)(0x80 | ((code >> 6) & 0x3F));
                buf[n++] = (char)(0x80 | (code & 0x3F));
            }
            break;
        }
        default:
            rc = json_error(j, "bad escape");
            goto cleanup;
        }
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
cleanup:
    free(buf);
    return rc;
}

/* Parses a non-negative integer that fits in int64. */
static int parse_uint(json_cursor *j, uint64_t *out) {
    skip_ws(j);
    uint64_t v = 0;
    size_t start = j->pos;
    while (j->pos < j->len && j->text[j->pos] >= '0' && j->text[j->pos] <= '9') {
        uint64_t d = (uint64_t)(j->text[j->pos] - '0');
        if (v > (UINT64_C(0x7fffffffffffffff) - d) / 10) return json_error(j, "integer too large");
        v = v * 10 + d;
        j->pos++;
    }
    if (j->pos == start) return json_error(j, "expected a non-negative integer");
    *out = v;
    return GT_OK;
}

/* Parses [int, int, ...] with at most `max` items. */
static int parse_uint_array(json_cursor *j, uint64_t *items, int max, int *count) {
    int rc = GT_OK;
    int done = 0;
    *count = 0;
    GT_CHECK(open_container(j, '[', ']', &done));
    while (!done) {
        if (*count >= max) {
            rc = json_error(j, "too many array items");
            goto cleanup;
        }
        GT_CHECK(parse_uint(j, &items[(*count)++]));
        GT_CHECK(next_item(j, ']', "expected ',' or ']'", &done));
    }
cleanup:
    return rc;
}

static int parse_metadata(json_cursor *j) {
    int rc = GT_OK;
    char *key = NULL, *value = NULL;
    int done = 0;
    GT_CHECK(open_container(j, '{', '}', &done));
    while (!done) {
        GT_CHECK(parse_string(j, &key));
        GT_CHECK(expect(j, ':'));
        GT_CHECK(parse_string(j, &value));
        free(key);
        free(value);
        key = value = NULL;
        GT_CHECK(next_item(j, '}', "expected ',' or '}' in __metadata__", &done));
    }
cleanup:
    free(key);
    free(value);
    return rc;
}

static int parse_tensor(json_cursor *j, gt_st_entry *e) {
    int rc = GT_OK;
    char *key = NULL, *dtype = NULL;
    int have_dtype = 0, have_shape = 0, have_offsets = 0, done = 0;
    GT_CHECK(expect(j, '{')); /* no empty tensor object: it lacks dtype, shape, data_offsets */
    while (!done) {
        GT_CHECK(parse_string(j, &key));
        GT_CHECK(expect(j, ':'));
        if (strcmp(key, "dtype") == 0 && !have_dtype) {
            GT_CHECK(parse_string(j, &dtype));
            if (strlen(dtype) >= sizeof(e->dtype)) {
                rc = json_error(j, "dtype name too long");
                goto cleanup;
            }
            strcpy(e->dtype, dtype);
            have_dtype = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            uint64_t dims[GT_ST_MAX_DIMS];
            GT_CHECK(parse_uint_array(j, dims, GT_ST_MAX_DIMS, &e->ndim));
            for (int d = 0; d < e->ndim; d++) e->shape[d] = (int64_t)dims[d];
            have_shape = 1;
        } else if (strcmp(key, "data_offsets") == 0 && !have_offsets) {
            uint64_t offs[2];
            int n = 0;
            GT_CHECK(parse_uint_array(j, offs, 2, &n));
            if (n != 2 || offs[1] < offs[0]) {
                rc = json_error(j, "data_offsets must be [begin, end] with begin <= end");
                goto cleanup;
            }
            e->begin = offs[0];
            e->end = offs[1];
            have_offsets = 1;
        } else {
            rc = gt_set_error(GT_EINPUT, "%s: invalid safetensors header: tensor '%s': "
                              "unexpected or repeated key '%s'", j->path, e->name, key);
            goto cleanup;
        }
        free(key);
        key = NULL;
        GT_CHECK(next_item(j, '}', "expected ',' or '}'", &done));
    }
    if (!have_dtype || !have_shape || !have_offsets)
        rc = gt_set_error(GT_EINPUT, "%s: invalid safetensors header: tensor '%s' lacks dtype, "
                          "shape or data_offsets", j->path, e->name);
cleanup:
    free(key);
    free(dtype);
    return rc;
}

static int dtype_size(const char *dtype) {
    static const struct { const char *name; int size; } table[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1},
        {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(dtype, table[i].name) == 0) return table[i].size;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* name index: open addressing, linear probing, at most half full                             */

static uint64_t name_hash(const char *name) {
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * UINT64_C(0x100000001b3);
    return h;
}

/* The index slot holding `name`, or the empty slot where it would go. */
static size_t index_slot(const gt_st_file *f, const char *name) {
    size_t mask = f->index_cap - 1;
    size_t slot = (size_t)name_hash(name) & mask;
    while (f->index[slot] != 0 && strcmp(f->entries[f->index[slot] - 1].name, name) != 0)
        slot = (slot + 1) & mask;
    return slot;
}

/* Grows the index (rehashing the entries in it) so that `count` entries fill at most half. */
static int index_reserve(gt_st_file *f, size_t count) {
    int rc = GT_OK;
    int *old = f->index;
    size_t old_cap = f->index_cap;
    if (count * 2 <= old_cap) return GT_OK;
    size_t cap = old_cap ? old_cap : 128;
    while (cap < count * 2) cap *= 2;
    f->index = NULL;
    GT_CALLOC(f->index, cap);
    f->index_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] != 0) f->index[index_slot(f, f->entries[old[i] - 1].name)] = old[i];
cleanup:
    if (rc != GT_OK) {
        f->index = old;
        old = NULL;
    }
    free(old);
    return rc;
}

static int parse_header(json_cursor *j, gt_st_file *f) {
    int rc = GT_OK;
    char *key = NULL;
    int cap = 0, done = 0;
    GT_CHECK(open_container(j, '{', '}', &done));
    while (!done) {
        GT_CHECK(parse_string(j, &key));
        GT_CHECK(expect(j, ':'));
        if (strcmp(key, "__metadata__") == 0) {
            GT_CHECK(parse_metadata(j));
            free(key);
        } else {
            if (f->num_entries >= GT_ST_MAX_TENSORS)
                GT_INPUT_FAIL("%s: invalid safetensors header: more than %d tensors (at most %d "
                              "allowed)", j->path, GT_ST_MAX_TENSORS, GT_ST_MAX_TENSORS);
            GT_CHECK(index_reserve(f, (size_t)f->num_entries + 1));
            size_t slot = index_slot(f, key);
            if (f->index[slot] != 0)
                GT_INPUT_FAIL("%s: invalid safetensors header: tensor '%s' appears twice",
                              j->path, key);
            if (f->num_entries == cap) {
                int new_cap = cap ? 2 * cap : 64;
                gt_st_entry *grown = realloc(f->entries, (size_t)new_cap * sizeof(*grown));
                if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory parsing %s", j->path);
                f->entries = grown;
                cap = new_cap;
            }
            gt_st_entry *e = &f->entries[f->num_entries++];
            memset(e, 0, sizeof(*e));
            e->name = key; /* owned by the entry from here on */
            key = NULL;
            f->index[slot] = f->num_entries;
            GT_CHECK(parse_tensor(j, e));
        }
        key = NULL;
        GT_CHECK(next_item(j, '}', "expected ',' or '}'", &done));
    }
    skip_ws(j);
    if (j->pos != j->len) rc = json_error(j, "trailing bytes after the header object");
cleanup:
    free(key);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* reading                                                                                     */

static int validate_entries(const gt_st_file *f) {
    int rc = GT_OK;
    uint64_t data_size = f->file_size - f->data_start;
    for (int i = 0; i < f->num_entries; i++) {
        const gt_st_entry *e = &f->entries[i];
        int size = dtype_size(e->dtype);
        if (size == 0)
            GT_INPUT_FAIL("%s: tensor '%s': unknown dtype '%s'", f->path, e->name, e->dtype);
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] != 0 && numel > UINT64_MAX / 16 / (uint64_t)e->shape[d])
                GT_INPUT_FAIL("%s: tensor '%s': shape too large", f->path, e->name);
            numel *= (uint64_t)e->shape[d];
        }
        if (e->end - e->begin != numel * (uint64_t)size)
            GT_INPUT_FAIL("%s: tensor '%s': data_offsets span %" PRIu64 " bytes but dtype %s and "
                          "its shape need %" PRIu64, f->path, e->name, e->end - e->begin,
                          e->dtype, numel * (uint64_t)size);
        if (e->end > data_size)
            GT_INPUT_FAIL("%s: truncated file: tensor '%s' needs data bytes up to %" PRIu64
                          " but the file holds %" PRIu64, f->path, e->name, e->end, data_size);
    }
cleanup:
    return rc;
}

int gt_st_open(const char *path, gt_st_file *out) {
    int rc = GT_OK;
    char *header = NULL;
    memset(out, 0, sizeof(*out));
    out->path = path;
    out->file = fopen(path, "rb");
    if (out->file == NULL)
        GT_INPUT_FAIL("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(out->file), &st) != 0) GT_FAIL(GT_EIO, "%s: stat: %s", path, strerror(errno));
    out->file_size = (uint64_t)st.st_size;
    unsigned char len_bytes[8];
    if (out->file_size < 8 || fread(len_bytes, 1, 8, out->file) != 8)
        GT_INPUT_FAIL("%s: truncated file: shorter than the 8-byte safetensors header length",
                      path);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | len_bytes[i];
    if (header_len > GT_ST_MAX_HEADER)
        GT_INPUT_FAIL("%s: not a safetensors file: header length %" PRIu64 " is over %u bytes",
                      path, header_len, GT_ST_MAX_HEADER);
    if (header_len > out->file_size - 8)
        GT_INPUT_FAIL("%s: truncated file: header of %" PRIu64 " bytes but only %" PRIu64
                      " bytes follow", path, header_len, out->file_size - 8);
    GT_CALLOC(header, header_len + 1);
    if (fread(header, 1, header_len, out->file) != header_len)
        GT_FAIL(GT_EIO, "%s: read error in the header", path);
    out->data_start = 8 + header_len;
    json_cursor j = {header, header_len, 0, path};
    GT_CHECK(parse_header(&j, out));
    GT_CHECK(validate_entries(out));
cleanup:
    free(header);
    if (rc != GT_OK) gt_st_close(out);
    return rc;
}

const gt_st_entry *gt_st_find(const gt_st_file *f, const char *name) {
    if (f->index_cap == 0) return NULL;
    int number = f->index[index_slot(f, name)];
    return number != 0 ? &f->entries[number - 1] : NULL;
}

int gt_st_read(gt_st_file *f, const gt_st_entry *e, void *dst) {
    int rc = GT_OK;
    size_t nbytes = (size_t)(e->end - e->begin);
    if (fseeko(f->file, (off_t)(f->data_start + e->begin), SEEK_SET) != 0)
        GT_FAIL(GT_EIO, "%s: seek to tensor '%s': %s", f->path, e->name, strerror(errno));
    if (fread(dst, 1, nbytes, f->file) != nbytes)
        GT_INPUT_FAIL("%s: truncated file: cannot read tensor '%s'", f->path, e->name);
cleanup:
    return rc;
}

void gt_st_close(gt_st_file *f) {
    if (f->file != NULL) fclose(f->file);
    for (int i = 0; i < f->num_entries; i++) free(f->entries[i].name);
    free(f->entries);
    free(f->index);
    const char *path = f->path;
    memset(f, 0, sizeof(*f));
    f->path = path;
}

/* ------------------------------------------------------------------------------------------ */
/* writing                                                                                     */

/* Appends printf output to a growing buffer. */
typedef struct {
    char *data;
    size_t len, cap;
} gt_strbuf;

static int sb_printf(gt_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sb_printf(gt_strbuf *sb, const char *fmt, ...) {
    int rc = GT_OK;
    for (;;) {
        va_list args;
        va_start(args, fmt);
        int n = vsnprintf(sb->data ? sb->data + sb->len : NULL, sb->data ? sb->cap - sb->len : 0,
                          fmt, args);
        va_end(args);
        if (n < 0) GT_FAIL(GT_EIO, "formatting the safetensors header failed");
        if (sb->data && sb->len + (size_t)n < sb->cap) {
            sb->len += (size_t)n;
            break;
        }
        size_t new_cap = (sb->cap + (size_t)n + 1) * 2;
        char *grown = realloc(sb->data, new_cap);
        if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory formatting a safetensors header");
        sb->data = grown;
        sb->cap = new_cap;
    }
cleanup:
    return rc;
}

int gt_st_write_f32(const char *path, const gt_tensor_info *tensors, int num_tensors,
                    const float *base) {
    int rc = GT_OK;
    gt_strbuf sb = {0};
    char *tmp_path = NULL;
    FILE *f = NULL;
    GT_CHECK(sb_printf(&sb, "{\"__metadata__\":{\"format\":\"pt\"}"));
    uint64_t offset = 0;
    for (int i = 0; i < num_tensors; i++) {
        const gt_tensor_info *t = &tensors[i];
        uint64_t bytes = (uint64_t)t->numel * 4;
        GT_CHECK(sb_printf(&sb, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%" PRId64, t->name,
                           t->shape[0]));
        if (t->ndim == 2) GT_CHECK(sb_printf(&sb, ",%" PRId64, t->shape[1]));
        GT_CHECK(sb_printf(&sb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
                           offset + bytes));
        offset += bytes;
    }
    GT_CHECK(sb_printf(&sb, "}"));
    while (sb.len % 8 != 0) GT_CHECK(sb_printf(&sb, " "));
    GT_CALLOC(tmp_path, strlen(path) + 5);
    snprintf(tmp_path, strlen(path) + 5, "%s.tmp", path);
    f = fopen(tmp_path, "wb");
    if (f == NULL) GT_FAIL(GT_EIO, "%s: cannot create: %s", tmp_path, strerror(errno));
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)(((uint64_t)sb.len >> (8 * i)) & 0xFF);
    if (fwrite(len_bytes, 1, 8, f) != 8 || fwrite(sb.data, 1, sb.len, f) != sb.len)
        GT_FAIL(GT_EIO, "%s: write failed: %s", tmp_path, strerror(errno));
    for (int i = 0; i < num_tensors; i++) {
        const gt_tensor_info *t = &tensors[i];
        if (fwrite(base + t->offset, sizeof(float), t->numel, f) != t->numel)
            GT_FAIL(GT_EIO, "%s: write failed: %s", tmp_path, strerror(errno));
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        GT_FAIL(GT_EIO, "%s: flush failed: %s", tmp_path, strerror(errno));
    int close_status = fclose(f);
    f = NULL;
    if (close_status != 0) GT_FAIL(GT_EIO, "%s: close failed: %s", tmp_path, strerror(errno));
    if (rename(tmp_path, path) != 0)
        GT_FAIL(GT_EIO, "%s: rename to %s failed: %s", tmp_path, path, strerror(errno));
cleanup:
    if (f != NULL) {
        fclose(f);
        unlink(tmp_path);
    }
    free(tmp_path);
    free(sb.data);
    return rc;
}
