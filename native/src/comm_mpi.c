/*
 * comm_mpi.c — the MPI implementation of comm.h (CPU build).
 *
 * Point-to-point: MPI_Isend / MPI_Irecv on the pipe communicator, posted in the order of the
 * schedule table, completed by MPI_Wait on the request the table names. Collectives: MPI
 * all-reduce / reduce / bcast on communicators split once at creation. Every MPI call goes
 * through MPI_CHECK, which records the MPI error string and file:line. The world dup, the pipe
 * communicator and the host-scalar collectives are comm_host.c's (shared with comm_nccl.c).
 *
 * Overlapped data-parallel buckets (gt_comm_dp_bucket_start / gt_comm_dp_wait_all): the same
 * three hierarchical steps as gt_comm_allreduce_dp, nonblocking — MPI_Ireduce to the node
 * leader, MPI_Iallreduce across the leaders, MPI_Ibcast in the node — each on its own dup of
 * the node / leaders communicator. A bucket's next step is posted once its previous step has
 * completed and the bucket before it has posted that step too, so every communicator sees its
 * operations in bucket order on every rank (MPI matches nonblocking collectives by order).
 * Progress: every bucket start tests the pending ones; wait-all completes them in order. A
 * step with one participant (a node of one dp rank, or one node) is skipped. With two ranks per
 * step the sums are the blocking path's bit for bit (a + b = b + a); with more, MPI may pick a
 * different reduction order for a bucket than for the whole buffer.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_host.h"
#include "common.h"

/* Steps of an overlapped bucket, in order; `phase` is the step posted last. */
enum { GT_DPB_REDUCE = 0, GT_DPB_ALLREDUCE = 1, GT_DPB_BCAST = 2, GT_DPB_DONE = 3 };

typedef struct {
    float *buf;
    int count;
    int phase;       /* GT_DPB_*: the step posted last */
    MPI_Request req; /* of that step; MPI_REQUEST_NULL once complete or if skipped */
} gt_dp_bucket;

struct gt_comm {
    gt_comm_host host; /* first: layout, world, pipe (comm_host.c) */
    MPI_Comm dp_comm; /* ranks of this pipeline position, rank = replica */
    MPI_Comm node;    /* dp ranks on this node */
    MPI_Comm leaders; /* node leaders of dp_comm (MPI_COMM_NULL on non-leaders) */
    MPI_Comm tied;    /* pipeline ranks 0 and pp-1 (MPI_COMM_NULL elsewhere or pp == 1) */
    MPI_Request *reqs;
    int n_reqs;
    /* overlapped dp buckets: dups of node (reduce, bcast) and leaders, one per step */
    MPI_Comm nb_reduce, nb_leaders, nb_bcast;
    int node_rank, node_size, leaders_size;
    gt_dp_bucket *buckets; /* [n_buckets] started since the last wait-all */
    int n_buckets, cap_buckets, first_pending;
};

_Static_assert(offsetof(struct gt_comm, host) == 0, "comm_host.c needs the host part first");

static void free_comm(MPI_Comm *c) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

const char *gt_comm_backend(void) { return "mpi"; }

int gt_comm_unique_id(void *out, size_t len) {
    int rc = GT_OK;
    if (out == NULL || len < GT_COMM_ID_BYTES)
        GT_INPUT_FAIL("gt_comm_unique_id: needs a buffer of %d bytes", GT_COMM_ID_BYTES);
    memset(out, 0, GT_COMM_ID_BYTES);
cleanup:
    return rc;
}

void *gt_comm_compute_stream(gt_comm *comm) {
    (void)comm;
    return NULL;
}

int gt_comm_mpi_create(int world_fint, int pp, int dp, int pipe_rank, int replica, int node_id,
                       gt_comm **out) {
    return gt_comm_create(world_fint, pp, dp, pipe_rank, replica, node_id, NULL, 0, out);
}

int gt_comm_create(int world_fint, int pp, int dp, int pipe_rank, int replica, int node_id,
                   const void *id, size_t id_len, gt_comm **out) {
    int rc = GT_OK;
    (void)id;
    (void)id_len;
    gt_comm *c = NULL;
    *out = NULL;
    GT_CHECK(gt_comm_check_layout(pp, dp, pipe_rank, replica));
    GT_CALLOC(c, 1);
    c->dp_comm = c->node = c->leaders = c->tied = MPI_COMM_NULL;
    c->nb_reduce = c->nb_leaders = c->nb_bcast = MPI_COMM_NULL;
    GT_CHECK(gt_comm_host_init(&c->host, world_fint, pp, dp, pipe_rank, replica));
    MPI_CHECK(MPI_Comm_split(c->host.world, pipe_rank, replica, &c->dp_comm));
    MPI_CHECK(MPI_Comm_split(c->dp_comm, node_id, replica, &c->node));
    int node_rank = 0;
    MPI_CHECK(MPI_Comm_rank(c->node, &node_rank));
    MPI_CHECK(MPI_Comm_split(c->dp_comm, node_rank == 0 ? 0 : MPI_UNDEFINED, replica,
                             &c->leaders));
    c->node_rank = node_rank;
    MPI_CHECK(MPI_Comm_size(c->node, &c->node_size));
    MPI_CHECK(MPI_Comm_dup(c->node, &c->nb_reduce));
    MPI_CHECK(MPI_Comm_dup(c->node, &c->nb_bcast));
    if (c->leaders != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_size(c->leaders, &c->leaders_size));
        MPI_CHECK(MPI_Comm_dup(c->leaders, &c->nb_leaders));
    }
    int tied_color = gt_comm_in_tied(pp, pipe_rank) ? replica : MPI_UNDEFINED;
    MPI_CHECK(MPI_Comm_split(c->host.world, tied_color, pipe_rank, &c->tied));
    *out = c;
    c = NULL;
cleanup:
    gt_comm_free(c);
    return rc;
}

void gt_comm_free(gt_comm *c) {
    if (c == NULL) return;
    for (int i = 0; i < c->n_reqs; i++)
        if (c->reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&c->reqs[i]);
    free(c->reqs);
    /* buckets still in flight (a failed step) are left to MPI: freeing or cancelling the
     * request of a nonblocking collective is erroneous */
    free(c->buckets);
    free_comm(&c->nb_bcast);
    free_comm(&c->nb_leaders);
    free_comm(&c->nb_reduce);
    free_comm(&c->tied);
    free_comm(&c->leaders);
    free_comm(&c->node);
    free_comm(&c->dp_comm);
    gt_comm_host_release(&c->host);
    free(c);
}

int gt_comm_p2p_setup(gt_comm *c, size_t max_bytes) {
    (void)c, (void)max_bytes; /* host buffers: MPI moves them as they are */
    return GT_OK;
}

int gt_comm_reserve(gt_comm *c, int n) {
    int rc = GT_OK;
    if (n <= c->n_reqs) return GT_OK;
    MPI_Request *grown = realloc(c->reqs, (size_t)n * sizeof(*grown));
    if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d requests", n);
    for (int i = c->n_reqs; i < n; i++) grown[i] = MPI_REQUEST_NULL;
    c->reqs = grown;
    c->n_reqs = n;
cleanup:
    return rc;
}

static int check_p2p(gt_comm *c, int req, int peer, size_t bytes) {
    int rc = GT_OK;
    if (req < 0 || req >= c->n_reqs) GT_FAIL(GT_ESTATE, "request %d out of range", req);
    if (c->reqs[req] != MPI_REQUEST_NULL) GT_FAIL(GT_ESTATE, "request %d still active", req);
    if (peer < 0 || peer >= c->host.pp)
        GT_FAIL(GT_ESTATE, "peer %d out of range (pp=%d)", peer, c->host.pp);
    if (bytes > INT32_MAX) GT_FAIL(GT_ESTATE, "message of %zu bytes is too large", bytes);
cleanup:
    return rc;
}

int gt_comm_isend(gt_comm *c, int req, int peer, int kind, const void *buf, size_t bytes) {
    int rc = GT_OK;
    GT_CHECK(check_p2p(c, req, peer, bytes));
    MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, kind, c->host.pipe, &c->reqs[req]));
cleanup:
    return rc;
}

int gt_comm_irecv(gt_comm *c, int req, int peer, int kind, void *buf, size_t bytes) {
    int rc = GT_OK;
    GT_CHECK(check_p2p(c, req, peer, bytes));
    MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, kind, c->host.pipe, &c->reqs[req]));
cleanup:
    return rc;
}

int gt_comm_update_begin(gt_comm *c) {
    (void)c;
    return GT_OK; /* host buffers, blocking updates: nothing to order */
}

int gt_comm_update_end(gt_comm *c) {
    (void)c;
    return GT_OK;
}

int gt_comm_wait(gt_comm *c, int req, int *was_ready) {
    int rc = GT_OK;
    int done = 0;
    if (req < 0 || req >= c->n_reqs || c->reqs[req] == MPI_REQUEST_NULL)
        GT_FAIL(GT_ESTATE, "wait on request %d that was not posted", req);
    MPI_CHECK(MPI_Test(&c->reqs[req], &done, MPI_STATUS_IGNORE));
    if (!done) MPI_CHECK(MPI_Wait(&c->reqs[req], MPI_STATUS_IGNORE));
    *was_ready = done;
cleanup:
    return rc;
}

/* MPI counts are int: reduce in chunks. */
#define GT_MPI_CHUNK ((size_t)1 << 30)

int gt_comm_allreduce_dp(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->host.dp == 1) return GT_OK;
    for (size_t off = 0; off < count; off += GT_MPI_CHUNK) {
        int n = (int)(count - off < GT_MPI_CHUNK ? count - off : GT_MPI_CHUNK);
        float *p = buf + off;
        int node_rank = 0;
        MPI_CHECK(MPI_Comm_rank(c->node, &node_rank));
        /* 1. reduce to the node leader, 2. all-reduce across leaders, 3. bcast in the node */
        MPI_CHECK(MPI_Reduce(node_rank == 0 ? MPI_IN_PLACE : p, node_rank == 0 ? p : NULL, n,
                             MPI_FLOAT, MPI_SUM, 0, c->node));
        if (c->leaders != MPI_COMM_NULL)
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, c->leaders));
        MPI_CHECK(MPI_Bcast(p, n, MPI_FLOAT, 0, c->node));
    }
cleanup:
    return rc;
}

int gt_comm_allreduce_tied(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->tied == MPI_COMM_NULL) return GT_OK;
    for (size_t off = 0; off < count; off += GT_MPI_CHUNK) {
        int n = (int)(count - off < GT_MPI_CHUNK ? count - off : GT_MPI_CHUNK);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, MPI_SUM, c->tied));
    }
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* overlapped data-parallel buckets                                                            */

/* Posts step `phase` of bucket b (nothing where the step has one participant). */
static int post_step(gt_comm *c, gt_dp_bucket *b, int phase) {
    int rc = GT_OK;
    b->phase = phase;
    b->req = MPI_REQUEST_NULL;
    if (phase == GT_DPB_REDUCE && c->node_size > 1)
        MPI_CHECK(MPI_Ireduce(c->node_rank == 0 ? MPI_IN_PLACE : b->buf,
                              c->node_rank == 0 ? b->buf : NULL, b->count, MPI_FLOAT, MPI_SUM, 0,
                              c->nb_reduce, &b->req));
    else if (phase == GT_DPB_ALLREDUCE && c->nb_leaders != MPI_COMM_NULL && c->leaders_size > 1)
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, b->buf, b->count, MPI_FLOAT, MPI_SUM,
                                 c->nb_leaders, &b->req));
    else if (phase == GT_DPB_BCAST && c->node_size > 1)
        MPI_CHECK(MPI_Ibcast(b->buf, b->count, MPI_FLOAT, 0, c->nb_bcast, &b->req));
cleanup:
    return rc;
}

/* Moves bucket k through its steps as far as it can (blocking: to the end). */
static int advance(gt_comm *c, int k, int blocking) {
    int rc = GT_OK;
    gt_dp_bucket *b = &c->buckets[k];
    while (b->phase < GT_DPB_DONE) {
        if (b->req != MPI_REQUEST_NULL) {
            int done = 1;
            if (blocking) MPI_CHECK(MPI_Wait(&b->req, MPI_STATUS_IGNORE));
            else MPI_CHECK(MPI_Test(&b->req, &done, MPI_STATUS_IGNORE));
            if (!done) break;
        }
        int next = b->phase + 1;
        /* the bucket before must have posted step `next` first (per-communicator order) */
        if (next < GT_DPB_DONE && k > 0 && c->buckets[k - 1].phase < next) break;
        GT_CHECK(post_step(c, b, next));
    }
cleanup:
    return rc;
}

int gt_comm_dp_bucket_start(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->host.dp == 1) return GT_OK;
    for (size_t off = 0; off < count; off += GT_MPI_CHUNK) {
        if (c->n_buckets == c->cap_buckets) {
            int cap = c->cap_buckets > 0 ? 2 * c->cap_buckets : 64;
            gt_dp_bucket *grown = realloc(c->buckets, (size_t)cap * sizeof(*grown));
            if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d dp buckets", cap);
            c->buckets = grown;
            c->cap_buckets = cap;
        }
        gt_dp_bucket *b = &c->buckets[c->n_buckets++];
        b->buf = buf + off;
        b->count = (int)(count - off < GT_MPI_CHUNK ? count - off : GT_MPI_CHUNK);
        GT_CHECK(post_step(c, b, GT_DPB_REDUCE));
    }
    for (int k = c->first_pending; k < c->n_buckets; k++) GT_CHECK(advance(c, k, 0));
    while (c->first_pending < c->n_buckets && c->buckets[c->first_pending].phase == GT_DPB_DONE)
        c->first_pending++;
cleanup:
    return rc;
}

int gt_comm_dp_wait_all(gt_comm *c) {
    int rc = GT_OK;
    for (int k = c->first_pending; k < c->n_buckets; k++) GT_CHECK(advance(c, k, 1));
    c->n_buckets = c->first_pending = 0;
cleanup:
    return rc;
}
