/*
 * runtime_config.h — every GANTRY_* environment switch the native library reads, read once
 * into one typed struct (runtime_config.c): stage creation (the CUDA build keeps it in its
 * stage), the pipeline executor and the NCCL communicator each call gt_runtime_config_read
 * when they are created and use only the struct afterwards; nothing else in the library calls
 * getenv for a GANTRY_* name. Unset or empty gives the default; any other value outside what
 * is allowed is a GT_EINPUT error naming the variable, its value and what is allowed.
 * gt_runtime_config_describe (stage.h) lists the values for the run's start event.
 *
 * The switch table in runtime_config.c (k_switches: name, kind, default, range or choices) is
 * the one list of them. launcher/native/runtime_config.py mirrors it with a description per
 * switch (a test parses the C table and compares), and the environment reference of the docs
 * is generated from that mirror.
 */
#ifndef GANTRY_RUNTIME_CONFIG_H
#define GANTRY_RUNTIME_CONFIG_H

#include <stddef.h>

enum { GT_ATTENTION_AUTO = 0, GT_ATTENTION_CUDNN = 1, GT_ATTENTION_REFERENCE = 2 };
enum { GT_P2P_AUTO = 0, GT_P2P_CE = 1, GT_P2P_NCCL = 2 };
enum { GT_PROFILE_OFF = 0, GT_PROFILE_ON = 1, GT_PROFILE_PREFILL = 2 };

/* The switches, one field each (see the table above for meaning, default and range). */
typedef struct {
    int attention;       /* GT_ATTENTION_* */
    int attn_autotune;
    int bias_gemm;
    int ce_fused;
    int cuda_graphs;
    double dp_bucket_mb;
    int dp_max_ctas;
    int dp_overlap;
    int gemm_autotune;
    int gemm_candidates;
    int gemm_tune_log;
    int grad_overwrite;
    int ln_bias_sums;
    int norm_capture;
    int opt_overlap;
    int p2p_ce_slots;
    int p2p_max_ctas;
    int p2p_transport;   /* GT_P2P_* */
    int profile_ops;     /* GT_PROFILE_* */
    int resid_ln;
} gt_runtime_config;

/* Reads and checks every switch from the environment into *out (the defaults first; on error
 * *out holds the defaults and the values read before the bad one). */
int gt_runtime_config_read(gt_runtime_config *out);

/* Elements (fp32) of a data-parallel bucket of `mb` MB. */
size_t gt_runtime_dp_bucket_elements(const gt_runtime_config *rc);

#endif /* GANTRY_RUNTIME_CONFIG_H */
