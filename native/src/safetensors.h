/*
 * safetensors.h — a small, strict safetensors reader and an fp32 writer.
 *
 * Format: u64 little-endian header length n, n bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"k": "v"}}
 * then the data; offsets are relative to the end of the header. The reader checks the JSON
 * strictly, every offset against the file size (a truncated file names the first tensor it cuts)
 * and each byte length against dtype x shape. Error messages start with the file's path.
 * Bounds: a header of at most GT_ST_MAX_HEADER bytes and GT_ST_MAX_TENSORS tensors; memory is
 * linear in the header (each string at its own length), names are checked unique through a
 * hash index (also behind gt_st_find).
 */
#ifndef GANTRY_SAFETENSORS_H
#define GANTRY_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "gantry/stage.h"

#define GT_ST_MAX_DIMS 8
#define GT_ST_MAX_HEADER (100u * 1024u * 1024u) /* bytes of JSON header, as safetensors' cap */
#define GT_ST_MAX_TENSORS 65536 /* GPT-2 1.5B has ~600 tensors */

typedef struct {
    char *name;
    char dtype[16];
    int ndim;
    int64_t shape[GT_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets relative to the data section */
} gt_st_entry;

typedef struct {
    const char *path;
    FILE *file;
    uint64_t data_start; /* 8 + header length */
    uint64_t file_size;
    gt_st_entry *entries;
    int num_entries;
    int *index;        /* open-addressing hash of names: entry number + 1, 0 = empty slot */
    size_t index_cap;  /* a power of two, at least twice num_entries */
} gt_st_file;

/* Opens and validates `path`; on failure everything is released and *out zeroed. */
int gt_st_open(const char *path, gt_st_file *out);
const gt_st_entry *gt_st_find(const gt_st_file *f, const char *name);
/* Reads entry e's raw bytes into dst (exactly e->end - e->begin bytes). */
int gt_st_read(gt_st_file *f, const gt_st_entry *e, void *dst);
void gt_st_close(gt_st_file *f);

/* Writes tensors (fp32, names and shapes from the table) of `base` to path + ".tmp", fsyncs it,
 * renames it to path. */
int gt_st_write_f32(const char *path, const gt_tensor_info *tensors, int num_tensors,
                    const float *base);

#endif /* GANTRY_SAFETENSORS_H */
