/*
 * comm_nccl.c — the NCCL implementation of comm.h (CUDA build).
 *
 * Bootstrap: world rank 0 makes an ncclUniqueId (gt_comm_unique_id), every rank gets the same
 * bytes (mpi4py bcast in `gantry train`, MPI_Bcast in gt_comm_mpi_create), picks its GPU (its
 * index among the ranks of its node, modulo the visible GPUs) and joins the NCCL world
 * communicator; the others are split from it (ncclCommSplit, collective, same order on every
 * rank):
 *   tied      pipeline ranks 0 and pp-1 of a replica (wte gradient), if pp > 1
 *   dp        the replicas of one pipeline position (gradient all-reduce; NCCL picks rings /
 *             trees across nodes itself, so no hand-made hierarchy), if dp > 1
 *   edges     one 2-rank communicator per DIRECTED pipeline link and message kind:
 *             act  p -> p+1 (mod pp), grad p -> p-1 (mod pp); sender is rank 0 of the edge.
 * Each edge carries one kind in one direction, so its sends and receives match in FIFO order
 * (what the schedule simulator proves per (peer, kind)) and never wait on another edge's
 * traffic: no cross-kind ordering, no deadlock.
 *
 * SMs: a posted NCCL send/recv is a kernel that holds its CTAs (one SM each) from the moment
 * its stream reaches it until the peer's data has moved, i.e. for most of the concurrent
 * forward/backward in a pipeline. Between two NVLink-connected H200s NCCL gives a peer up to
 * 32 p2p channels; the edge communicators are split with maxCTAs = GANTRY_P2P_MAX_CTAS
 * (default 4; 0 = NCCL's own choice) so the transfers leave the SMs to the compute stream.
 *
 * Streams: the stages compute on `compute`; each edge this rank uses has its own stream
 * (act-out, act-in, grad-out, grad-in, high priority). A send or receive posted by the table
 * first waits (cudaStreamWaitEvent) for everything enqueued on `compute` so far — the producer
 * of the data or the last reader of the buffer; a receive posted during the optimizer's update
 * (gt_comm_update_begin/_end) only for what came before the update — then runs on its edge
 * stream, so the next micro-batch's compute overlaps the transfer. gt_comm_wait blocks the host
 * on the request's done event (polling NCCL's async error so a dead peer is an error, not a
 * hang) and orders a received buffer before later compute. All-reduces of gradients run on
 * `compute`; host scalars (loss, norm) use MPI.
 *
 * Overlapped data-parallel buckets (dp > 1, GANTRY_DP_OVERLAP=1): their own communicator
 * (split from dp with maxCTAs = GANTRY_DP_MAX_CTAS, default 8, so the all-reduce kernels
 * running beside the backward leave most SMs to it) and their own stream. A bucket records an
 * event on `compute` right after the last kernel writing its gradients was enqueued, the DP
 * stream waits for it and runs ncclAllReduce; wait-all records the DP stream's end and makes
 * `compute` wait for it, so the tied all-reduce, the norm and AdamW see the sums and the host
 * never blocks for them. The DP stream has the default (lowest) priority: the edges' transfers
 * and the compute stream go first.
 *
 * Copy engines (gt_comm_p2p_setup, p2p_ce.h): an edge whose two ranks share a node and reach
 * each other's GPU moves its messages with peer copies into a ring on the receiver, ordered by
 * counters the GPUs wait on (stream memory operations): nothing waits on an SM, so the busy
 * rank's compute keeps all of them. Same streams, events and completion points as the NCCL
 * path; the NCCL edge stays as the fallback (GANTRY_P2P_TRANSPORT=nccl).
 *
 * Every CUDA / NCCL / MPI call is checked; failures carry the call, the library's message and
 * file:line. The world dup, the pipe communicator and the host-scalar collectives are
 * comm_host.c's (shared with comm_mpi.c).
 */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_host.h"
#include "common.h"
#include "cuda/cuda_check.h"
#include "dp_buckets.h"
#include "p2p_ce.h"
#include "runtime_config.h"

#define NCCL_CHECK(call)                                                                      \
    do {                                                                                      \
        ncclResult_t nccl_rc_ = (call);                                                       \
        if (nccl_rc_ != ncclSuccess)                                                          \
            GT_FAIL(GT_ESTATE, "%s failed: %s", #call, ncclGetErrorString(nccl_rc_));         \
    } while (0)

/* The edges a rank uses (index into edge[] / streams[]). */
enum { GT_EDGE_ACT_OUT = 0, GT_EDGE_ACT_IN = 1, GT_EDGE_GRAD_OUT = 2, GT_EDGE_GRAD_IN = 3,
       GT_N_EDGES = 4 };

struct gt_comm {
    gt_comm_host host;           /* first: layout, world, pipe (comm_host.c) */
    int device, node_id;
    gt_runtime_config env;       /* the GANTRY_* switches, read at creation */
    ncclComm_t nworld, ntied, ndp;
    ncclComm_t ndp_overlap;      /* overlapped dp buckets (NULL: dp == 1 or overlap off) */
    cudaStream_t dp_stream;      /* their stream */
    cudaEvent_t dp_ready;        /* recorded on compute when a bucket starts */
    cudaEvent_t dp_done;         /* recorded on dp_stream at wait-all */
    int dp_started;              /* buckets since the last wait-all */
    ncclComm_t edge[GT_N_EDGES]; /* NULL where unused (pp == 1) */
    gt_ce_edge *ce[GT_N_EDGES];  /* copy-engine edges (gt_comm_p2p_setup); NULL: NCCL */
    size_t ce_bytes;             /* message size the transfers were prepared for */
    cudaStream_t compute;
    cudaStream_t streams[GT_N_EDGES];
    cudaEvent_t posted;          /* recorded on compute when a send/recv is posted */
    cudaEvent_t pre_update;      /* recorded on compute at gt_comm_update_begin */
    int in_update;               /* between gt_comm_update_begin and _end */
    cudaEvent_t *done;           /* [n_reqs] completion of each request */
    int8_t *edge_of;             /* [n_reqs] edge of an active request, -1 if none */
    int n_reqs;
    void *scratch;               /* device: 1 byte for the connection warm-up */
};

_Static_assert(offsetof(struct gt_comm, host) == 0, "comm_host.c needs the host part first");

const char *gt_comm_backend(void) { return "nccl"; }

/* More hardware queues than CUDA's default 8 before this process's CUDA context exists, so
 * the copy-engine edges' counter waits get queues of their own (p2p_ce.c); a value the user
 * set stays. */
static void widen_hardware_queues(void) { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

int gt_comm_unique_id(void *out, size_t len) {
    int rc = GT_OK;
    ncclUniqueId id;
    widen_hardware_queues();
    if (out == NULL || len < GT_COMM_ID_BYTES)
        GT_INPUT_FAIL("gt_comm_unique_id: needs a buffer of %d bytes", GT_COMM_ID_BYTES);
    _Static_assert(sizeof(ncclUniqueId) == GT_COMM_ID_BYTES, "ncclUniqueId size");
    NCCL_CHECK(ncclGetUniqueId(&id));
    memcpy(out, &id, sizeof(id));
cleanup:
    return rc;
}

void *gt_comm_compute_stream(gt_comm *c) { return c ? (void *)c->compute : NULL; }

/* Which pipeline rank sends on edge `sender` of a kind, and which receives. */
static int edge_receiver(int kind, int sender, int pp) {
    return kind == GT_MSG_ACT ? (sender + 1) % pp : (sender - 1 + pp) % pp;
}

/* Split round of the edge whose sender is `sender`: neighbouring edges get different rounds,
 * so a rank joins at most one edge per round (a third round for the wrap edge of an odd ring). */
static int edge_round(int sender, int pp) { return (pp % 2 == 1 && sender == pp - 1) ? 2 : sender % 2; }

/* This rank's GPU: its index among the world ranks of the same node, modulo visible GPUs. */
static int pick_device(MPI_Comm world, int node_id, int *device) {
    int rc = GT_OK;
    MPI_Comm local = MPI_COMM_NULL;
    int world_rank = 0, local_rank = 0, count = 0;
    MPI_CHECK(MPI_Comm_rank(world, &world_rank));
    MPI_CHECK(MPI_Comm_split(world, node_id, world_rank, &local));
    MPI_CHECK(MPI_Comm_rank(local, &local_rank));
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count < 1) GT_FAIL(GT_ESTATE, "no CUDA device visible to world rank %d", world_rank);
    *device = local_rank % count;
    CUDA_CHECK(cudaSetDevice(*device));
cleanup:
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    return rc;
}

/* The overlapped dp buckets' communicator (split from dp: collective over the dp group),
 * stream and events. */
static int create_dp_overlap(gt_comm *c) {
    int rc = GT_OK;
    /* CTA (SM) cap GANTRY_DP_MAX_CTAS; 0 = NCCL's default */
    int max_ctas = c->env.dp_max_ctas;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (!c->env.dp_overlap || c->ndp == NULL) goto cleanup;
    if (max_ctas > 0) config.minCTAs = 1, config.maxCTAs = max_ctas;
    NCCL_CHECK(ncclCommSplit(c->ndp, 0, c->host.replica, &c->ndp_overlap,
                             max_ctas > 0 ? &config : NULL));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->dp_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->dp_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->dp_done, cudaEventDisableTiming));
cleanup:
    return rc;
}

/* Splits the edge communicators (rounds in the same order on every rank). */
static int split_edges(gt_comm *c) {
    int rc = GT_OK;
    const int pp = c->host.pp, p = c->host.pipe_rank;
    const int n_rounds = pp % 2 == 1 ? 3 : 2;
    int max_ctas = c->env.p2p_max_ctas; /* GANTRY_P2P_MAX_CTAS; 0 = NCCL's default */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (max_ctas > 0) config.minCTAs = 1, config.maxCTAs = max_ctas;
    for (int k = 0; k < 2; k++) {
        int kind = k == 0 ? GT_MSG_ACT : GT_MSG_GRAD;
        int out_slot = k == 0 ? GT_EDGE_ACT_OUT : GT_EDGE_GRAD_OUT;
        int in_slot = k == 0 ? GT_EDGE_ACT_IN : GT_EDGE_GRAD_IN;
        /* the edge this rank receives on is the one whose sender's receiver is p */
        int in_sender = kind == GT_MSG_ACT ? (p - 1 + pp) % pp : (p + 1) % pp;
        for (int r = 0; r < n_rounds; r++) {
            int color = NCCL_SPLIT_NOCOLOR, key = 0, slot = -1;
            if (edge_round(p, pp) == r) {
                color = c->host.replica * pp + p, key = 0, slot = out_slot;
            } else if (edge_round(in_sender, pp) == r) {
                color = c->host.replica * pp + in_sender, key = 1, slot = in_slot;
            }
            ncclComm_t made = NULL;
            NCCL_CHECK(ncclCommSplit(c->nworld, color, key, &made, max_ctas > 0 ? &config : NULL));
            if (slot >= 0) c->edge[slot] = made;
        }
    }
cleanup:
    return rc;
}

/* The edge slot (GT_EDGE_*) this rank holds for the edge of `kind` sent by `sender`, or -1. */
static int edge_slot(const gt_comm *c, int kind, int sender) {
    int receiver = edge_receiver(kind, sender, c->host.pp);
    if (c->host.pipe_rank == sender) return kind == GT_MSG_ACT ? GT_EDGE_ACT_OUT : GT_EDGE_GRAD_OUT;
    if (c->host.pipe_rank == receiver) return kind == GT_MSG_ACT ? GT_EDGE_ACT_IN : GT_EDGE_GRAD_IN;
    return -1;
}

/* Connects every edge once, in one global order (replica, kind, sender), so that no rank
 * blocks in NCCL's lazy connection setup in the middle of a step. Deadlock-free: the first
 * unfinished edge of that order always has both of its ranks at it. */
static int warm_up_edges(gt_comm *c) {
    int rc = GT_OK;
    const int pp = c->host.pp;
    for (int k = 0; k < 2; k++) {
        int kind = k == 0 ? GT_MSG_ACT : GT_MSG_GRAD;
        for (int sender = 0; sender < pp; sender++) {
            int slot = edge_slot(c, kind, sender);
            if (slot < 0) continue;
            if (slot == GT_EDGE_ACT_OUT || slot == GT_EDGE_GRAD_OUT)
                NCCL_CHECK(ncclSend(c->scratch, 1, ncclUint8, 1, c->edge[slot], c->streams[slot]));
            else
                NCCL_CHECK(ncclRecv(c->scratch, 1, ncclUint8, 0, c->edge[slot], c->streams[slot]));
            CUDA_CHECK(cudaStreamSynchronize(c->streams[slot]));
        }
    }
cleanup:
    return rc;
}

int gt_comm_create(int world_fint, int pp, int dp, int pipe_rank, int replica, int node_id,
                   const void *id, size_t id_len, gt_comm **out) {
    int rc = GT_OK;
    gt_comm *c = NULL;
    ncclUniqueId uid;
    int world_rank = 0, world_size = 0, lo = 0, hi = 0;
    *out = NULL;
    widen_hardware_queues();
    GT_CHECK(gt_comm_check_layout(pp, dp, pipe_rank, replica));
    if (id == NULL || id_len != sizeof(uid))
        GT_INPUT_FAIL("gt_comm_create: the NCCL build needs the %zu-byte id of world rank 0 "
                      "(got %zu bytes)", sizeof(uid), id == NULL ? (size_t)0 : id_len);
    memcpy(&uid, id, sizeof(uid));
    GT_CALLOC(c, 1);
    GT_CHECK(gt_runtime_config_read(&c->env));
    GT_CHECK(gt_comm_host_init(&c->host, world_fint, pp, dp, pipe_rank, replica));
    MPI_CHECK(MPI_Comm_rank(c->host.world, &world_rank));
    MPI_CHECK(MPI_Comm_size(c->host.world, &world_size));
    c->node_id = node_id;
    GT_CHECK(pick_device(c->host.world, node_id, &c->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    for (int e = 0; e < GT_N_EDGES; e++)
        CUDA_CHECK(cudaStreamCreateWithPriority(&c->streams[e], cudaStreamNonBlocking, hi));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->posted, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->pre_update, cudaEventDisableTiming));
    CUDA_MALLOC(c->scratch, 16);
    NCCL_CHECK(ncclCommInitRank(&c->nworld, world_size, uid, world_rank));
    {
        int in_tied = gt_comm_in_tied(pp, pipe_rank);
        ncclComm_t made = NULL;
        if (pp > 1) {
            NCCL_CHECK(ncclCommSplit(c->nworld, in_tied ? replica : NCCL_SPLIT_NOCOLOR,
                                     pipe_rank, &made, NULL));
            c->ntied = made;
        }
        if (dp > 1) {
            made = NULL;
            NCCL_CHECK(ncclCommSplit(c->nworld, pipe_rank, replica, &made, NULL));
            c->ndp = made;
        }
    }
    GT_CHECK(create_dp_overlap(c));
    if (pp > 1) {
        GT_CHECK(split_edges(c));
        GT_CHECK(warm_up_edges(c));
    }
    *out = c;
    c = NULL;
cleanup:
    gt_comm_free(c);
    return rc;
}

int gt_comm_mpi_create(int world_fint, int pp, int dp, int pipe_rank, int replica, int node_id,
                       gt_comm **out) {
    int rc = GT_OK;
    unsigned char id[GT_COMM_ID_BYTES];
    int world_rank = 0;
    MPI_Comm world = MPI_Comm_f2c((MPI_Fint)world_fint);
    *out = NULL;
    memset(id, 0, sizeof(id));
    MPI_CHECK(MPI_Comm_rank(world, &world_rank));
    if (world_rank == 0) rc = gt_comm_unique_id(id, sizeof(id));
    /* every rank learns whether rank 0 made the id before anyone waits in NCCL */
    MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, world));
    if (rc != GT_OK) {
        if (world_rank != 0) GT_FAIL(GT_ESTATE, "world rank 0 could not make the NCCL id");
        goto cleanup;
    }
    MPI_CHECK(MPI_Bcast(id, (int)sizeof(id), MPI_BYTE, 0, world));
    GT_CHECK(gt_comm_create(world_fint, pp, dp, pipe_rank, replica, node_id, id, sizeof(id), out));
cleanup:
    return rc;
}

/* Frees the copy-engine edges once their streams are idle. */
static void free_ce_edges(gt_comm *c) {
    for (int e = 0; e < GT_N_EDGES; e++) {
        if (c->ce[e] == NULL) continue;
        if (c->streams[e] != NULL) cudaStreamSynchronize(c->streams[e]);
        gt_ce_edge_free(c->ce[e]);
        c->ce[e] = NULL;
    }
    c->ce_bytes = 0;
}

int gt_comm_p2p_setup(gt_comm *c, size_t max_bytes) {
    int rc = GT_OK;
    const int pp = c->host.pp, p = c->host.pipe_rank;
    /* GANTRY_P2P_TRANSPORT as p2p_ce.h's modes: 0 = nccl, 1 = auto, 2 = ce */
    int mode = c->env.p2p_transport == GT_P2P_NCCL ? 0 : c->env.p2p_transport == GT_P2P_CE ? 2 : 1;
    int slots = c->env.p2p_ce_slots, n_ce = 0, n_edges = 0;
    if (pp < 2 || (c->ce_bytes > 0 && max_bytes <= c->ce_bytes)) return GT_OK;
    free_ce_edges(c);
    /* one global edge order (kind, sender), as for the NCCL warm-up: deadlock-free pairings */
    for (int k = 0; k < 2; k++) {
        int kind = k == 0 ? GT_MSG_ACT : GT_MSG_GRAD;
        for (int sender = 0; sender < pp; sender++) {
            int slot = edge_slot(c, kind, sender);
            if (slot < 0) continue;
            int is_sender = slot == GT_EDGE_ACT_OUT || slot == GT_EDGE_GRAD_OUT;
            int peer = is_sender ? edge_receiver(kind, sender, pp) : sender;
            GT_CHECK(gt_ce_edge_create(c->host.pipe, peer, 100 + k * pp + sender, is_sender,
                                       c->node_id, c->device, mode, slots, max_bytes,
                                       &c->ce[slot]));
            n_edges++;
            n_ce += c->ce[slot] != NULL;
        }
    }
    c->ce_bytes = max_bytes;
    if (p == 0 && c->host.replica == 0)
        fprintf(stderr, "gantry: pipeline transfers: %d of rank 0's %d edges on copy engines "
                "(%d x %.1f MB ring per receiving edge), the rest on NCCL\n", n_ce, n_edges, slots,
                (double)max_bytes / 1e6);
cleanup:
    return rc;
}

/* ncclCommDestroy finalizes with the communicator's other ranks: every rank destroys in one
 * global order (edges by (kind, sender), then tied, dp, world) or two ranks can each wait in a
 * different communicator's teardown forever (seen on the H200 pair with per-slot order: every
 * PP=2 run trained to the end, then hung at exit). */
void gt_comm_free(gt_comm *c) {
    if (c == NULL) return;
    free_ce_edges(c);
    for (int i = 0; i < c->n_reqs; i++)
        if (c->done[i] != NULL) cudaEventDestroy(c->done[i]);
    free(c->done);
    free(c->edge_of);
    for (int k = 0; k < 2 && c->host.pp > 1; k++) {
        for (int sender = 0; sender < c->host.pp; sender++) {
            int slot = edge_slot(c, k == 0 ? GT_MSG_ACT : GT_MSG_GRAD, sender);
            if (slot >= 0 && c->edge[slot] != NULL) {
                ncclCommDestroy(c->edge[slot]);
                c->edge[slot] = NULL;
            }
        }
    }
    if (c->ndp_overlap != NULL) ncclCommDestroy(c->ndp_overlap);
    if (c->ndp != NULL) ncclCommDestroy(c->ndp);
    if (c->ntied != NULL) ncclCommDestroy(c->ntied);
    if (c->nworld != NULL) ncclCommDestroy(c->nworld);
    if (c->scratch != NULL) cudaFree(c->scratch);
    if (c->posted != NULL) cudaEventDestroy(c->posted);
    if (c->pre_update != NULL) cudaEventDestroy(c->pre_update);
    if (c->dp_ready != NULL) cudaEventDestroy(c->dp_ready);
    if (c->dp_done != NULL) cudaEventDestroy(c->dp_done);
    if (c->dp_stream != NULL) cudaStreamDestroy(c->dp_stream);
    for (int e = 0; e < GT_N_EDGES; e++)
        if (c->streams[e] != NULL) cudaStreamDestroy(c->streams[e]);
    if (c->compute != NULL) cudaStreamDestroy(c->compute);
    gt_comm_host_release(&c->host);
    free(c);
}

int gt_comm_reserve(gt_comm *c, int n) {
    int rc = GT_OK;
    if (n <= c->n_reqs) return GT_OK;
    for (int i = 0; i < c->n_reqs; i++)
        if (c->edge_of[i] >= 0) GT_FAIL(GT_ESTATE, "reserve with request %d still active", i);
    cudaEvent_t *done = realloc(c->done, (size_t)n * sizeof(*done));
    if (done == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d requests", n);
    c->done = done;
    int8_t *edge_of = realloc(c->edge_of, (size_t)n * sizeof(*edge_of));
    if (edge_of == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d requests", n);
    c->edge_of = edge_of;
    for (int i = c->n_reqs; i < n; i++) {
        c->done[i] = NULL;
        c->edge_of[i] = -1;
    }
    for (int i = c->n_reqs; i < n; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming));
        c->n_reqs = i + 1; /* created so far: freed by gt_comm_free on failure */
    }
cleanup:
    return rc;
}

/* Checks a post and returns the edge it goes on. */
static int p2p_edge(gt_comm *c, int req, int peer, int kind, int is_send, int *edge) {
    int rc = GT_OK;
    if (req < 0 || req >= c->n_reqs) GT_FAIL(GT_ESTATE, "request %d out of range", req);
    if (c->edge_of[req] >= 0) GT_FAIL(GT_ESTATE, "request %d still active", req);
    if (c->host.pp < 2) GT_FAIL(GT_ESTATE, "send/recv with pp=1");
    if (kind != GT_MSG_ACT && kind != GT_MSG_GRAD) GT_FAIL(GT_ESTATE, "bad message kind %d", kind);
    {
        int p = c->host.pipe_rank, pp = c->host.pp;
        int expected = is_send ? edge_receiver(kind, p, pp)
                               : (kind == GT_MSG_ACT ? (p - 1 + pp) % pp : (p + 1) % pp);
        if (peer != expected)
            GT_FAIL(GT_ESTATE, "%s of %s between pipeline ranks %d and %d: only neighbours "
                    "(expected peer %d)", is_send ? "send" : "recv",
                    kind == GT_MSG_ACT ? "activations" : "gradients", p, peer, expected);
        *edge = kind == GT_MSG_ACT ? (is_send ? GT_EDGE_ACT_OUT : GT_EDGE_ACT_IN)
                                   : (is_send ? GT_EDGE_GRAD_OUT : GT_EDGE_GRAD_IN);
    }
cleanup:
    return rc;
}

/* Posts a send or receive on its edge's stream after everything queued on `compute` so far
 * (the producer of the data or the last reader of the buffer); done[req] marks its end. */
static int post_p2p(gt_comm *c, int req, int peer, int kind, int is_send, void *buf,
                    size_t bytes) {
    int rc = GT_OK;
    int e = 0;
    GT_CHECK(p2p_edge(c, req, peer, kind, is_send, &e));
    if (is_send || !c->in_update) { /* a receive during the update: what came before it */
        CUDA_CHECK(cudaEventRecord(c->posted, c->compute));
        CUDA_CHECK(cudaStreamWaitEvent(c->streams[e], c->posted, 0));
    } else {
        CUDA_CHECK(cudaStreamWaitEvent(c->streams[e], c->pre_update, 0));
    }
    if (c->ce[e] != NULL && is_send)
        GT_CHECK(gt_ce_edge_send(c->ce[e], buf, bytes, c->streams[e]));
    else if (c->ce[e] != NULL)
        GT_CHECK(gt_ce_edge_recv(c->ce[e], buf, bytes, c->streams[e]));
    else if (is_send) NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, 1, c->edge[e], c->streams[e]));
    else NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, 0, c->edge[e], c->streams[e]));
    CUDA_CHECK(cudaEventRecord(c->done[req], c->streams[e]));
    c->edge_of[req] = (int8_t)e;
cleanup:
    return rc;
}

int gt_comm_isend(gt_comm *c, int req, int peer, int kind, const void *buf, size_t bytes) {
    return post_p2p(c, req, peer, kind, 1, (void *)buf, bytes);
}

int gt_comm_irecv(gt_comm *c, int req, int peer, int kind, void *buf, size_t bytes) {
    return post_p2p(c, req, peer, kind, 0, buf, bytes);
}

int gt_comm_update_begin(gt_comm *c) {
    int rc = GT_OK;
    CUDA_CHECK(cudaEventRecord(c->pre_update, c->compute));
    c->in_update = 1;
cleanup:
    return rc;
}

int gt_comm_update_end(gt_comm *c) {
    c->in_update = 0;
    return GT_OK;
}

int gt_comm_wait(gt_comm *c, int req, int *was_ready) {
    int rc = GT_OK;
    if (req < 0 || req >= c->n_reqs || c->edge_of[req] < 0)
        GT_FAIL(GT_ESTATE, "wait on request %d that was not posted", req);
    {
        int e = c->edge_of[req];
        cudaError_t q = cudaEventQuery(c->done[req]);
        *was_ready = q == cudaSuccess;
        for (long spins = 0; q == cudaErrorNotReady; spins++) {
            if (spins % 4096 == 4095) {
                ncclResult_t async_rc = ncclSuccess;
                NCCL_CHECK(ncclCommGetAsyncError(c->edge[e], &async_rc));
                if (async_rc != ncclSuccess && async_rc != ncclInProgress)
                    GT_FAIL(GT_ESTATE, "NCCL %s of request %d failed: %s",
                            e == GT_EDGE_ACT_OUT || e == GT_EDGE_GRAD_OUT ? "send" : "recv", req,
                            ncclGetErrorString(async_rc));
            }
            q = cudaEventQuery(c->done[req]);
        }
        CUDA_CHECK(q);
        if (e == GT_EDGE_ACT_IN || e == GT_EDGE_GRAD_IN)
            CUDA_CHECK(cudaStreamWaitEvent(c->compute, c->done[req], 0));
        c->edge_of[req] = -1;
    }
cleanup:
    return rc;
}

int gt_comm_allreduce_dp(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->ndp == NULL) return GT_OK;
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->ndp, c->compute));
cleanup:
    return rc;
}

int gt_comm_allreduce_tied(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->ntied == NULL) return GT_OK;
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->ntied, c->compute));
cleanup:
    return rc;
}

int gt_comm_dp_bucket_start(gt_comm *c, float *buf, size_t count) {
    int rc = GT_OK;
    if (c->ndp == NULL) return GT_OK;
    if (c->ndp_overlap == NULL) { /* overlap switched off at creation: in stream order */
        NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->ndp, c->compute));
        goto cleanup;
    }
    /* the bucket's gradients are final once `compute` reaches this point */
    CUDA_CHECK(cudaEventRecord(c->dp_ready, c->compute));
    CUDA_CHECK(cudaStreamWaitEvent(c->dp_stream, c->dp_ready, 0));
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->ndp_overlap, c->dp_stream));
    c->dp_started++;
cleanup:
    return rc;
}

int gt_comm_dp_wait_all(gt_comm *c) {
    int rc = GT_OK;
    if (c->dp_started == 0) return GT_OK;
    CUDA_CHECK(cudaEventRecord(c->dp_done, c->dp_stream));
    CUDA_CHECK(cudaStreamWaitEvent(c->compute, c->dp_done, 0));
    c->dp_started = 0;
cleanup:
    return rc;
}
