/*
 * p2p_ce.h — zero-SM pipeline transfers between two GPUs of one host: CUDA copy engines over
 * CUDA IPC, synchronized on the GPUs with stream memory operations (comm_nccl.c uses it for
 * every pipeline edge whose two ranks can, NCCL's send/recv kernels otherwise).
 *
 * Why: a posted NCCL send or receive is a kernel that holds its SMs from the moment its stream
 * reaches it until the peer's side arrives. On the busy rank of a pipeline that steals SMs from
 * the compute stream's matrix products (measured at 1.5B PP=2 zb-h2: rank 0's forward 6%
 * slower than the same layers in a one-GPU step while its receive was posted). Copy engines
 * move the data without SMs, and a stream waiting on a memory value holds none either.
 *
 * One edge = one directed link (sender -> receiver) of one message kind, FIFO like NCCL's.
 * The receiver owns a ring of `slots` buffers of `cap` bytes and a counter `full` (messages
 * delivered); the sender owns a counter `empty` (messages the receiver has taken). Each side
 * maps the other's memory with cudaIpcOpenMemHandle. Message n (both sides count):
 *   send, on the sender's edge stream: wait until empty >= n - slots + 1 (ring slot n % slots
 *        free), copy the data into the receiver's ring slot (peer copy, copy engine), then
 *        write full = n + 1 into the receiver's memory (the write is fenced after the copy);
 *   recv, on the receiver's edge stream: wait until full >= n + 1, copy the ring slot into the
 *        destination (copy engine), then write empty = n + 1 into the sender's memory.
 * The counters compare cyclically (CU_STREAM_WAIT_VALUE_GEQ), so they may wrap. A send
 * completes once its data left the source buffer, a receive once the data is in place: the
 * same completion points as NCCL's, with `slots` messages of buffering instead of a
 * rendezvous, so every schedule the simulator proves deadlock-free stays so.
 *
 * Not part of the public API.
 */
#ifndef GANTRY_P2P_CE_H
#define GANTRY_P2P_CE_H

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stddef.h>

typedef struct gt_ce_edge gt_ce_edge;

/* Transport modes (GANTRY_P2P_TRANSPORT, runtime_config.h): 0 = nccl (never the copy
 * engines), 1 = auto (copy engines where both ranks can), 2 = ce (fail where they cannot). The
 * ring depth is GANTRY_P2P_CE_SLOTS. */

/* Sets up the edge between this rank and pipeline rank `peer` of `pipe` (collective between
 * the two: both call it in the same global edge order; `tag` distinguishes the edge).
 * *out = NULL (and GT_OK) when the two ranks cannot both use copy engines (other node id, no
 * peer access, stream memory operations unsupported, mode nccl): both sides then agree on
 * NCCL. `device` is this rank's CUDA device, `cap` the largest message in bytes. */
int gt_ce_edge_create(MPI_Comm pipe, int peer, int tag, int is_sender, int node_id, int device,
                      int mode, int slots, size_t cap, gt_ce_edge **out);

/* Enqueues message n+1 of the edge on `stream` (after what the stream already holds). */
int gt_ce_edge_send(gt_ce_edge *e, const void *buf, size_t bytes, cudaStream_t stream);
int gt_ce_edge_recv(gt_ce_edge *e, void *buf, size_t bytes, cudaStream_t stream);

/* Unmaps the peer's memory and frees this side's (the caller has synchronized its streams). */
void gt_ce_edge_free(gt_ce_edge *e);

#endif /* GANTRY_P2P_CE_H */
