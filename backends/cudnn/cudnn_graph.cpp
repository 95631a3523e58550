// cuDNN SDPA operation graphs through the backend API (see cudnn_graph.hpp).
//
// Written from the cuDNN backend API reference and from reading how
// cudnn-frontend lowers its SDPA nodes (matmul, pointwise, reduction and reshape
// operations over virtual tensors); no frontend code is used.
#include "backends/cudnn/cudnn_graph.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace attnbench::cudnn_sdpa {

namespace {

using Dims = std::array<int64_t, 4>;

/// "CUDNN_STATUS_X (last error text)" of a failed call that is not fatal by itself.
std::string status_text(cudnnStatus_t s) {
  std::string out = cudnnGetErrorString(s);
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  if (last[0]) out += std::string(" (") + last + ")";
  return out;
}

bool is_not_supported(cudnnStatus_t s) { return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED; }

/// cudnnBackendSetAttribute, checked; a failure names the descriptor and attribute.
void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, const char* attr_name,
              cudnnBackendAttributeType_t type, int64_t count, const void* value, const std::string& what) {
  try {
    ATTNBENCH_CHECK(cudnnBackendSetAttribute(d, attr, type, count, value));
  } catch (const device::DeviceError& e) {
    throw device::DeviceError("cuDNN graph: " + what + ": setting " + attr_name + " failed: " + e.what());
  }
}
#define ATTNBENCH_ATTR(a) a, #a

/// cudnnBackendFinalize, checked. A NOT_SUPPORTED status throws GraphUnsupported.
void finalize(cudnnBackendDescriptor_t d, const std::string& what) {
  const cudnnStatus_t s = cudnnBackendFinalize(d);
  if (s == CUDNN_STATUS_SUCCESS) return;
  if (is_not_supported(s))
    throw GraphUnsupported("cuDNN graph: finalizing " + what + " failed: " + status_text(s));
  try {
    ATTNBENCH_CHECK(s);
  } catch (const device::DeviceError& e) {
    throw device::DeviceError("cuDNN graph: finalizing " + what + " failed: " + e.what());
  }
}

/// A finalized engine descriptor: engine `index` of operation graph `graph`.
Descriptor make_engine(cudnnBackendDescriptor_t graph, int64_t index) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  set_attr(engine.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINE_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
           "engine");
  set_attr(engine.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINE_GLOBAL_INDEX), CUDNN_TYPE_INT64, 1, &index, "engine");
  finalize(engine.get(), "engine " + std::to_string(index));
  return engine;
}

/// `n` new descriptors of `type` (owned) and their handles, to receive an
/// array-valued attribute through cudnnBackendGetAttribute.
struct DescriptorArray {
  std::vector<Descriptor> owned;
  std::vector<cudnnBackendDescriptor_t> raw;
};
DescriptorArray make_descriptors(cudnnBackendDescriptorType_t type, int64_t n, const std::string& what) {
  DescriptorArray a;
  for (int64_t i = 0; i < n; ++i) {
    a.owned.emplace_back(type, what);
    a.raw.push_back(a.owned.back().get());
  }
  return a;
}

cudnnDataType_t io_type(DType t) { return t == DType::fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

/// A tensor of the graph under construction.
struct T {
  cudnnBackendDescriptor_t d = nullptr;
  int64_t uid = 0;
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  Dims dim{}, str{};
  std::string name;
  int64_t numel() const { return dim[0] * dim[1] * dim[2] * dim[3]; }
};

/// Builds one operation graph into a BuiltGraph.
class Builder {
 public:
  Builder(const GraphSpec& s, BuiltGraph& out) : s_(s), out_(out) {}

  const GraphSpec& spec() const { return s_; }

  // ------------------------------------------------------------ tensors
  T tensor(const std::string& name, int64_t uid, cudnnDataType_t dt, Dims dim, Dims str, bool is_virtual,
           bool by_value, const T* ragged) {
    const std::string what = "tensor '" + name + "' (uid " + std::to_string(uid) + ")";
    Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t alignment = 16;
    set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &dt, what);
    set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 4, dim.data(), what);
    set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 4, str.data(), what);
    set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, &uid, what);
    set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, &alignment, what);
    if (is_virtual) {
      const bool yes = true;
      set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    }
    if (by_value) {
      const bool yes = true;
      set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, 1, &yes, what);
    }
    if (ragged && ragged->d) {
      cudnnBackendDescriptor_t r = ragged->d;
      set_attr(d.get(), ATTNBENCH_ATTR(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
               what);
    }
    finalize(d.get(), what);
    T t;
    t.d = d.get();
    t.uid = uid;
    t.dt = dt;
    t.dim = dim;
    t.str = str;
    t.name = name;
    out_.names[uid] = name;
    out_.keep.push_back(std::move(d));
    return t;
  }

  /// A non-virtual tensor bound to device memory in the variant pack.
  T dev(const std::string& name, int64_t uid, cudnnDataType_t dt, Dims dim, Dims str, const T* ragged = nullptr) {
    T t = tensor(name, uid, dt, dim, str, false, false, ragged);
    out_.device_uids.push_back(uid);
    return t;
  }
  /// A virtual (intermediate) tensor.
  T virt(const std::string& name, cudnnDataType_t dt, Dims dim, Dims str, const T* ragged = nullptr) {
    return tensor(name, next_virtual_++, dt, dim, str, true, false, ragged);
  }
  /// A by-value float32 scalar [1,1,1,1].
  T scalar_f(const std::string& name, float v) { return scalar(name, CUDNN_DATA_FLOAT, &v, sizeof(v)); }
  /// A by-value int32 scalar [1,1,1,1].
  T scalar_i(const std::string& name, int32_t v) { return scalar(name, CUDNN_DATA_INT32, &v, sizeof(v)); }
  /// The mask fill value: -inf, or the lowest float for cuDNN < 9.10 (as cudnn-frontend does).
  T neg_inf() {
    return scalar_f("mask_value",
                    s_.neg_inf_lowest ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity());
  }

  // ------------------------------------------------------------ operations
  /// Pointwise y = mode(x [, b [, t]]) into an existing tensor.
  void pw_into(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t compute, const T& x,
               const T* b, const T* t, const T& y, int64_t axis = -1) {
    const std::string what = "pointwise '" + name + "'";
    Descriptor pd(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set_attr(pd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set_attr(pd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      set_attr(pd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(pd.get(), what + " descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    cudnnBackendDescriptor_t pdd = pd.get(), xd = x.d, yd = y.d;
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), CUDNN_TYPE_BACKEND_DESCRIPTOR,
             1, &pdd, what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd,
             what);
    if (b) {
      cudnnBackendDescriptor_t bd = b->d;
      set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &bd, what);
    }
    if (t) {
      cudnnBackendDescriptor_t td = t->d;
      set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &td, what);
    }
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd,
             what);
    set_alphas(op.get(), what);
    finalize(op.get(), what);
    add_op(std::move(pd), std::move(op));
  }

  /// Unary pointwise into a new virtual tensor shaped like x.
  T pw1(const std::string& name, cudnnPointwiseMode_t mode, const T& x, cudnnDataType_t out_dt = CUDNN_DATA_FLOAT,
        cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    T y = virt(name, out_dt, x.dim, x.str);
    pw_into(name, mode, compute, x, nullptr, nullptr, y, axis);
    return y;
  }
  /// Binary pointwise into a new virtual tensor shaped like the larger operand
  /// (the other one broadcasts).
  T pw2(const std::string& name, cudnnPointwiseMode_t mode, const T& x, const T& b,
        cudnnDataType_t out_dt = CUDNN_DATA_FLOAT, cudnnDataType_t compute = CUDNN_DATA_FLOAT) {
    const T& shape = x.numel() >= b.numel() ? x : b;
    T y = virt(name, out_dt, shape.dim, shape.str);
    pw_into(name, mode, compute, x, &b, nullptr, y);
    return y;
  }
  /// y = t ? x : b (BINARY_SELECT) into a new virtual tensor shaped like x.
  T select(const std::string& name, const T& x, const T& b, const T& t) {
    T y = virt(name, CUDNN_DATA_FLOAT, x.dim, x.str);
    pw_into(name, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, &b, &t, y);
    return y;
  }
  /// Activation backward dx = mode(dy, x) (e.g. TANH_BWD: dy * (1 - tanh(x)^2)).
  T pw_bwd(const std::string& name, cudnnPointwiseMode_t mode, const T& dy, const T& x) {
    const std::string what = "pointwise '" + name + "'";
    T dx = virt(name, CUDNN_DATA_FLOAT, dy.dim, dy.str);
    Descriptor pd(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set_attr(pd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set_attr(pd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    finalize(pd.get(), what + " descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    cudnnBackendDescriptor_t pdd = pd.get(), xd = x.d, dyd = dy.d, dxd = dx.d;
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), CUDNN_TYPE_BACKEND_DESCRIPTOR,
             1, &pdd, what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dyd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dxd,
             what);
    set_alphas(op.get(), what);
    finalize(op.get(), what);
    add_op(std::move(pd), std::move(op));
    return dx;
  }

  /// c = a @ b (batched over the first two dims, float32 accumulation), with
  /// optional per-batch M / N / K overrides (int32 [n,1,1,1]).
  void matmul(const std::string& name, const T& a, const T& b, const T& c, const T* m_override,
              const T* n_override, const T* k_override) {
    const std::string what = "matmul '" + name + "'";
    Descriptor md(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set_attr(md.get(), ATTNBENCH_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    finalize(md.get(), what + " descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    cudnnBackendDescriptor_t ad = a.d, bd = b.d, cd = c.d, mdd = md.get();
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ad,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mdd,
             what);
    if (m_override) {
      cudnnBackendDescriptor_t o = m_override->d;
      set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC),
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o, what);
    }
    if (n_override) {
      cudnnBackendDescriptor_t o = n_override->d;
      set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC),
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o, what);
    }
    if (k_override) {
      cudnnBackendDescriptor_t o = k_override->d;
      set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC),
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o, what);
    }
    finalize(op.get(), what);
    add_op(std::move(md), std::move(op));
  }

  /// y = reduce_op(x) over the dims where y has extent 1 (or the GQA group).
  void reduce(const std::string& name, cudnnReduceTensorOp_t mode, const T& x, const T& y) {
    const std::string what = "reduction '" + name + "'";
    Descriptor rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set_attr(rd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    set_attr(rd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
             what);
    if (s_.version >= 91100) {
      const bool deterministic = false;
      set_attr(rd.get(), ATTNBENCH_ATTR(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC), CUDNN_TYPE_BOOLEAN, 1,
               &deterministic, what);
    }
    finalize(rd.get(), what + " descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    cudnnBackendDescriptor_t rdd = rd.get(), xd = x.d, yd = y.d;
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rdd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd,
             what);
    finalize(op.get(), what);
    add_op(std::move(rd), std::move(op));
  }

  /// y = x viewed with y's dims and strides (a transpose view for SDPA).
  void reshape(const std::string& name, const T& x, const T& y) {
    const std::string what = "reshape '" + name + "'";
    Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    cudnnBackendDescriptor_t xd = x.d, yd = y.d;
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd,
             what);
    set_attr(op.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd,
             what);
    finalize(op.get(), what);
    add_op(Descriptor(), std::move(op));
  }

  /// Finalize the operation graph, run the heuristics and finalize the first
  /// engine config that works into out_.plan.
  void finish(cudnnHandle_t handle) {
    const std::string what = "operation graph [" + s_.describe() + "]";
    Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
    set_attr(graph.get(), ATTNBENCH_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<int64_t>(ops_.size()), ops_.data(), what);
    // CUDNN_ATTR_OPERATIONGRAPH_HANDLE (800) is marked deprecated in cuDNN 9.19
    // headers but is still how the heuristics learn the device; cudnn-frontend
    // sets it too. The numeric value avoids the deprecation warning.
    set_attr(graph.get(), static_cast<cudnnBackendAttributeName_t>(800), "CUDNN_ATTR_OPERATIONGRAPH_HANDLE",
             CUDNN_TYPE_HANDLE, 1, &handle, what);
    finalize(graph.get(), what);
    out_.ops = static_cast<int>(ops_.size());

    std::string tried;
    const std::pair<cudnnBackendHeurMode_t, const char*> modes[] = {{CUDNN_HEUR_MODE_A, "A"},
                                                                   {CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}};
    for (const auto& [mode, mode_name] : modes) {
      const std::string hwhat = "engine heuristics (mode " + std::string(mode_name) + ") for " + what;
      Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, hwhat);
      cudnnBackendDescriptor_t gd = graph.get();
      set_attr(heur.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &gd, hwhat);
      cudnnBackendHeurMode_t m = mode;
      set_attr(heur.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, &m, hwhat);
      const cudnnStatus_t hs = cudnnBackendFinalize(heur.get());
      if (hs != CUDNN_STATUS_SUCCESS) {
        tried += std::string(" heuristics ") + mode_name + ": " + status_text(hs) + ";";
        continue;
      }
      int64_t count = 0;
      ATTNBENCH_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
      DescriptorArray cfgs = make_descriptors(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count, hwhat + " result");
      std::vector<cudnnBackendDescriptor_t>& raw = cfgs.raw;
      int64_t got = 0;
      if (count > 0)
        ATTNBENCH_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
      if (got == 0) tried += std::string(" heuristics ") + mode_name + ": no engine configs;";
      out_.heuristic_count = static_cast<int>(got);
      for (int64_t i = 0; i < got; ++i) {
        Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        cudnnBackendDescriptor_t cfg = raw[static_cast<size_t>(i)];
        set_attr(plan.get(), ATTNBENCH_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 1, &cfg, "execution plan for " + what);
        const cudnnStatus_t ps = cudnnBackendFinalize(plan.get());
        if (ps != CUDNN_STATUS_SUCCESS) {
          if (i < 4) tried += std::string(" ") + mode_name + "[" + std::to_string(i) + "]: " + status_text(ps) + ";";
          continue;
        }
        int64_t ws = 0, n = 0;
        ATTNBENCH_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &n, &ws));
        out_.workspace_bytes = ws;
        out_.heuristic_rank = static_cast<int>(i);
        out_.heuristic_mode = mode_name;
        out_.engine_index = engine_index(cfg);
        out_.knobs = read_knobs(graph.get(), cfg, out_.engine_index);
        out_.op_graph = graph.get();
        out_.plan = std::move(plan);
        out_.keep.push_back(std::move(cfgs.owned[static_cast<size_t>(i)]));
        out_.keep.push_back(std::move(heur));
        out_.keep.push_back(std::move(graph));
        return;
      }
    }
    throw GraphUnsupported("cuDNN has no engine for " + what + ":" + tried);
  }

  /// Scalars get their storage in BuiltGraph::scalars.
  T scalar(const std::string& name, cudnnDataType_t dt, const void* v, size_t bytes) {
    T t = tensor(name, next_scalar_++, dt, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, nullptr);
    BuiltGraph::Scalar sc;
    sc.uid = t.uid;
    std::memcpy(sc.bytes, v, bytes);
    out_.scalars.push_back(sc);
    return t;
  }

 private:
  void set_alphas(cudnnBackendDescriptor_t op, const std::string& what) {
    const float one = 1.0f;
    set_attr(op, ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, 1, &one, what);
    set_attr(op, ATTNBENCH_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, 1, &one, what);
  }
  void add_op(Descriptor desc, Descriptor op) {
    ops_.push_back(op.get());
    if (desc.get()) out_.keep.push_back(std::move(desc));
    out_.keep.push_back(std::move(op));
  }
  /// The knobs of engine `index` on `graph` and the values `cfg` chose; empty on any
  /// failure (knob information is informative, never required).
  static std::vector<KnobInfo> read_knobs(cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t cfg,
                                          int64_t index) {
    std::vector<KnobInfo> out;
    if (index < 0) return out;
    try {
      Descriptor engine = make_engine(graph, index);
      DescriptorArray infos = make_descriptors(CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, "knob info");
      std::vector<cudnnBackendDescriptor_t>& raw = infos.raw;
      int64_t n = 0;
      if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &n, raw.data()) != CUDNN_STATUS_SUCCESS)
        return {};
      for (int64_t i = 0; i < n; ++i) {
        KnobInfo k;
        cudnnBackendKnobType_t t{};
        int64_t c = 0;
        if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c, &t) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &c, &k.max) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &c, &k.min) !=
                CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &c, &k.stride) !=
                CUDNN_STATUS_SUCCESS)
          return {};
        k.type = static_cast<int64_t>(t);
        out.push_back(k);
      }
      // The heuristics' choices.
      DescriptorArray choices =
          make_descriptors(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, "knob choice");
      std::vector<cudnnBackendDescriptor_t>& craw = choices.raw;
      int64_t nc = 0;
      if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   CUDNN_KNOB_TYPE_COUNTS, &nc, craw.data()) == CUDNN_STATUS_SUCCESS) {
        for (int64_t i = 0; i < nc; ++i) {
          cudnnBackendKnobType_t t{};
          int64_t v = 0, c = 0;
          if (cudnnBackendGetAttribute(craw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c, &t) !=
                  CUDNN_STATUS_SUCCESS ||
              cudnnBackendGetAttribute(craw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c, &v) !=
                  CUDNN_STATUS_SUCCESS)
            continue;
          for (auto& k : out)
            if (k.type == static_cast<int64_t>(t)) k.chosen = v;
        }
      }
    } catch (const std::exception&) {
      return {};
    }
    return out;
  }

  static int64_t engine_index(cudnnBackendDescriptor_t cfg) {
    try {
      Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
      int64_t n = 0;
      cudnnBackendDescriptor_t e = engine.get();
      if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
          CUDNN_STATUS_SUCCESS)
        return -1;
      int64_t index = -1;
      if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
          CUDNN_STATUS_SUCCESS)
        return -1;
      return index;
    } catch (const std::exception&) {
      return -1;
    }
  }

  const GraphSpec& s_;
  BuiltGraph& out_;
  int64_t next_virtual_ = kFirstVirtualUid;
  int64_t next_scalar_ = kFirstScalarUid;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

/// The inputs shared by both graphs.
struct Common {
  T q, kt, stats, seq_q, seq_kv, rag_q, rag_k, rag_v, rag_o, rag_stats, scale;
  bool padded = false, ragged = false;
  const T* sq() const { return padded ? &seq_q : nullptr; }
  const T* skv() const { return padded ? &seq_kv : nullptr; }
  const T* rq() const { return ragged ? &rag_q : nullptr; }
  const T* rk() const { return ragged ? &rag_k : nullptr; }
  const T* rv() const { return ragged ? &rag_v : nullptr; }
  const T* ro() const { return ragged ? &rag_o : nullptr; }
  const T* rs() const { return ragged ? &rag_stats : nullptr; }
};

Dims dims4(const int64_t (&a)[4]) { return {a[0], a[1], a[2], a[3]}; }

Common make_common(Builder& g) {
  const GraphSpec& s = g.spec();
  Common c;
  c.padded = s.padded;
  c.ragged = s.ragged;
  const Dims one{1, 1, 1, 1};
  if (s.ragged) {
    const Dims off{s.n + 1, 1, 1, 1};
    c.rag_q = g.dev("ragged_offset_q", kUidRagQ, CUDNN_DATA_INT64, off, one);
    c.rag_k = g.dev("ragged_offset_k", kUidRagK, CUDNN_DATA_INT64, off, one);
    c.rag_v = g.dev("ragged_offset_v", kUidRagV, CUDNN_DATA_INT64, off, one);
    c.rag_o = g.dev("ragged_offset_o", kUidRagO, CUDNN_DATA_INT64, off, one);
    c.rag_stats = g.dev("ragged_offset_stats", kUidRagStats, CUDNN_DATA_INT64, off, one);
  }
  if (s.padded) {
    c.seq_q = g.dev("seq_len_q", kUidSeqQ, CUDNN_DATA_INT32, {s.n, 1, 1, 1}, one);
    c.seq_kv = g.dev("seq_len_kv", kUidSeqKV, CUDNN_DATA_INT32, {s.n, 1, 1, 1}, one);
  }
  const cudnnDataType_t io = io_type(s.dtype);
  c.q = g.dev("Q", kUidQ, io, {s.n, s.hq, s.sq, s.dqk}, dims4(s.q_stride), c.rq());
  // cuDNN's first matmul takes K^T: the same memory viewed [n, hkv, dqk, sk].
  c.kt = g.dev("K", kUidK, io, {s.n, s.hkv, s.dqk, s.sk}, {s.k_stride[0], s.k_stride[1], s.k_stride[3], s.k_stride[2]},
               c.rk());
  c.stats = g.dev("Stats", kUidStats, CUDNN_DATA_FLOAT, {s.n, s.hq, s.sq, 1}, dims4(s.stats_stride), c.rs());
  c.scale = g.scalar_f("attn_scale", s.scale);
  return c;
}

Dims score_dims(const GraphSpec& s) { return {s.n, s.hq, s.sq, s.sk}; }
Dims score_strides(const GraphSpec& s) { return {s.hq * s.sq * s.sk, s.sq * s.sk, s.sk, 1}; }
Dims row_dims(const GraphSpec& s) { return {s.n, s.hq, s.sq, 1}; }
Dims row_strides(const GraphSpec& s) { return {s.hq * s.sq, s.sq, 1, 1}; }

/// Score modifiers, padding mask, (backward: minus Stats), diagonal band, in the
/// order cudnn-frontend's composite SDPA nodes use. For softcap, `tanh_input`
/// receives S / cap and `cap_out` the cap scalar (both reused by the backward).
T score_path(Builder& g, const Common& c, T S, const T* stats, T* tanh_input, T* cap_out) {
  const GraphSpec& s = g.spec();
  if (s.mod == ScoreMod::Kind::softcap) {
    T cap = g.scalar_f("softcap", s.cap);
    if (cap_out) *cap_out = cap;
    T x = g.pw2("div_by_softcap", CUDNN_POINTWISE_DIV, S, cap);
    if (tanh_input) *tanh_input = x;
    T t = g.pw1("tanh", CUDNN_POINTWISE_TANH_FWD, x);
    S = g.pw2("mul_by_softcap", CUDNN_POINTWISE_MUL, t, cap);
  }
  if (s.mod == ScoreMod::Kind::alibi) {
    T row = g.pw1("alibi_row", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 2);
    T col = g.pw1("alibi_col", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 3);
    T diff = g.pw2("alibi_col_minus_row", CUDNN_POINTWISE_SUB, col, row, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    T slopes = g.dev("alibi_slopes", kUidAlibi, CUDNN_DATA_FLOAT, {1, s.hq, 1, 1}, {s.hq, 1, 1, 1});
    T bias = g.pw2("alibi_bias", CUDNN_POINTWISE_MUL, diff, slopes);
    S = g.pw2("add_alibi", CUDNN_POINTWISE_ADD, S, bias);
  }
  if (c.padded) {
    T row = g.pw1("padding_row", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 2);
    T col = g.pw1("padding_col", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 3);
    T rin = g.pw2("row_lt_seq_q", CUDNN_POINTWISE_CMP_LT, row, c.seq_q, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    T cin = g.pw2("col_lt_seq_kv", CUDNN_POINTWISE_CMP_LT, col, c.seq_kv, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    T keep = g.pw2("padding_keep", CUDNN_POINTWISE_LOGICAL_AND, rin, cin, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    S = g.select("padding_mask", S, g.neg_inf(), keep);
  }
  if (stats) {
    S = g.pw2("sub_stats", CUDNN_POINTWISE_SUB, S, *stats);
    if (c.padded && s.version < 91000) {
      // cuDNN 9.0-9.9 needs the padding value put back after the statistics are
      // subtracted (cudnn-frontend does the same).
      T row = g.pw1("padding_row_2", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 2);
      T col = g.pw1("padding_col_2", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_INT32, 3);
      T rin = g.pw2("row_lt_seq_q_2", CUDNN_POINTWISE_CMP_LT, row, c.seq_q, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
      T cin = g.pw2("col_lt_seq_kv_2", CUDNN_POINTWISE_CMP_LT, col, c.seq_kv, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
      T keep = g.pw2("padding_keep_2", CUDNN_POINTWISE_LOGICAL_AND, rin, cin, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
      S = g.select("padding_mask_2", S, g.neg_inf(), keep);
    }
  }
  const Band& band = s.band;
  const bool br = band.align == Align::bottom_right;
  if (band.has_right) {
    T row = g.pw1("right_bound_row", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 2);
    T col = g.pw1("right_bound_col", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 3);
    if (br) {
      T skv = c.padded ? c.seq_kv : g.scalar_i("s_kv", static_cast<int32_t>(s.sk));
      T sq = c.padded ? c.seq_q : g.scalar_i("s_q", static_cast<int32_t>(s.sq));
      row = g.pw2("row_plus_s_kv", CUDNN_POINTWISE_ADD, row, skv, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
      row = g.pw2("row_minus_s_q", CUDNN_POINTWISE_SUB, row, sq, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    }
    if (band.right != 0) {
      T shift = g.scalar_i("right_bound", static_cast<int32_t>(band.right));
      row = g.pw2("row_plus_right_bound", CUDNN_POINTWISE_ADD, row, shift, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    }
    T keep = g.pw2("right_bound_keep", CUDNN_POINTWISE_CMP_GE, row, col, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    S = g.select("right_bound_mask", S, g.neg_inf(), keep);
  }
  if (band.has_left) {
    T row = g.pw1("left_bound_row", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 2);
    T col = g.pw1("left_bound_col", CUDNN_POINTWISE_GEN_INDEX, S, CUDNN_DATA_INT32, CUDNN_DATA_FLOAT, 3);
    if (!br) {
      T lb = g.scalar_f("left_bound", static_cast<float>(band.left_bound));
      col = g.pw2("col_plus_left_bound", CUDNN_POINTWISE_ADD, col, lb, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
    } else if (!c.padded) {
      // Fixed lengths: fold the bottom-right shift into the bound.
      T lb = g.scalar_f("left_bound", static_cast<float>(band.left_bound - s.sk + s.sq));
      col = g.pw2("col_plus_left_bound", CUDNN_POINTWISE_ADD, col, lb, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
    } else {
      T lb = g.scalar_i("left_bound", static_cast<int32_t>(band.left_bound));
      col = g.pw2("col_plus_left_bound", CUDNN_POINTWISE_ADD, col, lb, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
      col = g.pw2("col_minus_s_kv", CUDNN_POINTWISE_SUB, col, c.seq_kv, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
      col = g.pw2("col_plus_s_q", CUDNN_POINTWISE_ADD, col, c.seq_q, CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    }
    T keep = g.pw2("left_bound_keep", CUDNN_POINTWISE_CMP_GT, col, row, CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    S = g.select("left_bound_mask", S, g.neg_inf(), keep);
  }
  return S;
}

void build_forward(Builder& g) {
  const GraphSpec& s = g.spec();
  const cudnnDataType_t io = io_type(s.dtype);
  Common c = make_common(g);
  T v = g.dev("V", kUidV, io, {s.n, s.hkv, s.sk, s.dv}, dims4(s.v_stride), c.rv());
  T o = g.dev("O", kUidO, io, {s.n, s.hq, s.sq, s.dv}, dims4(s.o_stride), c.ro());

  T S = g.virt("S", CUDNN_DATA_FLOAT, score_dims(s), score_strides(s));
  g.matmul("bmm1 Q.K^T", c.q, c.kt, S, c.sq(), c.skv(), nullptr);
  S = g.pw2("attn_scale", CUDNN_POINTWISE_MUL, S, c.scale);
  S = score_path(g, c, S, nullptr, nullptr, nullptr);

  // softmax with natural-log statistics: Stats = max + log(sum(exp(S - max)))
  T mx = g.virt("row_max", CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  g.reduce("row_max", CUDNN_REDUCE_TENSOR_MAX, S, mx);
  T z = g.pw2("sub_max", CUDNN_POINTWISE_SUB, S, mx);
  T e = g.pw1("exp", CUDNN_POINTWISE_EXP, z);
  T sum = g.virt("row_sum_exp", CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  g.reduce("row_sum_exp", CUDNN_REDUCE_TENSOR_ADD, e, sum);
  T lg = g.pw1("log_sum_exp", CUDNN_POINTWISE_LOG, sum);
  g.pw_into("stats", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, &lg, nullptr, c.stats);
  T P = g.virt("P", io, score_dims(s), score_strides(s));  // bmm2's A operand in the I/O dtype
  g.pw_into("softmax", CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, &sum, nullptr, P);
  g.matmul("bmm2 P.V", P, v, o, c.sq(), nullptr, c.skv());
}

/// Strides of a full-head GQA gradient laid out like the Hkv-head one (token-major
/// THD): batch and sequence strides grow by the group size Hq / Hkv, as
/// cudnn-frontend does for its max_total_seq_len_kv form.
Dims fullhead_strides(const int64_t* kv_stride, int64_t group) {
  return {kv_stride[0] * group, kv_stride[1], kv_stride[2] * group, kv_stride[3]};
}

void build_backward(Builder& g) {
  const GraphSpec& s = g.spec();
  const cudnnDataType_t io = io_type(s.dtype);
  Common c = make_common(g);
  // dV/dP matmuls take V^T: V's memory viewed [n, hkv, dv, sk].
  T vt = g.dev("V", kUidV, io, {s.n, s.hkv, s.dv, s.sk}, {s.v_stride[0], s.v_stride[1], s.v_stride[3], s.v_stride[2]},
               c.rv());
  T o = g.dev("O", kUidO, io, {s.n, s.hq, s.sq, s.dv}, dims4(s.o_stride), c.ro());
  T dO = g.dev("dO", kUidDO, io, {s.n, s.hq, s.sq, s.dv}, dims4(s.o_stride), c.ro());
  T dQ = g.dev("dQ", kUidDQ, io, {s.n, s.hq, s.sq, s.dqk}, dims4(s.q_stride), c.rq());
  T dK = g.dev("dK", kUidDK, io, {s.n, s.hkv, s.sk, s.dqk}, dims4(s.k_stride), c.rk());
  T dV = g.dev("dV", kUidDV, io, {s.n, s.hkv, s.sk, s.dv}, dims4(s.v_stride), c.rv());

  // Dsum = rowsum(dO * O), a float32 workspace tensor
  T doo = g.virt("dO*O", CUDNN_DATA_FLOAT, {s.n, s.hq, s.sq, s.dv},
                 {s.hq * s.sq * s.dv, s.sq * s.dv, s.hq * s.dv, 1});
  g.pw_into("mul_dO_O", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dO, &o, nullptr, doo);
  T red = g.virt("rowsum_dO_O", CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  g.reduce("rowsum_dO_O", CUDNN_REDUCE_TENSOR_ADD, doo, red);
  T dsum = s.ragged ? g.dev("softmax_sum", kUidSoftmaxSum, CUDNN_DATA_FLOAT, row_dims(s), dims4(s.stats_stride),
                            c.rs())
                    : g.dev("softmax_sum", kUidSoftmaxSum, CUDNN_DATA_FLOAT, row_dims(s), row_strides(s));
  T one = g.scalar_f("one", 1.0f);
  g.pw_into("softmax_sum", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, red, &one, nullptr, dsum);

  // P recomputed from Stats
  T S = g.virt("S", CUDNN_DATA_FLOAT, score_dims(s), score_strides(s));
  g.matmul("matmul Q.K^T", c.q, c.kt, S, c.sq(), c.skv(), nullptr);
  S = g.pw2("attn_scale", CUDNN_POINTWISE_MUL, S, c.scale);
  T tanh_in, cap;
  S = score_path(g, c, S, &c.stats, &tanh_in, &cap);
  T P = g.pw1("exp_s", CUDNN_POINTWISE_EXP, S);

  const Dims trans_dims{s.n, s.hq, s.sk, s.sq};
  const Dims trans_str{s.hq * s.sq * s.sk, s.sq * s.sk, 1, s.sk};
  T pt = g.virt("P^T", io, trans_dims, trans_str);
  g.reshape("P^T", P, pt);
  if (s.hq == s.hkv) {
    g.matmul("matmul P^T.dO", pt, dO, dV, c.skv(), nullptr, c.sq());
  } else {
    T full = s.fullhead_tokens ? g.dev("dV_fullhead", kUidDVFull, io, {s.n, s.hq, s.sk, s.dv}, fullhead_strides(s.v_stride, s.hq / s.hkv), c.rv())
                               : g.virt("dV_fullhead", io, {s.n, s.hq, s.sk, s.dv}, {s.hq * s.sk * s.dv, s.sk * s.dv, s.dv, 1});
    g.matmul("matmul P^T.dO", pt, dO, full, c.skv(), nullptr, c.sq());
    g.reduce("dV_group_sum", CUDNN_REDUCE_TENSOR_ADD, full, dV);
  }

  T dP = g.virt("dP", CUDNN_DATA_FLOAT, score_dims(s), score_strides(s));
  g.matmul("matmul dO.V^T", dO, vt, dP, c.sq(), c.skv(), nullptr);
  T dS = g.pw2("sub_softmax_sum", CUDNN_POINTWISE_SUB, dP, dsum);
  dS = g.pw2("mul_P", CUDNN_POINTWISE_MUL, dS, P);
  if (s.mod == ScoreMod::Kind::softcap) {
    T x = g.pw2("mul_by_softcap_bwd", CUDNN_POINTWISE_MUL, dS, cap);
    T y = g.pw_bwd("dtanh", CUDNN_POINTWISE_TANH_BWD, x, tanh_in);
    dS = g.pw2("div_by_softcap_bwd", CUDNN_POINTWISE_DIV, y, cap);
  }
  dS = g.pw2("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, dS, c.scale);

  T dst = g.virt("dS^T", io, trans_dims, trans_str);
  g.reshape("dS^T", dS, dst);
  if (s.hq == s.hkv) {
    g.matmul("matmul dS^T.Q", dst, c.q, dK, c.skv(), nullptr, c.sq());
  } else {
    T full = s.fullhead_tokens ? g.dev("dK_fullhead", kUidDKFull, io, {s.n, s.hq, s.sk, s.dqk}, fullhead_strides(s.k_stride, s.hq / s.hkv), c.rk())
                               : g.virt("dK_fullhead", io, {s.n, s.hq, s.sk, s.dqk}, {s.hq * s.sk * s.dqk, s.sk * s.dqk, s.dqk, 1});
    g.matmul("matmul dS^T.Q", dst, c.q, full, c.skv(), nullptr, c.sq());
    g.reduce("dK_group_sum", CUDNN_REDUCE_TENSOR_ADD, full, dK);
  }

  T k = g.virt("K (untransposed)", io, {s.n, s.hkv, s.sk, s.dqk}, dims4(s.k_stride), c.rk());
  g.reshape("K", c.kt, k);
  if (s.dq_direct) {
    g.matmul("matmul dS.K", dS, k, dQ, c.sq(), nullptr, c.skv());
    return;
  }
  T acc = s.ragged ? g.dev("dQ_accum", kUidDQAccum, CUDNN_DATA_FLOAT, {s.n, s.hq, s.sq, s.dqk}, dims4(s.q_stride),
                           c.rq())
                   : g.dev("dQ_accum", kUidDQAccum, CUDNN_DATA_FLOAT, {s.n, s.hq, s.sq, s.dqk},
                           {s.hq * s.sq * s.dqk, s.sq * s.dqk, s.dqk, 1});
  g.matmul("matmul dS.K", dS, k, acc, c.sq(), nullptr, c.skv());
  g.pw_into("dQ", CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, nullptr, nullptr, dQ);
}

std::shared_ptr<BuiltGraph> build(const GraphSpec& spec) {
  auto out = std::make_shared<BuiltGraph>();
  const auto t0 = std::chrono::steady_clock::now();
  out->description = spec.describe();
  Builder g(spec, *out);
  if (spec.backward) build_backward(g);
  else build_forward(g);
  g.finish(shared_handle(spec.device));
  out->build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

struct CacheEntry {
  std::shared_ptr<const BuiltGraph> graph;
  std::string unsupported;  ///< non-empty: cuDNN rejected the graph
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, CacheEntry>& cache() {
  static std::unordered_map<std::string, CacheEntry> c;
  return c;
}

}  // namespace

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, const std::string& what) {
  try {
    ATTNBENCH_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  } catch (const device::DeviceError& e) {
    throw device::DeviceError("cuDNN graph: creating the descriptor of " + what + " failed: " + e.what());
  }
}

Descriptor::~Descriptor() {
  if (d_) (void)cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

cudnnHandle_t shared_handle(int device) {
  static std::mutex m;
  static std::unordered_map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(m);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  ATTNBENCH_CHECK(cudaSetDevice(device));
  cudnnHandle_t h = nullptr;
  ATTNBENCH_CHECK(cudnnCreate(&h));
  handles.emplace(device, h);
  return h;
}

std::shared_ptr<const BuiltGraph> get_plan(const GraphSpec& spec, bool* cache_hit) {
  const std::string key = spec.key();
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache().find(key);
  if (it != cache().end()) {
    if (cache_hit) *cache_hit = true;
    if (!it->second.unsupported.empty()) throw GraphUnsupported(it->second.unsupported);
    return it->second.graph;
  }
  if (cache_hit) *cache_hit = false;
  try {
    std::shared_ptr<const BuiltGraph> g = build(spec);
    cache()[key] = CacheEntry{g, {}};
    return g;
  } catch (const GraphUnsupported& e) {
    cache()[key] = CacheEntry{nullptr, e.what()};
    throw;
  }
}

size_t plan_cache_size() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return cache().size();
}

std::string knob_name(int64_t type) {
  switch (type) {
    case CUDNN_KNOB_TYPE_SWIZZLE: return "SWIZZLE";
    case CUDNN_KNOB_TYPE_TILE_SIZE: return "TILE_SIZE";
    case CUDNN_KNOB_TYPE_EDGE: return "EDGE";
    case CUDNN_KNOB_TYPE_MULTIPLY: return "MULTIPLY";
    case CUDNN_KNOB_TYPE_SPLIT_K_BUF: return "SPLIT_K_BUF";
    case CUDNN_KNOB_TYPE_TILEK: return "TILEK";
    case CUDNN_KNOB_TYPE_STAGES: return "STAGES";
    case CUDNN_KNOB_TYPE_REDUCTION_MODE: return "REDUCTION_MODE";
    case CUDNN_KNOB_TYPE_SPLIT_K_SLC: return "SPLIT_K_SLC";
    case CUDNN_KNOB_TYPE_IDX_MODE: return "IDX_MODE";
    case CUDNN_KNOB_TYPE_SPECFILT: return "SPECFILT";
    case CUDNN_KNOB_TYPE_KERNEL_CFG: return "KERNEL_CFG";
    case CUDNN_KNOB_TYPE_WORKSPACE: return "WORKSPACE";
    case CUDNN_KNOB_TYPE_TILE_CGA_M: return "TILE_CGA_M";
    case CUDNN_KNOB_TYPE_TILE_CGA_N: return "TILE_CGA_N";
    case CUDNN_KNOB_TYPE_BLOCK_SIZE: return "BLOCK_SIZE";
    case CUDNN_KNOB_TYPE_OCCUPANCY: return "OCCUPANCY";
    case CUDNN_KNOB_TYPE_ARRAY_SIZE_PER_THREAD: return "ARRAY_SIZE_PER_THREAD";
    case CUDNN_KNOB_TYPE_SPLIT_COLS: return "SPLIT_COLS";
    case CUDNN_KNOB_TYPE_TILE_ROWS: return "TILE_ROWS";
    case CUDNN_KNOB_TYPE_TILE_COLS: return "TILE_COLS";
    case CUDNN_KNOB_TYPE_LOAD_SIZE: return "LOAD_SIZE";
    case CUDNN_KNOB_TYPE_CTA_COUNT: return "CTA_COUNT";
    case CUDNN_KNOB_TYPE_STREAM_K: return "STREAM_K";
    case CUDNN_KNOB_TYPE_SPLIT_P_SLC: return "SPLIT_P_SLC";
    case CUDNN_KNOB_TYPE_TILE_M: return "TILE_M";
    case CUDNN_KNOB_TYPE_TILE_N: return "TILE_N";
    case CUDNN_KNOB_TYPE_WARP_SPEC_CFG: return "WARP_SPEC_CFG";
    case CUDNN_KNOB_TYPE_SWAP_AB: return "SWAP_AB";
    default: return "KNOB_" + std::to_string(type);
  }
}

namespace {

/// The plan of engine `index` on `op_graph` with `choices` (knob type, value;
/// values < 0 are left to the engine), or nothing when cuDNN refuses any step.
std::optional<PlanVariant> variant_plan(cudnnBackendDescriptor_t op_graph, int64_t index,
                                        const std::vector<std::pair<int64_t, int64_t>>& choices, std::string label) {
  try {
    PlanVariant pv;
    pv.label = std::move(label);
    Descriptor engine = make_engine(op_graph, index);
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const auto& [type, value] : choices) {
      if (value < 0) continue;  // the heuristics left it to the engine's default
      Descriptor c(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
      const auto t = static_cast<cudnnBackendKnobType_t>(type);
      set_attr(c.get(), ATTNBENCH_ATTR(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE), CUDNN_TYPE_KNOB_TYPE, 1, &t, pv.label);
      set_attr(c.get(), ATTNBENCH_ATTR(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE), CUDNN_TYPE_INT64, 1, &value, pv.label);
      finalize(c.get(), "knob choice " + pv.label);
      raw.push_back(c.get());
      pv.keep.push_back(std::move(c));
    }
    Descriptor cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    cudnnBackendDescriptor_t e = engine.get();
    set_attr(cfg.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINECFG_ENGINE), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e, pv.label);
    if (!raw.empty())
      set_attr(cfg.get(), ATTNBENCH_ATTR(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES), CUDNN_TYPE_BACKEND_DESCRIPTOR,
               static_cast<int64_t>(raw.size()), raw.data(), pv.label);
    finalize(cfg.get(), "engine config " + pv.label);
    Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
    cudnnBackendDescriptor_t cd = cfg.get();
    set_attr(plan.get(), ATTNBENCH_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &cd, pv.label);
    if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) return std::nullopt;  // not a valid combination
    int64_t n = 0;
    ATTNBENCH_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                             1, &n, &pv.workspace_bytes));
    pv.plan = std::move(plan);
    pv.keep.push_back(std::move(engine));
    pv.keep.push_back(std::move(cfg));
    return pv;
  } catch (const std::exception&) {
    return std::nullopt;  // refused
  }
}

}  // namespace

std::vector<PlanVariant> knob_variants(const BuiltGraph& g, int max_per_knob, int max_total) {
  std::vector<PlanVariant> out;
  if (!g.op_graph || g.engine_index < 0) return out;
  // Every other engine cuDNN has for this graph, with its default knobs.
  int64_t engines = 0, n = 0;
  if (cudnnBackendGetAttribute(g.op_graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n,
                               &engines) != CUDNN_STATUS_SUCCESS)
    engines = 0;
  for (int64_t index = 0; index < engines && static_cast<int>(out.size()) < max_total; ++index) {
    if (index == g.engine_index) continue;
    if (auto pv = variant_plan(g.op_graph, index, {}, "engine=" + std::to_string(index))) out.push_back(std::move(*pv));
  }
  // Every combination of the chosen engine's knob values (each knob: unset, then
  // min..max by stride, at most max_per_knob values), except the heuristics' own
  // choice; at most kMaxKnobAttempts combinations are tried.
  constexpr int kMaxKnobAttempts = 4096;
  std::vector<std::vector<int64_t>> values(g.knobs.size());
  for (size_t j = 0; j < g.knobs.size(); ++j) {
    const KnobInfo& k = g.knobs[j];
    values[j].push_back(-1);
    const int64_t step = std::max<int64_t>(1, k.stride);
    for (int64_t v = k.min; v <= k.max && static_cast<int>(values[j].size()) <= max_per_knob; v += step)
      values[j].push_back(v);
  }
  std::vector<size_t> at(g.knobs.size(), 0);
  int attempts = 0;
  for (bool more = !g.knobs.empty(); more && static_cast<int>(out.size()) < max_total && attempts < kMaxKnobAttempts;) {
    std::vector<std::pair<int64_t, int64_t>> choices;
    std::string label;
    bool heuristics = true;
    for (size_t j = 0; j < g.knobs.size(); ++j) {
      const int64_t v = values[j][at[j]];
      choices.emplace_back(g.knobs[j].type, v);
      heuristics = heuristics && v == g.knobs[j].chosen;
      if (v >= 0) label += (label.empty() ? "" : ",") + knob_name(g.knobs[j].type) + "=" + std::to_string(v);
    }
    if (!heuristics) {
      ++attempts;
      if (auto pv = variant_plan(g.op_graph, g.engine_index, choices, label.empty() ? "knobs unset" : label))
        out.push_back(std::move(*pv));
    }
    more = false;  // next combination (odometer over the knobs)
    for (size_t j = 0; j < at.size() && !more; ++j) {
      if (++at[j] < values[j].size()) more = true;
      else at[j] = 0;
    }
  }
  return out;
}

Descriptor make_variant_pack(const BuiltGraph& g, const std::map<int64_t, void*>& device_ptrs, void* workspace) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (int64_t uid : g.device_uids) {
    auto it = device_ptrs.find(uid);
    if (it == device_ptrs.end() || it->second == nullptr) {
      auto name = g.names.find(uid);
      throw std::invalid_argument("cuDNN variant pack: no device pointer for tensor '" +
                                  (name != g.names.end() ? name->second : std::string("?")) + "' (uid " +
                                  std::to_string(uid) + ") of graph [" + g.description + "]");
    }
    uids.push_back(uid);
    ptrs.push_back(it->second);
  }
  for (const auto& sc : g.scalars) {
    uids.push_back(sc.uid);
    ptrs.push_back(const_cast<unsigned char*>(sc.bytes));  // read by cuDNN at execute time
  }
  const std::string what = "variant pack of [" + g.description + "]";
  Descriptor vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
  set_attr(vp.get(), ATTNBENCH_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64,
           static_cast<int64_t>(uids.size()), uids.data(), what);
  set_attr(vp.get(), ATTNBENCH_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(ptrs.size()), ptrs.data(), what);
  set_attr(vp.get(), ATTNBENCH_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, &workspace, what);
  finalize(vp.get(), what);
  return vp;
}

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
