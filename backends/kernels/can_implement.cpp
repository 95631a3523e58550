#include "backends/kernels/can_implement.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace attnbench::kernels {

namespace {

const char* path_name(int32_t path) { return path == 1 ? "Hopper (sm90)" : "portable (sm80)"; }

const char* direction_name(Direction d) { return d == Direction::forward ? "forward" : "backward"; }

/// Why no instance of (direction, path, head_dim, dtype) is in `built`.
std::string instance_reason(const AttnParams& p, const InstanceKey& want, std::span<const InstanceKey> built) {
  const Direction dir = want.direction;
  const int32_t path = want.path;
  if (has_instance(want, built)) return {};
  const bool any_dim = std::any_of(built.begin(), built.end(), [&](const InstanceKey& k) {
    return k.head_dim == p.head_dim;
  });
  if (!any_dim) {
    const std::string dims = instantiated_head_dims(built);
    return "head_dim " + std::to_string(p.head_dim) + " not supported (" +
           (dims.empty() ? std::string("this build has no kernels") : "this build instantiates " + dims) + ")";
  }
  return std::string("no ") + path_name(path) + " " + direction_name(dir) + " kernel for head_dim " +
         std::to_string(p.head_dim) + " " + to_string(p.dtype) + " in this build";
}

/// The flex path's limits: block sizes, and those of its Hopper backward.
std::string flex_reason(const AttnParams& p, const LaunchShape& s) {
  const BlockMaskView& bm = p.bm;
  if (std::string why = block_sizes_reason(bm.q_block, bm.kv_block); !why.empty()) return why;
  if (s.pack != 1) return "the BlockMask walk runs without GQA packing (pack " + std::to_string(s.pack) + ")";
  if (s.direction != Direction::backward || s.bwd_path != BwdPath::sm90) return {};
  if (bm.kv_block != bwd_block_n(BwdPath::sm90))
    return "the Hopper backward needs block=" + std::to_string(bwd_block_n(BwdPath::sm90)) +
           " (its 128-key tiles are one KV block)";
  return {};
}

}  // namespace

const char* to_string(ElemType t) {
  switch (t) {
    case ElemType::fp16: return "fp16";
    case ElemType::bf16: return "bf16";
    case ElemType::fp32: return "fp32";
  }
  return "?";
}

std::string instantiated_head_dims(std::span<const InstanceKey> built) {
  std::set<int32_t> dims;
  for (const InstanceKey& k : built) dims.insert(k.head_dim);
  std::string out;
  for (int32_t d : dims) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return out;
}

bool has_instance(const InstanceKey& key, std::span<const InstanceKey> built) {
  return std::find(built.begin(), built.end(), key) != built.end();
}

InstanceKey instance_key(const AttnParams& p, const LaunchShape& s) {
  const bool fwd = s.direction == Direction::forward;
  return {s.direction, fwd ? static_cast<int32_t>(s.fwd_path) : static_cast<int32_t>(s.bwd_path), p.head_dim, p.dtype};
}

int fwd_rows_resolved(const AttnParams& p, const LaunchShape& shape) {
  if (shape.rows != 0) return shape.rows;
  if (!shape.flex) return fwd_block_m(shape.pack, p.head_dim, shape.fwd_path);
  return flex_block_rows(p.bm.q_block, p.head_dim, shape.fwd_path);
}

std::string block_sizes_reason(int q_block, int kv_block) {
  if ((q_block != 64 && q_block != 128) || (kv_block != 64 && kv_block != 128))
    return "BlockMask block sizes " + std::to_string(q_block) + " x " + std::to_string(kv_block) +
           " not supported (64 or 128 each)";
  return {};
}

std::string pack_reason(int pack, int group) {
  if (pack < 1 || kFwdWarps % pack != 0)
    return "GQA pack " + std::to_string(pack) + " is not 1, 2 or 4";
  if (group < 1 || group % pack != 0)
    return "GQA pack " + std::to_string(pack) + " must divide the GQA group " + std::to_string(group);
  return {};
}

std::string fwd_rows_reason(int pack, int rows, bool flex, int q_block, int head_dim, FwdPath path) {
  const int wide_max = max_wide_fwd_head_dim(path);
  const bool wide_ok = head_dim <= wide_max;
  if (flex) {
    if ((rows == q_block && (rows == kFwdBlockM || wide_ok)) || (rows == kFwdBlockM && q_block == kFwdBlockMWide))
      return {};
    return "forward CTAs of " + std::to_string(rows) + " rows for query blocks of " + std::to_string(q_block) +
           " at head_dim " + std::to_string(head_dim) + " (whole blocks, or 64-row halves of 128-row blocks; 128 " +
           "rows up to head_dim " + std::to_string(wide_max) + " on this path)";
  }
  if (rows == kFwdBlockM || (rows == kFwdBlockMWide && pack == 1 && wide_ok)) return {};
  return "forward CTAs of " + std::to_string(rows) + " rows with GQA pack " + std::to_string(pack) + " at head_dim " +
         std::to_string(head_dim) + " (it runs " + std::to_string(fwd_block_m(pack, head_dim, path)) +
         (fwd_block_m(pack, head_dim, path) == kFwdBlockMWide ? " or 64)" : ")");
}

std::string dq_direct_reason(const LaunchShape& s) {
  if (s.direction == Direction::backward && s.bwd_path == BwdPath::sm90 && !s.deterministic && !s.flex) return {};
  return "direct dQ rows need the Hopper backward (bwd_path auto or sm90 on an sm_90a build) with atomic dQ "
         "(deterministic=false), off the flex path";
}

std::string persistent_reason(const LaunchShape& s, int head_dim) {
  const bool fwd = s.direction == Direction::forward && s.fwd_path == FwdPath::sm90;
  const bool dq = s.direction == Direction::backward && s.bwd_path == BwdPath::sm90 && s.deterministic;
  if (!fwd && !dq)
    return "a persistent launch needs the Hopper forward or the Hopper deterministic dQ kernel (fwd_path / "
           "bwd_path auto or sm90 on an sm_90a build with a device of compute capability 9.0; the dQ kernel with "
           "deterministic dQ)";
  if (!persistent_head_dim(head_dim))
    return "the persistent Hopper forward runs up to head_dim 128 (at " + std::to_string(head_dim) +
           " the consumers' registers hold no tile-loop state)";
  return {};
}

std::string pingpong_reason(const AttnParams& p, const LaunchShape& s) {
  if (s.direction != Direction::forward || s.fwd_path != FwdPath::sm90 || fwd_rows_resolved(p, s) != kFwdBlockMWide)
    return "ping-pong needs the Hopper forward (fwd_path auto or sm90 on an sm_90a build with a device of compute "
           "capability 9.0) with 128-row CTAs, whose two consumer warpgroups take turns";
  if (!persistent_head_dim(p.head_dim))
    return "ping-pong runs up to head_dim 128 (at " + std::to_string(p.head_dim) +
           " it is not compiled in: the consumers spilled with it)";
  return {};
}

std::string next_tile_reason(const LaunchShape& s) {
  if (s.direction != Direction::forward || s.fwd_path != FwdPath::sm90 || !s.persistent)
    return "publishing the next tile early needs the persistent Hopper forward (fwd_path auto or sm90 on an sm_90a "
           "build with a device of compute capability 9.0, persistent auto or on, head_dim up to 128)";
  return {};
}

std::string can_implement(const AttnParams& p, const LaunchShape& s, std::span<const InstanceKey> built) {
  if (p.dtype != ElemType::bf16 && p.dtype != ElemType::fp16)
    return std::string("dtype ") + to_string(p.dtype) + " not supported (bf16 and fp16 only)";
  if (p.head_dim != p.head_dim_v)
    return "head_dim " + std::to_string(p.head_dim) + " != head_dim_v " + std::to_string(p.head_dim_v) +
           " not supported (Dqk = Dv only)";
  if (std::string why = instance_reason(p, instance_key(p, s), built); !why.empty()) return why;
  if (p.heads_kv <= 0 || p.heads_q <= 0 || p.heads_q % p.heads_kv != 0 || p.group != p.heads_q / p.heads_kv)
    return "heads " + std::to_string(p.heads_q) + " / " + std::to_string(p.heads_kv) + " with group " +
           std::to_string(p.group) + " (heads_q must be a multiple of heads_kv, group their ratio)";
  if (std::string why = pack_reason(s.pack, p.group); !why.empty()) return why;
  if (p.num_seqs > kMaxSequences)
    return std::to_string(p.num_seqs) + " sequences exceed " + std::to_string(kMaxSequences) +
           " per launch (the Dsum launch grid)";
  if (learnable_bias(p.mod) && !s.flex)
    return "score_mod " + std::string(p.mod == ModKind::rel_bias ? "rel_bias" : "offset_bias") +
           " not supported (learnable biases need the flex backend; none, softcap and alibi run here)";
  if (p.mod == ModKind::rel_bias && (p.max_distance < 0 || p.max_distance > kMaxRelBiasDistance))
    return "rel_bias max_distance " + std::to_string(p.max_distance) + " outside [0, " +
           std::to_string(kMaxRelBiasDistance) + "] (the dBias row of 2m + 1 floats lives in shared memory)";
  if (s.flex)
    if (std::string why = flex_reason(p, s); !why.empty()) return why;
  if (s.dq_direct)
    if (std::string why = dq_direct_reason(s); !why.empty()) return why;
  if (s.persistent)
    if (std::string why = persistent_reason(s, p.head_dim); !why.empty()) return why;
  if (s.pingpong)
    if (std::string why = pingpong_reason(p, s); !why.empty()) return why;
  if (s.next_tile_early)
    if (std::string why = next_tile_reason(s); !why.empty()) return why;
  if (s.direction == Direction::forward)
    return fwd_rows_reason(s.pack, fwd_rows_resolved(p, s), s.flex, p.bm.q_block, p.head_dim, s.fwd_path);
  return {};
}

}  // namespace attnbench::kernels
