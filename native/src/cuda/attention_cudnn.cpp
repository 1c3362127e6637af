// attention_cudnn.cpp — cuDNN fused flash attention (SDPA) for the CUDA backend, following
// llm.c's cudnn_att.cpp: one forward graph (emits O and the softmax stats) and one backward graph
// per (B, T, NH, hs), built on first use and cached; strides read q/k/v straight out of the
// fused (B,T,3,NH,hs) qkv tensor. Errors come back as strings (no exceptions cross into C).
//
// Plan choice (GANTRY_ATTN_AUTOTUNE, default on; 0 = cuDNN's heuristic choice): every plan the
// heuristic offers is built, and when a shape is first probed (at stage creation, before any
// transfer is in flight) each is timed on scratch buffers; the fastest is used. The choice is
// kept per process and shape, so every stage of a process runs the same plan.
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cuda/attention_cudnn.h"
#include "cuda/kernels.h"

namespace fe = cudnn_frontend;

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct FwdGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    TensorPtr q, k, v, scale, o, stats;
    int64_t plan = -1; // -1: the graph's own candidate (heuristic choice)
};
struct BwdGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    TensorPtr q, k, v, o, dout, stats, scale, dq, dk, dv;
    int64_t plan = -1;
};
using Key = std::tuple<int, int, int, int>;

// The process's tuned plans by shape: {forward, backward} plan index.
std::mutex g_tuned_lock;
std::map<Key, std::pair<int64_t, int64_t>> g_tuned;

void set_err(char *err, size_t len, const char *what, const std::string &msg) {
    if (err != nullptr && len > 0) std::snprintf(err, len, "cuDNN attention %s: %s", what, msg.c_str());
}

}  // namespace

struct gt_cudnn_attn {
    cudnnHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_size = 0;
    bool autotune = true; // GANTRY_ATTN_AUTOTUNE (runtime_config.h)
    std::map<Key, FwdGraph> fwd;
    std::map<Key, BwdGraph> bwd;
};

namespace {

// Grows the shared workspace to `need` bytes.
bool ensure_workspace(gt_cudnn_attn *ctx, size_t need, char *err, size_t len) {
    if (need <= ctx->workspace_size) return true;
    if (ctx->workspace != nullptr) cudaFree(ctx->workspace);
    ctx->workspace = nullptr;
    ctx->workspace_size = 0;
    cudaError_t rc = cudaMalloc(&ctx->workspace, need);
    if (rc != cudaSuccess) {
        set_err(err, len, "workspace", cudaGetErrorString(rc));
        return false;
    }
    ctx->workspace_size = need;
    return true;
}

bool check(fe::error_object e, const char *what, char *err, size_t len) {
    if (e.is_good()) return true;
    set_err(err, len, what, e.get_message());
    return false;
}

TensorPtr qkv_tensor(fe::graph::Graph &g, const char *name, int B, int NH, int T, int hs) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_dim({B, NH, T, hs})
                        .set_stride({3LL * NH * hs * T, hs, 3LL * NH * hs, 1}));
}

TensorPtr scale_tensor(fe::graph::Graph &g) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("attn_scale")
                        .set_dim({1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_is_pass_by_value(true)
                        .set_data_type(fe::DataType_t::FLOAT));
}

bool build(gt_cudnn_attn *ctx, fe::graph::Graph &g, char *err, size_t len) {
    if (!check(g.validate(), "validate", err, len)) return false;
    if (!check(g.build_operation_graph(ctx->handle), "build_operation_graph", err, len))
        return false;
    if (!check(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", err, len))
        return false;
    if (!check(g.check_support(ctx->handle), "check_support", err, len)) return false;
    if (ctx->autotune) { // every candidate (fails only if none builds), sized for all of them
        if (!check(g.build_plans(ctx->handle, fe::BuildPlanPolicy_t::ALL), "build_plans", err,
                   len))
            return false;
        return ensure_workspace(ctx, (size_t)g.get_autotune_workspace_size(), err, len);
    }
    if (!check(g.build_plans(ctx->handle), "build_plans", err, len)) return false;
    int64_t ws = 0;
    if (!check(g.get_workspace_size(ws), "get_workspace_size", err, len)) return false;
    return ensure_workspace(ctx, (size_t)ws, err, len);
}

FwdGraph *forward_graph(gt_cudnn_attn *ctx, int B, int T, int NH, int hs, char *err, size_t len) {
    Key key{B, T, NH, hs};
    auto it = ctx->fwd.find(key);
    if (it != ctx->fwd.end()) return &it->second;
    FwdGraph f;
    f.graph = std::make_shared<fe::graph::Graph>();
    fe::graph::Graph &g = *f.graph;
    g.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    f.q = qkv_tensor(g, "Q", B, NH, T, hs);
    f.k = qkv_tensor(g, "K", B, NH, T, hs);
    f.v = qkv_tensor(g, "V", B, NH, T, hs);
    f.scale = scale_tensor(g);
    auto options = fe::graph::SDPA_attributes()
                       .set_name("flash_attention")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(f.scale);
    auto outs = g.sdpa(f.q, f.k, f.v, options);
    f.o = outs[0];
    f.stats = outs[1];
    f.o->set_output(true).set_dim({B, NH, T, hs}).set_stride({(int64_t)NH * hs * T, hs,
                                                               (int64_t)NH * hs, 1});
    f.stats->set_output(true)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, NH, T, 1})
        .set_stride({(int64_t)NH * T, T, 1, 1});
    if (!build(ctx, g, err, len)) return nullptr;
    return &ctx->fwd.emplace(key, f).first->second;
}

BwdGraph *backward_graph(gt_cudnn_attn *ctx, int B, int T, int NH, int hs, char *err,
                         size_t len) {
    Key key{B, T, NH, hs};
    auto it = ctx->bwd.find(key);
    if (it != ctx->bwd.end()) return &it->second;
    BwdGraph b;
    b.graph = std::make_shared<fe::graph::Graph>();
    fe::graph::Graph &g = *b.graph;
    g.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    b.q = qkv_tensor(g, "Q", B, NH, T, hs);
    b.k = qkv_tensor(g, "K", B, NH, T, hs);
    b.v = qkv_tensor(g, "V", B, NH, T, hs);
    const std::vector<int64_t> o_dim{B, NH, T, hs};
    const std::vector<int64_t> o_stride{(int64_t)NH * hs * T, hs, (int64_t)NH * hs, 1};
    b.o = g.tensor(fe::graph::Tensor_attributes().set_name("O").set_dim(o_dim).set_stride(o_stride));
    b.dout = g.tensor(
        fe::graph::Tensor_attributes().set_name("dO").set_dim(o_dim).set_stride(o_stride));
    b.stats = g.tensor(fe::graph::Tensor_attributes()
                           .set_name("stats")
                           .set_dim({B, NH, T, 1})
                           .set_stride({(int64_t)NH * T, T, 1, 1})
                           .set_data_type(fe::DataType_t::FLOAT));
    b.scale = scale_tensor(g);
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("flash_attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(b.scale);
    auto grads = g.sdpa_backward(b.q, b.k, b.v, b.o, b.dout, b.stats, options);
    b.dq = grads[0];
    b.dk = grads[1];
    b.dv = grads[2];
    const std::vector<int64_t> qkv_stride{3LL * NH * hs * T, hs, 3LL * NH * hs, 1};
    b.dq->set_output(true).set_dim(o_dim).set_stride(qkv_stride);
    b.dk->set_output(true).set_dim(o_dim).set_stride(qkv_stride);
    b.dv->set_output(true).set_dim(o_dim).set_stride(qkv_stride);
    if (!build(ctx, g, err, len)) return nullptr;
    return &ctx->bwd.emplace(key, b).first->second;
}

// Mean time (ms) of `reps` runs of plan i after one warm-up, or a negative value if it fails.
template <typename Pack>
float time_plan(gt_cudnn_attn *ctx, fe::graph::Graph &g, Pack &pack, int64_t i, cudaEvent_t t0,
                cudaEvent_t t1) {
    const int reps = 5;
    if (g.execute_plan_at_index(ctx->handle, pack, ctx->workspace, i).is_bad()) return -1.0f;
    if (cudaEventRecord(t0, nullptr) != cudaSuccess) return -1.0f;
    for (int r = 0; r < reps; r++)
        if (g.execute_plan_at_index(ctx->handle, pack, ctx->workspace, i).is_bad()) return -1.0f;
    float ms = 0.0f;
    if (cudaEventRecord(t1, nullptr) != cudaSuccess || cudaEventSynchronize(t1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, t0, t1) != cudaSuccess)
        return -1.0f;
    return ms / reps;
}

// Index of the fastest plan of g (-1 if none ran); reports the timings on stderr.
template <typename Pack>
int64_t fastest_plan(gt_cudnn_attn *ctx, fe::graph::Graph &g, Pack &pack, const char *what,
                     cudaEvent_t t0, cudaEvent_t t1) {
    int64_t best = -1, n = g.get_execution_plan_count();
    float best_ms = 0.0f, first_ms = -1.0f;
    for (int64_t i = 0; i < n; i++) {
        float ms = time_plan(ctx, g, pack, i, t0, t1);
        if (ms < 0.0f) continue;
        if (first_ms < 0.0f) first_ms = ms;
        if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    }
    (void)cudaGetLastError();
    if (best >= 0)
        std::fprintf(stderr, "gantry: cuDNN attention %s: %lld plans, chose #%lld (%.3f ms; "
                     "heuristic's first %.3f ms)\n", what, (long long)n, (long long)best,
                     best_ms, first_ms);
    return best;
}

// Times every plan of both graphs of `key` (once per process and shape) on scratch buffers:
// q, k, v and dO uniform in [-1, 1) (not zeros, which can time faster than real data), O and
// the statistics as the forward's timing runs leave them; sets f.plan / b.plan. Failures leave
// the heuristic's choice in place.
void tune(gt_cudnn_attn *ctx, const Key &key, FwdGraph &f, BwdGraph &b) {
    {
        std::lock_guard<std::mutex> lock(g_tuned_lock);
        auto it = g_tuned.find(key);
        if (it != g_tuned.end()) {
            f.plan = it->second.first;
            b.plan = it->second.second;
            return;
        }
    }
    auto [B, T, NH, hs] = key;
    size_t C = (size_t)NH * hs, N = (size_t)B * T;
    void *block = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    size_t qkv_bytes = 3 * N * C * 2, o_bytes = N * C * 2, stats_bytes = (size_t)B * NH * T * 4;
    size_t total = 2 * qkv_bytes + 2 * o_bytes + stats_bytes;
    if (cudnnSetStream(ctx->handle, nullptr) == CUDNN_STATUS_SUCCESS &&
        cudaMalloc(&block, total) == cudaSuccess && cudaMemset(block, 0, total) == cudaSuccess &&
        gt_cu_fill_uniform(static_cast<gt_bf16 *>(block), 3 * N * C, 1u, 1.0f, nullptr) ==
            cudaSuccess &&
        gt_cu_fill_uniform(reinterpret_cast<gt_bf16 *>(static_cast<char *>(block) +
                                                       2 * qkv_bytes + o_bytes),
                           N * C, 2u, 1.0f, nullptr) == cudaSuccess &&
        cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess) {
        auto *qkv = static_cast<gt_bf16 *>(block);
        auto *dqkv = reinterpret_cast<gt_bf16 *>(static_cast<char *>(block) + qkv_bytes);
        auto *o = reinterpret_cast<gt_bf16 *>(static_cast<char *>(block) + 2 * qkv_bytes);
        auto *dout = reinterpret_cast<gt_bf16 *>(static_cast<char *>(block) + 2 * qkv_bytes +
                                                 o_bytes);
        auto *stats = reinterpret_cast<float *>(static_cast<char *>(block) + 2 * qkv_bytes +
                                                2 * o_bytes);
        float scale = 1.0f / sqrtf((float)hs);
        std::unordered_map<TensorPtr, void *> fpack = {
            {f.q, qkv}, {f.k, qkv + C}, {f.v, qkv + 2 * C},
            {f.scale, &scale}, {f.o, o}, {f.stats, stats}};
        std::unordered_map<TensorPtr, void *> bpack = {
            {b.q, qkv}, {b.k, qkv + C}, {b.v, qkv + 2 * C}, {b.o, o}, {b.dout, dout},
            {b.stats, stats}, {b.scale, &scale}, {b.dq, dqkv}, {b.dk, dqkv + C},
            {b.dv, dqkv + 2 * C}};
        f.plan = fastest_plan(ctx, *f.graph, fpack, "forward", t0, t1);
        b.plan = fastest_plan(ctx, *b.graph, bpack, "backward", t0, t1);
    }
    (void)cudaGetLastError();
    if (t0 != nullptr) cudaEventDestroy(t0);
    if (t1 != nullptr) cudaEventDestroy(t1);
    if (block != nullptr) cudaFree(block);
    std::lock_guard<std::mutex> lock(g_tuned_lock);
    g_tuned.emplace(key, std::make_pair(f.plan, b.plan));
}
}  // namespace

extern "C" int gt_cudnn_attn_create(gt_cudnn_attn **out, int autotune, char *err, size_t len) {
    *out = nullptr;
    auto *ctx = new (std::nothrow) gt_cudnn_attn();
    if (ctx == nullptr) {
        set_err(err, len, "create", "out of memory");
        return 1;
    }
    ctx->autotune = autotune != 0;
    cudnnStatus_t st = cudnnCreate(&ctx->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        set_err(err, len, "cudnnCreate", cudnnGetErrorString(st));
        delete ctx;
        return 1;
    }
    *out = ctx;
    return 0;
}

extern "C" size_t gt_cudnn_version(void) { return cudnnGetVersion(); }

extern "C" void gt_cudnn_attn_destroy(gt_cudnn_attn *ctx) {
    if (ctx == nullptr) return;
    ctx->fwd.clear();
    ctx->bwd.clear();
    if (ctx->workspace != nullptr) cudaFree(ctx->workspace);
    if (ctx->handle != nullptr) cudnnDestroy(ctx->handle);
    delete ctx;
}

extern "C" int gt_cudnn_attn_supported(gt_cudnn_attn *ctx, int B, int T, int NH, int hs,
                                       char *err, size_t len) {
    try {
        FwdGraph *f = forward_graph(ctx, B, T, NH, hs, err, len);
        BwdGraph *b = f != nullptr ? backward_graph(ctx, B, T, NH, hs, err, len) : nullptr;
        if (b == nullptr) return 0;
        if (ctx->autotune) tune(ctx, Key{B, T, NH, hs}, *f, *b);
        return 1;
    } catch (const std::exception &e) {
        set_err(err, len, "probe", e.what());
        return 0;
    }
}

extern "C" int gt_cudnn_attn_forward(gt_cudnn_attn *ctx, gt_bf16 *out, float *stats,
                                     const gt_bf16 *qkv, int B, int T, int NH, int hs,
                                     cudaStream_t stream, char *err, size_t len) {
    try {
        FwdGraph *f = forward_graph(ctx, B, T, NH, hs, err, len);
        if (f == nullptr) return 1;
        cudnnStatus_t st = cudnnSetStream(ctx->handle, stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            set_err(err, len, "cudnnSetStream", cudnnGetErrorString(st));
            return 1;
        }
        size_t C = (size_t)NH * hs;
        auto *base = const_cast<gt_bf16 *>(qkv);
        float scale = 1.0f / sqrtf((float)hs);
        std::unordered_map<TensorPtr, void *> pack = {
            {f->q, base}, {f->k, base + C}, {f->v, base + 2 * C},
            {f->scale, &scale}, {f->o, out}, {f->stats, stats}};
        auto done = f->plan >= 0
                        ? f->graph->execute_plan_at_index(ctx->handle, pack, ctx->workspace,
                                                          f->plan)
                        : f->graph->execute(ctx->handle, pack, ctx->workspace);
        return check(done, "forward", err, len) ? 0 : 1;
    } catch (const std::exception &e) {
        set_err(err, len, "forward", e.what());
        return 1;
    }
}

extern "C" int gt_cudnn_attn_backward(gt_cudnn_attn *ctx, gt_bf16 *dqkv, const gt_bf16 *dout,
                                      const gt_bf16 *qkv, const gt_bf16 *out, const float *stats,
                                      int B, int T, int NH, int hs, cudaStream_t stream,
                                      char *err, size_t len) {
    try {
        BwdGraph *b = backward_graph(ctx, B, T, NH, hs, err, len);
        if (b == nullptr) return 1;
        cudnnStatus_t st = cudnnSetStream(ctx->handle, stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            set_err(err, len, "cudnnSetStream", cudnnGetErrorString(st));
            return 1;
        }
        size_t C = (size_t)NH * hs;
        auto *base = const_cast<gt_bf16 *>(qkv);
        float scale = 1.0f / sqrtf((float)hs);
        std::unordered_map<TensorPtr, void *> pack = {
            {b->q, base}, {b->k, base + C}, {b->v, base + 2 * C},
            {b->o, const_cast<gt_bf16 *>(out)}, {b->dout, const_cast<gt_bf16 *>(dout)},
            {b->stats, const_cast<float *>(stats)}, {b->scale, &scale},
            {b->dq, dqkv}, {b->dk, dqkv + C}, {b->dv, dqkv + 2 * C}};
        auto done = b->plan >= 0
                        ? b->graph->execute_plan_at_index(ctx->handle, pack, ctx->workspace,
                                                          b->plan)
                        : b->graph->execute(ctx->handle, pack, ctx->workspace);
        return check(done, "backward", err, len) ? 0 : 1;
    } catch (const std::exception &e) {
        set_err(err, len, "backward", e.what());
        return 1;
    }
}
