// GPU tests of the head dims beyond 64 and 128 (96: Phi-style; 256: Gemma-style)
// on every backend of the fused kernel family (flash, varlen, flex), against the
// float64 reference under the correctness rule: ragged lengths around the tiles,
// Sq != Sk in both causal alignments, GQA 4:1 and MQA, sliding windows, padding,
// documents, softcap and alibi, flex's learnable biases with dBias, both dtypes,
// and both dQ modes (deterministic: bitwise repeatable), on the automatic
// kernel paths (on an H100, head dim 96: the Hopper kernels in 128-wide tiles;
// 256: the Hopper forward and the portable mma.sync backward) and on the portable ones. The tests also pin
// the path choice and the reasons for what stays unsupported (Dqk != Dv, fp32,
// head dims without an instance).
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "backends/kernels/attn_launch.hpp"
#include "harness/backend/backend.hpp"
#include "tests/gpu/gpu_check.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::test;

namespace {

std::unique_ptr<Backend> variant(const std::string& spec) {
  std::unique_ptr<Backend> be = BackendRegistry::create_variant(spec);
  REQUIRE(be);
  return be;
}

/// flash in both dQ modes (deterministic: bitwise checked) on the automatic
/// paths (the Hopper kernels at head dim 96 on an H100), and on the portable ones;
/// where the Hopper backward runs (96), atomic with every direct dQ row stored by
/// the dK/dV kernel (dq_direct=on: the 96 columns of a 128-wide tile).
void flash_case(const Problem& p) {
  check_gpu_case(*variant("flash[deterministic=true]"), p, true);
  check_gpu_case(*variant("flash[deterministic=false]"), p, false);
  check_gpu_case(*variant("flash[deterministic=true,fwd_path=sm80,bwd_path=sm80]"), p, true);
  if (kernels::fwd_sm90_usable() && p.head_dim <= 128)
    check_gpu_case(*variant("flash[deterministic=false,dq_direct=on]"), p, false);
}

constexpr int64_t kDims[] = {96, 256};

}  // namespace

TEST_CASE("head dims 96 and 256: the automatic paths, and the refusal of the Hopper backward at 256") {
  // Head dim 96 takes the Hopper kernels where head dim 128 does (128-wide tiles); 256 the Hopper forward
  // and the portable backward.
  const Problem p128 = with_causal(make_problem(1, 2, 1, 130, 130, 128, DType::bf16));
  const nlohmann::json e128 = variant("flash")->prepare(p128, make_inputs(p128))->extra();
  const Problem p96 = with_causal(make_problem(1, 2, 1, 130, 130, 96, DType::bf16));
  const nlohmann::json e96 = variant("flash")->prepare(p96, make_inputs(p96))->extra();
  CHECK(e96["fwd_path"] == e128["fwd_path"]);
  CHECK(e96["bwd_path"] == e128["bwd_path"]);
  const Problem p256 = with_causal(make_problem(1, 2, 1, 130, 130, 256, DType::bf16));
  const nlohmann::json e256 = variant("flash")->prepare(p256, make_inputs(p256))->extra();
  CHECK(e256["fwd_path"] == e128["fwd_path"]);
  CHECK(e256["bwd_path"] == "sm80");
  if (e128["fwd_path"] == "sm90") {  // asked for, the Hopper backward at 256 is refused with the reason
    CHECK(variant("flash[fwd_path=sm90]")->supports(p256).ok);
    const Support s = variant("flash[bwd_path=sm90]")->supports(p256);
    CHECK_FALSE(s.ok);
    CHECK(s.reason.find("no Hopper (sm90) backward kernel for head_dim 256") != std::string::npos);
  }
}

TEST_CASE("head dims: what stays unsupported says why") {
  Problem mla = make_problem(1, 2, 1, 64, 64, 192, DType::bf16);
  mla.head_dim_v = 128;
  for (const char* be : {"flash", "varlen", "flex"}) {
    CAPTURE(be);
    const Support s = variant(be)->supports(mla);
    CHECK_FALSE(s.ok);
    CHECK(s.reason.find("head_dim 192 != head_dim_v 128") != std::string::npos);
  }
  const Support f32 = variant("flash")->supports(make_problem(1, 2, 1, 64, 64, 128, DType::fp32));
  CHECK_FALSE(f32.ok);
  CHECK(f32.reason.find("fp32") != std::string::npos);
}

TEST_CASE("flash at head dims 96 and 256") {
  for (int64_t d : kDims) {
    CAPTURE(d);
    flash_case(make_problem(2, 4, 1, 131, 131, d, DType::bf16, Layout::bshd, 960 + d));  // MQA, ragged
    flash_case(with_causal(make_problem(1, 8, 2, 200, 333, d, DType::fp16, Layout::bhsd, 961 + d)));  // GQA 4:1
    flash_case(with_causal(make_problem(1, 4, 2, 333, 200, d, DType::bf16, Layout::bshd, 962 + d),
                           CausalAlign::top_left));
    flash_case(with_score_mod(with_window(with_causal(make_problem(1, 4, 4, 300, 300, d, DType::bf16)), 70, 0),
                        ScoreMod::Kind::softcap, 30.0));
    flash_case(with_score_mod(with_padding(make_problem(3, 4, 2, 150, 150, d, DType::fp16, Layout::bshd, 963 + d),
                                     {150, 3, 90}, {150, 64, 1}),
                        ScoreMod::Kind::alibi));
  }
}

TEST_CASE("varlen at head dims 96 and 256: documents, THD with padding, chunked prefill") {
  for (int64_t d : kDims) {
    CAPTURE(d);
    const Problem docs = with_causal(
        with_documents(make_problem(2, 8, 2, 300, 300, d, DType::bf16, Layout::bshd, 970 + d), {{100, 77, 123}, {300}}));
    check_gpu_case(*variant("varlen[deterministic=true]"), docs, true);
    check_gpu_case(*variant("varlen[deterministic=false]"), docs, false);
    if (kernels::fwd_sm90_usable() && d <= 128)
      check_gpu_case(*variant("varlen[deterministic=false,dq_direct=on]"), docs, false);
    const Problem thd = with_padding(make_problem(3, 4, 1, 150, 150, d, DType::bf16, Layout::thd, 971 + d),
                                     {150, 3, 90}, {150, 3, 90});
    check_gpu_case(*variant("varlen[deterministic=true]"), thd, true);
    const Problem chunk = with_causal(make_problem(2, 4, 1, 100, 700, d, DType::fp16, Layout::bhsd, 972 + d));
    check_gpu_case(*variant("varlen[deterministic=true]"), chunk, true);
  }
}

TEST_CASE("flex at head dims 96 and 256: BlockMask walk, schedules, learnable biases") {
  for (int64_t d : kDims) {
    CAPTURE(d);
    const Problem docs = with_causal(with_documents(
        make_problem(2, 4, 2, 300, 300, d, DType::bf16, Layout::bshd, 980 + d), {{100, 77, 123}, {150, 150}}));
    check_gpu_case(*variant("flex"), docs, true);
    check_gpu_case(*variant("flex[schedule=block_mask]"), docs, true);
    check_gpu_case(*variant("flex[schedule=block_mask,block=64]"), docs, true);
    const Problem rel = with_score_mod(with_causal(make_problem(1, 4, 1, 200, 200, d, DType::bf16, Layout::bshd, 981 + d)),
                                ScoreMod::Kind::rel_bias, 40);
    check_gpu_case(*variant("flex[dbias=deterministic]"), rel, true);
    check_gpu_case(*variant("flex[dbias=atomic]"), rel, false);
    const Problem off = with_score_mod(with_window(make_problem(1, 2, 2, 190, 190, d, DType::fp16, Layout::bshd, 982 + d), 64, 64),
                                 ScoreMod::Kind::offset_bias, 13);
    check_gpu_case(*variant("flex[dbias=deterministic]"), off, true);
  }
}
