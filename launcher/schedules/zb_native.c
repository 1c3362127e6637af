/* zb_native.c: the zb-interleaved search's three hot loops in C, each the exact twin of its
 * Python reference (launcher/schedules/zb_interleaved.py `_run`, table.py `_rank_rows`,
 * timing.py `makespan`): the same decisions, the same rows, the same double operations in
 * the same order (compiled with -ffp-contract=off), hence byte-identical tables and
 * bit-identical makespans. Compiled on demand by launcher/schedules/native.py and loaded
 * with ctypes; every function returns a status and never aborts, so the Python caller can
 * fall back to the reference on anything unexpected (ZB_ERROR).
 *
 * Layouts: an order is int32 triples (op, stage, micro-batch); a table rank's rows are
 * int32 [n, 5] (op, stage, micro_batch, slot, peer), row-major. Op codes as table.py's Op.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OP_F = 1, OP_B = 2, OP_BI = 3, OP_W = 4, OP_SEND_ACT = 5, OP_RECV_ACT = 6,
       OP_SEND_GRAD = 7, OP_RECV_GRAD = 8, OP_WAIT = 9 };
enum { ZB_DONE = 0, ZB_STALL = 1, ZB_PAST = 2, ZB_FORK = 3, ZB_ERROR = -1 };

/* ---------------------------------------------------------------- greedy (zb_interleaved._run) */

typedef struct { int32_t stage, mb; int64_t ready; double done; } msg_t;

/* The list scheduler's state at one decision (zb_interleaved._Greedy). Per rank r: its
 * activation and gradient inputs (queues of capacity v*m, never wrapping: at most v*m
 * messages arrive on each over a step), its pending weight gradients (v*m), its orders
 * (3*v*m triples). */
typedef struct zb_state {
    int pp, m, v, cap_q;
    int64_t t;
    int n_awake, pos;
    int next_data, next_loss;
    int64_t remaining;
    int n_ev;
    int *awake;                       /* 3*pp */
    msg_t *acts, *grads;              /* pp * cap_q */
    int *acts_h, *acts_t, *grads_h, *grads_t, *w_h, *w_t, *live, *n_orders;  /* pp each */
    int32_t *weights;                 /* pp * cap_q * 2 */
    int32_t *orders;                  /* pp * 3 * cap_q * 3 */
    int64_t *forward_end;             /* m; INT64_MAX: not yet */
    int64_t *busy;                    /* pp */
    double *early, *rest;             /* pp */
    int64_t *ev_end; int *ev_rank;    /* heap of (end, rank), pp */
    const struct zb_state *base;      /* a copy's first base_n[r] orders are base's */
    int *base_n;                      /* pp */
} zb_state;

void zb_free(zb_state *g) {
    if (!g) return;
    free(g->awake); free(g->acts); free(g->grads); free(g->acts_h); free(g->acts_t);
    free(g->grads_h); free(g->grads_t); free(g->w_h); free(g->w_t); free(g->live);
    free(g->n_orders); free(g->weights); free(g->orders); free(g->forward_end);
    free(g->busy); free(g->early); free(g->rest); free(g->ev_end); free(g->ev_rank);
    free(g->base_n);
    free(g);
}

/* The big arrays (queues, orders) are not zeroed: only what a state wrote is ever read. */
static zb_state *alloc_state(int pp, int m, int v) {
    zb_state *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    size_t q = (size_t)v * (size_t)m, n = (size_t)pp;
    g->pp = pp; g->m = m; g->v = v; g->cap_q = (int)q;
    g->awake = calloc(3 * n, sizeof(int));
    g->acts = malloc(n * q * sizeof(msg_t)); g->grads = malloc(n * q * sizeof(msg_t));
    g->acts_h = calloc(n, sizeof(int)); g->acts_t = calloc(n, sizeof(int));
    g->grads_h = calloc(n, sizeof(int)); g->grads_t = calloc(n, sizeof(int));
    g->w_h = calloc(n, sizeof(int)); g->w_t = calloc(n, sizeof(int));
    g->live = calloc(n, sizeof(int)); g->n_orders = calloc(n, sizeof(int));
    g->weights = malloc(n * q * 2 * sizeof(int32_t));
    g->orders = malloc(n * q * 9 * sizeof(int32_t));
    g->base_n = calloc(n, sizeof(int));
    g->forward_end = calloc((size_t)m, sizeof(int64_t));
    g->busy = calloc(n, sizeof(int64_t));
    g->early = calloc(n, sizeof(double)); g->rest = calloc(n, sizeof(double));
    g->ev_end = calloc(n, sizeof(int64_t)); g->ev_rank = calloc(n, sizeof(int));
    if (!g->awake || !g->acts || !g->grads || !g->acts_h || !g->acts_t || !g->grads_h
        || !g->grads_t || !g->w_h || !g->w_t || !g->live || !g->n_orders || !g->weights
        || !g->orders || !g->forward_end || !g->busy || !g->early || !g->rest || !g->ev_end
        || !g->ev_rank || !g->base_n) {
        zb_free(g);
        return NULL;
    }
    return g;
}

/* A fresh state at time 0, every rank awake; ``rest0`` is m (F + B + W) at SELECT_COSTS as
 * Python sums it. */
zb_state *zb_new(int pp, int m, int v, double rest0) {
    if (pp < 1 || m < 1 || v < 1) return NULL;
    zb_state *g = alloc_state(pp, m, v);
    if (!g) return NULL;
    for (int r = 0; r < pp; r++) { g->awake[r] = r; g->rest[r] = rest0; }
    g->n_awake = pp;
    for (int i = 0; i < m; i++) g->forward_end[i] = INT64_MAX;
    g->remaining = 3LL * pp * v * m;
    return g;
}

/* A copy of ``s`` that reads s's orders so far from s itself (``s`` must outlive it and
 * only append meanwhile: the Python wrapper holds it). */
zb_state *zb_copy(const zb_state *s) {
    zb_state *g = alloc_state(s->pp, s->m, s->v);
    if (!g) return NULL;
    size_t n = (size_t)s->pp, q = (size_t)s->cap_q;
    g->t = s->t; g->n_awake = s->n_awake; g->pos = s->pos;
    g->next_data = s->next_data; g->next_loss = s->next_loss;
    g->remaining = s->remaining; g->n_ev = s->n_ev;
    memcpy(g->awake, s->awake, 3 * n * sizeof(int));
    for (size_t r = 0; r < n; r++) {  /* only what is live of each queue */
        memcpy(g->acts + r * q + s->acts_h[r], s->acts + r * q + s->acts_h[r],
               (size_t)(s->acts_t[r] - s->acts_h[r]) * sizeof(msg_t));
        memcpy(g->grads + r * q + s->grads_h[r], s->grads + r * q + s->grads_h[r],
               (size_t)(s->grads_t[r] - s->grads_h[r]) * sizeof(msg_t));
        memcpy(g->weights + (r * q + s->w_h[r]) * 2, s->weights + (r * q + s->w_h[r]) * 2,
               (size_t)(s->w_t[r] - s->w_h[r]) * 2 * sizeof(int32_t));
        g->base_n[r] = s->n_orders[r];
    }
    g->base = s;
    memcpy(g->acts_h, s->acts_h, n * sizeof(int)); memcpy(g->acts_t, s->acts_t, n * sizeof(int));
    memcpy(g->grads_h, s->grads_h, n * sizeof(int));
    memcpy(g->grads_t, s->grads_t, n * sizeof(int));
    memcpy(g->w_h, s->w_h, n * sizeof(int)); memcpy(g->w_t, s->w_t, n * sizeof(int));
    memcpy(g->live, s->live, n * sizeof(int)); memcpy(g->n_orders, s->n_orders, n * sizeof(int));
    memcpy(g->forward_end, s->forward_end, (size_t)s->m * sizeof(int64_t));
    memcpy(g->busy, s->busy, n * sizeof(int64_t));
    memcpy(g->early, s->early, n * sizeof(double)); memcpy(g->rest, s->rest, n * sizeof(double));
    memcpy(g->ev_end, s->ev_end, n * sizeof(int64_t)); memcpy(g->ev_rank, s->ev_rank, n * sizeof(int));
    return g;
}

static int ev_less(const zb_state *g, int a, int b) {
    return g->ev_end[a] < g->ev_end[b]
           || (g->ev_end[a] == g->ev_end[b] && g->ev_rank[a] < g->ev_rank[b]);
}

static void ev_swap(zb_state *g, int a, int b) {
    int64_t e = g->ev_end[a]; g->ev_end[a] = g->ev_end[b]; g->ev_end[b] = e;
    int r = g->ev_rank[a]; g->ev_rank[a] = g->ev_rank[b]; g->ev_rank[b] = r;
}

static void ev_push(zb_state *g, int64_t end, int rank) {
    int i = g->n_ev++;
    g->ev_end[i] = end; g->ev_rank[i] = rank;
    while (i > 0 && ev_less(g, i, (i - 1) / 2)) { ev_swap(g, i, (i - 1) / 2); i = (i - 1) / 2; }
}

static int ev_pop(zb_state *g) {
    int rank = g->ev_rank[0], n = --g->n_ev, i = 0;
    g->ev_end[0] = g->ev_end[n]; g->ev_rank[0] = g->ev_rank[n];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, s = i;
        if (l < n && ev_less(g, l, s)) s = l;
        if (r < n && ev_less(g, r, s)) s = r;
        if (s == i) return rank;
        ev_swap(g, i, s); i = s;
    }
}

/* Run the list scheduler from ``g``: ZB_DONE (orders complete), ZB_STALL (the cap stalls
 * it), ZB_PAST (provably ends after ``limit`` at SELECT_COSTS: s_* per chunk op), or, with
 * ``parted`` >= 0 (forking, the smallest cap not yet handed over), ZB_FORK: the state is
 * left at the decision where a rank holding ``*held`` >= parted would take a forward; the
 * caller hands caps parted..held their copies and calls again with parted = held + 1. */
int zb_run(zb_state *g, int cap, int c_fwd, int c_bwd, int c_w, int backward_first,
           double s_fwd, double s_bwd, double s_w, double limit, int parted, int *held_out) {
    const int pp = g->pp, m = g->m, last = pp * g->v - 1, loss_rank = last % pp;
    const size_t q = (size_t)g->cap_q;
    const int forking = parted >= 0;
    if (!forking) parted = cap;
    int64_t t = g->t;
    for (;;) {
        for (int at = g->pos; at < g->n_awake; at++) {
            int r = g->awake[at];
            if (g->busy[r] > t) continue;
            msg_t *gq = g->grads + r * q, *aq = g->acts + r * q;
            int back, fwd;
            if (g->grads_h[r] < g->grads_t[r] && gq[g->grads_h[r]].ready <= t) back = 2;
            else if (r == loss_rank && g->next_loss < m && g->forward_end[g->next_loss] <= t)
                back = 4;
            else back = 0;
            if (g->acts_h[r] < g->acts_t[r] && aq[g->acts_h[r]].ready <= t) fwd = 1;
            else if (r == 0 && g->next_data < m) fwd = 3;
            else fwd = 0;
            if (fwd) {
                int held = g->live[r];
                if (held >= cap) fwd = 0;
                else if (held >= parted && forking && !(back && backward_first)) {
                    g->t = t; g->pos = at;
                    *held_out = held;
                    return ZB_FORK;
                }
            }
            int source = backward_first ? (back ? back : fwd) : (fwd ? fwd : back);
            int32_t stage, mb;
            double ready = 0.0;
            if (source == 1) {
                msg_t *x = &aq[g->acts_h[r]++];
                stage = x->stage; mb = x->mb; ready = x->done;
            } else if (source == 2) {
                msg_t *x = &gq[g->grads_h[r]++];
                stage = x->stage; mb = x->mb; ready = x->done;
            } else if (source == 3) {
                stage = 0; mb = g->next_data++;
            } else if (source == 4) {
                stage = last; mb = g->next_loss++;
            } else if (g->w_h[r] < g->w_t[r]) {
                int32_t *w = g->weights + (r * q + (size_t)g->w_h[r]++) * 2;
                stage = w[0]; mb = w[1];
            } else {
                continue;
            }
            int op;
            int64_t end;
            double done;
            if (source & 1) {
                op = OP_F;
                g->busy[r] = end = t + c_fwd;
                done = (g->early[r] > ready ? g->early[r] : ready) + s_fwd;
                g->rest[r] -= s_fwd;
                g->live[r] += 1;
                if (stage == last) {
                    g->forward_end[mb] = end;
                } else {
                    int to = (r + 1) % pp;
                    if (g->acts_t[to] >= g->cap_q) return ZB_ERROR;
                    msg_t *x = g->acts + (size_t)to * q + g->acts_t[to]++;
                    x->stage = stage + 1; x->mb = mb; x->ready = end; x->done = done;
                }
            } else if (source) {
                op = OP_BI;
                g->busy[r] = end = t + c_bwd;
                done = (g->early[r] > ready ? g->early[r] : ready) + s_bwd;
                g->rest[r] -= s_bwd;
                if (g->w_t[r] >= g->cap_q) return ZB_ERROR;
                int32_t *w = g->weights + (r * q + (size_t)g->w_t[r]++) * 2;
                w[0] = stage; w[1] = mb;
                if (stage > 0) {
                    int to = (r - 1 + pp) % pp;
                    if (g->grads_t[to] >= g->cap_q) return ZB_ERROR;
                    msg_t *x = g->grads + (size_t)to * q + g->grads_t[to]++;
                    x->stage = stage - 1; x->mb = mb; x->ready = end; x->done = done;
                }
            } else {
                op = OP_W;
                g->busy[r] = end = t + c_w;
                done = g->early[r] + s_w;
                g->rest[r] -= s_w;
                g->live[r] -= 1;
            }
            g->early[r] = done;
            if (done + g->rest[r] > limit) return ZB_PAST;
            if (g->n_orders[r] >= 3 * g->cap_q) return ZB_ERROR;
            int32_t *o = g->orders + r * q * 9 + (size_t)g->n_orders[r]++ * 3;
            o[0] = op; o[1] = stage; o[2] = mb;
            g->remaining -= 1;
            ev_push(g, end, r);
        }
        if (!g->remaining) { g->t = t; g->pos = g->n_awake; return ZB_DONE; }
        if (!g->n_ev) return ZB_STALL;
        t = g->ev_end[0];
        g->n_awake = 0; g->pos = 0;
        while (g->n_ev && g->ev_end[0] == t) {
            int r = ev_pop(g);
            g->awake[g->n_awake++] = r;
            g->awake[g->n_awake++] = (r + 1) % pp;
            g->awake[g->n_awake++] = (r - 1 + pp) % pp;
        }
    }
}

/* The finished orders: rank after rank, 3*v*m (op, stage, mb) triples each. */
int zb_orders(const zb_state *g, int32_t *out) {
    size_t q = (size_t)g->cap_q;
    for (int r = 0; r < g->pp; r++) {
        if ((size_t)g->n_orders[r] != 3 * q) return ZB_ERROR;
        int32_t *to = out + (size_t)r * q * 9;
        int hi = g->n_orders[r];
        for (const zb_state *at = g; at && hi > 0; at = at->base) {  /* [base_n, hi) in at */
            int lo = at->base_n[r];
            memcpy(to + (size_t)lo * 3, at->orders + (size_t)r * q * 9 + (size_t)lo * 3,
                   (size_t)(hi - lo) * 3 * sizeof(int32_t));
            hi = lo;
        }
    }
    return ZB_DONE;
}

/* ------------------------------------------------------------- table rows (table._rank_rows) */

#define PENDING_MAX 8

/* One rank's table being built: slots per (chunk, micro-batch), free slots per chunk (a
 * min-heap, as heapq), sends not yet waited per (chunk, slot), posted receives. */
typedef struct {
    int pp, m, slots_max, rows, cap_rows;
    int32_t *out, *counts;
    int *held, *post_act, *post_grad, *heap, *heap_n, *pend, *pend_n;
    char *fwd_done;
} rank_build;

static int emit(rank_build *b, int op, int stage, int mb, int slot, int peer) {
    if (b->rows >= b->cap_rows) return ZB_ERROR;
    int32_t *row = b->out + (size_t)b->rows++ * 5;
    row[0] = op; row[1] = stage; row[2] = mb; row[3] = slot; row[4] = peer;
    return ZB_DONE;
}

/* table._rank_rows' slot_of: the held slot, else the lowest free one (its unwaited sends
 * waited first), else a new one; -1 on overflow. */
static int slot_of(rank_build *b, int stage, int mb) {
    int chunk = stage / b->pp, key = chunk * b->m + mb, slot = b->held[key];
    if (slot >= 0) return slot;
    if (b->heap_n[chunk]) {
        int *h = b->heap + (size_t)chunk * b->slots_max, n = --b->heap_n[chunk], i = 0;
        slot = h[0];
        h[0] = h[n];
        for (;;) {
            int l = 2 * i + 1, r = l + 1, s = i;
            if (l < n && h[l] < h[s]) s = l;
            if (r < n && h[r] < h[s]) s = r;
            if (s == i) break;
            int x = h[i]; h[i] = h[s]; h[s] = x; i = s;
        }
        int pk = chunk * b->slots_max + slot;
        for (int p = 0; p < b->pend_n[pk]; p++)
            if (emit(b, OP_WAIT, -1, -1, -1, b->pend[(size_t)pk * PENDING_MAX + p])) return -1;
        b->pend_n[pk] = 0;
    } else {
        if (b->counts[stage] >= b->slots_max) return -1;
        slot = b->counts[stage]++;
    }
    b->held[key] = slot;
    return slot;
}

static int need(int op, int stage, int last) {
    if (op == OP_F) return stage > 0 ? OP_RECV_ACT : 0;
    if (op == OP_B || op == OP_BI) return stage < last ? OP_RECV_GRAD : 0;
    return 0;
}

static int rank_rows(rank_build *b, int last, const int32_t *order, int n) {
    const int pp = b->pp, m = b->m;
    for (int k = 0; k < n; k++) {
        for (int j = k; j < n && j <= k + 1; j++) {  /* lookahead 1 */
            int op = order[3 * j], stage = order[3 * j + 1], mb = order[3 * j + 2];
            int key = (stage / pp) * m + mb, recv = need(op, stage, last);
            if (!recv) continue;
            int *posted = recv == OP_RECV_ACT ? b->post_act : b->post_grad;
            if (posted[key] >= 0 || (recv == OP_RECV_GRAD && !b->fwd_done[key])) continue;
            int slot = slot_of(b, stage, mb);
            if (slot < 0) return ZB_ERROR;
            posted[key] = b->rows;
            if (emit(b, recv, stage, mb, slot, (recv == OP_RECV_ACT ? stage - 1 : stage + 1) % pp))
                return ZB_ERROR;
        }
        int op = order[3 * k], stage = order[3 * k + 1], mb = order[3 * k + 2];
        int chunk = stage / pp, key = chunk * m + mb, recv = need(op, stage, last);
        if (recv) {
            int row = (recv == OP_RECV_ACT ? b->post_act : b->post_grad)[key];
            if (row < 0 || emit(b, OP_WAIT, -1, -1, -1, row)) return ZB_ERROR;
        }
        int slot = slot_of(b, stage, mb);
        if (slot < 0 || emit(b, op, stage, mb, slot, -1)) return ZB_ERROR;
        int send = 0, peer = 0;
        if (op == OP_F) {
            if (stage < last) { send = OP_SEND_ACT; peer = (stage + 1) % pp; }
            b->fwd_done[key] = 1;
        } else if ((op == OP_B || op == OP_BI) && stage > 0) {
            send = OP_SEND_GRAD; peer = (stage - 1) % pp;
        }
        if (send) {
            int pk = chunk * b->slots_max + slot;
            if (b->pend_n[pk] >= PENDING_MAX) return ZB_ERROR;
            b->pend[(size_t)pk * PENDING_MAX + b->pend_n[pk]++] = b->rows;
            if (emit(b, send, stage, mb, slot, peer)) return ZB_ERROR;
        }
        if (op == OP_B || op == OP_W) {  /* free the slot: heappush */
            int *h = b->heap + (size_t)chunk * b->slots_max, i = b->heap_n[chunk]++;
            if (i >= b->slots_max) return ZB_ERROR;
            h[i] = slot;
            b->held[key] = -1;
            while (i > 0 && h[i] < h[(i - 1) / 2]) {
                int x = h[i]; h[i] = h[(i - 1) / 2]; h[(i - 1) / 2] = x; i = (i - 1) / 2;
            }
        }
    }
    /* sorted(pending): this rank's stages ascend with their chunk, then by slot */
    for (int chunk = 0; chunk * pp < last + 1; chunk++)
        for (int slot = 0; slot < b->slots_max; slot++) {
            int pk = chunk * b->slots_max + slot;
            for (int p = 0; p < b->pend_n[pk]; p++)
                if (emit(b, OP_WAIT, -1, -1, -1, b->pend[(size_t)pk * PENDING_MAX + p]))
                    return ZB_ERROR;
        }
    return ZB_DONE;
}

/* One rank's rows (lookahead 1) from its order of n triples into ``out`` (capacity
 * ``cap_rows`` rows, ``*n_rows`` used); ``counts`` (per global stage) gains its stages'
 * slots. Every op must be a compute op of a stage of rank ``rank`` and a micro-batch below
 * m (else ZB_ERROR). */
int zb_rank_rows(int pp, int v, int m, int rank, const int32_t *order, int n, int32_t *out,
                 int cap_rows, int *n_rows, int32_t *counts) {
    const int n_stages = pp * v, slots_max = m + 1;
    const size_t keys = (size_t)v * (size_t)m, slot_keys = (size_t)v * (size_t)slots_max;
    for (int k = 0; k < n; k++) {
        int op = order[3 * k], stage = order[3 * k + 1], mb = order[3 * k + 2];
        if (op < OP_F || op > OP_W || stage < 0 || stage >= n_stages || stage % pp != rank
            || mb < 0 || mb >= m)
            return ZB_ERROR;
    }
    rank_build b = {pp, m, slots_max, 0, cap_rows, out, counts,
                    malloc(keys * sizeof(int)), malloc(keys * sizeof(int)),
                    malloc(keys * sizeof(int)), malloc(slot_keys * sizeof(int)),
                    calloc((size_t)v, sizeof(int)),
                    malloc(slot_keys * PENDING_MAX * sizeof(int)),
                    calloc(slot_keys, sizeof(int)), calloc(keys, 1)};
    int status = ZB_ERROR;
    if (b.held && b.post_act && b.post_grad && b.heap && b.heap_n && b.pend && b.pend_n
        && b.fwd_done) {
        for (size_t i = 0; i < keys; i++) b.held[i] = b.post_act[i] = b.post_grad[i] = -1;
        status = rank_rows(&b, n_stages - 1, order, n);
        *n_rows = b.rows;
    }
    free(b.held); free(b.post_act); free(b.post_grad); free(b.heap); free(b.heap_n);
    free(b.pend); free(b.pend_n); free(b.fwd_done);
    return status;
}

/* ----------------------------------------------------------------- makespan (timing.makespan) */

/* The simulator's makespan of pp ranks' rows at ``cost`` (per op code 0..15, already / v;
 * NaN: no cost given) into ``*out``: ZB_DONE, ZB_PAST (some rank ends after ``limit``), or
 * ZB_ERROR (deadlock, unpaired channel, a bad row: the Python reference says which). */
int zb_makespan(int pp, const int32_t *const *rows, const int *n_rows, const double *cost,
                double limit, double *out) {
    int status = ZB_ERROR;
    size_t total = 0, n_ch = (size_t)pp * pp * 2;
    for (int r = 0; r < pp; r++) total += (size_t)n_rows[r];
    size_t *base = malloc(((size_t)pp + 1) * sizeof(size_t));
    int *pr = malloc((total + 1) * sizeof(int)), *pi = malloc((total + 1) * sizeof(int));
    double *posted = malloc((total + 1) * sizeof(double)), *left = calloc((size_t)pp, sizeof(double));
    double *clock = calloc((size_t)pp, sizeof(double));
    int *pc = calloc((size_t)pp, sizeof(int));
    int *n_send = calloc(n_ch, sizeof(int)), *n_recv = calloc(n_ch, sizeof(int));
    size_t *off = calloc(n_ch + 1, sizeof(size_t));
    int *send_at = malloc((total + 1) * sizeof(int)), *recv_at = malloc((total + 1) * sizeof(int));
    int *fill_s = calloc(n_ch, sizeof(int)), *fill_r = calloc(n_ch, sizeof(int));
    if (!base || !pr || !pi || !posted || !left || !clock || !pc || !n_send || !n_recv || !off
        || !send_at || !recv_at || !fill_s || !fill_r)
        goto done;
    base[0] = 0;
    for (int r = 0; r < pp; r++) base[r + 1] = base[r] + (size_t)n_rows[r];
    for (size_t i = 0; i < total; i++) pr[i] = -1;
    /* compute totals; count each channel's sends and receives */
    for (int r = 0; r < pp; r++) {
        double sum = 0.0;
        for (int i = 0; i < n_rows[r]; i++) {
            const int32_t *row = rows[r] + (size_t)i * 5;
            int op = row[0], peer = row[4];
            if (op >= OP_F && op <= OP_W) {
                if (isnan(cost[op])) goto done;
                sum += cost[op];
            } else if (op >= OP_SEND_ACT && op <= OP_RECV_GRAD) {
                if (peer < 0 || peer >= pp) goto done;
                int is_send = op == OP_SEND_ACT || op == OP_SEND_GRAD;
                int kind = op == OP_SEND_GRAD || op == OP_RECV_GRAD;
                int src = is_send ? r : peer, dst = is_send ? peer : r;
                size_t ch = ((size_t)src * pp + dst) * 2 + kind;
                if (is_send) n_send[ch]++; else n_recv[ch]++;
            } else if (op != OP_WAIT) {
                goto done;
            }
        }
        left[r] = sum;
    }
    for (size_t ch = 0; ch < n_ch; ch++) {
        if (n_send[ch] != n_recv[ch]) goto done;
        off[ch + 1] = off[ch] + (size_t)n_send[ch];
    }
    /* the k-th send on a channel with its k-th receive (both in row order) */
    for (int r = 0; r < pp; r++)
        for (int i = 0; i < n_rows[r]; i++) {
            const int32_t *row = rows[r] + (size_t)i * 5;
            int op = row[0], peer = row[4];
            if (op < OP_SEND_ACT || op > OP_RECV_GRAD) continue;
            int is_send = op == OP_SEND_ACT || op == OP_SEND_GRAD;
            int kind = op == OP_SEND_GRAD || op == OP_RECV_GRAD;
            int src = is_send ? r : peer, dst = is_send ? peer : r;
            size_t ch = ((size_t)src * pp + dst) * 2 + kind;
            size_t at = off[ch] + (size_t)(is_send ? fill_s[ch]++ : fill_r[ch]++);
            if (is_send) send_at[at] = (int)(base[r] + (size_t)i);
            else recv_at[at] = (int)(base[r] + (size_t)i);
        }
    for (size_t k = 0; k < off[n_ch]; k++) {
        size_t s = (size_t)send_at[k], rv = (size_t)recv_at[k];
        int sr = 0, rr = 0;
        while (base[sr + 1] <= s) sr++;
        while (base[rr + 1] <= rv) rr++;
        pr[s] = rr; pi[s] = (int)(rv - base[rr]);
        pr[rv] = sr; pi[rv] = (int)(s - base[sr]);
    }
    for (;;) {
        int progressed = 0, finished = 1;
        for (int r = 0; r < pp; r++) {
            int i = pc[r], start = i, n = n_rows[r];
            double t = clock[r], rest = left[r];
            while (i < n) {
                const int32_t *row = rows[r] + (size_t)i * 5;
                int op = row[0];
                if (op == OP_WAIT) {
                    int target = row[4];
                    if (target < 0 || target >= n) goto done;
                    size_t at = base[r] + (size_t)target;
                    int peer = pr[at], index = pi[at];
                    if (peer < 0) goto done;
                    if (pc[peer] <= index) break;
                    double when = posted[base[peer] + (size_t)index];
                    t = t >= when ? t : when;  /* Python's max(t, when) */
                } else if (op >= OP_F && op <= OP_W) {
                    double c = cost[op];
                    t += c;
                    rest -= c;
                    if (t + rest > limit) { status = ZB_PAST; goto done; }
                } else {
                    posted[base[r] + (size_t)i] = t;
                }
                i++;
            }
            if (i > start) { progressed = 1; pc[r] = i; clock[r] = t; left[r] = rest; }
        }
        for (int r = 0; r < pp; r++) if (pc[r] < n_rows[r]) finished = 0;
        if (finished) {
            double best = clock[0];
            for (int r = 1; r < pp; r++) if (clock[r] > best) best = clock[r];
            *out = best;
            status = ZB_DONE;
            goto done;
        }
        if (!progressed) goto done;
    }
done:
    free(base); free(pr); free(pi); free(posted); free(left); free(clock); free(pc);
    free(n_send); free(n_recv); free(off); free(send_at); free(recv_at); free(fill_s);
    free(fill_r);
    return status;
}
