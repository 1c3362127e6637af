/*
 * shard.c — token shards in llm.c's layout: a header of 256 int32 (magic 20240520, version 1,
 * token count, zeros), then the tokens as uint16. Reads are bounds-checked against the file size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

void gt_free(void *ptr) { free(ptr); }

int gt_shard_read(const char *path, uint16_t **tokens, size_t *ntok) {
    int rc = GT_OK;
    FILE *f = NULL;
    uint16_t *data = NULL;
    int32_t header[GT_SHARD_HEADER_INTS];
    if (tokens == NULL || ntok == NULL) GT_INPUT_FAIL("gt_shard_read: NULL output");
    *tokens = NULL;
    *ntok = 0;
    f = fopen(path, "rb");
    if (f == NULL) GT_INPUT_FAIL("%s: cannot open token shard: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) GT_FAIL(GT_EIO, "%s: stat: %s", path, strerror(errno));
    size_t header_bytes = sizeof(header);
    if ((size_t)st.st_size < header_bytes || fread(header, 1, header_bytes, f) != header_bytes)
        GT_INPUT_FAIL("%s: truncated token shard: %lld bytes, shorter than the %zu-byte header",
                      path, (long long)st.st_size, header_bytes);
    if (header[0] != GT_SHARD_MAGIC)
        GT_INPUT_FAIL("%s: not a token shard: magic %d (expected %d)", path, header[0],
                      GT_SHARD_MAGIC);
    if (header[1] != GT_SHARD_VERSION)
        GT_INPUT_FAIL("%s: token shard version %d is not supported (expected %d)", path,
                      header[1], GT_SHARD_VERSION);
    if (header[2] < 0) GT_INPUT_FAIL("%s: token shard count %d is negative", path, header[2]);
    size_t count = (size_t)header[2];
    size_t expected = header_bytes + count * sizeof(uint16_t);
    if ((size_t)st.st_size < expected)
        GT_INPUT_FAIL("%s: truncated token shard: header says %zu tokens (%zu bytes) but the file "
                      "has %lld bytes", path, count, expected, (long long)st.st_size);
    if ((size_t)st.st_size > expected)
        GT_INPUT_FAIL("%s: token shard has %lld bytes, more than the %zu its header says", path,
                      (long long)st.st_size, expected);
    GT_CALLOC(data, count);
    if (fread(data, sizeof(uint16_t), count, f) != count)
        GT_FAIL(GT_EIO, "%s: read error", path);
    *tokens = data;
    *ntok = count;
    data = NULL;
cleanup:
    free(data);
    if (f != NULL) fclose(f);
    return rc;
}

int gt_shard_write(const char *path, const uint16_t *tokens, size_t ntok) {
    int rc = GT_OK;
    FILE *f = NULL;
    int32_t header[GT_SHARD_HEADER_INTS] = {0};
    if (ntok > 0x7fffffff) GT_INPUT_FAIL("%s: %zu tokens do not fit one shard", path, ntok);
    header[0] = GT_SHARD_MAGIC;
    header[1] = GT_SHARD_VERSION;
    header[2] = (int32_t)ntok;
    f = fopen(path, "wb");
    if (f == NULL) GT_FAIL(GT_EIO, "%s: cannot create: %s", path, strerror(errno));
    if (fwrite(header, sizeof(header), 1, f) != 1 ||
        fwrite(tokens, sizeof(uint16_t), ntok, f) != ntok)
        GT_FAIL(GT_EIO, "%s: write failed: %s", path, strerror(errno));
    int close_status = fclose(f);
    f = NULL;
    if (close_status != 0) GT_FAIL(GT_EIO, "%s: close failed: %s", path, strerror(errno));
cleanup:
    if (f != NULL) fclose(f);
    return rc;
}
