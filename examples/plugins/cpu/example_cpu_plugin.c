/* example-cpu: a small but honest attention backend as an attnbench plugin
 * (docs/plugins.md). Plain C99, one thread, float32 arithmetic throughout: per
 * query row a two-pass softmax (max, then sum of exponentials), O = P V / l,
 * LSE = m + log l; the backward recomputes P from the saved LSE and accumulates
 * dQ, dK, dV in float32 (GQA: dK/dV summed over the query heads of a group).
 *
 * It supports every mask kind (through attnb_mask_allowed, the header's copy of
 * docs/semantics.md section 3), the softcap and ALiBi score mods, GQA/MQA, Sq !=
 * Sk, Dqk != Dv, layouts BSHD, BHSD and THD and dtypes fp32, fp16 and bf16. It
 * declines the learnable-bias score mods (rel_bias, offset_bias) with a reason.
 * O(B Hq Sq Sk D) work: meant for small problems, as a template, not for speed.
 *
 * It declares one option (ABI version 2, docs/backend-options.md): `order`, the
 * direction of the forward's key loop that sums exponentials and P V
 * (ascending, the default, or descending): float32 sums in another order round
 * differently, and both pass the rule. `--backends 'example-cpu[order=descending]'`.
 */
#include <attnbench/plugin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct instance {
  attnb_problem p; /* a copy; its arrays stay valid until teardown() */
  float* o;   /* [B, Hq, Sq, Dv] float32 O of the last forward (for D = dO . O) */
  float* lse; /* [B, Hq, Sq] */
  float* dq;  /* [B, Hq, Sq, Dqk] float32 sums */
  float* dk;  /* [B, Hkv, Sk, Dqk] */
  float* dv;  /* [B, Hkv, Sk, Dv] */
  int descending; /* option order=descending: the forward sums keys from the last */
} instance;

static int supports(const attnb_problem* p, attnb_message* why) {
  if (p->score_mod == ATTNB_MOD_REL_BIAS || p->score_mod == ATTNB_MOD_OFFSET_BIAS) {
    attnb_set_message(why, "example-cpu: learnable-bias score mods (rel_bias, offset_bias) are not implemented");
    return 0;
  }
  if (p->batch * p->heads_q * p->seq_q * p->seq_k > (int64_t)1 << 30) {
    attnb_set_message(why, "example-cpu: more than 2^30 scores; this single-threaded example would take too long");
    return 0;
  }
  return 1;
}

/* The scratch the harness allocates for us: one row of scores. */
static size_t workspace_bytes(const attnb_problem* p) { return (size_t)p->seq_k * sizeof(float); }

static int prepare_with_options(const attnb_problem* p, const attnb_tensors* t, const attnb_option_value* options,
                                uint32_t n_options, void** out, attnb_message* err) {
  instance* in = (instance*)calloc(1, sizeof *in);
  (void)t;
  if (in) {
    in->o = (float*)calloc((size_t)(p->batch * p->heads_q * p->seq_q * p->head_dim_v), sizeof(float));
    in->lse = (float*)calloc((size_t)(p->batch * p->heads_q * p->seq_q), sizeof(float));
    in->dq = (float*)calloc((size_t)(p->batch * p->heads_q * p->seq_q * p->head_dim), sizeof(float));
    in->dk = (float*)calloc((size_t)(p->batch * p->heads_kv * p->seq_k * p->head_dim), sizeof(float));
    in->dv = (float*)calloc((size_t)(p->batch * p->heads_kv * p->seq_k * p->head_dim_v), sizeof(float));
  }
  if (!in || !in->o || !in->lse || !in->dq || !in->dk || !in->dv) {
    if (in) free(in->o), free(in->lse), free(in->dq), free(in->dk), free(in->dv);
    free(in);
    attnb_set_message(err, "example-cpu: out of host memory");
    return 1;
  }
  in->p = *p;
  for (uint32_t k = 0; k < n_options; ++k) /* every declared option, canonical values */
    if (strcmp(options[k].name, "order") == 0) in->descending = strcmp(options[k].value, "descending") == 0;
  *out = in;
  return 0;
}

static void teardown(void* handle) {
  instance* in = (instance*)handle;
  free(in->o), free(in->lse), free(in->dq), free(in->dk), free(in->dv);
  free(in);
}

/* The modified score of (h, i, j) from the scaled dot product x. */
static float score_mod(const attnb_problem* p, float x, int64_t h, int64_t i, int64_t j) {
  if (p->score_mod == ATTNB_MOD_SOFTCAP) return (float)p->softcap * tanhf(x / (float)p->softcap);
  if (p->score_mod == ATTNB_MOD_ALIBI) {
    const float slope = exp2f(-8.0f * (float)(h + 1) / (float)p->heads_q);
    return x - slope * (float)(i > j ? i - j : j - i);
  }
  return x;
}

/* d score_mod / dx. */
static float score_mod_grad(const attnb_problem* p, float x) {
  if (p->score_mod == ATTNB_MOD_SOFTCAP) {
    const float th = tanhf(x / (float)p->softcap);
    return 1.0f - th * th;
  }
  return 1.0f;
}

/* Scaled dot product q_(b,h,i) . k_(b,kh,j). */
static float qk(const attnb_problem* p, const attnb_tensors* t, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t kh = h / (p->heads_q / p->heads_kv);
  const int64_t qo = attnb_offset(p, &t->q, 1, b, h, i, 0), ko = attnb_offset(p, &t->k, 0, b, kh, j, 0);
  const int64_t qs = t->q.strides[t->q.ndim - 1], ks = t->k.strides[t->k.ndim - 1];
  float acc = 0.0f;
  for (int64_t d = 0; d < p->head_dim; ++d)
    acc += attnb_load(t->q.data, t->q.dtype, qo + d * qs) * attnb_load(t->k.data, t->k.dtype, ko + d * ks);
  return acc * (float)p->scale;
}

/* Whether (b, i, j) is computed: allowed by the mask and stored (THD). */
static int live(const attnb_problem* p, const attnb_tensors* t, int64_t b, int64_t i, int64_t j) {
  return attnb_offset(p, &t->k, 0, b, 0, j, 0) >= 0 && attnb_mask_allowed(p, b, i, j);
}

static int forward(void* handle, const attnb_tensors* t, void* stream, attnb_message* err) {
  instance* in = (instance*)handle;
  const attnb_problem* p = &in->p;
  float* s = (float*)t->workspace.data;
  const int64_t dv_stride = t->v.strides[t->v.ndim - 1], do_stride = t->o.strides[t->o.ndim - 1];
  (void)stream, (void)err;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->seq_q; ++i) {
        const int64_t kh = h / (p->heads_q / p->heads_kv), row = (b * p->heads_q + h) * p->seq_q + i;
        const int64_t oo = attnb_offset(p, &t->o, 1, b, h, i, 0);
        float m = -INFINITY, l = 0.0f;
        float* o = in->o + row * p->head_dim_v;
        for (int64_t d = 0; d < p->head_dim_v; ++d) o[d] = 0.0f;
        if (oo >= 0)
          for (int64_t j = 0; j < p->seq_k; ++j) {
            s[j] = live(p, t, b, i, j) ? score_mod(p, qk(p, t, b, h, i, j), h, i, j) : -INFINITY;
            if (s[j] > m) m = s[j];
          }
        if (m > -INFINITY) {
          for (int64_t n = 0; n < p->seq_k; ++n) {
            const int64_t j = in->descending ? p->seq_k - 1 - n : n;
            if (s[j] == -INFINITY) continue;
            const float e = expf(s[j] - m);
            const int64_t vo = attnb_offset(p, &t->v, 0, b, kh, j, 0);
            l += e;
            for (int64_t d = 0; d < p->head_dim_v; ++d) o[d] += e * attnb_load(t->v.data, t->v.dtype, vo + d * dv_stride);
          }
          for (int64_t d = 0; d < p->head_dim_v; ++d) o[d] /= l;
        }
        in->lse[row] = m > -INFINITY ? m + logf(l) : -INFINITY; /* fully masked: O = 0, LSE = -inf */
        ((float*)t->lse.data)[row] = in->lse[row];
        if (oo >= 0)
          for (int64_t d = 0; d < p->head_dim_v; ++d) attnb_store(t->o.data, t->o.dtype, oo + d * do_stride, o[d]);
      }
  return 0;
}

/* Write a float32 [B, H, S, D] logical array into an output view. */
static void write_out(const attnb_problem* p, const attnb_tensor* t, int is_q, const float* src, int64_t H,
                      int64_t S, int64_t D) {
  const int64_t ds = t->strides[t->ndim - 1];
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t x = 0; x < S; ++x) {
        const int64_t off = attnb_offset(p, t, is_q, b, h, x, 0);
        if (off < 0) continue;
        for (int64_t d = 0; d < D; ++d) attnb_store(t->data, t->dtype, off + d * ds, src[((b * H + h) * S + x) * D + d]);
      }
}

static int backward(void* handle, const attnb_tensors* t, void* stream, attnb_message* err) {
  instance* in = (instance*)handle;
  const attnb_problem* p = &in->p;
  const int64_t Dq = p->head_dim, Dv = p->head_dim_v;
  const int64_t qs = t->q.strides[t->q.ndim - 1], ks = t->k.strides[t->k.ndim - 1];
  const int64_t vs = t->v.strides[t->v.ndim - 1], gs = t->d_o.strides[t->d_o.ndim - 1];
  (void)stream, (void)err;
  memset(in->dq, 0, sizeof(float) * (size_t)(p->batch * p->heads_q * p->seq_q * Dq));
  memset(in->dk, 0, sizeof(float) * (size_t)(p->batch * p->heads_kv * p->seq_k * Dq));
  memset(in->dv, 0, sizeof(float) * (size_t)(p->batch * p->heads_kv * p->seq_k * Dv));
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->seq_q; ++i) {
        const int64_t kh = h / (p->heads_q / p->heads_kv), row = (b * p->heads_q + h) * p->seq_q + i;
        const int64_t qo = attnb_offset(p, &t->q, 1, b, h, i, 0), go = attnb_offset(p, &t->d_o, 1, b, h, i, 0);
        float dsum = 0.0f; /* D_i = dO_i . O_i */
        if (qo < 0 || in->lse[row] == -INFINITY) continue; /* fully masked row: dQ = 0 */
        for (int64_t d = 0; d < Dv; ++d) dsum += attnb_load(t->d_o.data, t->d_o.dtype, go + d * gs) * in->o[row * Dv + d];
        for (int64_t j = 0; j < p->seq_k; ++j) {
          if (!live(p, t, b, i, j)) continue;
          const int64_t ko = attnb_offset(p, &t->k, 0, b, kh, j, 0), vo = attnb_offset(p, &t->v, 0, b, kh, j, 0);
          const int64_t kv_row = (b * p->heads_kv + kh) * p->seq_k + j;
          const float x = qk(p, t, b, h, i, j), pij = expf(score_mod(p, x, h, i, j) - in->lse[row]);
          float dp = 0.0f, dx;
          for (int64_t d = 0; d < Dv; ++d) {
            const float g = attnb_load(t->d_o.data, t->d_o.dtype, go + d * gs);
            dp += g * attnb_load(t->v.data, t->v.dtype, vo + d * vs);
            in->dv[kv_row * Dv + d] += pij * g;
          }
          dx = pij * (dp - dsum) * score_mod_grad(p, x) * (float)p->scale;
          for (int64_t d = 0; d < Dq; ++d) {
            in->dq[row * Dq + d] += dx * attnb_load(t->k.data, t->k.dtype, ko + d * ks);
            in->dk[kv_row * Dq + d] += dx * attnb_load(t->q.data, t->q.dtype, qo + d * qs);
          }
        }
      }
  write_out(p, &t->dq, 1, in->dq, p->heads_q, p->seq_q, Dq);
  write_out(p, &t->dk, 0, in->dk, p->heads_kv, p->seq_k, Dq);
  write_out(p, &t->dv, 0, in->dv, p->heads_kv, p->seq_k, Dv);
  return 0;
}

static const attnb_option kOptions[] = {
    {"order", ATTNB_OPTION_ENUM, "ascending", "ascending|descending", 0, 0,
     "direction of the forward's key loop (float32 sums in another order)"},
};

static const attnb_plugin kPlugin = {
    ATTNB_PLUGIN_ABI_VERSION,
    sizeof(attnb_plugin),
    "example-cpu",
    "example plugin: single-threaded float32 attention in C (examples/plugins/cpu)",
    ATTNB_DEVICE_CPU,
    0, /* deterministic */
    NULL, /* available: always */
    supports,
    workspace_bytes,
    NULL, /* prepare: prepare_with_options takes its place */
    forward,
    backward,
    teardown,
    kOptions,
    1,
    prepare_with_options,
};

ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) { return &kPlugin; }
