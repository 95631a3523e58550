/* tiny: the forward-only example plugin of docs/plugins.md (kept identical to it by tests/test_plugin.cpp). */
#include <attnbench/plugin.h>
#include <math.h>

static int supports(const attnb_problem* p, attnb_message* why) {
  if (p->score_mod == ATTNB_MOD_NONE && p->head_dim_v <= 256) return 1;
  attnb_set_message(why, "tiny: score mods and Dv > 256 not implemented");
  return 0;
}
static int prepare(const attnb_problem* p, const attnb_tensors* t, void** inst, attnb_message* err) {
  (void)t, (void)err;
  *inst = (void*)p; /* the problem stays valid until teardown */
  return 0;
}
static int forward(void* inst, const attnb_tensors* t, void* stream, attnb_message* err) {
  const attnb_problem* p = inst;
  (void)stream, (void)err;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->seq_q; ++i) {
        int64_t kh = h / (p->heads_q / p->heads_kv), qo = attnb_offset(p, &t->q, 1, b, h, i, 0);
        float m = -INFINITY, l = 0, o[256] = {0};
        for (int64_t j = 0; qo >= 0 && j < p->seq_k; ++j) {
          int64_t ko = attnb_offset(p, &t->k, 0, b, kh, j, 0), vo = attnb_offset(p, &t->v, 0, b, kh, j, 0);
          if (ko < 0 || !attnb_mask_allowed(p, b, i, j)) continue;
          float s = 0, mn, c, e;
          for (int64_t d = 0; d < p->head_dim; ++d)
            s += attnb_load(t->q.data, t->q.dtype, qo + d * t->q.strides[t->q.ndim - 1]) *
                 attnb_load(t->k.data, t->k.dtype, ko + d * t->k.strides[t->k.ndim - 1]);
          s *= (float)p->scale, mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn), m = mn, l = l * c + e;
          for (int64_t d = 0; d < p->head_dim_v; ++d)
            o[d] = o[d] * c + e * attnb_load(t->v.data, t->v.dtype, vo + d * t->v.strides[t->v.ndim - 1]);
        }
        ((float*)t->lse.data)[(b * p->heads_q + h) * p->seq_q + i] = l > 0 ? m + logf(l) : -INFINITY;
        for (int64_t d = 0, oo = attnb_offset(p, &t->o, 1, b, h, i, 0); oo >= 0 && d < p->head_dim_v; ++d)
          attnb_store(t->o.data, t->o.dtype, oo + d * t->o.strides[t->o.ndim - 1], l > 0 ? o[d] / l : 0.0f);
      }
  return 0;
}
static void teardown(void* inst) { (void)inst; }

static const attnb_plugin plugin = {ATTNB_PLUGIN_ABI_VERSION, sizeof(attnb_plugin), "tiny", "forward-only example",
                                    ATTNB_DEVICE_CPU, 0, NULL, supports, NULL, prepare, forward, NULL, teardown};
ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) { return &plugin; }
