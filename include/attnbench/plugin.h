/* attnbench plugin ABI, version 2 (docs/plugins.md). Version 1 plugins (no
 * options) keep loading.
 *
 * A shared library becomes an attnbench backend by exporting one C function,
 *
 *     const attnb_plugin* attnbench_plugin_entry(void);
 *
 * returning a static table of the plugin's name, device and functions. attnbench
 * loads it with `--plugin PATH.so` (repeatable) or ATTNBENCH_PLUGIN_PATH
 * (colon-separated files or folders), checks abi_version against
 * ATTNB_PLUGIN_ABI_VERSION, and from then on runs it like an in-tree backend: the
 * same checking against the float64 reference, the same timing and report rows.
 *
 * Semantics are those of docs/semantics.md (NORMATIVE): logical tensors
 * Q [B,Hq,Sq,Dqk], K [B,Hkv,Sk,Dqk], V [B,Hkv,Sk,Dv], O/dO [B,Hq,Sq,Dv],
 * LSE float32 [B,Hq,Sq] (natural log); query head h reads kv head h / (Hq/Hkv);
 * s = score_mod(scale * q.k), masked pairs are -inf; a fully masked row has
 * O = 0, LSE = -inf and dQ = 0.
 *
 * Memory: attnbench allocates every tensor on the plugin's device (host memory
 * for ATTNB_DEVICE_CPU, cudaMalloc for ATTNB_DEVICE_CUDA) in the problem's dtype
 * and physical layout, uploads the inputs before prepare(), NaN-poisons the
 * outputs before each checked pass and reads them back itself. The views passed
 * to prepare(), forward() and backward() of one instance are the same for its
 * whole life, so a plugin may keep the pointers it gets in prepare().
 *
 * Errors: every call that can fail returns 0 on success and nonzero on failure,
 * with a NUL-terminated message in `err->text` (becomes an `error` report row).
 * Functions must not let C++ exceptions escape. Plain C99; no attnbench library
 * needs to be linked (CMake: find_package(attnbench) + attnbench::plugin).
 */
#ifndef ATTNBENCH_PLUGIN_H
#define ATTNBENCH_PLUGIN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI this header describes. attnbench loads plugins of versions
 *  ATTNB_PLUGIN_ABI_VERSION_MIN to ATTNB_PLUGIN_ABI_VERSION and refuses others.
 *  Version 2 added declared options (attnb_plugin.options, prepare_with_options). */
#define ATTNB_PLUGIN_ABI_VERSION 2u
/** The oldest ABI version attnbench still loads. */
#define ATTNB_PLUGIN_ABI_VERSION_MIN 1u
/** Name of the one symbol a plugin exports. */
#define ATTNB_PLUGIN_ENTRY_NAME "attnbench_plugin_entry"

#if defined(_WIN32)
#define ATTNB_PLUGIN_EXPORT __declspec(dllexport)
#else
#define ATTNB_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/** Element types. Q, K, V, O and the gradients use the problem dtype; LSE, bias
 *  and dBias are always ATTNB_FP32; offset is ATTNB_INT32. */
typedef enum attnb_dtype { ATTNB_FP32 = 0, ATTNB_FP16 = 1, ATTNB_BF16 = 2, ATTNB_INT32 = 3, ATTNB_UINT8 = 4 } attnb_dtype;
/** Where a plugin computes (and where its tensors live). */
typedef enum attnb_device { ATTNB_DEVICE_CPU = 0, ATTNB_DEVICE_CUDA = 1 } attnb_device;
/** Physical layouts (docs/semantics.md section 1). */
typedef enum attnb_layout { ATTNB_LAYOUT_BSHD = 0, ATTNB_LAYOUT_BHSD = 1, ATTNB_LAYOUT_THD = 2 } attnb_layout;

/** Bits of attnb_problem.mask_kinds: which entries the problem's mask list has
 *  (the mask is their AND; none = full attention). */
enum {
  ATTNB_MASK_CAUSAL_TOP_LEFT = 1u << 0,     /**< j <= i */
  ATTNB_MASK_CAUSAL_BOTTOM_RIGHT = 1u << 1, /**< j <= i + off */
  ATTNB_MASK_SLIDING_WINDOW = 1u << 2,      /**< off - left <= j - i <= off + right */
  ATTNB_MASK_DOCUMENT = 1u << 3,            /**< doc_ids[b][i] == doc_ids[b][j] != -1 */
  ATTNB_MASK_PREFIX_LM = 1u << 4,           /**< j < prefix_len or j <= i */
  ATTNB_MASK_PADDING = 1u << 5,             /**< i < seq_lens_q[b] and j < seq_lens_k[b] */
  ATTNB_MASK_BLOCK_SPARSE = 1u << 6         /**< 128x128 blocks kept by attnb_block_sparse_keep */
};

/** Score mods (docs/semantics.md section 4), applied to the scaled score s. */
typedef enum attnb_score_mod {
  ATTNB_MOD_NONE = 0,
  ATTNB_MOD_SOFTCAP = 1,     /**< s = cap * tanh(s / cap) */
  ATTNB_MOD_ALIBI = 2,       /**< s -= 2^(-8 (h+1) / Hq) * |i - j| */
  ATTNB_MOD_REL_BIAS = 3,    /**< s += bias[h][clamp(i - j, -m, m) + m], bias fp32 [Hq, 2m+1] */
  ATTNB_MOD_OFFSET_BIAS = 4  /**< s += bias[offset[j]], bias fp32 [size], offset int32 [Sk] */
} attnb_score_mod;

/** Plugin flags (attnb_plugin.flags). */
enum {
  /** Two runs of one prepared case may differ bitwise (e.g. float atomics).
   *  Reported, not gated. */
  ATTNB_PLUGIN_NONDETERMINISTIC = 1u << 0
};

/** Option types (ABI version 2; docs/backend-options.md). */
typedef enum attnb_option_type {
  ATTNB_OPTION_BOOL = 0,   /**< "true" / "false" (the user may write 1/0, on/off, yes/no) */
  ATTNB_OPTION_INT = 1,    /**< decimal in [min, max] */
  ATTNB_OPTION_ENUM = 2,   /**< one of `choices` */
  ATTNB_OPTION_STRING = 3  /**< any text without ',', '[', ']', '=' or control characters */
} attnb_option_type;

/** One option a plugin declares (ABI version 2). A run selects a variant as
 *  `NAME[option=value,...]`; attnbench checks the value against this declaration
 *  (exit 2 naming plugin, option and value) and hands the plugin every declared
 *  option's resolved value in prepare_with_options(). */
typedef struct attnb_option {
  const char* name;          /**< [a-z0-9_]+, unique within the plugin */
  int32_t type;              /**< attnb_option_type */
  const char* default_value; /**< canonical text: "true"/"false", decimal, one of choices, or a string */
  const char* choices;       /**< ATTNB_OPTION_ENUM: the values separated by '|', e.g. "64|128"; else NULL */
  int64_t min, max;          /**< ATTNB_OPTION_INT: inclusive range */
  const char* doc;           /**< one line for `attnbench list backends --options` */
} attnb_option;

/** One resolved option value: the declared name and its canonical text
 *  ("true"/"false", decimal, the enum value, the string). */
typedef struct attnb_option_value {
  const char* name;
  const char* value;
} attnb_option_value;

/** A strided view of one tensor. Element (i0, i1, ...) sits at
 *  data + sum(i_k * strides[k]) elements. Q/K/V/O/dO and gradients:
 *  BSHD and BHSD give ndim 4 with the LOGICAL shape [B, H, S, D] and strides
 *  that encode the physical layout (BSHD [S*H*D, D, H*D, 1], BHSD [H*S*D, S*D, D, 1]);
 *  THD gives ndim 3, shape [T, H, D] (T = tokens stored, see cu_seqlens_q/k).
 *  LSE: ndim 3, [B, Hq, Sq] contiguous, fp32 (padding rows too: -inf).
 *  An absent tensor has data == NULL and ndim == 0. */
typedef struct attnb_tensor {
  void* data;
  int32_t dtype;        /**< attnb_dtype */
  int32_t device;       /**< attnb_device */
  int32_t device_index; /**< CUDA ordinal, 0 on the CPU */
  int32_t ndim;
  int64_t shape[4];
  int64_t strides[4];   /**< in elements */
} attnb_tensor;

/** Every tensor of one prepared case. Inputs: q, k, v, d_o, bias, offset
 *  (uploaded before prepare()). Outputs: o, lse (forward), dq, dk, dv, dbias
 *  (backward; dbias only with a learnable score mod). workspace: uint8
 *  [workspace_bytes(problem)] on the plugin's device, or absent. */
typedef struct attnb_tensors {
  attnb_tensor q, k, v, d_o, bias, offset;
  attnb_tensor o, lse, dq, dk, dv, dbias;
  attnb_tensor workspace;
} attnb_tensors;

/** One attention problem, its mask flattened like attnbench's MaskDesc
 *  (harness/model/mask_desc.hpp). The struct passed to prepare() and its arrays
 *  (HOST pointers owned by attnbench) stay valid until teardown() of that
 *  instance; during supports() and workspace_bytes() only for the call. */
typedef struct attnb_problem {
  int64_t batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v;
  int32_t dtype;  /**< attnb_dtype of Q, K, V, O and gradients */
  int32_t layout; /**< attnb_layout */
  double scale;   /**< softmax scale actually used */

  /* ---- mask: AND of the entries named in mask_kinds ---- */
  uint32_t mask_kinds;      /**< ATTNB_MASK_* bits */
  int64_t window_left, window_right; /**< sliding window as given (-1 = unbounded) */
  /* The interval terms in MaskDesc form. With a padding mask off = seq_lens_k[b] -
   * seq_lens_q[b], else off = Sk - Sq. Allowed iff
   *   j - i <= upper_tl, lower_br <= j - i - off <= upper_br, and the prefix,
   *   document, padding and block-sparse terms below. Unused bounds are +-2^60. */
  int64_t upper_tl, upper_br, lower_br;
  int64_t prefix_len;          /**< -1 = no prefix_lm */
  const int32_t* doc_ids;      /**< [B * Sq] document ids, -1 = padding; NULL = no document mask */
  const int64_t* doc_lengths;  /**< contiguous documents: row b's lengths are
                                    doc_lengths[doc_offsets[b] .. doc_offsets[b+1]); NULL when
                                    the ids are not contiguous runs (or no document mask) */
  const int64_t* doc_offsets;  /**< [B + 1] */
  const int32_t* seq_lens_q;   /**< [B] valid query lengths; NULL = no padding mask */
  const int32_t* seq_lens_k;   /**< [B] valid key lengths */
  double block_density;        /**< block_sparse keep probability; < 0 = none */
  uint64_t block_seed;
  const int32_t* cu_seqlens_q; /**< THD: [B + 1] token offsets of Q/O rows; else NULL */
  const int32_t* cu_seqlens_k; /**< THD: [B + 1] token offsets of K/V rows; else NULL */

  /* ---- score mod ---- */
  int32_t score_mod;      /**< attnb_score_mod */
  double softcap;         /**< ATTNB_MOD_SOFTCAP: cap */
  int64_t max_distance;   /**< ATTNB_MOD_REL_BIAS: m */
  int64_t bias_numel;     /**< elements of bias / dbias (0 = no learnable bias) */

  int64_t reserved[8];    /**< zero; room for later minor additions */
} attnb_problem;

/** A message buffer: write a NUL-terminated string into text. */
typedef struct attnb_message {
  char text[1024];
} attnb_message;

/** The table a plugin returns from attnbench_plugin_entry(). Functions marked
 *  optional may be NULL. */
typedef struct attnb_plugin {
  uint32_t abi_version; /**< ATTNB_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /**< sizeof(attnb_plugin) */
  const char* name;        /**< backend name in reports and --backends: [A-Za-z0-9_.-]+, unique */
  const char* description; /**< one line for `attnbench list backends` */
  int32_t device;          /**< attnb_device */
  uint32_t flags;          /**< ATTNB_PLUGIN_* bits */

  /** Optional: can the plugin run on this machine at all? 1 = yes; 0 = no,
   *  reason in why (every case becomes `unsupported`). */
  int (*available)(attnb_message* why);
  /** Can this problem run? 1 = yes; 0 = no, reason in why (an `unsupported` row). */
  int (*supports)(const attnb_problem* p, attnb_message* why);
  /** Optional: scratch bytes beyond inputs and outputs (allocated by attnbench,
   *  passed as tensors->workspace). */
  size_t (*workspace_bytes)(const attnb_problem* p);
  /** Build per-case state (metadata, plans). Untimed. *instance receives the
   *  plugin's handle (may be NULL if it keeps none). 0 = ok. */
  int (*prepare)(const attnb_problem* p, const attnb_tensors* t, void** instance, attnb_message* err);
  /** O and LSE from q, k, v (and bias/offset). CUDA plugins enqueue on `stream`
   *  (a cudaStream_t) and may return before the work is done; CPU plugins get
   *  NULL and compute synchronously. 0 = ok. */
  int (*forward)(void* instance, const attnb_tensors* t, void* stream, attnb_message* err);
  /** Optional: dQ, dK, dV (and dBias) from q, k, v, o, lse, d_o of the last
   *  forward. 0 = ok. NULL = forward only (run with --no-backward, else every
   *  case is an `error` row saying so). */
  int (*backward)(void* instance, const attnb_tensors* t, void* stream, attnb_message* err);
  /** Release the instance (called once per successful prepare(), also after a
   *  failed forward or backward; never after a failed prepare()). */
  void (*teardown)(void* instance);

  /* ---- ABI version 2: a version 1 table ends here (its struct_size says so) ---- */

  /** Optional: the plugin's declared options, n_options entries (NULL = none). */
  const attnb_option* options;
  uint32_t n_options;
  /** Optional: prepare() with the run variant's options: every declared option
   *  in declaration order, values canonical (strings valid until teardown()).
   *  When set, attnbench calls it instead of prepare(). 0 = ok. */
  int (*prepare_with_options)(const attnb_problem* p, const attnb_tensors* t, const attnb_option_value* options,
                              uint32_t n_options, void** instance, attnb_message* err);
} attnb_plugin;

/** sizeof the version 1 table (the fields before `options`): the least
 *  struct_size of a version 1 plugin. */
#define ATTNB_PLUGIN_V1_SIZE offsetof(attnb_plugin, options)

/** The entry point's type. */
typedef const attnb_plugin* (*attnb_plugin_entry_fn)(void);

/* ------------------------------------------------------------------ helpers
 * Plain inline functions a plugin may use; attnbench's tests check that they
 * agree with its own mask and dtype code. Those marked ATTNB_HD also compile as
 * CUDA device functions under nvcc (give them an attnb_problem whose arrays were
 * copied to the device). */
#if defined(__CUDACC__)
#define ATTNB_HD __host__ __device__
#else
#define ATTNB_HD
#endif

/** Copy a string into a message (truncating). */
static inline void attnb_set_message(attnb_message* m, const char* s) {
  if (!m) return;
  strncpy(m->text, s, sizeof m->text - 1);
  m->text[sizeof m->text - 1] = '\0';
}

/** splitmix64 finaliser (block_sparse hashing). */
static inline ATTNB_HD uint64_t attnb_splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/** Whether 128x128 block (qb, kb) of a block_sparse{density, seed} mask is kept. */
static inline ATTNB_HD int attnb_block_sparse_keep(uint64_t seed, int64_t qb, int64_t kb, double density) {
  uint64_t h = attnb_splitmix64(seed ^ attnb_splitmix64((uint64_t)qb * 0x100000001B3ull + (uint64_t)kb));
  double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
  return u < density;
}

/** mask(b, i, j) of docs/semantics.md section 3 (no mask kind depends on the head):
 *  1 where attention is allowed. i in [0, Sq), j in [0, Sk). */
static inline ATTNB_HD int attnb_mask_allowed(const attnb_problem* p, int64_t b, int64_t i, int64_t j) {
  int64_t sq = p->seq_q, sk = p->seq_k, d, off;
  if (p->seq_lens_q) {
    sq = p->seq_lens_q[b];
    sk = p->seq_lens_k[b];
    if (i >= sq || j >= sk) return 0;
  }
  d = j - i;
  off = sk - sq;
  if (d > p->upper_tl || d - off > p->upper_br || d - off < p->lower_br) return 0;
  if (p->prefix_len >= 0 && !(j < p->prefix_len || j <= i)) return 0;
  if (p->doc_ids) {
    int32_t di = p->doc_ids[b * p->seq_q + i];
    if (di < 0 || di != p->doc_ids[b * p->seq_q + j]) return 0;
  }
  if (p->block_density >= 0.0 && !attnb_block_sparse_keep(p->block_seed, i / 128, j / 128, p->block_density))
    return 0;
  return 1;
}

/** Element offset of logical (b, h, s, d) in a Q/K/V/O-like view of problem p:
 *  `is_q` selects cu_seqlens_q (Q, O, dO, dQ) or cu_seqlens_k (K, V, dK, dV).
 *  Returns -1 for a THD position at or past its row's stored length. */
static inline ATTNB_HD int64_t attnb_offset(const attnb_problem* p, const attnb_tensor* t, int is_q, int64_t b, int64_t h,
                                   int64_t s, int64_t d) {
  if (t->ndim == 3) {
    const int32_t* cu = is_q ? p->cu_seqlens_q : p->cu_seqlens_k;
    if (s >= cu[b + 1] - cu[b]) return -1;
    return (cu[b] + s) * t->strides[0] + h * t->strides[1] + d * t->strides[2];
  }
  return b * t->strides[0] + h * t->strides[1] + s * t->strides[2] + d * t->strides[3];
}

/** Read element `i` of an fp32 / fp16 / bf16 buffer as float (exact). */
static inline ATTNB_HD float attnb_load(const void* data, int32_t dtype, int64_t i) {
  uint32_t bits;
  float f;
  if (dtype == ATTNB_FP32) return ((const float*)data)[i];
  if (dtype == ATTNB_BF16) {
    bits = (uint32_t)((const uint16_t*)data)[i] << 16;
  } else { /* fp16 */
    uint32_t h = ((const uint16_t*)data)[i], sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) {
      bits = sign | 0x7F800000u | (m << 13);
    } else if (e != 0) {
      bits = sign | ((e + 112u) << 23) | (m << 13);
    } else {
      f = (float)m * (1.0f / 16777216.0f); /* subnormal: m * 2^-24 */
      return sign ? -f : f;
    }
  }
  memcpy(&f, &bits, 4);
  return f;
}

/** Write float `x` as element `i` of an fp32 / fp16 / bf16 buffer, rounding to
 *  nearest even (overflow gives +-inf, NaN stays NaN). */
static inline ATTNB_HD void attnb_store(void* data, int32_t dtype, int64_t i, float x) {
  uint32_t bits;
  if (dtype == ATTNB_FP32) {
    ((float*)data)[i] = x;
    return;
  }
  memcpy(&bits, &x, 4);
  if (dtype == ATTNB_BF16) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
      ((uint16_t*)data)[i] = (uint16_t)((bits >> 16) | 0x40u);
      return;
    }
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    ((uint16_t*)data)[i] = (uint16_t)(bits >> 16);
    return;
  }
  { /* fp16 */
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u), out;
    float a = fabsf(x);
    if (x != x) {
      out = 0x7E00u;
    } else if (a >= 65520.0f) {
      out = 0x7C00u;
    } else if (a < 6.103515625e-05f) { /* subnormal or zero: round a / 2^-24 */
      out = (uint16_t)nearbyintf(a * 16777216.0f);
    } else {
      uint32_t ab = bits & 0x7FFFFFFFu;
      uint32_t mant = ab & 0x7FFFFFu, e = (ab >> 23) - 112u; /* rebias 127 -> 15 */
      uint32_t r = (e << 10) | (mant >> 13), rem = mant & 0x1FFFu;
      if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
      out = (uint16_t)r;
    }
    ((uint16_t*)data)[i] = (uint16_t)(sign | out);
  }
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNBENCH_PLUGIN_H */
