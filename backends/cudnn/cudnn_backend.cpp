// The "cudnn" backend (see cudnn_backend.hpp).
#include "backends/cudnn/cudnn_backend.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <variant>

#include "backends/cudnn/cudnn_fixup.hpp"
#include "backends/cudnn/cudnn_graph.hpp"
#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/stream.hpp"
#include "harness/device/device.hpp"
#include "harness/device/digest.hpp"
#include "harness/device/output_bits.hpp"
#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::cudnn_sdpa {

namespace {

using device::DeviceBuffer;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Upload int64 values to a new device buffer (synchronous).
DeviceBuffer upload_i64(const std::vector<int64_t>& v, cudaStream_t stream) {
  DeviceBuffer b(v.size(), sizeof(int64_t));
  if (!v.empty()) {
    ATTNBENCH_CHECK(cudaMemcpyAsync(b.data(), v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
    ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
  }
  return b;
}

void expect_shape(const HostTensor& t, const std::vector<int64_t>& shape, const char* name) {
  if (t.shape != shape) {
    std::string want, got;
    for (auto s : shape) want += (want.empty() ? "" : ",") + std::to_string(s);
    for (auto s : t.shape) got += (got.empty() ? "" : ",") + std::to_string(s);
    throw std::invalid_argument(std::string("cudnn backend: input ") + name + " has shape [" + got +
                                "], the problem needs [" + want + "]");
  }
}


/// Workspace (bytes) of an instance whose parts need `need[i]` bytes each: the
/// largest when the parts run one after another on one stream, the sum of
/// 256-byte-aligned slices when they run concurrently (`offsets`, when given,
/// receives each part's slice start; all 0 when not concurrent).
int64_t parts_workspace(const std::vector<int64_t>& need, bool concurrent, std::vector<int64_t>* offsets = nullptr) {
  int64_t ws = 0;
  if (offsets) offsets->clear();
  for (int64_t n : need) {
    if (offsets) offsets->push_back(concurrent ? ws : 0);
    ws = concurrent ? ws + (n + 255) / 256 * 256 : std::max(ws, n);
  }
  return ws;
}

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::bshd: return "bshd";
    case Storage::bhsd: return "bhsd";
    case Storage::tokens: return "tokens (THD, ragged offsets)";
  }
  return "?";
}

/// fn(logical offset, stored offset) of every row of `role`'s tensor that the
/// plan's token storage holds (THD with ragged offsets), on the pass pool.
template <class Fn>
void cudnn_stored_rows(const Problem& p, const CasePlan& plan, TensorRole role, Fn&& fn) {
  const bool qs = role == TensorRole::q || role == TensorRole::o;
  const auto& rows = qs ? plan.q_row_of : plan.k_row_of;
  const int64_t H = qs ? p.heads_q : p.heads_kv, S = qs ? p.seq_q : p.seq_k;
  const int64_t D = (role == TensorRole::q || role == TensorRole::k) ? p.head_dim : p.head_dim_v;
  parallel_pass(p.batch * H, [&](int64_t bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t r = rows[static_cast<size_t>(b * S + s)];
      if (r >= 0) fn(static_cast<size_t>(((b * H + h) * S + s) * D), static_cast<size_t>((r * H + h) * D));
    }
  });
}

/// The plan's storage of `role` (dtype bits) -> logical [B, H, S, D]; positions
/// not stored read 0.
HostTensor from_storage(const Problem& p, const CasePlan& plan, const EncodedBuffer& buf, TensorRole role) {
  if (plan.storage != Storage::tokens) return decode_physical(buf, physical_layout(p, role), 0.0);
  const bool qs = role == TensorRole::q || role == TensorRole::o;
  const int64_t H = qs ? p.heads_q : p.heads_kv, S = qs ? p.seq_q : p.seq_k;
  const int64_t D = (role == TensorRole::q || role == TensorRole::k) ? p.head_dim : p.head_dim_v;
  HostTensor t({p.batch, H, S, D}, 0.0);
  cudnn_stored_rows(p, plan, role, [&](size_t logical, size_t stored) {
    decode_span(buf.data(), stored, static_cast<size_t>(D), buf.dtype, t.data.data() + logical);
  });
  return t;
}

class Instance final : public CudnnInstanceApi {
 public:
  Instance(const Problem& p, const ProblemData& in, CasePlan plan, const Env& env, double analysis_ms)
      : p_(p), plan_(std::move(plan)), env_(env), analysis_ms_(analysis_ms) {
    if (plan_.has_graph) {
      handle_ = shared_handle(env_.device);
      for (const GraphPart& gp : plan_.parts) {
        auto rt = std::make_unique<PartRuntime>();
        rt->fwd_hit = rt->bwd_hit = true;
        if (gp.run_fwd) {
          rt->fwd = get_plan(gp.fwd, &rt->fwd_hit);
          rt->fwd_plan = rt->fwd->plan.get();
          if (env_.autotune) rt->fwd_variants = knob_variants(*rt->fwd);
        }
        if (gp.run_bwd) {
          rt->bwd = get_plan(gp.bwd, &rt->bwd_hit);
          rt->bwd_plan = rt->bwd->plan.get();
          if (env_.autotune) rt->bwd_variants = knob_variants(*rt->bwd);
        }
        parts_.push_back(std::move(rt));
      }
    }
    const int64_t B = p_.batch, Hq = p_.heads_q, Sq = p_.seq_q;
    const DType t = p_.dtype;
    q_ = device::upload(to_storage(in.q, TensorRole::q), stream_);
    k_ = device::upload(to_storage(in.k, TensorRole::k), stream_);
    v_ = device::upload(to_storage(in.v, TensorRole::v), stream_);
    if (in.d_o.data.empty()) {
      HostTensor zeros({B, Hq, Sq, p_.head_dim_v}, 0.0);
      do_ = device::upload(to_storage(zeros, TensorRole::o), stream_);
    } else {
      do_ = device::upload(to_storage(in.d_o, TensorRole::o), stream_);
    }
    const size_t eb = static_cast<size_t>(dtype_bytes(t));
    o_ = DeviceBuffer(static_cast<size_t>(storage_numel(TensorRole::o)), eb);
    dq_ = DeviceBuffer(q_.count(), eb);
    dk_ = DeviceBuffer(k_.count(), eb);
    dv_ = DeviceBuffer(v_.count(), eb);
    stats_ = DeviceBuffer(static_cast<size_t>(plan_.stats_elems), sizeof(float));
    for (size_t i = 0; i < parts_.size(); ++i) {
      const GraphPart& gp = plan_.parts[i];
      PartRuntime& rt = *parts_[i];
      if (!gp.seq_len_q.empty()) {
        rt.seq_q = device::upload_i32(gp.seq_len_q, stream_);
        rt.seq_kv = device::upload_i32(gp.seq_len_kv, stream_);
      }
      if (gp.fwd.ragged) {
        rt.rag_q = upload_i64(gp.rag_q, stream_);
        rt.rag_k = upload_i64(gp.rag_k, stream_);
        rt.rag_v = upload_i64(gp.rag_v, stream_);
        rt.rag_o = upload_i64(gp.rag_o, stream_);
        rt.rag_stats = upload_i64(gp.rag_stats, stream_);
      }
    }
    if (plan_.has_graph) {
      const GraphSpec& g = plan_.bwd;
      const int64_t rows = g.ragged ? plan_.q_rows : g.n * g.sq;  // token rows or n * s_q
      dsum_ = DeviceBuffer(static_cast<size_t>(rows * g.hq), sizeof(float));
      if (!g.dq_direct) dq_accum_ = DeviceBuffer(static_cast<size_t>(rows * g.hq * g.dqk), sizeof(float));
      bool fullhead = false;
      for (const GraphPart& gp : plan_.parts) fullhead = fullhead || (gp.run_bwd && gp.bwd.fullhead_tokens);
      if (fullhead) {  // float32-sized like cudnn-frontend's dK/dV_fullhead_size
        dk_full_ = DeviceBuffer(static_cast<size_t>(plan_.k_rows * g.hq * g.dqk), sizeof(float));
        dv_full_ = DeviceBuffer(static_cast<size_t>(plan_.k_rows * g.hq * g.dv), sizeof(float));
      }
      // Parts that run one after another on one stream share one workspace;
      // concurrent parts (split_streams) get one slice each.
      concurrent_ = env_.split_streams && parts_.size() > 1;
      std::vector<int64_t> offsets;
      const int64_t ws = parts_workspace(part_needs(), concurrent_, &offsets);
      for (size_t i = 0; i < parts_.size(); ++i) parts_[i]->workspace_offset = offsets[i];
      if (ws > 0) workspace_ = DeviceBuffer(static_cast<size_t>(ws), 1);
      if (concurrent_) {
        for (size_t i = 1; i < parts_.size(); ++i) {
          aux_streams_.push_back(std::make_unique<device::OwnedStream>());
          joins_.push_back(std::make_unique<EventHolder>());
        }
        fork_ = std::make_unique<EventHolder>();
      }
    }
    if (!plan_.alibi_slopes.empty())
      alibi_ = device::upload_f32(std::vector<double>(plan_.alibi_slopes.begin(), plan_.alibi_slopes.end()), stream_);
    dead_q_ = upload_i64(plan_.dead_q.unit, stream_);
    dead_k_ = upload_i64(plan_.dead_k.unit, stream_);
    stats_dead_ = upload_i64(plan_.stats_dead.unit, stream_);

    for (auto& part : parts_) {
      PartRuntime& rt = *part;
      const std::map<int64_t, void*> ptrs = {
          {kUidQ, q_.data()},           {kUidK, k_.data()},
          {kUidV, v_.data()},           {kUidO, o_.data()},
          {kUidStats, stats_.data()},   {kUidDO, do_.data()},
          {kUidDQ, dq_.data()},         {kUidDK, dk_.data()},
          {kUidDV, dv_.data()},         {kUidSeqQ, rt.seq_q.data()},
          {kUidSeqKV, rt.seq_kv.data()}, {kUidRagQ, rt.rag_q.data()},
          {kUidRagK, rt.rag_k.data()},  {kUidRagV, rt.rag_v.data()},
          {kUidRagO, rt.rag_o.data()},  {kUidRagStats, rt.rag_stats.data()},
          {kUidSoftmaxSum, dsum_.data()}, {kUidDQAccum, dq_accum_.data()},
          {kUidAlibi, alibi_.data()},   {kUidDKFull, dk_full_.data()},
          {kUidDVFull, dv_full_.data()},
      };
      void* ws = workspace_.empty() ? nullptr : static_cast<char*>(workspace_.data()) + rt.workspace_offset;
      if (rt.fwd) rt.fwd_pack = make_variant_pack(*rt.fwd, ptrs, ws);
      if (rt.bwd) rt.bwd_pack = make_variant_pack(*rt.bwd, ptrs, ws);
    }
    ATTNBENCH_CHECK(cudaStreamSynchronize(stream_));
    if (env_.autotune) autotune();
  }

  ~Instance() override {
    if (stream_) (void)cudaStreamSynchronize(stream_);  // before the buffers are freed
    for (const auto& a : aux_streams_) (void)cudaStreamSynchronize(a->s);
  }

  void forward() override {
    if (replay(fwd_graph_, [this] { enqueue_forward(); })) return;
    enqueue_forward();
  }

  void backward() override {
    if (replay(bwd_graph_, [this] { enqueue_backward(); })) return;
    enqueue_backward();
  }

  /// Everything one forward enqueues on the instance's stream (and, with
  /// concurrent parts, on the aux streams joined back to it).
  void enqueue_forward() {
    if (plan_.has_graph)
      run_parts([](const PartRuntime& rt) { return std::make_pair(rt.fwd_plan, rt.fwd_pack.get()); });
    zero_rows(o_.data(), 2, dead_q_.as<int64_t>(), static_cast<int64_t>(plan_.dead_q.unit.size()),
              plan_.dead_q.heads, plan_.dead_q.head_stride, p_.head_dim_v, stream_);
    zero_rows(stats_.data(), 4, stats_dead_.as<int64_t>(), static_cast<int64_t>(plan_.stats_dead.unit.size()),
              plan_.stats_dead.heads, plan_.stats_dead.head_stride, 1, stream_);
    // LSE stays in cuDNN's Stats layout (what the backward reads); read_outputs
    // maps it to [B, Hq, Sq] with -inf for fully masked rows.
  }

  /// Everything one backward enqueues (see enqueue_forward()).
  void enqueue_backward() {
    if (plan_.has_graph) {
      if (env_.version < 90600 && !dq_accum_.empty())  // cuDNN < 9.6 expects a zeroed dQ accumulator
        ATTNBENCH_CHECK(cudaMemsetAsync(dq_accum_.data(), 0, dq_accum_.bytes(), stream_));
      run_parts([](const PartRuntime& rt) { return std::make_pair(rt.bwd_plan, rt.bwd_pack.get()); });
    }
    const auto nq = static_cast<int64_t>(plan_.dead_q.unit.size());
    const auto nk = static_cast<int64_t>(plan_.dead_k.unit.size());
    zero_rows(dq_.data(), 2, dead_q_.as<int64_t>(), nq, plan_.dead_q.heads, plan_.dead_q.head_stride, p_.head_dim,
              stream_);
    zero_rows(dk_.data(), 2, dead_k_.as<int64_t>(), nk, plan_.dead_k.heads, plan_.dead_k.head_stride, p_.head_dim,
              stream_);
    zero_rows(dv_.data(), 2, dead_k_.as<int64_t>(), nk, plan_.dead_k.heads, plan_.dead_k.head_stride, p_.head_dim_v,
              stream_);
  }

  void poison_outputs() override {
    for (const DeviceBuffer* b : {&o_, &dq_, &dk_, &dv_}) device::poison_nan(*b, p_.dtype, stream_);
    device::poison_nan(stats_, DType::fp32, stream_);
  }

  void synchronize() override { ATTNBENCH_CHECK(cudaStreamSynchronize(stream_)); }

  AttentionOutputs read_outputs(bool with_grads) override { return download_outputs(with_grads)(); }

  /// The bits now; the logical tensors (from_storage, lse_from_stats) when the
  /// function is called, from a copy of the plan.
  std::function<AttentionOutputs()> download_outputs(bool with_grads) override {
    synchronize();
    // lse holds cuDNN's softmax statistics (lse_from_stats maps them).
    auto d = std::make_shared<device::OutputBits>(
        device::download_output_bits(o_, stats_, dq_, dk_, dv_, nullptr, p_.dtype, with_grads, stream_));
    return [d, with_grads, p = p_, plan = std::make_shared<const CasePlan>(plan_)] {
      AttentionOutputs r;
      auto logical = [&](EncodedBuffer& bits, TensorRole role) {
        HostTensor t = from_storage(p, *plan, bits, role);
        bits = EncodedBuffer();
        return t;
      };
      r.o = logical(d->o, TensorRole::o);
      r.lse = lse_from_stats(*plan, d->lse, p.batch, p.heads_q, p.seq_q);
      if (with_grads) {
        r.dq = logical(d->dq, TensorRole::q);
        r.dk = logical(d->dk, TensorRole::k);
        r.dv = logical(d->dv, TensorRole::v);
      }
      return r;
    };
  }

  std::optional<uint64_t> outputs_digest(bool with_grads) override {
    std::vector<const DeviceBuffer*> out{&o_, &stats_};
    if (with_grads) out.insert(out.end(), {&dq_, &dk_, &dv_});
    return device::digest(out, stream_);
  }

  int64_t executed_pairs() const override { return plan_.executed_pairs; }

  double setup_ms() const override {
    double ms = analysis_ms_;
    for (const auto& rt : parts_) ms += (rt->fwd ? rt->fwd->build_ms : 0.0) + (rt->bwd ? rt->bwd->build_ms : 0.0);
    return ms;
  }

  size_t allocated_bytes() const override {
    size_t total = 0;
    for (const DeviceBuffer* b : buffers()) total += b->allocated_bytes();
    return total;
  }

  void* stream() const override { return stream_; }

  nlohmann::json extra() const override {
    nlohmann::json j;
    j["cudnn_version"] = env_.version;
    j["storage"] = storage_name(plan_.storage);
    j["sequences"] = plan_.has_graph ? plan_.fwd.n : 0;
    j["graphs"] = parts_.size();  // graph pairs executed per pass (length classes of a ragged case)
    j["concurrent_parts"] = concurrent_;  // split_streams: one stream per part
    j["plan_cache_hit"] = plan_cache_hit();
    j["analysis_ms"] = analysis_ms_;
    auto graph = [](const std::shared_ptr<const BuiltGraph>& g) -> nlohmann::json {
      if (!g) return nullptr;
      return {{"graph", g->description},   {"engine_global_index", g->engine_index},
              {"heuristics", g->heuristic_mode + "[" + std::to_string(g->heuristic_rank) + "/" + std::to_string(g->heuristic_count) + "]"},
              {"workspace_bytes", g->workspace_bytes}, {"operations", g->ops}, {"build_ms", g->build_ms}};
    };
    // "forward" / "backward" describe the first part that runs that pass (the only
    // part unless the sequences were split into length classes), "parts" all.
    std::shared_ptr<const BuiltGraph> first_fwd, first_bwd;
    for (const auto& rt : parts_) {
      if (!first_fwd) first_fwd = rt->fwd;
      if (!first_bwd) first_bwd = rt->bwd;
    }
    j["forward"] = graph(first_fwd);
    j["backward"] = graph(first_bwd);
    if (parts_.size() > 1) {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& rt : parts_) all.push_back({{"forward", graph(rt->fwd)}, {"backward", graph(rt->bwd)}});
      j["parts"] = std::move(all);
    }
    auto knobs = [](const std::shared_ptr<const BuiltGraph>& g) {
      nlohmann::json a = nlohmann::json::array();
      for (const KnobInfo& k : g->knobs)
        a.push_back({{"knob", knob_name(k.type)}, {"min", k.min}, {"max", k.max}, {"stride", k.stride},
                     {"chosen", k.chosen}});
      return a;
    };
    if (first_fwd) j["forward"]["knobs"] = knobs(first_fwd);
    if (first_bwd) j["backward"]["knobs"] = knobs(first_bwd);
    if (env_.autotune) {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& rt : parts_) all.push_back(rt->tuning);
      j["autotune"] = std::move(all);
    }
    j["fixup_rows"] = {{"dead_query_rows", plan_.dead_q.unit.size()}, {"unattended_key_rows", plan_.dead_k.unit.size()}};
    j["notes"] = plan_.notes;
    if (env_.cuda_graph) {
      auto state = [](const CapturedPass& c) -> nlohmann::json {
        if (c.state == CapturedPass::State::ready) return "replayed";
        if (c.state == CapturedPass::State::refused) return "refused: " + c.why;
        return "not run";
      };
      j["cuda_graph"] = {{"forward", state(fwd_graph_)}, {"backward", state(bwd_graph_)}};
    }
    return j;
  }

  const CasePlan& plan() const override { return plan_; }
  bool plan_cache_hit() const override {
    if (!plan_.has_graph) return false;
    for (const auto& rt : parts_)
      if (!rt->fwd_hit || !rt->bwd_hit) return false;
    return true;
  }
  int64_t plan_workspace_bytes() const override { return parts_workspace(part_needs(), concurrent_); }
  bool guards_intact() const override {
    for (const DeviceBuffer* b : buffers())
      if (!b->empty() && !b->guards_intact()) return false;
    return true;
  }

 private:
  /// The built graphs of one GraphPart and the per-sequence tensors they read.
  struct PartRuntime {
    std::shared_ptr<const BuiltGraph> fwd, bwd;
    int64_t workspace_offset = 0;    ///< bytes into the instance's workspace (own slice with split_streams)
    bool fwd_hit = false, bwd_hit = false;
    DeviceBuffer seq_q, seq_kv, rag_q, rag_k, rag_v, rag_o, rag_stats;
    Descriptor fwd_pack, bwd_pack;
    cudnnBackendDescriptor_t fwd_plan = nullptr, bwd_plan = nullptr;  ///< executed: the graph's or a tuned variant
    std::vector<PlanVariant> fwd_variants, bwd_variants;               ///< autotuning candidates (knob variants)
    nlohmann::json tuning;                                             ///< autotuning table (extra()["autotune"])
  };

  /// Owns a CUDA event without timing (fork / join of concurrent parts).
  struct EventHolder {
    cudaEvent_t e = nullptr;
    EventHolder() { ATTNBENCH_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }
    ~EventHolder() {
      if (e) (void)cudaEventDestroy(e);
    }
    EventHolder(const EventHolder&) = delete;
    EventHolder& operator=(const EventHolder&) = delete;
  };

  /// One pass captured as a CUDA graph (Env::cuda_graph).
  struct CapturedPass {
    enum class State { untried, ready, refused } state = State::untried;
    cudaGraphExec_t exec = nullptr;
    std::string why;  ///< why the capture was refused (report note)
    CapturedPass() = default;
    ~CapturedPass() {
      if (exec) (void)cudaGraphExecDestroy(exec);
    }
    CapturedPass(const CapturedPass&) = delete;
    CapturedPass& operator=(const CapturedPass&) = delete;
  };

  /// With Env::cuda_graph: launch the pass's CUDA graph on the instance's stream,
  /// capturing `enqueue` into it on the first call, and return true. Returns false
  /// (the caller enqueues directly) when the mode is off or the capture was
  /// refused (begin, enqueue, end or instantiate failed); the refusal is kept in
  /// `pass.why` for the report. Throws std::runtime_error only when launching an
  /// instantiated graph fails.
  template <class Enqueue>
  bool replay(CapturedPass& pass, Enqueue enqueue) {
    if (!env_.cuda_graph || pass.state == CapturedPass::State::refused) return false;
    if (pass.state == CapturedPass::State::untried) {
      pass.state = CapturedPass::State::refused;
      if (const cudaError_t begin = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed); begin != cudaSuccess) {
        (void)cudaGetLastError();
        pass.why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(begin);
        return false;
      }
      std::string failed;
      try {
        enqueue();
      } catch (const std::exception& e) {
        failed = e.what();
      } catch (...) {
        failed = "unknown exception while capturing";
      }
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      if (failed.empty() && end != cudaSuccess) failed = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
      if (failed.empty()) {
        const cudaError_t inst = cudaGraphInstantiate(&pass.exec, graph, 0);
        if (inst != cudaSuccess) failed = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
      }
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();  // a refused capture leaves no sticky error behind
      (void)cudnnSetStream(handle_, stream_);
      if (!failed.empty()) {
        pass.why = failed;
        return false;
      }
      pass.state = CapturedPass::State::ready;
    }
    ATTNBENCH_CHECK(cudaGraphLaunch(pass.exec, stream_));
    return true;
  }

  /// Execute the plan of every part that runs this pass (`pick` returns the plan
  /// and its variant pack, or a null plan for a part the pass skips): on the
  /// instance's stream one after another, or with split_streams the k-th such
  /// part on its own stream (the first on the instance's stream), forked from and
  /// joined back to the instance's stream with events.
  template <class Pick>
  void run_parts(Pick pick) {
    // The fork is recorded before anything of this pass is enqueued, so that no
    // part waits for another.
    if (concurrent_) ATTNBENCH_CHECK(cudaEventRecord(fork_->e, stream_));
    size_t k = 0, forked = 0;  // parts enqueued; aux streams that waited on the fork
    try {
      for (const auto& part : parts_) {
        auto [plan, pack] = pick(*part);
        if (!plan) continue;
        cudaStream_t s = stream_;
        if (concurrent_ && k > 0) {
          s = aux_streams_[k - 1]->s;
          ATTNBENCH_CHECK(cudaStreamWaitEvent(s, fork_->e, 0));
          forked = k;
        }
        ATTNBENCH_CHECK(cudnnSetStream(handle_, s));
        ATTNBENCH_CHECK(cudnnBackendExecute(handle_, plan, pack));
        if (concurrent_ && k > 0) ATTNBENCH_CHECK(cudaEventRecord(joins_[k - 1]->e, s));
        ++k;
      }
    } catch (...) {
      // Join every aux stream that waited on the fork back to the instance's
      // stream (recording the join of the one that failed half-way, so that a
      // stream capture in progress ends joined), leave the shared handle on the
      // instance's stream, then report the failure.
      if (forked == k && forked > 0) (void)cudaEventRecord(joins_[forked - 1]->e, aux_streams_[forked - 1]->s);
      for (size_t j = 1; j <= forked; ++j) (void)cudaStreamWaitEvent(stream_, joins_[j - 1]->e, 0);
      (void)cudnnSetStream(handle_, stream_);
      throw;
    }
    for (size_t j = 1; concurrent_ && j < k; ++j) ATTNBENCH_CHECK(cudaStreamWaitEvent(stream_, joins_[j - 1]->e, 0));
    ATTNBENCH_CHECK(cudnnSetStream(handle_, stream_));
  }

  /// Workspace bytes each part needs: its graphs' and their autotuning variants'.
  std::vector<int64_t> part_needs() const {
    std::vector<int64_t> need;
    for (const auto& rt : parts_) {
      int64_t ws = std::max(rt->fwd ? rt->fwd->workspace_bytes : 0, rt->bwd ? rt->bwd->workspace_bytes : 0);
      for (const auto* vs : {&rt->fwd_variants, &rt->bwd_variants})
        for (const PlanVariant& v : *vs) ws = std::max(ws, v.workspace_bytes);
      need.push_back(ws);
    }
    return need;
  }

  /// Median time (ms) of `plan` over 5 executions after 2 warm-ups, CUDA events on
  /// the instance's stream; nullopt when cuDNN fails to execute it.
  std::optional<double> time_plan(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    ATTNBENCH_CHECK(cudnnSetStream(handle_, stream_));
    for (int i = 0; i < 2; ++i)
      if (cudnnBackendExecute(handle_, plan, pack) != CUDNN_STATUS_SUCCESS) {
        ATTNBENCH_CHECK(cudaStreamSynchronize(stream_));
        return std::nullopt;
      }
    cudaEvent_t a = nullptr, b = nullptr;
    ATTNBENCH_CHECK(cudaEventCreate(&a));
    ATTNBENCH_CHECK(cudaEventCreate(&b));
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
      ATTNBENCH_CHECK(cudaEventRecord(a, stream_));
      const cudnnStatus_t st = cudnnBackendExecute(handle_, plan, pack);
      ATTNBENCH_CHECK(cudaEventRecord(b, stream_));
      ATTNBENCH_CHECK(cudaEventSynchronize(b));
      if (st != CUDNN_STATUS_SUCCESS) break;
      float t = 0;
      ATTNBENCH_CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    if (ms.size() < 5) return std::nullopt;
    std::sort(ms.begin(), ms.end());
    return ms[2];
  }

  /// Option autotune: time the heuristics' plan and every knob variant
  /// of every graph with this instance's buffers (hot L2, outside every timed
  /// pass; the forwards first, then one forward pass, then the backwards) and
  /// execute the fastest from now on. The outputs the tuning writes are
  /// overwritten by the runner's passes.
  void autotune() {
    for (auto& rt : parts_)
      if (rt->fwd) tune(*rt, "forward", *rt->fwd, rt->fwd_variants, rt->fwd_pack.get(), rt->fwd_plan);
    // the backward reads O and Stats of a forward
    forward();
    for (auto& rt : parts_)
      if (rt->bwd) tune(*rt, "backward", *rt->bwd, rt->bwd_variants, rt->bwd_pack.get(), rt->bwd_plan);
    ATTNBENCH_CHECK(cudaStreamSynchronize(stream_));
  }

  /// Time graph `g` and its knob variants `vars` with `pack`; `chosen` becomes the
  /// fastest plan and rt.tuning[which] the table.
  void tune(PartRuntime& rt, const char* which, const BuiltGraph& g, std::vector<PlanVariant>& vars,
            cudnnBackendDescriptor_t pack, cudnnBackendDescriptor_t& chosen) {
    nlohmann::json table = nlohmann::json::array();
    std::optional<double> best = time_plan(g.plan.get(), pack);
    table.push_back({{"plan", "heuristics"}, {"ms", best ? nlohmann::json(*best) : nlohmann::json(nullptr)}});
    std::string best_label = "heuristics";
    for (PlanVariant& v : vars) {
      const std::optional<double> t = time_plan(v.plan.get(), pack);
      table.push_back({{"plan", v.label}, {"ms", t ? nlohmann::json(*t) : nlohmann::json(nullptr)}});
      if (t && (!best || *t < *best)) {
        best = t;
        best_label = v.label;
        chosen = v.plan.get();
      }
    }
    rt.tuning[which] = {{"chosen", best_label}, {"candidates", std::move(table)}};
  }

  std::vector<const DeviceBuffer*> buffers() const {
    std::vector<const DeviceBuffer*> all = {&q_,     &k_,     &v_,       &o_,     &do_,        &dq_,
                                            &dk_,    &dv_,    &stats_,   &dsum_,  &dq_accum_,  &dk_full_,
                                            &dv_full_, &alibi_, &workspace_, &dead_q_, &dead_k_, &stats_dead_};
    for (const auto& rt : parts_)
      for (const DeviceBuffer* b : {&rt->seq_q, &rt->seq_kv, &rt->rag_q, &rt->rag_k, &rt->rag_v, &rt->rag_o,
                                    &rt->rag_stats})
        all.push_back(b);
    return all;
  }

  bool q_side(TensorRole r) const { return r == TensorRole::q || r == TensorRole::o; }

  int64_t storage_numel(TensorRole role) const {
    if (plan_.storage != Storage::tokens) return physical_layout(p_, role).numel();
    const bool qs = q_side(role);
    const int64_t H = qs ? p_.heads_q : p_.heads_kv;
    const int64_t D = (role == TensorRole::q || role == TensorRole::k) ? p_.head_dim : p_.head_dim_v;
    return (qs ? plan_.q_rows : plan_.k_rows) * H * D;
  }

  /// fn(logical, stored) for every stored token row of tensor `role` (token
  /// storage): the element offsets of its D values in the logical [B, H, S, D]
  /// tensor and in the storage. (b, h) pairs run on the pass pool (rows disjoint).
  template <class Fn>
  void for_each_stored_row(TensorRole role, Fn&& fn) const {
    cudnn_stored_rows(p_, plan_, role, std::forward<Fn>(fn));
  }

  /// Logical [B, H, S, D] -> the instance's storage as dtype bits (zeros where
  /// nothing is stored).
  EncodedBuffer to_storage(const HostTensor& t, TensorRole role) const {
    if (plan_.storage != Storage::tokens) return encode_physical(t, physical_layout(p_, role), p_.dtype);
    EncodedBuffer out(static_cast<size_t>(storage_numel(role)), p_.dtype);
    std::memset(out.data(), 0, out.size_bytes());  // +0.0 in every dtype
    const size_t D = static_cast<size_t>(t.shape[3]);
    for_each_stored_row(role, [&](size_t logical, size_t stored) {
      encode_span(t.data.data() + logical, D, p_.dtype, out.data(), stored);
    });
    return out;
  }


  Problem p_;
  CasePlan plan_;
  Env env_;
  double analysis_ms_ = 0.0;
  device::OwnedStream stream_holder_;  // declared before the buffers: destroyed after them
  cudaStream_t stream_ = stream_holder_.s;
  cudnnHandle_t handle_ = nullptr;
  std::vector<std::unique_ptr<PartRuntime>> parts_;  ///< one per plan_.parts entry
  bool concurrent_ = false;                          ///< split_streams with more than one part
  std::vector<std::unique_ptr<device::OwnedStream>> aux_streams_;  ///< parts 1.. when concurrent_
  std::unique_ptr<EventHolder> fork_;
  std::vector<std::unique_ptr<EventHolder>> joins_;
  CapturedPass fwd_graph_, bwd_graph_;  ///< Env::cuda_graph
  DeviceBuffer q_, k_, v_, o_, do_, dq_, dk_, dv_, stats_;
  DeviceBuffer dsum_, dq_accum_, dk_full_, dv_full_, alibi_, workspace_;
  DeviceBuffer dead_q_, dead_k_, stats_dead_;
};

}  // namespace

Env current_env(const Env& knobs) {
  Env e = knobs;
  e.version = static_cast<int64_t>(cudnnGetVersion());
  e.device = device::selected_device();
  int major = 0, minor = 0;
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, e.device));
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, e.device));
  e.sm = major * 10 + minor;
  return e;
}

OptionSpecs cudnn_option_specs() {
  return {
      OptionSpec::flag("split", true, "split ragged sequences into length classes, one graph each"),
      OptionSpec::flag("split_streams", true, "run the length classes concurrently, one CUDA stream each"),
      OptionSpec::text("split_bounds", "",
                       "upper bounds of the length classes, e.g. 128/256 (empty: 128, 256, 512, ...)"),
      OptionSpec::flag("split_forward", false, "the forward runs the length classes too (else one graph)"),
      OptionSpec::choice("split_order", "long-first", {"long-first", "short-first"},
                         "which length class is issued first"),
      OptionSpec::choice("seq_order", "natural", {"natural", "long-first", "short-first"},
                         "order of the sequences inside each ragged graph"),
      OptionSpec::choice("fullhead", "tokens", {"tokens", "padded"},
                         "ragged GQA backward: full-head dK/dV as token-major buffers, or padded virtual tensors"),
      OptionSpec::choice("dq_direct", "auto", {"auto", "on", "off"},
                         "backward writes dQ from a dP workspace instead of float32 atomics (auto: ragged graphs "
                         "within dp_workspace_limit)"),
      OptionSpec::integer("dp_workspace_limit", int64_t{4} << 30, 0, int64_t{1} << 50,
                          "largest dP workspace dq_direct may ask for (bytes)"),
      OptionSpec::flag("autotune", false, "time every knob variant of each graph once and run the fastest"),
      OptionSpec::flag("cuda_graph", false, "replay each pass as one captured CUDA graph"),
  };
}

Env knobs_from_options(const OptionValues& v) {
  Env e;
  e.split_by_length = v.flag("split");
  e.split_streams = v.flag("split_streams");
  if (!v.text("split_bounds").empty()) {
    try {
      e.split_bounds = parse_split_bounds(v.text("split_bounds"));
    } catch (const std::invalid_argument& ex) {
      throw InputError("<backend options>", "cudnn[split_bounds]", ex.what());
    }
  }
  e.split_forward = v.flag("split_forward");
  e.split_long_first = v.text("split_order") == "long-first";
  const std::string& so = v.text("seq_order");
  e.seq_order = so == "long-first" ? SeqOrder::long_first : so == "short-first" ? SeqOrder::short_first
                                                                                 : SeqOrder::natural;
  e.fullhead_tokens = v.text("fullhead") == "tokens";
  const std::string& dq = v.text("dq_direct");
  e.dq_direct = dq == "on" ? 1 : dq == "off" ? 0 : -1;
  e.dp_workspace_limit = v.integer("dp_workspace_limit");
  e.autotune = v.flag("autotune");
  e.cuda_graph = v.flag("cuda_graph");
  return e;
}

std::string CudnnBackend::description() const {
  return "cuDNN fused SDPA (flash fwd/bwd) via the cuDNN backend graph API; fp16/bf16, BSHD/BHSD/THD, causal, "
         "window, padding, documents (ragged), GQA, softcap, alibi";
}

bool CudnnBackend::available(std::string* why) const {
  if (!device::cuda_device_available(why)) return false;
  const size_t v = cudnnGetVersion();
  if (v < 90000) {
    if (why) *why = "cuDNN runtime " + std::to_string(v) + " is older than 9.0";
    return false;
  }
  return true;
}

Support CudnnBackend::supports(const Problem& p) const {
  CasePlan plan;
  try {
    auto r = plan_case(p, current_env(knobs_));
    if (auto* why = std::get_if<std::string>(&r)) return Support::no(*why);
    plan = std::move(std::get<CasePlan>(r));
  } catch (const std::exception& e) {
    return Support::no(std::string("cuDNN backend cannot analyse this problem: ") + e.what());
  }
  if (!plan.has_graph) return Support::yes();
  try {
    for (const GraphPart& gp : plan.parts) {  // only the graphs an instance executes
      if (gp.run_fwd) (void)get_plan(gp.fwd);
      if (gp.run_bwd) (void)get_plan(gp.bwd);
    }
  } catch (const GraphUnsupported& e) {
    return Support::no(std::string("cuDNN rejects the graph: ") + e.what());
  } catch (const std::exception&) {
    // Any other failure is an error, not a support question: prepare() will
    // rebuild the plan and report it as an error row.
  }
  return Support::yes();
}

size_t CudnnBackend::workspace_bytes(const Problem& p) const {
  try {
    auto r = plan_case(p, current_env(knobs_));
    auto* plan = std::get_if<CasePlan>(&r);
    if (!plan || !plan->has_graph) return 0;
    const GraphSpec& g = plan->bwd;
    const int64_t rows = g.ragged ? plan->q_rows : g.n * g.sq;
    size_t bytes = static_cast<size_t>(rows * g.hq * (1 + g.dqk)) * sizeof(float);
    try {
      // As the instance allocates it (parts_workspace).
      std::vector<int64_t> need;
      for (const GraphPart& gp : plan->parts) {
        int64_t n = 0;
        if (gp.run_fwd) n = std::max(n, get_plan(gp.fwd)->workspace_bytes);
        if (gp.run_bwd) n = std::max(n, get_plan(gp.bwd)->workspace_bytes);
        need.push_back(n);
      }
      bytes += static_cast<size_t>(parts_workspace(need, knobs_.split_streams && plan->parts.size() > 1));
    } catch (const std::exception&) {
    }
    return bytes;
  } catch (const std::exception&) {
    return 0;
  }
}

std::unique_ptr<BackendInstance> CudnnBackend::prepare(const Problem& p, const ProblemData& inputs) {
  const auto t0 = Clock::now();
  expect_shape(inputs.q, {p.batch, p.heads_q, p.seq_q, p.head_dim}, "q");
  expect_shape(inputs.k, {p.batch, p.heads_kv, p.seq_k, p.head_dim}, "k");
  expect_shape(inputs.v, {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, "v");
  if (!inputs.d_o.data.empty()) expect_shape(inputs.d_o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "d_o");
  const Env env = current_env(knobs_);
  auto r = plan_case(p, env);
  if (auto* why = std::get_if<std::string>(&r)) throw Unsupported("cudnn: " + *why);
  const double analysis_ms = ms_since(t0);
  return std::make_unique<Instance>(p, inputs, std::move(std::get<CasePlan>(r)), env, analysis_ms);
}

ATTNBENCH_REGISTER_BACKEND(CudnnBackend);

// The cuDNN runtime actually loaded (cudnnGetVersion: major * 10000 + minor * 100 + patch
// for cuDNN 9), recorded in every report's environment.
[[maybe_unused]] static const bool kCudnnVersionRegistered = ::attnbench::env::register_library_version("cudnn", [] {
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
});

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
