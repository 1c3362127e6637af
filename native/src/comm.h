/*
 * comm.h — the communication interface of the pipeline executor.
 *
 * One implementation per backend is linked in: comm_mpi.c (CPU build, Open MPI, host buffers)
 * and comm_nccl.c (CUDA build: NCCL p2p + all-reduces on device buffers, on dedicated streams
 * linked to the compute stream by events; MPI for host scalars). The NCCL world communicator is
 * bootstrapped from a unique id that world rank 0 makes (gt_comm_unique_id) and broadcasts over
 * MPI — `gantry train` does the broadcast with mpi4py (its NCCL hook) and passes the id to
 * gt_comm_create; gt_comm_mpi_create does it in C.
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

/* Bytes of the bootstrap id (NCCL's ncclUniqueId is 128 bytes). */
#define GT_COMM_ID_BYTES 128

/* Name of the linked implementation: "mpi" or "nccl". */
GT_API const char *gt_comm_backend(void);

/* Fills `out` (len >= GT_COMM_ID_BYTES) with a new bootstrap id: ncclGetUniqueId on the NCCL
 * build (call on world rank 0 only, then broadcast the bytes), zeros on the MPI build. */
GT_API int gt_comm_unique_id(void *out, size_t len);

/* Creates the communicators from a world communicator given as a Fortran handle (mpi4py's
 * comm.py2f()) and the bootstrap id world rank 0 made (the same bytes on every rank; ignored
 * by the MPI build). The NCCL build also picks this rank's GPU: the rank's index among the
 * ranks with the same node_id, modulo the visible GPUs. Collective over the world. */
GT_API int gt_comm_create(int world_fint, int pp, int dp, int pipe_rank, int replica,
                          int node_id, const void *id, size_t id_len, gt_comm **out);
/* gt_comm_create with the id made on world rank 0 and broadcast here with MPI_Bcast. */
GT_API int gt_comm_mpi_create(int world_fint, int pp, int dp, int pipe_rank, int replica,
                              int node_id, gt_comm **out);
GT_API void gt_comm_free(gt_comm *comm);

/* The stream the stages must compute on (a cudaStream_t the NCCL build owns; NULL on the MPI
 * build). Sends and receives wait for the work enqueued on it before they were posted. */
void *gt_comm_compute_stream(gt_comm *comm);

/* Request table capacity (grows; existing requests must be complete). */
int gt_comm_reserve(gt_comm *comm, int n_requests);

/* Prepares the pipeline transfers for messages of up to `max_bytes` bytes (collective over the
 * world; again with a larger size re-prepares). The NCCL build moves every edge whose two ranks
 * share a node and can reach each other's GPU through copy engines (CUDA IPC, no SMs held:
 * p2p_ce.h; GANTRY_P2P_TRANSPORT=auto|ce|nccl, GANTRY_P2P_CE_SLOTS), the others through NCCL;
 * without this call every edge uses NCCL. A no-op on the MPI build. */
int gt_comm_p2p_setup(gt_comm *comm, size_t max_bytes);

/* Non-blocking send/recv of `bytes` bytes to/from pipeline rank `peer`; request id `req`.
 * Activations (GT_MSG_ACT) go to pipe_rank + 1 and come from pipe_rank - 1, gradients the other
 * way (modulo pp: interleaved schedules wrap around). */
int gt_comm_isend(gt_comm *comm, int req, int peer, int kind, const void *buf, size_t bytes);
int gt_comm_irecv(gt_comm *comm, int req, int peer, int kind, void *buf, size_t bytes);
/* Completes request `req` (blocks the host until the transfer is done; a completed receive is
 * also ordered before later work of the compute stream); *was_ready = 1 if it had completed
 * before this call. */
int gt_comm_wait(gt_comm *comm, int req, int *was_ready);

/* Brackets the optimizer's update on the compute stream (work that touches parameters,
 * gradients and optimizer state, never an activation buffer): receives posted between
 * gt_comm_update_begin and gt_comm_update_end wait only for the compute work enqueued before
 * the begin, so a step's first receives start while the previous step's update still runs.
 * Sends always wait for everything enqueued so far. gt_comm_update_end may be called when no
 * update is open (the executor calls it before every compute action). No-ops on the MPI
 * build. */
int gt_comm_update_begin(gt_comm *comm);
int gt_comm_update_end(gt_comm *comm);

/* In-place sums. The float buffers are the stages' gradient buffers (host on the MPI build,
 * device on the NCCL build, where the sum is enqueued on the compute stream). */
int gt_comm_allreduce_dp(gt_comm *comm, float *buf, size_t count); /* MPI: hierarchical */
int gt_comm_allreduce_tied(gt_comm *comm, float *buf, size_t count);  /* no-op if pp == 1 */
int gt_comm_allreduce_pipe_double(gt_comm *comm, double *value);
int gt_comm_allreduce_world_double(gt_comm *comm, double *value);
int gt_comm_barrier(gt_comm *comm);

/* Overlapped data-parallel all-reduce (pipeline.c, GANTRY_DP_OVERLAP=1): the executor starts
 * one bucket (a contiguous range of a gradient buffer whose gradients are final, or about to
 * be on the compute stream) while the backward goes on, and waits for all of them before the
 * tied all-reduce, the norm and the optimizer. Same sum as gt_comm_allreduce_dp. Every rank of
 * a dp group starts the same buckets in the same order. No-ops if dp == 1.
 *   MPI:  nonblocking and hierarchical like gt_comm_allreduce_dp: per bucket MPI_Ireduce to
 *         the node leader, MPI_Iallreduce across the leaders, MPI_Ibcast inside the node, each
 *         step posted when the previous completed (tested at every start and at wait-all; each
 *         step has its own communicator, so all ranks post them in bucket order).
 *   NCCL: on a dedicated DP stream and communicator (GANTRY_DP_MAX_CTAS); the bucket waits
 *         (event) for the compute stream's work so far; wait-all makes the compute stream wait
 *         for the DP stream (the host does not block). */
int gt_comm_dp_bucket_start(gt_comm *comm, float *buf, size_t count);
int gt_comm_dp_wait_all(gt_comm *comm);

int gt_comm_pp(const gt_comm *comm);
int gt_comm_dp(const gt_comm *comm);
int gt_comm_pipe_rank(const gt_comm *comm);
int gt_comm_replica(const gt_comm *comm);

#endif /* GANTRY_COMM_H */
