/*
 * p2p_ce.c — copy-engine pipeline edges over CUDA IPC (see p2p_ce.h for the protocol).
 *
 * Setup exchanges, over MPI between the edge's two ranks: a probe (node id, PCI bus id,
 * whether stream memory operations work here), then each side's verdict (both must be able),
 * then the IPC handles (the receiver's ring and `full` counter, the sender's `empty` counter),
 * then a last message once both sides' counters are zeroed on the GPU, so no peer write can
 * land before the zeroing.
 */
#include "p2p_ce.h"

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_host.h"
#include "common.h"
#include "cuda/cuda_check.h"

/* A CUDA driver call (stream memory operations). */
#define CU_CHECK(call)                                                                         \
    do {                                                                                       \
        CUresult cu_rc_ = (call);                                                              \
        if (cu_rc_ != CUDA_SUCCESS) {                                                          \
            const char *cu_name_ = NULL;                                                       \
            cuGetErrorName(cu_rc_, &cu_name_);                                                 \
            GT_FAIL(GT_ESTATE, "%s failed: %s", #call, cu_name_ ? cu_name_ : "unknown error"); \
        }                                                                                      \
    } while (0)

/* Bytes of one counter allocation (one 32-bit counter, padded). */
#define CE_FLAG_BYTES 256

struct gt_ce_edge {
    int is_sender, slots;
    size_t cap;
    uint64_t count;      /* messages enqueued on this side */
    void *ring;          /* receiver: its ring, slots * cap bytes; sender: NULL */
    uint32_t *flag;      /* this side's counter: receiver `full`, sender `empty` */
    void *peer_ring;     /* sender: the receiver's ring (IPC mapping) */
    uint32_t *peer_flag; /* the other side's counter (IPC mapping) */
};

typedef struct {
    int node_id, can;
    char bus_id[32];
} ce_probe;

typedef struct {
    cudaIpcMemHandle_t ring, flag;
} ce_handles;

/* Zeroes a counter with a stream memory write: also proves that such writes work here. */
static int zero_flag(uint32_t *flag, int *works) {
    int rc = GT_OK;
    cudaStream_t s = NULL;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *works = cuStreamWriteValue32((CUstream)s, (CUdeviceptr)flag, 0,
                                  CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS;
    if (!*works) CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(*flag), s));
    CUDA_CHECK(cudaStreamSynchronize(s));
cleanup:
    if (s != NULL) cudaStreamDestroy(s);
    return rc;
}

/* A stream waiting on a counter blocks its hardware queue until the peer writes it; streams
 * share CUDA_DEVICE_MAX_CONNECTIONS queues, so with few queues the compute stream could queue
 * behind such a wait (a false cross-GPU dependency). gt_comm_create raises the default to 32
 * before the context exists; a user's smaller setting (e.g. 1) keeps NCCL's kernels. */
static int enough_queues(void) {
    const char *env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    return env == NULL || env[0] == '\0' || atoi(env) >= 16;
}

/* Whether this process can map and reach the peer's GPU (bus id from its probe). */
static int peer_reachable(int device, const char *bus_id) {
    int peer_dev = -1, ok = 0;
    if (cudaDeviceGetByPCIBusId(&peer_dev, bus_id) != cudaSuccess) {
        cudaGetLastError(); /* not visible here: clear the sticky-free error */
        return 0;
    }
    if (peer_dev == device) return 1;
    if (cudaDeviceCanAccessPeer(&ok, device, peer_dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ok;
}

int gt_ce_edge_create(MPI_Comm pipe, int peer, int tag, int is_sender, int node_id, int device,
                      int mode, int slots, size_t cap, gt_ce_edge **out) {
    int rc = GT_OK;
    gt_ce_edge *e = NULL;
    ce_probe mine, theirs;
    ce_handles my_h, peer_h;
    int my_ok = 0, peer_ok = 0, works = 0;
    *out = NULL;
    GT_CALLOC(e, 1);
    e->is_sender = is_sender, e->slots = slots, e->cap = cap;
    CUDA_MALLOC(e->flag, CE_FLAG_BYTES);
    GT_CHECK(zero_flag(e->flag, &works));
    memset(&mine, 0, sizeof(mine));
    mine.node_id = node_id;
    mine.can = works && mode != 0 && enough_queues(); /* either side's "no": both NCCL */
    CUDA_CHECK(cudaDeviceGetPCIBusId(mine.bus_id, (int)sizeof(mine.bus_id), device));
    MPI_CHECK(MPI_Sendrecv(&mine, (int)sizeof(mine), MPI_BYTE, peer, tag, &theirs,
                           (int)sizeof(theirs), MPI_BYTE, peer, tag, pipe, MPI_STATUS_IGNORE));
    theirs.bus_id[sizeof(theirs.bus_id) - 1] = '\0';
    my_ok = mine.can && theirs.can && mine.node_id == theirs.node_id &&
            peer_reachable(device, theirs.bus_id);
    MPI_CHECK(MPI_Sendrecv(&my_ok, 1, MPI_INT, peer, tag, &peer_ok, 1, MPI_INT, peer, tag, pipe,
                           MPI_STATUS_IGNORE));
    if (!my_ok || !peer_ok) {
        if (mode == 2)
            GT_FAIL(GT_ESTATE, "GANTRY_P2P_TRANSPORT=ce: pipeline ranks on GPUs %s and %s cannot "
                    "use copy engines (node ids %d / %d, stream memory writes and "
                    ">= 16 CUDA_DEVICE_MAX_CONNECTIONS %s / %s, peer access %s / %s)", mine.bus_id,
                    theirs.bus_id, mine.node_id, theirs.node_id, mine.can ? "yes" : "no",
                    theirs.can ? "yes" : "no", my_ok ? "yes" : "no", peer_ok ? "yes" : "no");
        gt_ce_edge_free(e);
        e = NULL;
        goto cleanup;
    }
    memset(&my_h, 0, sizeof(my_h));
    if (!is_sender) {
        CUDA_MALLOC(e->ring, (size_t)slots * cap);
        CUDA_CHECK(cudaIpcGetMemHandle(&my_h.ring, e->ring));
    }
    CUDA_CHECK(cudaIpcGetMemHandle(&my_h.flag, e->flag));
    MPI_CHECK(MPI_Sendrecv(&my_h, (int)sizeof(my_h), MPI_BYTE, peer, tag, &peer_h,
                           (int)sizeof(peer_h), MPI_BYTE, peer, tag, pipe, MPI_STATUS_IGNORE));
    if (is_sender)
        CUDA_CHECK(cudaIpcOpenMemHandle(&e->peer_ring, peer_h.ring,
                                        cudaIpcMemLazyEnablePeerAccess));
    {
        void *mapped = NULL;
        CUDA_CHECK(cudaIpcOpenMemHandle(&mapped, peer_h.flag, cudaIpcMemLazyEnablePeerAccess));
        e->peer_flag = mapped;
    }
    /* both counters are zero on both GPUs before either side may write the other's */
    MPI_CHECK(MPI_Sendrecv(&my_ok, 1, MPI_INT, peer, tag, &peer_ok, 1, MPI_INT, peer, tag, pipe,
                           MPI_STATUS_IGNORE));
    *out = e;
    e = NULL;
cleanup:
    gt_ce_edge_free(e);
    return rc;
}

int gt_ce_edge_send(gt_ce_edge *e, const void *buf, size_t bytes, cudaStream_t stream) {
    int rc = GT_OK;
    if (!e->is_sender || bytes > e->cap)
        GT_FAIL(GT_ESTATE, "copy-engine send of %zu bytes on an edge of %zu-byte %s", bytes,
                e->cap, e->is_sender ? "messages" : "receives");
    if (e->count >= (uint64_t)e->slots) /* ring slot free once message count - slots is taken */
        CU_CHECK(cuStreamWaitValue32((CUstream)stream, (CUdeviceptr)e->flag,
                                     (cuuint32_t)(e->count - (uint64_t)e->slots + 1),
                                     CU_STREAM_WAIT_VALUE_GEQ));
    size_t at = (size_t)(e->count % (uint64_t)e->slots) * e->cap;
    CUDA_CHECK(cudaMemcpyAsync((char *)e->peer_ring + at, buf, bytes, cudaMemcpyDefault, stream));
    CU_CHECK(cuStreamWriteValue32((CUstream)stream, (CUdeviceptr)e->peer_flag,
                                  (cuuint32_t)(e->count + 1), CU_STREAM_WRITE_VALUE_DEFAULT));
    e->count++;
cleanup:
    return rc;
}

int gt_ce_edge_recv(gt_ce_edge *e, void *buf, size_t bytes, cudaStream_t stream) {
    int rc = GT_OK;
    if (e->is_sender || bytes > e->cap)
        GT_FAIL(GT_ESTATE, "copy-engine receive of %zu bytes on an edge of %zu-byte %s", bytes,
                e->cap, e->is_sender ? "sends" : "messages");
    CU_CHECK(cuStreamWaitValue32((CUstream)stream, (CUdeviceptr)e->flag,
                                 (cuuint32_t)(e->count + 1), CU_STREAM_WAIT_VALUE_GEQ));
    size_t at = (size_t)(e->count % (uint64_t)e->slots) * e->cap;
    CUDA_CHECK(cudaMemcpyAsync(buf, (char *)e->ring + at, bytes, cudaMemcpyDefault, stream));
    CU_CHECK(cuStreamWriteValue32((CUstream)stream, (CUdeviceptr)e->peer_flag,
                                  (cuuint32_t)(e->count + 1), CU_STREAM_WRITE_VALUE_DEFAULT));
    e->count++;
cleanup:
    return rc;
}

void gt_ce_edge_free(gt_ce_edge *e) {
    if (e == NULL) return;
    if (e->peer_ring != NULL) cudaIpcCloseMemHandle(e->peer_ring);
    if (e->peer_flag != NULL) cudaIpcCloseMemHandle(e->peer_flag);
    if (e->ring != NULL) cudaFree(e->ring);
    if (e->flag != NULL) cudaFree(e->flag);
    free(e);
}
