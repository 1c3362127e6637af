/*
 * comm_mpi.c — the MPI implementation of comm.h (CPU build).
 *
 * Point-to-point: MPI_Isend / MPI_Irecv on the pipe communicator, posted in the order of the
 * schedule table, completed by MPI_Wait on the request the table names. Collectives: MPI
 * all-reduce / reduce / bcast on communicators split once at creation. Every MPI call goes
 * through MPI_CHECK, which records the MPI error string and file:line.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "common.h"

struct gt_comm {
    int pp, dp, pipe_rank, replica;
    MPI_Comm world;   /* dup of the caller's world */
    MPI_Comm pipe;    /* ranks of this replica, rank = pipeline rank */
    MPI_Comm dp_comm; /* ranks of this pipeline position, rank = replica */
    MPI_Comm node;    /* dp ranks on this node */
    MPI_Comm leaders; /* node leaders of dp_comm (MPI_COMM_NULL on non-leaders) */
    MPI_Comm tied;    /* pipeline ranks 0 and pp-1 (MPI_COMM_NULL elsewhere or pp == 1) */
    MPI_Request *reqs;
    int n_reqs;
};

#define MPI_CHECK(call)                                                                       \
    do {                                                                                      \
        int mpi_rc_ = (call);                                                                 \
        if (mpi_rc_ != MPI_SUCCESS) {                                                         \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                              \
            int mpi_len_ = 0;                                                                 \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                   \
            GT_FAIL(GT_ESTATE, "%s failed: %s", #call, mpi_msg_);                             \
        }                                                                                     \
    } while (0)

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
    if (pp < 1 || dp < 1 || pipe_rank < 0 || pipe_rank >= pp || replica < 0 || replica >= dp)
        GT_FAIL(GT_EINPUT, "bad layout: pp=%d dp=%d pipe_rank=%d replica=%d", pp, dp, pipe_rank,
                replica);
    GT_CALLOC(c, 1);
    c->pp = pp, c->dp = dp, c->pipe_rank = pipe_rank, c->replica = replica;
    c->world = c->pipe = c->dp_comm = c->node = c->leaders = c->tied = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(MPI_Comm_f2c((MPI_Fint)world_fint), &c->world));
    int world_size = 0;
    MPI_CHECK(MPI_Comm_size(c->world, &world_size));
    if (world_size != pp * dp)
        GT_FAIL(GT_EINPUT, "pp(%d) * dp(%d) = %d but the MPI world has %d ranks", pp, dp,
                pp * dp, world_size);
    MPI_CHECK(MPI_Comm_split(c->world, replica, pipe_rank, &c->pipe));
    MPI_CHECK(MPI_Comm_split(c->world, pipe_rank, replica, &c->dp_comm));
    MPI_CHECK(MPI_Comm_split(c->dp_comm, node_id, replica, &c->node));
    int node_rank = 0;
    MPI_CHECK(MPI_Comm_rank(c->node, &node_rank));
    MPI_CHECK(MPI_Comm_split(c->dp_comm, node_rank == 0 ? 0 : MPI_UNDEFINED, replica,
                             &c->leaders));
    int in_tied = pp > 1 && (pipe_rank == 0 || pipe_rank == pp - 1);
    MPI_CHECK(MPI_Comm_split(c->world, in_tied ? replica : MPI_UNDEFINED, pipe_rank, &c->tied));
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
    free_comm(&c->tied);
    free_comm(&c->leaders);
    free_comm(&c->node);
    free_comm(&c->dp_comm);
    free_comm(&c->pipe);
    free_comm(&c->world);
    free(c);
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
    if (peer < 0 || peer >= c->pp) GT_FAIL(GT_ESTATE, "peer %d out of range (pp=%d)", peer, c->pp);
    if (bytes > INT32_MAX) GT_FAIL(GT_ESTATE, "message of %zu bytes is too large", bytes);
cleanup:
    return rc;
}

int gt_comm_isend(gt_comm *c, int req, int peer, int kind, const void *buf, size_t bytes) {
    int rc = GT_OK;
    GT_CHECK(check_p2p(c, req, peer, bytes));
    MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, kind, c->pipe, &c->reqs[req]));
cleanup:
    return rc;
}

int gt_comm_irecv(gt_comm *c, int req, int peer, int kind, void *buf, size_t bytes) {
    int rc = GT_OK;
    GT_CHECK(check_p2p(c, req, peer, bytes));
    MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, kind, c->pipe, &c->reqs[req]));
cleanup:
    return rc;
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
    if (c->dp == 1) return GT_OK;
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

int gt_comm_allreduce_pipe_double(gt_comm *c, double *value) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, c->pipe));
cleanup:
    return rc;
}

int gt_comm_allreduce_world_double(gt_comm *c, double *value) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, c->world));
cleanup:
    return rc;
}

int gt_comm_barrier(gt_comm *c) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Barrier(c->world));
cleanup:
    return rc;
}

int gt_comm_pp(const gt_comm *c) { return c->pp; }
int gt_comm_dp(const gt_comm *c) { return c->dp; }
int gt_comm_pipe_rank(const gt_comm *c) { return c->pipe_rank; }
int gt_comm_replica(const gt_comm *c) { return c->replica; }
