// `attnbench reference --problem P.json --out DIR [--inputs DIR_IN]` (docs/semantics.md
// section 11, NORMATIVE): writes the float64 inputs as used and the gold outputs
// and gradients as .npy files, for scripts that check kernels outside attnbench.
//
// Files in DIR (float64 unless noted, logical shapes of docs/semantics.md section 1):
//   q [B,Hq,Sq,Dqk], k [B,Hkv,Sk,Dqk], v [B,Hkv,Sk,Dv], do [B,Hq,Sq,Dv],
//   bias ([Hq, 2m+1] rel_bias | [size] offset_bias) and offset ([Sk], int64,
//   offset_bias) for learnable score mods,
//   o [B,Hq,Sq,Dv], lse [B,Hq,Sq] (-inf on fully masked rows), dq, dk, dv (shaped
//   like q, k, v) and dbias (shaped like bias) for learnable score mods.
// With --inputs, q, k, v, do (and bias, offset) are read from DIR_IN/<name>.npy
// (float64 or float32; offset int64, int32 accepted) and used exactly as given: no
// rounding to the problem dtype. Otherwise they come from make_inputs(p).
// Errors in the problem file or the inputs exit with code 2 and name the file and
// field; failures while writing exit with code 3.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "harness/cli/cli.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

namespace attnbench::cli {

namespace {

namespace fs = std::filesystem;

struct ReferenceOptions {
  std::string problem, out, inputs;
};

/// Logical shape of the learnable bias: [Hq, 2m+1] for rel_bias, [size] for offset_bias.
std::vector<int64_t> bias_shape(const Problem& p) {
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias) return {p.heads_q, 2 * p.score_mod.max_distance + 1};
  return {p.score_mod.size};
}

/// Read DIR/<name>.npy; it must exist and have `shape`.
npy::Array read_input(const fs::path& dir, const std::string& name, const std::vector<int64_t>& shape,
                      const std::string& meaning) {
  const fs::path path = dir / (name + ".npy");
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(path.string(), name,
                     "missing input file (expected " + meaning + " of shape " + npy::shape_str(shape) + ")");
  npy::Array a = npy::read(path.string(), name);
  if (a.shape != shape)
    throw InputError(path.string(), name,
                     "shape " + a.shape_str() + " does not match the problem: " + meaning + " needs " +
                         npy::shape_str(shape));
  return a;
}

/// A float input: float64 or float32, finite, exactly as stored.
std::vector<double> read_float_input(const fs::path& dir, const std::string& name,
                                     const std::vector<int64_t>& shape, const std::string& meaning) {
  const npy::Array a = read_input(dir, name, shape, meaning);
  const std::string path = (dir / (name + ".npy")).string();
  if (!npy::is_float(a.dtype))
    throw InputError(path, name,
                     std::string("dtype '") + npy::descr(a.dtype) + "', expected float64 ('<f8') or float32 ('<f4')");
  std::vector<double> v = a.to_double();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw InputError(path, name, "element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                                       "; inputs must be finite");
  return v;
}

ProblemData read_inputs(const Problem& p, const fs::path& dir) {
  ProblemData in;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape, const std::string& meaning) {
    HostTensor t(shape);
    t.data = read_float_input(dir, name, shape, meaning);
    return t;
  };
  in.q = tensor("q", {p.batch, p.heads_q, p.seq_q, p.head_dim}, "q [B,Hq,Sq,Dqk]");
  in.k = tensor("k", {p.batch, p.heads_kv, p.seq_k, p.head_dim}, "k [B,Hkv,Sk,Dqk]");
  in.v = tensor("v", {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, "v [B,Hkv,Sk,Dv]");
  in.d_o = tensor("do", {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "do [B,Hq,Sq,Dv]");
  if (p.has_learnable_bias()) {
    const bool rel = p.score_mod.kind == ScoreMod::Kind::rel_bias;
    in.bias = read_float_input(dir, "bias", bias_shape(p), rel ? "rel_bias bias [Hq, 2m+1]" : "offset_bias bias [size]");
  }
  if (p.offset_numel() > 0) {
    const npy::Array a = read_input(dir, "offset", {p.seq_k}, "offset_bias offset [Sk]");
    const std::string path = (dir / "offset.npy").string();
    if (npy::is_float(a.dtype))
      throw InputError(path, "offset", std::string("dtype '") + npy::descr(a.dtype) + "', expected int64 ('<i8')");
    const std::vector<int64_t> off = a.to_int64();
    for (size_t j = 0; j < off.size(); ++j) {
      if (off[j] < 0 || off[j] >= p.score_mod.size)
        throw InputError(path, "offset", "offset[" + std::to_string(j) + "] = " + std::to_string(off[j]) +
                                             " outside [0, size = " + std::to_string(p.score_mod.size) + ")");
      in.offset.push_back(static_cast<int32_t>(off[j]));
    }
  }
  return in;
}

int run_reference(const ReferenceOptions& o) {
  const Problem p = problem_from_json(jsonu::load_file(o.problem), o.problem);
  const ProblemData in = o.inputs.empty() ? make_inputs(p) : read_inputs(p, o.inputs);

  const auto t0 = std::chrono::steady_clock::now();
  const AttentionOutputs out = reference::gold(p, in, /*grads=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const fs::path dir(o.out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(o.out, "--out", "cannot create the output directory: " + ec.message());

  int files = 0;
  auto put = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& data) {
    npy::write((dir / (name + ".npy")).string(), shape, data.data());
    ++files;
  };
  put("q", in.q.shape, in.q.data);
  put("k", in.k.shape, in.k.data);
  put("v", in.v.shape, in.v.data);
  put("do", in.d_o.shape, in.d_o.data);
  if (p.has_learnable_bias()) put("bias", bias_shape(p), in.bias);
  if (p.offset_numel() > 0) {
    const std::vector<int64_t> off(in.offset.begin(), in.offset.end());
    npy::write((dir / "offset.npy").string(), {p.seq_k}, off.data());
    ++files;
  }
  put("o", out.o.shape, out.o.data);
  put("lse", out.lse.shape, out.lse.data);
  put("dq", out.dq.shape, out.dq.data);
  put("dk", out.dk.shape, out.dk.data);
  put("dv", out.dv.shape, out.dv.data);
  if (p.has_learnable_bias()) put("dbias", bias_shape(p), out.dbias);

  std::printf("attnbench reference: wrote %d files to %s (inputs %s; float64 gold in %.3f s, %.3g GFLOP)\n", files,
              o.out.c_str(), o.inputs.empty() ? "generated from the seed" : o.inputs.c_str(), seconds,
              reference::estimated_flops(p, true) / 1e9);
  return kExitOk;
}

}  // namespace

void add_reference_command(CLI::App& app, Action& action) {
  auto opts = std::make_shared<ReferenceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "reference",
      "write float64 inputs and reference outputs (o, lse, dq, dk, dv, dbias) of a problem as .npy files");
  cmd->add_option("--problem", opts->problem, "problem file (JSON, docs/semantics.md section 10)")->required();
  cmd->add_option("--out", opts->out, "output directory (created if missing)")->required();
  cmd->add_option("--inputs", opts->inputs,
                  "directory with q, k, v, do (and bias, offset) .npy files to use instead of seeded inputs");
  cmd->callback([&action, opts] { action = [opts] { return run_reference(*opts); }; });
}

}  // namespace attnbench::cli
