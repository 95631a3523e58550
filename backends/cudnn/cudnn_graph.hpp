// The cuDNN SDPA operation graphs, built directly with the cuDNN backend API
// (cudnnBackendCreateDescriptor / SetAttribute / Finalize), their execution plans
// (engine heuristics, mode A then fallback), a process-wide plan cache and
// variant packs.
//
// Forward graph (the composite lowering cudnn-frontend uses for fp16/bf16 SDPA;
// every tensor not marked [dev] or [val] is virtual, float32 unless noted):
//
//   S  = matmul(Q[dev], K^T[dev])            (M/N overridden by seq_len_q / seq_len_kv when padded)
//   S  = S * scale[val]
//   S  = cap * tanh(S / cap)                 (softcap; cap[val])
//   S  = S + slope[dev][h] * (col - row)     (alibi; GEN_INDEX rows/cols, int32)
//   S  = select(row < seq_q && col < seq_kv, S, -inf)            (padded)
//   S  = select(row [+ seq_kv - seq_q] [+ R] >= col, S, -inf)     (right bound, causal)
//   S  = select(col + L [- seq_kv + seq_q] > row, S, -inf)        (left bound = window left + 1)
//   M  = max_j S;  E = exp(S - M);  Z = sum_j E
//   Stats[dev] = M + log Z                   (natural-log LSE, float32)
//   P  = E / Z                               (in the I/O dtype)
//   O[dev] = matmul(P, V[dev])               (M overridden by seq_len_q, K by seq_len_kv)
//
// Backward graph (recomputes P from Stats):
//
//   Dsum[dev, float32] = sum_d (dO * O) * 1   ("softmax_sum", a workspace tensor)
//   S  = matmul(Q, K^T) * scale, score mods and padding as above
//   S  = S - Stats;  bands as above;  P = exp(S)
//   dV = matmul(reshape(P)^T, dO)            (GQA: into [n, Hq, Sk, Dv], then reduce over the group;
//                                             ragged + fullhead_tokens: that tensor is [dev], token-major)
//   dS = (matmul(dO, V^T) - Dsum) * P        (softcap: dS = dS * (1 - tanh^2(S / cap)))
//   dS = dS * scale
//   dK = matmul(reshape(dS)^T, Q)            (GQA reduce as for dV)
//   dQ_accum[dev, float32] = matmul(dS, reshape(K^T)); dQ = identity(dQ_accum)
//                                            (dq_direct: dQ = matmul(dS, reshape(K^T)), no dQ_accum)
//
// Ragged (THD) graphs put ragged offsets on Q, K, V, O, dO, dQ, dK, dV, Stats, and
// on the float32 workspaces dQ_accum and Dsum, which are then sized by tokens.
#pragma once

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cudnn/cudnn_plan.hpp"
#include "harness/device/check.hpp"

namespace attnbench::cudnn_sdpa {

/// Unique ids of the graphs' device tensors (the variant-pack keys).
enum Uid : int64_t {
  kUidQ = 1,
  kUidK = 2,
  kUidV = 3,
  kUidO = 4,
  kUidStats = 5,
  kUidDO = 6,
  kUidDQ = 7,
  kUidDK = 8,
  kUidDV = 9,
  kUidSeqQ = 10,
  kUidSeqKV = 11,
  kUidRagQ = 12,
  kUidRagK = 13,
  kUidRagV = 14,
  kUidRagO = 15,
  kUidRagStats = 16,
  kUidSoftmaxSum = 17,
  kUidDQAccum = 18,
  kUidAlibi = 19,
  kUidDKFull = 20,  ///< ragged GQA backward: full-head dK, token-major (float32-sized buffer)
  kUidDVFull = 21,  ///< ragged GQA backward: full-head dV, token-major (float32-sized buffer)
};
/// By-value scalars get UIDs from here on, virtual tensors from kFirstVirtualUid.
constexpr int64_t kFirstScalarUid = 100;
constexpr int64_t kFirstVirtualUid = 1000;

/// cuDNN cannot run a graph: the operation graph was rejected or no engine config
/// of the heuristics finalized into a plan. The message names the graph and the
/// statuses cuDNN returned.
class GraphUnsupported : public device::DeviceError {
 public:
  using device::DeviceError::DeviceError;
};

/// Owning handle of one cudnnBackendDescriptor_t (destroyed with the object).
class Descriptor {
 public:
  Descriptor() = default;
  /// cudnnBackendCreateDescriptor(type); `what` labels a failure.
  Descriptor(cudnnBackendDescriptorType_t type, const std::string& what);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* ptr() { return &d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// One tunable knob of an engine (CUDNN_ATTR_ENGINE_KNOB_INFO) and the value the
/// heuristics' engine config chose for it (-1 when it set none).
struct KnobInfo {
  int64_t type = 0;  ///< cudnnBackendKnobType_t, e.g. 40 = CUDNN_KNOB_TYPE_TILE_M
  int64_t min = 0, max = 0, stride = 1;
  int64_t chosen = -1;
};

/// A finalized execution plan of the same graph and engine with other knob values.
struct PlanVariant {
  std::string label;          ///< "TILE_M=3" (knob name = value); "heuristics" for the chosen config
  Descriptor plan;
  int64_t workspace_bytes = 0;
  std::vector<Descriptor> keep;  ///< engine, knob choices and config the plan refers to
};

/// A finalized execution plan and what executing it needs.
struct BuiltGraph {
  std::vector<Descriptor> keep;  ///< every descriptor the plan refers to (tensors, ops, graph, config)
  Descriptor plan;
  int64_t workspace_bytes = 0;
  int64_t engine_index = -1;     ///< CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the chosen engine (-1 if unknown)
  int heuristic_rank = -1;       ///< position of the chosen config in the heuristics list
  int heuristic_count = 0;       ///< configs the heuristics mode of the chosen one returned
  std::string heuristic_mode;    ///< "A" or "FALLBACK"
  std::vector<int64_t> device_uids;        ///< device tensors the variant pack must bind
  std::map<int64_t, std::string> names;    ///< uid -> tensor name (messages)
  struct Scalar {
    int64_t uid = 0;
    alignas(8) unsigned char bytes[8] = {0};
  };
  std::vector<Scalar> scalars;   ///< by-value tensors (host values bound in the variant pack)
  int ops = 0;                   ///< operations in the graph
  double build_ms = 0.0;         ///< wall time of descriptor construction + heuristics + plan finalize
  std::string description;       ///< GraphSpec::describe()
  std::vector<KnobInfo> knobs;    ///< knobs of the chosen engine (empty if it has none or they cannot be read)
  cudnnBackendDescriptor_t op_graph = nullptr;  ///< the finalized operation graph (owned by keep)
};

/// Short name of a knob type ("TILE_M", "KERNEL_CFG"; "KNOB_<n>" for others).
std::string knob_name(int64_t type);

/// Candidate plans for autotuning g: first the plan of every other engine cuDNN
/// lists for g's operation graph (CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)
/// with its default knobs ("engine=N"), then g's engine for every combination of
/// its knobs' values (each knob unset or a value in [min, max] by stride, at most
/// `max_per_knob` values per knob; at most 4096 combinations tried) other than
/// the heuristics' choice, labelled "KERNEL_CFG=3,STAGES=1". At most `max_total`
/// plans; configurations cuDNN refuses to finalize are skipped. Used by the cudnn
/// backend's autotuning (option autotune), the way cudnn-frontend's
/// autotune times several plans of one graph.
std::vector<PlanVariant> knob_variants(const BuiltGraph& g, int max_per_knob = 64, int max_total = 256);

/// Process-wide cuDNN handle of CUDA device `device`, created on first use and
/// intentionally never destroyed (plans in the cache refer to it).
cudnnHandle_t shared_handle(int device);

/// The plan of `spec`, from the process-wide cache or built now (`cache_hit`
/// tells which). Thread-safe. Throws GraphUnsupported when cuDNN rejects the
/// graph (such failures are cached too) and device::DeviceError for other cuDNN
/// failures, naming the descriptor and attribute that failed.
std::shared_ptr<const BuiltGraph> get_plan(const GraphSpec& spec, bool* cache_hit = nullptr);

/// Number of plans (and cached rejections) in the cache.
size_t plan_cache_size();

/// Bind device pointers (uid -> pointer; extra entries are ignored) and the
/// workspace to `g`, returning a finalized variant pack. Throws
/// std::invalid_argument naming the tensor when a required pointer is missing.
Descriptor make_variant_pack(const BuiltGraph& g, const std::map<int64_t, void*>& device_ptrs, void* workspace);

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
