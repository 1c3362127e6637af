/*
 * comm.h — the communication interface of the pipeline executor.
 *
 * One implementation per backend is linked in: comm_mpi.c (CPU build, Open MPI) and, later,
 * comm_nccl.c (GPU build: same functions, NCCL p2p + all-reduce on device buffers, bootstrapped
 * with an id that rank 0 makes and MPI_Bcasts — see gt_comm_mpi_create's hook comment).
 *
 * Rank layout: the world has pp * dp ranks; each rank is (replica d, pipeline rank p).
 *   pipe  communicator: the pp ranks of one replica, rank = p     (activations, loss, norm)
 *   dp    communicator: the dp ranks holding the same stages, rank = d (gradient all-reduce)
 *   tied  communicator: pipeline ranks 0 and pp-1 of one replica  (wte gradient), if pp > 1
 * The dp all-reduce is hierarchical: reduce inside each node group (ranks with the same
 * node id, given by the caller from the placement — on the embedded cluster every "node" is
 * the same host, so shared-memory splitting would be wrong), all-reduce across the node
 * leaders, broadcast back inside the node.
 *
 * Point-to-point requests are identified by an integer slot (the index of the posting action
 * in the schedule table), so the executor can wait for exactly the request the table names.
 */
#ifndef GANTRY_COMM_H
#define GANTRY_COMM_H

#include <stddef.h>

#include "gantry/stage.h"

typedef struct gt_comm gt_comm;

/* Message kinds (also the MPI tags): matching is FIFO per (peer, kind), as the schedule
 * simulator proves for every table. */
enum { GT_MSG_ACT = 1, GT_MSG_GRAD = 2 };

/* Creates the communicators from a world communicator given as a Fortran handle (mpi4py's
 * comm.py2f()). Collective over the world. */
GT_API int gt_comm_mpi_create(int world_fint, int pp, int dp, int pipe_rank, int replica,
                              int node_id, gt_comm **out);
GT_API void gt_comm_free(gt_comm *comm);

/* Request table capacity (grows; existing requests must be complete). */
int gt_comm_reserve(gt_comm *comm, int n_requests);

/* Non-blocking send/recv of `count` floats to/from pipeline rank `peer`; request id `req`. */
int gt_comm_isend(gt_comm *comm, int req, int peer, int kind, const float *buf, size_t count);
int gt_comm_irecv(gt_comm *comm, int req, int peer, int kind, float *buf, size_t count);
/* Completes request `req`; *was_ready = 1 if it had completed before this call. */
int gt_comm_wait(gt_comm *comm, int req, int *was_ready);

/* In-place sums. */
int gt_comm_allreduce_dp(gt_comm *comm, float *buf, size_t count);    /* hierarchical */
int gt_comm_allreduce_tied(gt_comm *comm, float *buf, size_t count);  /* no-op if pp == 1 */
int gt_comm_allreduce_pipe_double(gt_comm *comm, double *value);
int gt_comm_allreduce_world_double(gt_comm *comm, double *value);
int gt_comm_barrier(gt_comm *comm);

int gt_comm_pp(const gt_comm *comm);
int gt_comm_dp(const gt_comm *comm);
int gt_comm_pipe_rank(const gt_comm *comm);
int gt_comm_replica(const gt_comm *comm);

#endif /* GANTRY_COMM_H */
