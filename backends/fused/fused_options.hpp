// The declared options (harness/backend/options.hpp) of the backends on
// attnbench's fused kernels: `flash`, `varlen` and `flex`. Header-only and free of
// CUDA, so that the CPU tests check the declarations (tests/test_backend_options.cpp)
// although the backends themselves build only with CUDA.
//
//   option         backends             values (default first)   what it selects
//   fwd_path       flash, varlen, flex  auto|sm80|sm90           the forward kernel: auto = Hopper
//                                                                (TMA + wgmma) where it runs, sm80 = portable
//   bwd_path       flash, varlen, flex  auto|sm80|sm90           the backward kernels (flex: sm90 = Hopper
//                                                                dK/dV with dQ by float32 atomics)
//   fwd_rows       flash, varlen        auto|64|128              forward CTA rows without GQA packing
//                                                                (auto = kernels::fwd_cta_rows' choice)
//   deterministic  flash, varlen        false|true               dQ by its own kernel instead of atomics
//   dq_direct      flash, varlen        auto|on|off              Hopper atomic backward: rows whose keys lie in
//                                                                one key block get dQ stored by the dK/dV kernel
//   persistent     flash, varlen, flex  auto|on|off              Hopper forward and deterministic dQ kernel: one
//                                                                CTA per resident slot walking the query tiles
//   pingpong       flash, varlen, flex  off|on                   Hopper forward with 128-row CTAs: the two consumer
//                                                                warpgroups issue their GEMMs in turn
//   tile_order     flash, varlen, flex  l2_groups|sequences|longest_first  the TileScheduler's order (TileOrder)
//   next_tile      flash, varlen, flex  late|early               persistent Hopper forward: when its K / V thread
//                                                                publishes the CTA's next tile
//   pack           varlen               0|1|2|4                  GQA query heads per CTA (0 = the plan's)
//   block          flex                 128|64                   Q_BLOCK = KV_BLOCK of the BlockMask
//   dbias          flex                 deterministic|atomic|none  how dBias of a learnable bias is made
//   schedule       flex                 auto|block_mask|documents|intervals  the tiles (FlexSchedule, fused_instance.hpp)
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "harness/backend/options.hpp"

namespace attnbench::fused {

/// Which kernel family a pass runs on: `automatic` lets the instance choose (the
/// Hopper kernels where they run and are measured faster), `sm80` forces the
/// portable mma.sync kernels, `sm90` the Hopper kernels (an error row where they
/// cannot run).
enum class KernelPath { automatic, sm80, sm90 };

/// "auto" | "sm80" | "sm90" -> KernelPath (the canonical text of a fwd_path /
/// bwd_path option). Throws std::invalid_argument for anything else (resolve_options
/// has refused it before a backend sees it).
inline KernelPath parse_kernel_path(const std::string& s) {
  if (s == "auto") return KernelPath::automatic;
  if (s == "sm80") return KernelPath::sm80;
  if (s == "sm90") return KernelPath::sm90;
  throw std::invalid_argument("kernel path \"" + s + "\" is not auto, sm80 or sm90");
}

/// The resolved fwd_path and bwd_path of a fused backend's options.
struct KernelPaths {
  KernelPath fwd = KernelPath::automatic, bwd = KernelPath::automatic;
};
/// KernelPaths from resolved options declaring fwd_path and bwd_path.
inline KernelPaths kernel_paths(const OptionValues& v) {
  return {parse_kernel_path(v.text("fwd_path")), parse_kernel_path(v.text("bwd_path"))};
}

/// fwd_path: the forward kernel.
inline OptionSpec fwd_path_option() {
  return OptionSpec::choice("fwd_path", "auto", {"auto", "sm80", "sm90"},
                            "forward kernel: auto = Hopper (TMA + wgmma) where it runs, sm80 = portable mma.sync, "
                            "sm90 = Hopper (error where it cannot run)");
}

/// bwd_path: the backward kernels; `flex` says what sm90 means there.
inline OptionSpec bwd_path_option(bool flex) {
  return OptionSpec::choice(
      "bwd_path", "auto", {"auto", "sm80", "sm90"},
      flex ? "backward kernels: auto = Hopper dK/dV + Hopper deterministic dQ where they run, sm80 = portable, "
             "sm90 = Hopper dK/dV with dQ by float32 atomics (not bitwise reproducible)"
           : "backward kernels: auto = Hopper dK/dV where it runs (either dQ mode), sm80 = portable, sm90 = Hopper");
}

/// fwd_rows: query rows per forward CTA without GQA packing.
inline OptionSpec fwd_rows_option() {
  return OptionSpec::choice("fwd_rows", "auto", {"auto", "64", "128"},
                            "forward CTA rows without GQA packing: auto = on the Hopper forward 64 where 64-row "
                            "tiles execute at most 85% of the 128-row tiles' pairs (kernels::fwd_cta_rows), else "
                            "128; on the portable one 128 up to head_dim 128, else 64");
}
/// The fwd_rows option's value as FusedOptions::fwd_rows (0 = auto).
inline int parse_fwd_rows(const std::string& s) { return s == "64" ? 64 : s == "128" ? 128 : 0; }

/// deterministic: dQ by its own kernel instead of float32 atomics.
inline OptionSpec deterministic_option() {
  return OptionSpec::flag("deterministic", false,
                          "dQ by a deterministic kernel (bitwise reproducible) instead of float32 atomics");
}

/// An option `name` of values auto|on|off (default auto), read by parse_auto_on_off.
inline OptionSpec auto_on_off_option(const std::string& name, const std::string& help) {
  return OptionSpec::choice(name, "auto", {"auto", "on", "off"}, help);
}

/// dq_direct: whether the Hopper dK/dV kernel with atomic dQ stores the dQ of the
/// rows whose keys lie in one key block itself (kernels::dq_direct_block).
inline OptionSpec dq_direct_option() {
  return auto_on_off_option(
      "dq_direct",
      "Hopper backward with atomic dQ: the rows whose keys lie in one key block (128 keys; 64 at head_dim 64) get "
      "dQ stored by the dK/dV kernel, without atomics, zeroing or conversion. auto = where at least 25% of the rows "
      "are such (packed short documents), on = always (an error row where that backward does not run), off = never");
}

/// persistent: whether the Hopper forward is launched persistent
/// (kernels::LaunchShape::persistent).
inline OptionSpec persistent_option() {
  return auto_on_off_option(
      "persistent",
      "Hopper forward and Hopper deterministic dQ kernel: one CTA per resident slot (SMs x CTAs per SM) walking the "
      "query tiles (in the order of tile_order), the next tile's loads running while a tile finishes, instead of one "
      "CTA per tile. "
      "auto = on where it runs (up to head_dim 128), on = always (an error row where the forward is not the Hopper "
      "one), off = never");
}

/// pingpong: whether the two consumer warpgroups of the Hopper forward's 128-row
/// CTAs issue their GEMMs in turn (kernels::LaunchShape::pingpong).
inline OptionSpec pingpong_option() {
  return OptionSpec::choice(
      "pingpong", "off", {"off", "on"},
      "Hopper forward with 128-row CTAs: on = the two consumer warpgroups take turns to issue a key step's GEMMs, "
      "so that one's softmax runs while the other's GEMMs hold the tensor cores (FlashAttention-3 section 3.1; an "
      "error row where the forward does not run 128-row Hopper CTAs up to head_dim 128). Off by default: measured "
      "no faster on an H200 (dense D128 forward -0.5% to +1.9% slower, docs/results/2026-11-29-h200-session25.md)");
}

/// next_tile: when the persistent Hopper forward's K / V producer thread claims,
/// decodes and publishes its CTA's next query tile (kernels::LaunchShape::next_tile_early).
inline OptionSpec next_tile_option() {
  return OptionSpec::choice(
      "next_tile", "late", {"late", "early"},
      "persistent Hopper forward: when the K / V producer thread claims, decodes and publishes the CTA's next query "
      "tile: late = after issuing this tile's last K / V loads, early = after its first, so that the next tile's Q "
      "loads sooner and the consumers do not wait for their next tile at the boundary (they spent 1.3% of the "
      "packed long-document forward's samples so, docs/results/2026-11-29-h200-session26.md; early is not measured "
      "yet). An error row where the forward is not the persistent Hopper one");
}

/// The order in which the Hopper kernels' CTAs take their tiles (the backends'
/// option tile_order; FusedInstance::order_items / set_tile_order; the portable
/// kernels always take the plan's list): `longest_first` = the
/// plan's list, longest work first over all sequences, every head of an item
/// together; `sequences` = that list regrouped sequence by sequence
/// (kernels::group_by_sequence), so that the tiles running at once share a
/// sequence's K / V (dK/dV: Q / dO) in L2; `l2_groups` = sequences, and the
/// heads taken as many at a time as the L2 holds the operands of
/// (kernels::l2_head_group, TileScheduler::decode).
enum class TileOrder { l2_groups, sequences, longest_first };

/// "l2_groups" | "sequences" | "longest_first" -> TileOrder. Throws
/// std::invalid_argument for anything else.
inline TileOrder parse_tile_order(const std::string& s) {
  if (s == "l2_groups") return TileOrder::l2_groups;
  if (s == "sequences") return TileOrder::sequences;
  if (s == "longest_first") return TileOrder::longest_first;
  throw std::invalid_argument("tile_order \"" + s + "\": expected l2_groups, sequences or longest_first");
}

/// tile_order: the TileScheduler's order (TileOrder).
inline OptionSpec tile_order_option() {
  return OptionSpec::choice(
      "tile_order", "l2_groups", {"l2_groups", "sequences", "longest_first"},
      "the order of the Hopper kernels' tiles: longest_first = longest work first over all sequences; sequences = "
      "that list sequence by sequence, so that the tiles running at once share a sequence's K / V in L2; l2_groups "
      "= sequences, with the heads taken as many at a time as the L2 holds their K / V (dK/dV: Q / dO) of "
      "(FlashAttention-3's L2-aware order)");
}

/// An auto|on|off option's value (dq_direct, persistent) as an optional<bool>
/// (nullopt = auto).
inline std::optional<bool> parse_auto_on_off(const std::string& s) {
  if (s == "on") return true;
  if (s == "off") return false;
  return std::nullopt;
}

/// The options of `flash`: fwd_path, bwd_path, fwd_rows, deterministic, dq_direct, persistent, pingpong,
/// tile_order, next_tile.
inline OptionSpecs flash_option_specs() {
  return {fwd_path_option(),  bwd_path_option(false), fwd_rows_option(), deterministic_option(),
          dq_direct_option(), persistent_option(),    pingpong_option(), tile_order_option(),
          next_tile_option()};
}

/// The options of `varlen`: fwd_path, bwd_path, fwd_rows, deterministic, dq_direct, persistent, pingpong,
/// tile_order, next_tile, pack.
inline OptionSpecs varlen_option_specs() {
  return {fwd_path_option(),
          bwd_path_option(false),
          fwd_rows_option(),
          deterministic_option(),
          dq_direct_option(),
          persistent_option(),
          pingpong_option(),
          tile_order_option(),
          next_tile_option(),
          OptionSpec::choice("pack", "0", {"0", "1", "2", "4"},
                             "GQA query heads folded into one query tile; 0 = the plan's choice by document length "
                             "(a value that does not divide the group is an unsupported row)")};
}

/// The options of `flex`: fwd_path, bwd_path, block, dbias, schedule, persistent, pingpong, tile_order,
/// next_tile.
inline OptionSpecs flex_option_specs() {
  return {fwd_path_option(), bwd_path_option(true),
          OptionSpec::choice("block", "128", {"128", "64"},
                             "Q_BLOCK = KV_BLOCK of the BlockMask (the Hopper backward needs 128)"),
          OptionSpec::choice("dbias", "deterministic", {"deterministic", "atomic", "none"},
                             "dBias of a learnable bias: deterministic scratch + ordered reduction, float32 "
                             "atomics, or none (skipped: measures its cost; the check then fails dBias)"),
          OptionSpec::choice("schedule", "auto", {"auto", "block_mask", "documents", "intervals"},
                             "tiles: block_mask = walk the BlockMask; documents = one packed sequence per document "
                             "(contiguous document masks, the varlen tiles); intervals = the flash tiles, each row's "
                             "keys an interval (causal, sliding_window, padding, prefix_lm); auto = whichever "
                             "executes the fewest pairs"),
          persistent_option(), pingpong_option(), tile_order_option(), next_tile_option()};
}

}  // namespace attnbench::fused
