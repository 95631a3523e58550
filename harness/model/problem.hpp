// The attention problem model of docs/semantics.md sections 1-5 (NORMATIVE) and the
// problem-file contract of its section 10.
//
// Logical tensors (row-major, innermost last):
//   Q [B, Hq, Sq, Dqk], K [B, Hkv, Sk, Dqk], V [B, Hkv, Sk, Dv],
//   O and dO [B, Hq, Sq, Dv], LSE [B, Hq, Sq] (float32, natural log).
// GQA/MQA: Hq % Hkv == 0; query head h reads kv head h / (Hq / Hkv).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// Element type of Q, K, V, O, dO and of the gradients (LSE is always float32).
enum class DType { fp32, fp16, bf16 };
/// Physical layout of Q/K/V/O: padded batch BSHD (default), BHSD, or packed THD
/// (tokens of all sequences back to back, with cu_seqlens int32 [N+1]).
enum class Layout { bshd, bhsd, thd };
/// Alignment of the causal diagonal when Sq != Sk: top_left (j <= i, PyTorch
/// is_causal) or bottom_right (j <= i + Sk - Sq, FlashAttention >= 2.1).
enum class CausalAlign { top_left, bottom_right };

/// causal{align}.
struct CausalTerm {
  CausalAlign align = CausalAlign::bottom_right;
};
/// sliding_window{left, right}: allowed iff i + Sk - Sq - left <= j <= i + Sk - Sq + right,
/// bounds inclusive, -1 = unbounded (FlashAttention window_size convention).
struct SlidingWindowTerm {
  int64_t left = -1;
  int64_t right = -1;
};
/// document{doc_ids | doc_lengths}: self-attention only (Sq == Sk). Allowed iff the
/// ids of i and j match; id -1 marks padding (query row fully masked, key never
/// attended). `doc_ids` is always filled ([B][Sq]); `doc_lengths` ([B][docs],
/// zero-length documents allowed) is kept when the documents are contiguous runs
/// (given as lengths, or built by packing): then row b holds its documents in order
/// followed by sum-to-Sq padding tokens (id -1).
struct DocumentTerm {
  std::vector<std::vector<int32_t>> doc_ids;
  std::vector<std::vector<int64_t>> doc_lengths;
};
/// prefix_lm{prefix_len}: allowed iff j < prefix_len or j <= i.
struct PrefixLmTerm {
  int64_t prefix_len = 0;
};
/// padding{seq_lens_q, seq_lens_k}: allowed iff i < seq_lens_q[b] and j < seq_lens_k[b].
/// Causal and window alignment then use the row's valid lengths.
struct PaddingTerm {
  std::vector<int64_t> seq_lens_q;
  std::vector<int64_t> seq_lens_k;
};
/// block_sparse{density, seed}: 128x128 blocks of (i, j), each kept with
/// probability `density` (see mask_desc.hpp: block_sparse_keep for the hash).
struct BlockSparseTerm {
  double density = 1.0;
  uint64_t seed = 0;
};

/// One entry of the mask list; the list is the AND of its entries. At most one
/// entry of each kind (validated).
using MaskTerm = std::variant<CausalTerm, SlidingWindowTerm, DocumentTerm, PrefixLmTerm,
                              PaddingTerm, BlockSparseTerm>;

/// Score modification applied to the scaled score (FlexAttention semantics).
/// softcap: s = cap * tanh(s / cap); alibi: s -= 2^(-8 (h+1) / Hq) * |i - j|;
/// rel_bias (learnable bias float [Hq, 2m+1]): s += bias[h, clamp(i - j, -m, m) + m];
/// offset_bias (learnable bias float [size], offset int [Sk] in [0, size)):
/// s += bias[offset[j]].
struct ScoreMod {
  enum class Kind { none, softcap, alibi, rel_bias, offset_bias };
  Kind kind = Kind::none;
  double cap = 0.0;          ///< softcap
  int64_t max_distance = 0;  ///< rel_bias m
  int64_t size = 0;          ///< offset_bias table size
};

/// One attention problem (docs/semantics.md sections 1 and 10).
struct Problem {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t seq_q = 1;
  int64_t seq_k = 1;
  int64_t head_dim = 64;    ///< Dqk
  int64_t head_dim_v = 64;  ///< Dv
  DType dtype = DType::bf16;
  std::optional<double> scale;  ///< nullopt = 1 / sqrt(head_dim)
  Layout layout = Layout::bshd;
  std::vector<MaskTerm> mask;
  ScoreMod score_mod;
  uint64_t seed = 0;

  /// The softmax scale actually used: `scale` or 1 / sqrt(head_dim).
  double softmax_scale() const;
  /// Hq / Hkv.
  int64_t group_size() const { return heads_q / heads_kv; }

  /// The mask entry of kind T, or nullptr.
  template <class T>
  const T* find_mask() const {
    for (const auto& m : mask)
      if (auto* p = std::get_if<T>(&m)) return p;
    return nullptr;
  }
  template <class T>
  T* find_mask() {
    for (auto& m : mask)
      if (auto* p = std::get_if<T>(&m)) return p;
    return nullptr;
  }

  /// Valid query / key length of batch row b (padding mask lengths, else seq_q / seq_k).
  int64_t valid_q(int64_t b) const;
  int64_t valid_k(int64_t b) const;

  /// Elements of the learnable bias: Hq * (2m + 1) for rel_bias, size for
  /// offset_bias, 0 otherwise.
  int64_t bias_numel() const;
  /// Elements of the offset index (Sk for offset_bias, else 0).
  int64_t offset_numel() const;
  /// True for score mods with a learnable bias (dBias is an output).
  bool has_learnable_bias() const { return bias_numel() > 0; }

  /// Elements of the logical tensors.
  int64_t q_numel() const { return batch * heads_q * seq_q * head_dim; }
  int64_t k_numel() const { return batch * heads_kv * seq_k * head_dim; }
  int64_t v_numel() const { return batch * heads_kv * seq_k * head_dim_v; }
  int64_t o_numel() const { return batch * heads_q * seq_q * head_dim_v; }
  int64_t lse_numel() const { return batch * heads_q * seq_q; }
};

/// Bytes of one element of `t` (4, 2, 2).
int dtype_bytes(DType t);
const char* to_string(DType t);
const char* to_string(Layout l);
const char* to_string(CausalAlign a);
const char* to_string(ScoreMod::Kind k);
/// Mask-kind name as used in JSON: "causal", "sliding_window", "document",
/// "prefix_lm", "padding", "block_sparse".
const char* mask_kind_name(const MaskTerm& t);

/// Parse a problem object (docs/semantics.md section 10). `file` and `path` (a JSON
/// pointer to `j` inside the file) only label errors.
/// Throws InputError naming file, JSON path and value on any malformed field,
/// unknown kind or inconsistent value (also runs validate()).
Problem problem_from_json(const nlohmann::json& j, const std::string& file,
                          const std::string& path = "");

/// Parse one mask entry (object with "kind"). Throws InputError.
MaskTerm mask_term_from_json(const nlohmann::json& j, const std::string& file,
                             const std::string& path);
/// Parse a score_mod object. Throws InputError.
ScoreMod score_mod_from_json(const nlohmann::json& j, const std::string& file,
                             const std::string& path);

/// Check every invariant of docs/semantics.md sections 1, 3, 4 and 10: positive sizes, Hq % Hkv == 0,
/// window bounds >= -1, document only with Sq == Sk and ids of shape [B][Sq],
/// doc_lengths summing to at most Sq (exactly Sq when given in a file), padding
/// lengths in range, density in [0, 1], score-mod parameters, at most one entry
/// per mask kind, and the total-size budget (check_budget() of budget.hpp: elements
/// per tensor, pairs, documents, host and device bytes, all with overflow-safe
/// arithmetic). Throws InputError (file/path label the problem); BudgetError (an
/// InputError) for the budget.
void validate(const Problem& p, const std::string& file = "", const std::string& path = "");

/// Serialise to the problem-file format. `compact` replaces long doc_ids by a
/// summary {"docs_per_row": [...], "padding_tokens": [...]} (not re-parseable),
/// for reports.
nlohmann::json to_json(const Problem& p, bool compact = false);
nlohmann::json to_json(const MaskTerm& t, bool compact = false);
nlohmann::json to_json(const ScoreMod& s);

/// Short human-readable mask description, e.g. "causal(br)+window(64,0)".
std::string describe_mask(const Problem& p);
/// Short score-mod description, e.g. "softcap(50)".
std::string describe_score_mod(const ScoreMod& s);

/// Doc ids [Sq] of a row built from document lengths (document k gets id k) with
/// trailing padding (-1) up to seq. Throws std::invalid_argument if the lengths exceed seq.
std::vector<int32_t> doc_ids_from_lengths(const std::vector<int64_t>& lengths, int64_t seq);
/// A document mask from per-row document lengths ([B][docs], zero-length documents
/// allowed): doc_lengths as given, doc_ids [B][seq] by doc_ids_from_lengths (each
/// row padded with -1 up to seq). Throws std::invalid_argument as that does.
DocumentTerm document_term_from_lengths(const std::vector<std::vector<int64_t>>& lengths, int64_t seq);

}  // namespace attnbench
