/*
 * comm_host.h — the MPI side that both implementations of comm.h share (comm_mpi.c on the CPU
 * build, comm_nccl.c on the CUDA build): the rank layout, the dup of the caller's world, the
 * pipe communicator (host scalars: loss, gradient norm) and the MPI_CHECK macro.
 *
 * Both struct gt_comm start with a gt_comm_host member named `host` (each asserts it), so the
 * layout accessors, host-scalar all-reduces and barrier of comm.h are defined once, in
 * comm_host.c. Not part of the public API.
 */
#ifndef GANTRY_COMM_HOST_H
#define GANTRY_COMM_HOST_H

#include <mpi.h>

#include "comm.h"

/* Runs an MPI call; on failure records the call, MPI's error string and file:line (GT_ESTATE). */
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

typedef struct {
    int pp, dp, pipe_rank, replica;
    MPI_Comm world; /* dup of the caller's world */
    MPI_Comm pipe;  /* ranks of this replica, rank = pipeline rank */
} gt_comm_host;

/* Checks a rank's place in the pp x dp layout (GT_EINPUT naming every factor). */
int gt_comm_check_layout(int pp, int dp, int pipe_rank, int replica);

/* Fills h (zeroed) for a checked layout: dups the world given as a Fortran handle, checks that
 * it has pp * dp ranks and splits the pipe communicator. Collective over the world. */
int gt_comm_host_init(gt_comm_host *h, int world_fint, int pp, int dp, int pipe_rank,
                      int replica);

/* Frees the pipe and world communicators (those that exist). */
void gt_comm_host_release(gt_comm_host *h);

/* 1 if this rank holds a tied wte copy: pipeline rank 0 or pp-1 of a pipeline with pp > 1. */
static inline int gt_comm_in_tied(int pp, int pipe_rank) {
    return pp > 1 && (pipe_rank == 0 || pipe_rank == pp - 1);
}

#endif /* GANTRY_COMM_HOST_H */
