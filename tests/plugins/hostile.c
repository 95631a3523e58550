/* Test plugin "test-hostile" (tests/test_cli_foreign.cpp): a correct float32
 * forward-only CPU attention (the tiny example's algorithm, no masks: it declines
 * masked problems) that misbehaves on purpose where HOSTILE_MODE says so:
 *   segv_available, segv_supports, segv_forward   raise SIGSEGV there
 *   unavailable                                   available() says no, with a reason
 *   hang_supports                                 sleep forever in supports()
 *   exit_supports, exit_forward                   exit(0) there
 *   rename                                        rewrite its own name in supports()
 *   fork_forward                                  fork a child that sleeps 3 s, then go on
 *   flaky                                         claim determinism, yet every second forward()
 *                                                 differs in the last bit of O[0]
 * HOSTILE_AFTER=N lets the first N forward() calls of a process behave.
 * HOSTILE_LOAD_LOG=FILE: every process that loads the plugin (calls its entry
 * point) appends one line "loaded" to FILE. */
#include <attnbench/plugin.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_mode(const char* m) {
  const char* v = getenv("HOSTILE_MODE");
  return v && strcmp(v, m) == 0;
}

static char g_name[32] = "test-hostile";

static int available(attnb_message* why) {
  if (is_mode("segv_available")) raise(SIGSEGV);
  if (is_mode("unavailable")) {
    attnb_set_message(why, "test-hostile: HOSTILE_MODE=unavailable");
    return 0;
  }
  return 1;
}
static int supports(const attnb_problem* p, attnb_message* why) {
  if (is_mode("segv_supports")) raise(SIGSEGV);
  if (is_mode("exit_supports")) exit(0);
  if (is_mode("hang_supports"))
    for (;;) sleep(1);
  if (is_mode("rename")) strcpy(g_name, "renamed");
  if (p->mask_kinds != 0 || p->score_mod != ATTNB_MOD_NONE || p->layout == ATTNB_LAYOUT_THD) {
    attnb_set_message(why, "test-hostile: masks, score mods and THD declined");
    return 0;
  }
  return 1;
}
static int prepare(const attnb_problem* p, const attnb_tensors* t, void** inst, attnb_message* err) {
  (void)t, (void)err;
  *inst = (void*)p;
  return 0;
}
static int forward(void* inst, const attnb_tensors* t, void* stream, attnb_message* err) {
  static int calls = 0;
  const char* after = getenv("HOSTILE_AFTER");
  const attnb_problem* p = inst;
  (void)stream, (void)err;
  ++calls;
  if (!after || calls > atoi(after)) {
    if (is_mode("segv_forward")) raise(SIGSEGV);
    if (is_mode("exit_forward")) exit(0);
    if (is_mode("fork_forward") && fork() == 0) {
      sleep(3);
      _exit(0);
    }
  }
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h)
      for (int64_t i = 0; i < p->seq_q; ++i) {
        int64_t kh = h / (p->heads_q / p->heads_kv), qo = attnb_offset(p, &t->q, 1, b, h, i, 0);
        float m = -INFINITY, l = 0, o[256] = {0};
        for (int64_t j = 0; j < p->seq_k; ++j) {
          int64_t ko = attnb_offset(p, &t->k, 0, b, kh, j, 0), vo = attnb_offset(p, &t->v, 0, b, kh, j, 0);
          float s = 0, mn, c, e;
          for (int64_t d = 0; d < p->head_dim; ++d)
            s += attnb_load(t->q.data, t->q.dtype, qo + d * t->q.strides[t->q.ndim - 1]) *
                 attnb_load(t->k.data, t->k.dtype, ko + d * t->k.strides[t->k.ndim - 1]);
          s *= (float)p->scale, mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn), m = mn, l = l * c + e;
          for (int64_t d = 0; d < p->head_dim_v && d < 256; ++d)
            o[d] = o[d] * c + e * attnb_load(t->v.data, t->v.dtype, vo + d * t->v.strides[t->v.ndim - 1]);
        }
        ((float*)t->lse.data)[(b * p->heads_q + h) * p->seq_q + i] = m + logf(l);
        for (int64_t d = 0, oo = attnb_offset(p, &t->o, 1, b, h, i, 0); d < p->head_dim_v; ++d)
          attnb_store(t->o.data, t->o.dtype, oo + d * t->o.strides[t->o.ndim - 1], o[d] / l);
      }
  if (is_mode("flaky") && (calls & 1)) {  /* still within the rule; not bitwise equal */
    float o0 = attnb_load(t->o.data, t->o.dtype, 0);
    attnb_store(t->o.data, t->o.dtype, 0, nextafterf(o0, INFINITY));
  }
  return 0;
}
static void teardown(void* inst) { (void)inst; }

static attnb_plugin plugin = {ATTNB_PLUGIN_ABI_VERSION, sizeof(attnb_plugin), g_name, "misbehaving test plugin",
                              ATTNB_DEVICE_CPU, 0, available, supports, NULL, prepare, forward, NULL, teardown};
ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) {
  const char* log = getenv("HOSTILE_LOAD_LOG");
  FILE* f = log ? fopen(log, "a") : NULL;
  if (f) {
    fputs("loaded\n", f);
    fclose(f);
  }
  return &plugin;
}
