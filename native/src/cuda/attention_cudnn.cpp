// attention_cudnn.cpp — cuDNN fused flash attention (SDPA) for the CUDA backend, following
// llm.c's cudnn_att.cpp: one forward graph (emits O and the softmax stats) and one backward graph
// per (B, T, NH, hs), built on first use and cached; strides read q/k/v straight out of the
// fused (B,T,3,NH,hs) qkv tensor. Errors come back as strings (no exceptions cross into C).
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "cuda/attention_cudnn.h"

namespace fe = cudnn_frontend;

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct FwdGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    TensorPtr q, k, v, scale, o, stats;
};
struct BwdGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    TensorPtr q, k, v, o, dout, stats, scale, dq, dk, dv;
};
using Key = std::tuple<int, int, int, int>;

void set_err(char *err, size_t len, const char *what, const std::string &msg) {
    if (err != nullptr && len > 0) std::snprintf(err, len, "cuDNN attention %s: %s", what, msg.c_str());
}

}  // namespace

struct gt_cudnn_attn {
    cudnnHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_size = 0;
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

}  // namespace

extern "C" int gt_cudnn_attn_create(gt_cudnn_attn **out, char *err, size_t len) {
    *out = nullptr;
    auto *ctx = new (std::nothrow) gt_cudnn_attn();
    if (ctx == nullptr) {
        set_err(err, len, "create", "out of memory");
        return 1;
    }
    cudnnStatus_t st = cudnnCreate(&ctx->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        set_err(err, len, "cudnnCreate", cudnnGetErrorString(st));
        delete ctx;
        return 1;
    }
    *out = ctx;
    return 0;
}

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
        return forward_graph(ctx, B, T, NH, hs, err, len) != nullptr &&
               backward_graph(ctx, B, T, NH, hs, err, len) != nullptr;
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
        return check(f->graph->execute(ctx->handle, pack, ctx->workspace), "forward", err, len)
                   ? 0 : 1;
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
        return check(b->graph->execute(ctx->handle, pack, ctx->workspace), "backward", err, len)
                   ? 0 : 1;
    } catch (const std::exception &e) {
        set_err(err, len, "backward", e.what());
        return 1;
    }
}
