// Host-side analysis of a Problem for the cuDNN SDPA backend: which cuDNN graph
// expresses it (or the reason none does), how the tensors are stored, which
// sequences cuDNN sees, and which rows the backend must fix up afterwards.
//
// Nothing here calls cuDNN or CUDA, so every decision (support surface, version
// gates, sequence lists, fix-up lists, executed-pair estimate) is a pure function
// of (Problem, Env) and can be tested with a fake Env.
//
// Storage modes
//   dense  : Q/K/V/O in the problem's BSHD or BHSD layout, cuDNN batch = B,
//            optional per-batch sequence lengths ("padded": padding mask, or the
//            frontend's workaround for max_s_q > max_s_kv with bottom-right bands).
//   ragged : token-major rows [T, H, D] ("THD") addressed by ragged offsets, one
//            cuDNN sequence per batch row (THD layout) or per document (document
//            masks), with per-sequence lengths. A document mask therefore never
//            builds Sq x Sk: cuDNN sees short sequences. Padding tokens (id -1),
//            positions past a row's valid length and zero-length documents belong
//            to no sequence and have no token row: they are fully masked, and
//            read_outputs gives them O = 0, LSE = -inf and zero gradients.
//
// Diagonal band (causal and sliding window, docs/semantics.md section 3). cuDNN's graph has
// one diagonal alignment per graph: a right bound (keep j <= i + R [+ off]) and a
// left bound (keep j > i - L [+ off]), off = s_kv - s_q of the sequence for
// bottom-right alignment. cuDNN's left bound counts the diagonal: L = left + 1.
#pragma once

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench::cudnn_sdpa {

/// Order of a ragged case's sequences in its cuDNN graphs (the ragged-offset
/// arrays may list the sequences in any order; token rows do not move).
enum class SeqOrder { natural, long_first, short_first };

/// The runtime facts a plan depends on.
struct Env {
  int64_t version = 0;  ///< cudnnGetVersion(), e.g. 91900 for 9.19.0
  int sm = 0;           ///< compute capability major * 10 + minor, e.g. 90
  int device = 0;       ///< CUDA device index (part of the plan-cache key)
  /// Split ragged sequences into length classes, one graph each (see GraphPart).
  /// Option split (default true). With split_streams and the
  /// forward kept whole it took the packed CodeAlpaca Llama-3-8B fwd+bwd from
  /// 2.09 to 1.99 ms on an H100 (backends/cudnn/README.md); run one after another
  /// the classes were slower than one graph.
  bool split_by_length = true;
  /// Run the length classes of a split case concurrently, one CUDA stream each
  /// (forked from and joined to the instance's stream with events; each part has
  /// its own workspace). Option split_streams (default true;
  /// (then the parts run one after another on the instance's stream).
  bool split_streams = true;
  /// Upper bounds (tokens, increasing) of the length classes: a sequence of length
  /// L is in the first class whose bound is >= L, or in the class after the last
  /// bound. Empty: kTile x 2^c (<= 128, <= 256, <= 512, ...). Option
  /// split_bounds="128/256" (parse_split_bounds: positive increasing integers).
  std::vector<int64_t> split_bounds;
  /// The forward runs the length classes too (false: the forward is one graph over
  /// every sequence and only the backward runs the classes). Option
  /// split_forward (default false).
  bool split_forward = false;
  /// The class of the longest sequences runs first (issued first; with
  /// split_streams it is the one on the instance's stream). Option
  /// split_order=long-first|short-first (default long-first).
  bool split_long_first = true;
  /// Order of the sequences inside each ragged graph. Option
  /// seq_order=natural|long-first|short-first (default natural).
  SeqOrder seq_order = SeqOrder::natural;
  /// Ragged GQA backward: give cuDNN the full-head dK/dV as token-major float32
  /// device buffers (sized by total tokens, cudnn-frontend's max_total_seq_len_kv
  /// form) instead of virtual [n, Hq, s_max, D] tensors it sizes itself.
  /// Option fullhead=tokens|padded (default tokens).
  bool fullhead_tokens = true;
  /// Backward writes dQ straight from matmul(dS, K) (cudnn-frontend's
  /// deterministic "dP workspace" form: cuDNN keeps dP in a workspace of about
  /// n * Hq * ceil64(s_q) * ceil128(s_kv) * 2 bytes instead of adding into the
  /// float32 dQ accumulator with atomics). -1 (auto): ragged graphs whose dP
  /// workspace estimate is at most dp_workspace_limit bytes (measured on an H100
  /// with cuDNN 9.19: packed CodeAlpaca Llama-3-8B backward 1.69 ms instead of
  /// 2.36, backends/cudnn/README.md); 0: never; 1: every graph within the limit.
  /// Option dq_direct=auto|on|off (default auto).
  int dq_direct = -1;
  /// Largest dP workspace dq_direct may ask for. Option
  /// dp_workspace_limit (bytes; default 4 GiB).
  int64_t dp_workspace_limit = int64_t{4} << 30;
  /// Time the heuristics' plan and every knob variant of each graph once per
  /// instance and run the fastest (cudnn_graph.hpp knob_variants()).
  /// Option autotune (default false).
  bool autotune = false;
  /// Replay each pass (every part's plan, the fork/join events and the fix-up
  /// kernels) as one CUDA graph captured from the instance's stream on the first
  /// call (cudaStreamBeginCapture, relaxed mode), as in a training step
  /// captured in a CUDA graph; a capture cuDNN refuses falls back to direct
  /// execution with the reason in the report. On the H100 it times the same as
  /// direct launches (backends/cudnn/README.md). Option
  /// cuda_graph (default false).
  bool cuda_graph = false;
};

/// cuDNN's diagonal alignment of the band mask.
enum class Align { top_left, bottom_right };

/// The diagonal band of one graph, in cuDNN's terms.
struct Band {
  bool has_right = false;  ///< keep j <= i + right (+ off for bottom_right)
  int64_t right = 0;
  bool has_left = false;   ///< keep j > i - left_bound (+ off): left_bound = semantics.md left + 1
  int64_t left_bound = 0;
  Align align = Align::top_left;
  bool any() const { return has_right || has_left; }
};

/// How Q/K/V/O (and their gradients) are stored on the device.
enum class Storage { bshd, bhsd, tokens };

/// Everything that changes a cuDNN graph (the plan-cache key is built from it).
struct GraphSpec {
  bool backward = false;
  DType dtype = DType::bf16;
  int64_t n = 0;      ///< cuDNN batch: B (dense) or number of sequences (ragged)
  int64_t hq = 0, hkv = 0;
  int64_t sq = 0, sk = 0;  ///< cuDNN sequence dims (max lengths when ragged)
  int64_t dqk = 0, dv = 0;
  int64_t q_stride[4] = {0, 0, 0, 0};  ///< logical [n, h, s, d] strides of Q (and dQ)
  int64_t k_stride[4] = {0, 0, 0, 0};  ///< K and dK
  int64_t v_stride[4] = {0, 0, 0, 0};  ///< V and dV
  int64_t o_stride[4] = {0, 0, 0, 0};  ///< O and dO
  int64_t stats_stride[4] = {0, 0, 0, 0};  ///< stats [n, hq, sq, 1] (float32)
  Storage storage = Storage::bshd;
  bool ragged = false;   ///< ragged offsets on every Q/K/V/O-like tensor and on stats
  bool padded = false;   ///< per-sequence lengths (seq_len_q / seq_len_kv) in the graph
  /// Backward, ragged, Hq != Hkv: dK/dV full-head tensors are token-major device
  /// tensors [tokens, Hq, D] in the I/O dtype, in float32-sized buffers as
  /// cudnn-frontend allocates them (uids kUidDKFull / kUidDVFull), with the ragged
  /// offsets of dK/dV (cuDNN scales them by Hq / Hkv); see Env.
  bool fullhead_tokens = false;
  bool dq_direct = false;  ///< backward: dQ = matmul(dS, K) directly, no dQ_accum (see Env)
  Band band;
  float scale = 1.0f;
  ScoreMod::Kind mod = ScoreMod::Kind::none;  ///< none, softcap or alibi
  float cap = 0.0f;
  bool neg_inf_lowest = false;  ///< use -FLT_MAX instead of -inf as the mask value (cuDNN < 9.10)
  int64_t version = 0;          ///< runtime cuDNN version (attribute gates)
  int device = 0;

  /// A string that differs whenever any field differs.
  std::string key() const;
  /// One line for reports, e.g. "fwd bf16 n=2 hq=8 hkv=2 s=300x300 d=64/64 bshd causal(tl,R=0)".
  std::string describe() const;
};

/// cuDNN's dP workspace for the dq_direct backward of `g` (bytes, an estimate:
/// n * Hq * ceil64(s_q) * ceil128(s_kv) * 2: 2,745,171,968 for n=187, Hq=32,
/// s=431, where cuDNN 9.19 asked for a workspace of 2,745,244,416).
int64_t dp_workspace_estimate(const GraphSpec& g);

/// One cuDNN sequence (a batch row in dense/THD mode, a document in document mode).
struct Sequence {
  int64_t b = 0;                ///< batch row of the problem
  int64_t q_pos = 0, k_pos = 0; ///< first position inside the row
  int64_t q_len = 0, k_len = 0; ///< lengths cuDNN processes
  int64_t q_row = 0, k_row = 0; ///< first token row in the token-major buffers (ragged only)
};

/// One cuDNN graph pair of a case and the per-sequence tensors it reads.
///
/// A ragged case can run as several graphs over disjoint subsets of its sequences
/// ("length classes"): cuDNN's grid is (sequences x heads x ceil(s_max / tile)),
/// so one graph over 187 documents of mean length 173 and maximum ~2,000 launches
/// mostly empty tiles. Grouping the sequences by ceil(log2(ceil(len / 128))) gives
/// each graph its own s_max. The parts share every token-major buffer (Q, K, V, O,
/// their gradients, stats, the float32 workspaces): the ragged offsets of a part
/// point into those buffers, so the parts write disjoint rows and run one after
/// another on the instance's stream.
struct GraphPart {
  GraphSpec fwd, bwd;
  /// Which passes execute this part: a split case whose forward stays one graph
  /// has a whole-case part that runs only the forward and class parts that run
  /// only the backward (Env::split_forward).
  bool run_fwd = true, run_bwd = true;
  std::vector<int32_t> seq_len_q, seq_len_kv;  ///< [n] when fwd.padded || bwd.padded
  std::vector<int64_t> rag_q, rag_k, rag_v, rag_o, rag_stats;  ///< [n + 1] each (ragged only)
  int64_t tiles = 0;  ///< n * ceil(sq / kTile) * hq: the query tiles cuDNN's forward grid launches
};

/// A list of rows to overwrite after a pass. Row r covers, for every head h,
/// the D elements starting at element (unit[r] + h * head_stride) * D of a buffer
/// whose row length is D (so the same list serves O and dQ, or dK and dV).
struct RowList {
  std::vector<int64_t> unit;
  int64_t heads = 0;
  int64_t head_stride = 0;
};

/// The complete recipe of one case.
struct CasePlan {
  Storage storage = Storage::bshd;
  bool has_graph = true;  ///< false when no sequence is left (every row fully masked)
  GraphSpec fwd, bwd;
  std::vector<Sequence> seqs;
  std::vector<int32_t> seq_len_q, seq_len_kv;  ///< [n] when fwd.padded || bwd.padded
  /// Ragged offsets in elements, [n + 1] each (ragged only).
  std::vector<int64_t> rag_q, rag_k, rag_v, rag_o, rag_stats;
  /// The graphs executed, in order: one part equal to (fwd, bwd, seq_len_*, rag_*)
  /// above, or the length classes of a ragged case (GraphPart) when
  /// Env::split_by_length is set and splitting launches at most
  /// kSplitMaxTileFraction of the tiles of one graph. Then, unless
  /// Env::split_forward, parts[0] is the whole case running only the forward and
  /// the classes run only the backward.
  std::vector<GraphPart> parts;
  /// Token-major storage: buffer row of logical (b, s), or -1 when not stored.
  std::vector<int64_t> q_row_of, k_row_of;  ///< [B * Sq], [B * Sk]
  int64_t q_rows = 0, k_rows = 0;           ///< allocated token rows (with slack)
  int64_t stats_elems = 0;                  ///< floats of the stats buffer
  /// Fix-ups. dead_q: O and dQ rows to zero (fully masked query rows that are
  /// stored). dead_k: dK and dV rows to zero (stored keys no query attends).
  /// stats_dead: stats entries to set to 0 so that a fully masked row can never
  /// feed a NaN into the backward pass (its scores are all masked, so any finite
  /// value gives P = 0).
  RowList dead_q, dead_k, stats_dead;
  /// When non-empty, LSE [B, Hq, Sq] is gathered from stats by lse_from_stats():
  /// lse_src[b * Sq + i] is the stats unit of row (b, i) (head h adds h *
  /// lse_head_stride) or -1 for a fully masked row (LSE = -inf). Empty: the stats
  /// buffer is the LSE.
  std::vector<int64_t> lse_src;
  int64_t lse_head_stride = 0;
  /// ALiBi slopes 2^(-8 (h + 1) / Hq) for the alibi score mod ([Hq]).
  std::vector<float> alibi_slopes;
  /// Estimated (i, j) pairs inside the 128 x 128 tiles cuDNN computes, summed
  /// over sequences and query heads (see estimate_executed_pairs).
  int64_t executed_pairs = 0;
  /// Notes for the report (e.g. "bwd uses sequence lengths: cuDNN <= 9.15.0 workaround").
  std::vector<std::string> notes;
};

/// The logical LSE [B, Hq, Sq] from the Stats buffer `stats` as downloaded (float
/// values of the natural-log LSE cuDNN wrote, with the plan's fix-ups): with
/// plan.lse_src empty the first B * Hq * Sq entries are already [B, Hq, Sq];
/// otherwise lse[b, h, i] = -inf where lse_src[b * Sq + i] < 0 (a fully masked
/// row) and stats[lse_src[b * Sq + i] + h * lse_head_stride] elsewhere. The
/// backend keeps LSE in cuDNN's layout during the timed passes (the backward reads
/// it there) and maps it here, untimed. Throws std::out_of_range when `stats` is
/// shorter than the plan needs.
HostTensor lse_from_stats(const CasePlan& plan, const std::vector<double>& stats, int64_t B, int64_t Hq,
                          int64_t Sq);

/// Parse the cudnn option split_bounds ("128/256" or "128,256": positive, strictly
/// increasing integers). Throws std::invalid_argument naming the option and the
/// value otherwise.
std::vector<int64_t> parse_split_bounds(const std::string& text);

/// Analyse `p` for cuDNN: the plan, or the reason it is unsupported (a string).
/// Steps, in order (the first refusal wins): support surface (versions, compute
/// capability, dtype, head dims, score mods and mask terms cuDNN cannot express),
/// storage and sequences (token rows when ragged), diagonal band, score mods
/// against the band, graph gates, graph specs, parts (length classes), fix-up
/// lists, executed-pair estimate.
std::variant<CasePlan, std::string> plan_case(const Problem& p, const Env& env);

/// Tile edge used by the executed-pair estimate (cuDNN's Hopper SDPA kernels
/// compute 128 x 128 score tiles; other tilings change the estimate only at the
/// edges of the band).
constexpr int64_t kTile = 128;

/// A ragged case is split into length classes only when that launches at most
/// this fraction of the query tiles of a single graph.
constexpr double kSplitMaxTileFraction = 0.75;

/// Extra token rows allocated after the last sequence of token-major buffers, as
/// cudnn-frontend's own THD tests do (they round the token count up to a tile).
constexpr int64_t kRowSlack = 128;

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
