// The host side shared by the `flash` and `varlen` backends: one prepared case
// on attnbench's fused attention kernels (backends/kernels/). It uploads the
// inputs in the kernels' layout, builds the AttnParams and the tile plan, and
// runs the forward and backward launches on its own stream.
//
// Two placements of the tokens:
//   padded     the problem's own layout (BSHD or BHSD; THD becomes one packed
//              sequence per batch row with cu_seqlens from the valid lengths);
//              padding-mask lengths go to the kernels as seqlens_q / seqlens_k.
//   documents  every document of a document mask becomes one packed sequence
//              (THD, cu_seqlens_q = cu_seqlens_k built from the document lengths
//              in order, as PyTorch's varlen_attn tutorial builds them from EOS
//              positions); padding tokens (id -1) are not stored at all. Without
//              a document mask, every batch row's valid tokens become one
//              sequence (cu_seqlens_q / cu_seqlens_k from the padding lengths or
//              the THD layout: Sq != Sk per sequence, zero-length rows, decode
//              with one query), as FlashAttention's varlen API takes them.
//   block_mask the problem's own layout (BSHD or BHSD), the tiles walked from the
//              problem's BlockMask (harness/model/block_mask.hpp) and partial
//              tiles masked by mask_allowed(): every mask kind and combination,
//              and the learnable-bias score mods with dBias (the `flex` backend).
// read_outputs() maps back to the logical [B, H, S, D] view: positions that are
// not stored read O = dQ = dK = dV = 0 and LSE = -inf (they are fully masked
// queries and never-attended keys, docs/semantics.md "Fully masked rows").
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backends/fused/fused_options.hpp"
#include "backends/kernels/attn_params.hpp"
#include "harness/backend/backend.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench::fused {

/// How tokens are placed and tiles walked (see the file comment).
enum class Placement { padded, documents, block_mask };

/// The `flex` backend's tile schedule (FusedOptions::schedule, read with the
/// block_mask placement only). The same pairs are allowed under each (one mask
/// definition: docs/semantics.md); only the tiles differ:
///   block_mask  walk the problem's BlockMask (every mask kind, every score mod);
///   documents   every document of a document mask (contiguous runs) becomes a
///               packed sequence whose tiles start at the document's first token,
///               as in the documents placement (the varlen tiles), with the
///               remaining terms (causal, sliding_window) as per-row intervals
///               inside each document. Possible where flex_documents_refusal(p) is
///               empty (document + causal / sliding_window, score mods none /
///               softcap / alibi);
///   intervals   a mask of interval terms only (causal in both alignments,
///               sliding_window, padding, prefix_lm; or none) runs the flash tiles
///               (the padded placement: each row's keys an interval, 128-key steps
///               on the Hopper forward, narrow 64-row CTAs where they cut work)
///               instead of the BlockMask's 64-key steps. Possible where
///               flex_intervals_refusal(p) is empty (score mods none / softcap / alibi);
///   automatic   of documents, intervals and block_mask, the one whose tiles
///               execute the fewest pairs (kernels::TilePlan::executed_pairs; ties
///               in that order): on packed CodeAlpaca, 128 x 128 blocks across
///               short documents run at tile efficiency 0.33 against the
///               per-document tiles' 0.70 (docs/results/2026-11-27-h100-session11.md).
enum class FlexSchedule { automatic, block_mask, documents, intervals };

/// Options of one fused instance.
struct FusedOptions {
  Placement placement = Placement::padded;
  /// Deterministic backward: dQ by its own kernel (bitwise reproducible)
  /// instead of float32 atomics (flash / varlen default to atomics, where the
  /// Hopper backward runs; flex to this unless its option bwd_path=sm90).
  bool deterministic = true;
  /// Query heads per forward / dQ CTA (GQA packing); 0 = the plan's choice
  /// (kernels::choose_pack for documents, 1 otherwise). Must divide the group.
  int pack = 0;
  /// Backend name used in messages ("flash", "varlen", "flex").
  std::string name = "flash";
  /// block_mask placement: Q_BLOCK = KV_BLOCK of the BlockMask (64 or 128).
  int block_size = 128;
  /// block_mask placement: how dBias of a learnable bias is produced (none skips
  /// it: for measuring its cost only; the check then has no dBias to compare).
  kernels::DbiasMode dbias = kernels::DbiasMode::deterministic;
  /// The forward kernel (the backends' option fwd_path, fused_options.hpp).
  KernelPath fwd_path = KernelPath::automatic;
  /// The backward kernels (the backends' option bwd_path).
  KernelPath bwd_path = KernelPath::automatic;
  /// block_mask placement: the tile schedule (FlexSchedule; flex's option schedule).
  FlexSchedule schedule = FlexSchedule::automatic;
  /// Query rows per Hopper forward CTA without GQA packing (kernels::fwd_cta_rows):
  /// 0 = its choice, 64 or 128 (the backends' option fwd_rows).
  int fwd_rows = 0;
  /// Hopper backward with atomic dQ (not flex): the direct dQ rows stored by the
  /// dK/dV kernel (kernels::LaunchShape::dq_direct): nullopt = where
  /// kernels::dq_direct_rows_pay(), true = always (std::invalid_argument where
  /// that backward does not run), false = never (the backends' option dq_direct).
  std::optional<bool> dq_direct{};
  /// Hopper forward launched persistent (kernels::LaunchShape::persistent):
  /// nullopt = wherever the Hopper forward runs, true = always
  /// (std::invalid_argument where it does not), false = never (the backends'
  /// option persistent).
  std::optional<bool> persistent{};
  /// Ping-pong of the Hopper forward's two consumer warpgroups
  /// (kernels::LaunchShape::pingpong; the backends' option pingpong): true =
  /// always (std::invalid_argument where the forward runs no 128-row Hopper
  /// CTAs), false = never.
  bool pingpong = false;
  /// The persistent Hopper forward publishes each CTA's next tile early
  /// (kernels::LaunchShape::next_tile_early; the backends' option next_tile):
  /// true = early (std::invalid_argument where the forward is not the
  /// persistent Hopper one), false = late.
  bool next_tile_early = false;
  /// The order of the Hopper kernels' tiles (TileOrder; the backends' option
  /// tile_order; FusedInstance::set_tile_order).
  TileOrder tile_order = TileOrder::l2_groups;
};

/// The pointer-free part of the kernels' AttnParams for problem `p`: heads, GQA
/// group, head dims, element type (fp32 kept, for can_implement to refuse),
/// softmax scale, score mod and its constants, `num_seqs` sequences and BlockMask
/// blocks of `block` (the flex shape). What kernels::can_implement() decides on;
/// the instance fills the tensors, strides and lengths on top of it.
kernels::AttnParams shape_params(const Problem& p, int64_t num_seqs, int block);

/// Why flex's documents schedule cannot run `p` (empty when it can): the limits
/// of the documents placement (unsupported_reason(p, Placement::documents)),
/// worded for flex.
std::string flex_documents_refusal(const Problem& p);

/// Why flex's intervals schedule cannot run `p` (empty when it can): the limits
/// of the padded placement (unsupported_reason(p, Placement::padded)), worded for flex.
std::string flex_intervals_refusal(const Problem& p);

/// Why the fused kernels cannot run `p` with `placement` (empty when they can):
/// kernels::can_implement() of its forward and backward on the portable path
/// (dtype bf16 / fp16, Dqk = Dv with an instance in this build, heads, score
/// mods, sequences per launch), then what the placement expresses: mask terms (padded:
/// causal, sliding_window, padding, prefix_lm; documents: causal, sliding_window
/// and either a document mask whose ids form one contiguous run per document or
/// padding (or none: one sequence per batch row);
/// block_mask: every kind, BSHD / BHSD), score mods (none, softcap, alibi; with
/// block_mask also rel_bias up to kMaxRelBiasDistance and offset_bias) and
/// 32-bit position limits.
std::string unsupported_reason(const Problem& p, Placement placement);

/// Why the Hopper kernels a variant asks for (option fwd_path / bwd_path = sm90)
/// cannot run `p` with `placement` (empty when none is asked for or they can):
/// kernels::can_implement() of that direction on the Hopper path, e.g. a head dim
/// without Hopper instances. Prefixed with the backend name as unsupported_reason.
/// (The flex Hopper backward's own limits: flex_bwd_sm90_refusal.)
std::string asked_path_reason(const Problem& p, Placement placement, const KernelPaths& paths);

/// Why the flex path's Hopper backward cannot run `p` with BlockMask blocks of
/// `block` and dBias mode `dbias` (empty when it can): kernels::can_implement()
/// of that launch (its 128-key tiles are one KV block, and this build must have its instance). By default (option bwd_path=auto) the
/// instance then runs the portable backward and reports the reason
/// (extra.backend.bwd_path_reason); with bwd_path=sm90 the flex backend reports it
/// as an unsupported row and make_instance throws it.
std::string flex_bwd_sm90_refusal(const Problem& p, int block, kernels::DbiasMode dbias);

/// Prepare `p` on the current CUDA device (inputs uploaded, plan built, work
/// lists on the device). With the block_mask placement, opt.schedule first picks
/// the tiles (FlexSchedule; the row's extra.backend.schedule says which ran and the
/// executed pairs of both). Throws std::invalid_argument when `in` does not match
/// `p` or unsupported_reason() is not empty, DeviceOutOfMemory / DeviceError on
/// device failures.
std::unique_ptr<BackendInstance> make_instance(const Problem& p, const ProblemData& in, const FusedOptions& opt);

/// Whether the selected CUDA device can run the fused kernels (compute
/// capability >= 8.0: mma.sync bf16, cp.async); `why` names `backend` and the reason.
bool sm80_available(const std::string& backend, std::string* why);


}  // namespace attnbench::fused
