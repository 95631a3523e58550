// The kernel family's one capability check (backends/kernels/can_implement.hpp):
// every rule refuses what it must and accepts the shapes the backends launch,
// against an explicit instance list (the build's own list is empty on the CPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "backends/kernels/can_implement.hpp"

using namespace attnbench::kernels;

namespace {

/// Both directions and paths of head dims 64 and 128 in both dtypes (a Hopper build).
/// The instances of a build for sm_90a with portable kernels at `dims` (the
/// Hopper backward up to 128 only, the forward up to 256, as
/// cmake/attn_instances.cmake generates them).
std::vector<InstanceKey> hopper_build(std::initializer_list<int32_t> dims = {64, 128}) {
  std::vector<InstanceKey> keys;
  for (Direction d : {Direction::forward, Direction::backward})
    for (int32_t path : {0, 1})
      for (int32_t hd : dims)
        if (path == 0 || hd <= (d == Direction::forward ? 256 : 128))
          for (ElemType t : {ElemType::bf16, ElemType::fp16}) keys.push_back({d, path, hd, t});
  return keys;
}

AttnParams dense(int hq = 8, int hkv = 2, int d = 128) {
  AttnParams p;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.group = hq / hkv;
  p.head_dim = p.head_dim_v = d;
  p.num_seqs = 4;
  p.dtype = ElemType::bf16;
  return p;
}

LaunchShape fwd(int pack = 1, int rows = 0, FwdPath path = FwdPath::sm80) {
  LaunchShape s;
  s.pack = pack;
  s.rows = rows;
  s.fwd_path = path;
  return s;
}

LaunchShape bwd(BwdPath path, bool flex = false) {
  LaunchShape s;
  s.direction = Direction::backward;
  s.bwd_path = path;
  s.flex = flex;
  return s;
}

}  // namespace

TEST_CASE("can_implement accepts the shapes the backends launch") {
  const auto built = hopper_build();
  CHECK(can_implement(dense(), fwd(), built).empty());
  CHECK(can_implement(dense(), fwd(4), built).empty());                       // GQA pack 4, 64-row CTAs
  CHECK(can_implement(dense(), fwd(1, 64, FwdPath::sm90), built).empty());    // narrow Hopper tiles
  CHECK(can_implement(dense(), fwd(1, 128, FwdPath::sm90), built).empty());
  CHECK(can_implement(dense(16, 16, 64), bwd(BwdPath::sm90), built).empty());
  AttnParams flex = dense();
  flex.mod = ModKind::rel_bias;
  flex.max_distance = 16;
  flex.dbias_mode = DbiasMode::deterministic;
  LaunchShape f = fwd(1, 64, FwdPath::sm90);
  f.flex = true;
  CHECK(can_implement(flex, f, built).empty());  // 64-row halves of 128-row blocks
  CHECK(can_implement(flex, bwd(BwdPath::sm80, true), built).empty());
}

TEST_CASE("can_implement names the element type, head dims and the missing instance") {
  const auto built = hopper_build();
  AttnParams p = dense();
  p.dtype = ElemType::fp32;
  CHECK(can_implement(p, fwd(), built) == "dtype fp32 not supported (bf16 and fp16 only)");
  p = dense(8, 2, 96);
  CHECK(can_implement(p, fwd(), built) == "head_dim 96 not supported (this build instantiates 64, 128)");
  CHECK(can_implement(p, fwd(), {}) == "head_dim 96 not supported (this build has no kernels)");
  p = dense();
  p.head_dim_v = 64;
  CHECK(can_implement(p, fwd(), built) == "head_dim 128 != head_dim_v 64 not supported (Dqk = Dv only)");
  // A build without sm_90a: the portable path runs, the Hopper one is named as missing.
  std::vector<InstanceKey> portable;
  std::copy_if(built.begin(), built.end(), std::back_inserter(portable), [](const InstanceKey& k) { return k.path == 0; });
  CHECK(can_implement(dense(), fwd(), portable).empty());
  CHECK(can_implement(dense(), bwd(BwdPath::sm90), portable) ==
        "no Hopper (sm90) backward kernel for head_dim 128 bf16 in this build");
  CHECK(instantiated_head_dims(built) == "64, 128");
  // Head dims with portable kernels only: the Hopper ones are named as missing.
  const auto wide_dims = hopper_build({64, 96, 128, 256});
  CHECK(instantiated_head_dims(wide_dims) == "64, 96, 128, 256");
  CHECK(can_implement(dense(8, 2, 96), bwd(BwdPath::sm90), wide_dims).empty());
  CHECK(can_implement(dense(8, 2, 256), bwd(BwdPath::sm80), wide_dims).empty());
  CHECK(can_implement(dense(8, 2, 256), fwd(1, 0, FwdPath::sm90), wide_dims).empty());
  CHECK(can_implement(dense(8, 2, 256), bwd(BwdPath::sm90), wide_dims) ==
        "no Hopper (sm90) backward kernel for head_dim 256 bf16 in this build");
  CHECK(has_instance({Direction::backward, 0, 256, ElemType::fp16}, wide_dims));
  CHECK_FALSE(has_instance({Direction::backward, 1, 256, ElemType::fp16}, wide_dims));
  CHECK(can_implement(dense(8, 2, 192), fwd(), wide_dims) ==
        "head_dim 192 not supported (this build instantiates 64, 96, 128, 256)");
}

TEST_CASE("can_implement: heads, GQA pack, CTA rows, sequences") {
  const auto built = hopper_build();
  CHECK(can_implement(dense(8, 3), fwd(), built).find("heads 8 / 3") == 0);
  CHECK(can_implement(dense(), fwd(3), built) == "GQA pack 3 is not 1, 2 or 4");
  CHECK(can_implement(dense(6, 2), fwd(2), built) == "GQA pack 2 must divide the GQA group 3");
  CHECK(can_implement(dense(), fwd(1, 64), built).empty());  // 64-row CTAs without packing, portable path too
  CHECK(can_implement(dense(), fwd(2, 128), built) ==
        "forward CTAs of 128 rows with GQA pack 2 at head_dim 128 (it runs 64)");
  CHECK(fwd_rows_resolved(dense(), fwd(2)) == 64);
  CHECK(fwd_rows_resolved(dense(), fwd(1)) == 128);
  // Above head_dim 128 the portable forward has no 128-row tile: 64 rows by default.
  const auto wide_dims = hopper_build({64, 96, 128, 256});
  CHECK(fwd_rows_resolved(dense(8, 2, 256), fwd(1)) == 64);
  CHECK(can_implement(dense(8, 2, 256), fwd(1), wide_dims).empty());
  CHECK(can_implement(dense(8, 2, 256), fwd(1, 128), wide_dims) ==
        "forward CTAs of 128 rows with GQA pack 1 at head_dim 256 (it runs 64)");
  CHECK(fwd_rows_resolved(dense(8, 2, 96), fwd(1)) == 128);
  // The Hopper forward has a 128-row tile at 256 (two warpgroups, 64-key steps).
  CHECK(fwd_rows_resolved(dense(8, 2, 256), fwd(1, 0, FwdPath::sm90)) == 128);
  CHECK(can_implement(dense(8, 2, 256), fwd(1, 128, FwdPath::sm90), wide_dims).empty());
  CHECK(can_implement(dense(8, 2, 96), fwd(1), wide_dims).empty());
  AttnParams p = dense();
  p.num_seqs = kMaxSequences + 1;
  CHECK(can_implement(p, fwd(), built) == "65536 sequences exceed 65535 per launch (the Dsum launch grid)");
  p.num_seqs = kMaxSequences;
  CHECK(can_implement(p, fwd(), built).empty());
}

TEST_CASE("can_implement: score mods and the flex path's limits") {
  const auto built = hopper_build();
  AttnParams p = dense();
  p.mod = ModKind::offset_bias;
  CHECK(can_implement(p, fwd(), built) ==
        "score_mod offset_bias not supported (learnable biases need the flex backend; none, softcap and alibi run "
        "here)");
  LaunchShape f = fwd();
  f.flex = true;
  CHECK(can_implement(p, f, built).empty());
  p.mod = ModKind::rel_bias;
  p.max_distance = kMaxRelBiasDistance + 1;
  CHECK(can_implement(p, f, built).find("rel_bias max_distance 8192 outside [0, 8191]") == 0);
  p.max_distance = 4;
  p.bm.q_block = 32;
  CHECK(can_implement(p, f, built) == "BlockMask block sizes 32 x 128 not supported (64 or 128 each)");
  p.bm.q_block = 128;
  AttnParams wide = p;  // above head_dim 128 a 128-row block runs as two 64-row halves by default
  wide.head_dim = wide.head_dim_v = 256;
  CHECK(fwd_rows_resolved(wide, f) == 64);
  f.rows = 64;  // 64-row halves of 128-row blocks, on either forward path
  CHECK(can_implement(p, f, built).empty());
  f.rows = 128;
  p.bm.q_block = 64;  // more rows than a block has
  CHECK(can_implement(p, f, built).find("forward CTAs of 128 rows for query blocks of 64") == 0);
  p.bm.q_block = 128;
  // The Hopper backward: 128-key KV blocks; rel_bias dBias in either mode.
  for (DbiasMode m : {DbiasMode::atomic, DbiasMode::deterministic, DbiasMode::none}) {
    p.dbias_mode = m;
    CHECK(can_implement(p, bwd(BwdPath::sm90, true), built).empty());
  }
  p.bm.kv_block = 64;
  CHECK(can_implement(p, bwd(BwdPath::sm90, true), built).find("the Hopper backward needs block=128") == 0);
  CHECK(can_implement(p, bwd(BwdPath::sm80, true), built).empty());
  LaunchShape packed = bwd(BwdPath::sm80, true);
  packed.pack = 2;
  CHECK(can_implement(p, packed, built).find("the BlockMask walk runs without GQA packing") == 0);
}

TEST_CASE("instance_key takes the path of the launch's direction") {
  LaunchShape s = fwd(1, 0, FwdPath::sm90);
  s.bwd_path = BwdPath::sm80;
  CHECK(instance_key(dense(), s) == InstanceKey{Direction::forward, 1, 128, ElemType::bf16});
  s.direction = Direction::backward;
  CHECK(instance_key(dense(), s) == InstanceKey{Direction::backward, 0, 128, ElemType::bf16});
}

TEST_CASE("direct dQ rows: the Hopper backward with atomic dQ off the flex path, and nothing else") {
  const auto built = hopper_build();
  LaunchShape s = bwd(BwdPath::sm90);
  s.deterministic = false;
  CHECK(dq_direct_reason(s).empty());
  s.dq_direct = true;
  CHECK(can_implement(dense(), s, built).empty());
  LaunchShape det = s;
  det.deterministic = true;
  LaunchShape portable = s;
  portable.bwd_path = BwdPath::sm80;
  LaunchShape forward = fwd();
  forward.dq_direct = true;
  for (const LaunchShape& no : {det, portable, forward}) {
    CHECK_FALSE(dq_direct_reason(no).empty());
    CHECK(can_implement(dense(), no, built) == dq_direct_reason(no));
  }
  det.dq_direct = false;  // the shape without direct rows stays launchable
  CHECK(can_implement(dense(), det, built).empty());
}

TEST_CASE("ping-pong: the Hopper forward's 128-row CTAs (two consumer warpgroups), and nothing else") {
  const auto built = hopper_build();
  LaunchShape wide = fwd(1, 0, FwdPath::sm90);  // dense D128: 128-row CTAs by default
  REQUIRE(fwd_rows_resolved(dense(), wide) == 128);
  CHECK(pingpong_reason(dense(), wide).empty());
  wide.pingpong = true;
  CHECK(can_implement(dense(), wide, built).empty());
  LaunchShape narrow = fwd(1, 64, FwdPath::sm90);  // one consumer warpgroup
  narrow.pingpong = true;
  LaunchShape packed = fwd(2, 0, FwdPath::sm90);  // GQA-packed: 64-row CTAs
  packed.pingpong = true;
  REQUIRE(fwd_rows_resolved(dense(), packed) == 64);
  LaunchShape portable = fwd(1, 0, FwdPath::sm80);
  portable.pingpong = true;
  LaunchShape backward = bwd(BwdPath::sm90);
  backward.pingpong = true;
  for (const LaunchShape& no : {narrow, packed, portable, backward}) {
    CHECK(pingpong_reason(dense(), no).find("128-row CTAs") != std::string::npos);
    CHECK(can_implement(dense(), no, built) == pingpong_reason(dense(), no));
  }
  narrow.pingpong = false;  // the shape without it stays launchable
  CHECK(can_implement(dense(), narrow, built).empty());
  CHECK(pingpong_reason(dense(8, 2, 256), wide).find("up to head_dim 128 (at 256") != std::string::npos);
}

TEST_CASE("next_tile=early: the persistent Hopper forward, and nothing else") {
  const auto built = hopper_build();
  LaunchShape wide = fwd(1, 0, FwdPath::sm90);
  wide.persistent = true;
  CHECK(next_tile_reason(wide).empty());
  wide.next_tile_early = true;
  CHECK(can_implement(dense(), wide, built).empty());
  LaunchShape narrow = fwd(1, 64, FwdPath::sm90);  // 64-row CTAs publish tiles the same way
  narrow.persistent = true;
  narrow.next_tile_early = true;
  CHECK(can_implement(dense(), narrow, built).empty());
  LaunchShape one_cta = wide;  // one CTA per tile: no next tile
  one_cta.persistent = false;
  LaunchShape portable = fwd(1, 0, FwdPath::sm80);
  portable.next_tile_early = true;
  LaunchShape backward = bwd(BwdPath::sm90);
  backward.next_tile_early = true;
  for (const LaunchShape& no : {one_cta, portable, backward}) {
    CHECK(next_tile_reason(no).find("needs the persistent Hopper forward") != std::string::npos);
    CHECK(can_implement(dense(), no, built) == next_tile_reason(no));
  }
  one_cta.next_tile_early = false;  // the shape without it stays launchable
  CHECK(can_implement(dense(), one_cta, built).empty());
}

TEST_CASE("persistent launches: the Hopper forward and the Hopper deterministic dQ kernel, and nothing else") {
  const auto built = hopper_build();
  LaunchShape s = fwd(1, 0, FwdPath::sm90);
  CHECK(persistent_reason(s, 64).empty());
  s.persistent = true;
  CHECK(can_implement(dense(), s, built).empty());
  LaunchShape packed = fwd(2, 0, FwdPath::sm90);
  packed.persistent = true;
  CHECK(can_implement(dense(), packed, built).empty());
  LaunchShape dq = bwd(BwdPath::sm90);  // deterministic: the Hopper dQ kernel
  dq.persistent = true;
  CHECK(can_implement(dense(), dq, built).empty());
  LaunchShape portable = fwd(1, 0, FwdPath::sm80);
  portable.persistent = true;
  LaunchShape atomic = bwd(BwdPath::sm90);  // dQ by the dK/dV kernel's atomics: no dQ kernel
  atomic.deterministic = false;
  atomic.persistent = true;
  LaunchShape portable_dq = bwd(BwdPath::sm80);
  portable_dq.persistent = true;
  for (const LaunchShape& no : {portable, atomic, portable_dq}) {
    CHECK_FALSE(persistent_reason(no, 128).empty());
    CHECK(can_implement(dense(), no, built) == persistent_reason(no, 128));
  }
  CHECK(persistent_reason(s, 128).empty());
  CHECK(persistent_reason(s, 256).find("up to head_dim 128 (at 256") != std::string::npos);
  portable.persistent = false;  // the shape without it stays launchable
  CHECK(can_implement(dense(), portable, built).empty());
}
