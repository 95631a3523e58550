// Request writing and result reading of the peer file protocol (peer_protocol.hpp).
#include "backends/peers/peer_protocol.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "harness/model/dtype_codec.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::peers {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The shape of the learnable bias tensor (bias.npy, dbias.npy): [Hq, 2m+1] for
/// rel_bias (m = max_distance), else [bias_numel()].
std::vector<int64_t> bias_shape(const Problem& p) {
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias) return {p.heads_q, 2 * p.score_mod.max_distance + 1};
  return {p.bias_numel()};
}

}  // namespace

// ------------------------------------------------------------------ request

json make_request(const std::string& peer, const Problem& p, const RunContext& ctx) {
  json r;
  r["protocol"] = kProtocolVersion;
  r["peer"] = peer;
  r["problem"] = "problem.json";
  json inputs = {{"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"do", "do.npy"}};
  if (p.has_learnable_bias()) inputs["bias"] = "bias.npy";
  if (p.offset_numel() > 0) inputs["offset"] = "offset.npy";
  r["inputs"] = inputs;
  r["backward"] = ctx.backward;
  json passes = json::array();
  if (ctx.timing) {
    passes.push_back("fwd");
    if (ctx.backward) {
      passes.push_back("bwd");
      passes.push_back("fwd_bwd");
    }
  }
  r["passes"] = passes;
  r["timing"] = ctx.policy.to_json();
  r["timing"]["hold_stream"] = ctx.hold_stream;
  r["determinism"] = ctx.determinism;
  r["device"] = ctx.device;
  r["result"] = "result.json";
  if (ctx.options.is_object() && !ctx.options.empty()) r["options"] = ctx.options;
  return r;
}

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// Write input `t` as the 16-bit bits of `dtype` (uint16, when `dtype` is fp16 or
/// bf16 and every value is one: make_inputs rounds to the dtype), else float32 when
/// every value is a float32, else float64: nothing is rounded on the way
/// (representable()), and a bf16 row writes a quarter of the float64 bytes (a
/// B32 S512 H16 D64 row wrote 537 MB of float64 per tensor before float32, half of
/// that before the bits).
void write_tensor(const std::string& path, const HostTensor& t, const std::vector<int64_t>& want, const char* name,
                  DType dtype) {
  if (t.shape != want || static_cast<int64_t>(t.data.size()) != t.numel())
    throw std::invalid_argument(std::string("peer inputs: ") + name + " does not have the problem's shape");
  std::vector<DType> narrow_types = {dtype};
  if (dtype != DType::fp32) narrow_types.push_back(DType::fp32);
  for (DType narrow : narrow_types) {
    if (!representable(t.data, narrow)) continue;
    const EncodedBuffer bits = encode(t.data, narrow);
    return npy::write(path, narrow == DType::fp32 ? npy::Dtype::f4 : npy::Dtype::u2, t.shape, bits.data());
  }
  npy::write(path, t.shape, t.data.data());  // keep float64
}

}  // namespace

void write_work_dir(const std::string& dir, const std::string& peer, const Problem& p, const ProblemData& in,
                    const RunContext& ctx) {
  const fs::path d(dir);
  write_tensor((d / "q.npy").string(), in.q, {p.batch, p.heads_q, p.seq_q, p.head_dim}, "q", p.dtype);
  write_tensor((d / "k.npy").string(), in.k, {p.batch, p.heads_kv, p.seq_k, p.head_dim}, "k", p.dtype);
  write_tensor((d / "v.npy").string(), in.v, {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, "v", p.dtype);
  write_tensor((d / "do.npy").string(), in.d_o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "do", p.dtype);
  if (p.has_learnable_bias()) {
    if (static_cast<int64_t>(in.bias.size()) != p.bias_numel())
      throw std::invalid_argument("peer inputs: bias has " + std::to_string(in.bias.size()) + " elements, expected " +
                                  std::to_string(p.bias_numel()));
    npy::write((d / "bias.npy").string(), bias_shape(p), in.bias.data());
  }
  if (p.offset_numel() > 0) {
    if (static_cast<int64_t>(in.offset.size()) != p.offset_numel())
      throw std::invalid_argument("peer inputs: offset has the wrong length");
    std::vector<int64_t> off(in.offset.begin(), in.offset.end());
    npy::write((d / "offset.npy").string(), {p.offset_numel()}, off.data());
  }
  write_text((d / "problem.json").string(), to_json(p).dump(1) + "\n");
  write_text((d / "request.json").string(), make_request(peer, p, ctx).dump(1) + "\n");
}

// ------------------------------------------------------------------ result

namespace {

const char* pass_key(int i) {
  static const char* keys[] = {"fwd", "bwd", "fwd_bwd"};
  return keys[i];
}

[[noreturn]] void bad_result(const std::string& file, const std::string& field, const std::string& what) {
  throw PeerProtocolError(file + (field.empty() ? std::string() : ": " + field) + ": " + what);
}

std::optional<double> opt_number(const json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) bad_result(file, std::string("/") + key, "expected a number or null, got " + j[key].dump());
  return j[key].get<double>();
}

/// result.json "timings_ms" ({fwd, bwd, fwd_bwd}: arrays of finite non-negative
/// milliseconds, each optional) into r.samples; PeerProtocolError on anything else.
void read_timings(const json& j, const std::string& file, PeerResult& r) {
  if (!j.contains("timings_ms") || j["timings_ms"].is_null()) return;
  const json& t = j["timings_ms"];
  if (!t.is_object()) bad_result(file, "/timings_ms", "expected an object {fwd, bwd, fwd_bwd}");
  for (auto it = t.begin(); it != t.end(); ++it)
    if (it.key() != "fwd" && it.key() != "bwd" && it.key() != "fwd_bwd")
      bad_result(file, "/timings_ms/" + it.key(), "unknown pass (expected fwd, bwd or fwd_bwd)");
  for (int i = 0; i < 3; ++i) {
    if (!t.contains(pass_key(i)) || t[pass_key(i)].is_null()) continue;
    const json& a = t[pass_key(i)];
    const std::string path = std::string("/timings_ms/") + pass_key(i);
    if (!a.is_array()) bad_result(file, path, "expected an array of milliseconds");
    std::vector<double> v;
    for (size_t n = 0; n < a.size(); ++n) {
      if (!a[n].is_number()) bad_result(file, path + "/" + std::to_string(n), "expected a number, got " + a[n].dump());
      const double x = a[n].get<double>();
      if (!std::isfinite(x) || x < 0)
        bad_result(file, path + "/" + std::to_string(n), "expected a finite non-negative time, got " + a[n].dump());
      v.push_back(x);
    }
    r.samples[i] = std::move(v);
  }
}

/// Output `key` of shape `shape` (or, with `allow_flat`, the same elements as one
/// dimension) as float64: from float64 / float32 values, or from uint16 holding the
/// bits of the problem's 16-bit `dtype`.
HostTensor read_output(const std::string& dir, const json& outputs, const char* key, const std::vector<int64_t>& shape,
                       const std::string& result_file, DType dtype, bool allow_flat = false) {
  std::string name = std::string(key) + ".npy";
  if (outputs.contains(key)) {
    if (!outputs[key].is_string()) bad_result(result_file, std::string("/outputs/") + key, "expected a file name");
    name = outputs[key].get<std::string>();
  }
  const fs::path path = fs::path(name).is_absolute() ? fs::path(name) : fs::path(dir) / name;
  npy::Array a;
  try {
    a = npy::read(path.string(), key);
  } catch (const std::exception& e) {
    throw PeerProtocolError(std::string("peer output ") + key + ": " + e.what());
  }
  const bool bits = a.dtype == npy::Dtype::u2 && (dtype == DType::fp16 || dtype == DType::bf16);
  if (!npy::is_float(a.dtype) && !bits)
    throw PeerProtocolError(path.string() + ": " + key + " must be float64, float32 or (fp16 / bf16 problems) uint16 bits, got " +
                            npy::descr(a.dtype));
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  const bool flat_ok = (shape.size() == 1 || allow_flat) && a.shape.size() == 1 && a.numel() == numel;
  if (a.shape != shape && !flat_ok) {
    std::string want = "(";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    want += shape.size() == 1 ? ",)" : ")";
    throw PeerProtocolError(path.string() + ": " + key + " has shape " + a.shape_str() + ", expected " + want);
  }
  HostTensor t;
  t.shape = shape;
  if (bits) {
    t.data.resize(static_cast<size_t>(numel));
    parallel_chunks(t.data.size(), [&](size_t begin, size_t end) {
      decode_span(a.raw.data(), begin, end - begin, dtype, t.data.data() + begin);
    });
  } else {
    t.data = a.to_double();
  }
  return t;
}

}  // namespace

PeerResult read_result(const std::string& dir, const Problem& p, bool with_grads) {
  const std::string file = (fs::path(dir) / "result.json").string();
  std::ifstream f(file, std::ios::binary);
  if (!f) throw PeerProtocolError(file + ": cannot read (the worker wrote no result)");
  PeerResult r;
  std::stringstream contents;
  contents << f.rdbuf();
  try {
    r.raw = jsonu::parse_text(contents.str(), file);  // depth limit, finite numbers, unique keys
  } catch (const InputError& e) {
    throw PeerProtocolError(e.what());  // names the file, pointer and value
  }
  const json& j = r.raw;
  if (!j.is_object()) bad_result(file, "", "expected a JSON object");
  if (j.contains("protocol") && j["protocol"] != kProtocolVersion)
    bad_result(file, "/protocol", "protocol " + j["protocol"].dump() + ", expected " + std::to_string(kProtocolVersion));
  if (!j.contains("status") || !j["status"].is_string()) bad_result(file, "/status", "missing or not a string");
  r.status = j["status"].get<std::string>();
  if (r.status != "ok" && r.status != "unsupported" && r.status != "error")
    bad_result(file, "/status", "expected ok, unsupported or error, got \"" + r.status + "\"");
  auto text = [&](const char* key) -> std::string {
    if (!j.contains(key) || j[key].is_null()) return {};
    if (!j[key].is_string()) bad_result(file, std::string("/") + key, "expected a string");
    return j[key].get<std::string>();
  };
  r.reason = text("reason");
  r.message = text("message");
  if (r.status == "unsupported" && r.reason.empty()) r.reason = "the peer reported unsupported without a reason";
  if (r.status == "error" && r.message.empty()) r.message = "the peer reported an error without a message";

  read_timings(j, file, r);
  r.compile_ms = opt_number(j, "compile_ms", file);
  r.setup_ms = opt_number(j, "setup_ms", file);
  if (j.contains("deterministic") && !j["deterministic"].is_null()) {
    if (!j["deterministic"].is_boolean()) bad_result(file, "/deterministic", "expected true, false or null");
    r.deterministic = j["deterministic"].get<bool>();
  }
  if (j.contains("executed_pairs") && !j["executed_pairs"].is_null()) {
    if (!j["executed_pairs"].is_number_integer() || j["executed_pairs"].get<int64_t>() < 0)
      bad_result(file, "/executed_pairs", "expected a non-negative integer");
    r.executed_pairs = j["executed_pairs"].get<int64_t>();
  }
  if (j.contains("memory") && j["memory"].is_object() && j["memory"].contains("allocated_bytes") &&
      j["memory"]["allocated_bytes"].is_number_integer())
    r.allocated_bytes = j["memory"]["allocated_bytes"].get<int64_t>();

  if (r.status != "ok") return r;
  const json outputs = j.contains("outputs") && j["outputs"].is_object() ? j["outputs"] : json::object();
  r.outputs.o = read_output(dir, outputs, "o", {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, file, p.dtype);
  // LSE and dbias are float32 quantities: never 16-bit bits
  r.outputs.lse = read_output(dir, outputs, "lse", {p.batch, p.heads_q, p.seq_q}, file, DType::fp32);
  if (with_grads) {
    r.outputs.dq = read_output(dir, outputs, "dq", {p.batch, p.heads_q, p.seq_q, p.head_dim}, file, p.dtype);
    r.outputs.dk = read_output(dir, outputs, "dk", {p.batch, p.heads_kv, p.seq_k, p.head_dim}, file, p.dtype);
    r.outputs.dv = read_output(dir, outputs, "dv", {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, file, p.dtype);
    if (p.has_learnable_bias())
      r.outputs.dbias = read_output(dir, outputs, "dbias", bias_shape(p), file, DType::fp32, true).data;
  }
  return r;
}

}  // namespace attnbench::peers
