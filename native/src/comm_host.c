/*
 * comm_host.c — the MPI side shared by comm_mpi.c and comm_nccl.c (comm_host.h): layout check,
 * world dup and pipe split at creation, and the comm.h functions that only read the layout or
 * reduce host scalars over MPI.
 */
#include "comm_host.h"

#include "common.h"

/* The host part at the start of a gt_comm of either implementation. */
static gt_comm_host *host_of(gt_comm *c) { return (gt_comm_host *)(void *)c; }
static const gt_comm_host *const_host_of(const gt_comm *c) {
    return (const gt_comm_host *)(const void *)c;
}

int gt_comm_check_layout(int pp, int dp, int pipe_rank, int replica) {
    int rc = GT_OK;
    if (pp < 1 || dp < 1 || pipe_rank < 0 || pipe_rank >= pp || replica < 0 || replica >= dp)
        GT_FAIL(GT_EINPUT, "bad layout: pp=%d dp=%d pipe_rank=%d replica=%d", pp, dp, pipe_rank,
                replica);
cleanup:
    return rc;
}

int gt_comm_host_init(gt_comm_host *h, int world_fint, int pp, int dp, int pipe_rank,
                      int replica) {
    int rc = GT_OK;
    int world_size = 0;
    h->pp = pp, h->dp = dp, h->pipe_rank = pipe_rank, h->replica = replica;
    h->world = h->pipe = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(MPI_Comm_f2c((MPI_Fint)world_fint), &h->world));
    MPI_CHECK(MPI_Comm_size(h->world, &world_size));
    if (world_size != pp * dp)
        GT_FAIL(GT_EINPUT, "pp(%d) * dp(%d) = %d but the MPI world has %d ranks", pp, dp,
                pp * dp, world_size);
    MPI_CHECK(MPI_Comm_split(h->world, replica, pipe_rank, &h->pipe));
cleanup:
    return rc;
}

void gt_comm_host_release(gt_comm_host *h) {
    if (h->pipe != MPI_COMM_NULL) MPI_Comm_free(&h->pipe);
    if (h->world != MPI_COMM_NULL) MPI_Comm_free(&h->world);
}

int gt_comm_allreduce_pipe_double(gt_comm *c, double *value) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, host_of(c)->pipe));
cleanup:
    return rc;
}

int gt_comm_allreduce_world_double(gt_comm *c, double *value) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, host_of(c)->world));
cleanup:
    return rc;
}

int gt_comm_barrier(gt_comm *c) {
    int rc = GT_OK;
    MPI_CHECK(MPI_Barrier(host_of(c)->world));
cleanup:
    return rc;
}

int gt_comm_pp(const gt_comm *c) { return const_host_of(c)->pp; }
int gt_comm_dp(const gt_comm *c) { return const_host_of(c)->dp; }
int gt_comm_pipe_rank(const gt_comm *c) { return const_host_of(c)->pipe_rank; }
int gt_comm_replica(const gt_comm *c) { return const_host_of(c)->replica; }
