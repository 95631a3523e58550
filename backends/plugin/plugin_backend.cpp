// Shared-library backends: the loader and the Backend adapter around the C ABI
// of include/attnbench/plugin.h (docs/plugins.md).
#include "backends/plugin/plugin_backend.hpp"

#include <dlfcn.h>

#include <charconv>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "harness/backend/backend.hpp"
#include "harness/device/device.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask.hpp"

#ifdef ATTNBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/stream.hpp"
#endif

namespace attnbench::plugin {

CProblem::CProblem(const Problem& p) {
  attnb_problem& v = view_;
  v.batch = p.batch;
  v.heads_q = p.heads_q;
  v.heads_kv = p.heads_kv;
  v.seq_q = p.seq_q;
  v.seq_k = p.seq_k;
  v.head_dim = p.head_dim;
  v.head_dim_v = p.head_dim_v;
  v.dtype = p.dtype == DType::fp32 ? ATTNB_FP32 : p.dtype == DType::fp16 ? ATTNB_FP16 : ATTNB_BF16;
  v.layout = p.layout == Layout::bshd ? ATTNB_LAYOUT_BSHD : p.layout == Layout::bhsd ? ATTNB_LAYOUT_BHSD
                                                                                      : ATTNB_LAYOUT_THD;
  v.scale = p.softmax_scale();
  v.window_left = v.window_right = -1;
  for (const auto& term : p.mask) {
    if (auto* c = std::get_if<CausalTerm>(&term)) {
      v.mask_kinds |= c->align == CausalAlign::top_left ? ATTNB_MASK_CAUSAL_TOP_LEFT : ATTNB_MASK_CAUSAL_BOTTOM_RIGHT;
    } else if (auto* w = std::get_if<SlidingWindowTerm>(&term)) {
      v.mask_kinds |= ATTNB_MASK_SLIDING_WINDOW;
      v.window_left = w->left;
      v.window_right = w->right;
    } else if (auto* d = std::get_if<DocumentTerm>(&term)) {
      v.mask_kinds |= ATTNB_MASK_DOCUMENT;
      if (!d->doc_lengths.empty()) {
        doc_offsets_.push_back(0);
        for (const auto& row : d->doc_lengths) {
          doc_lengths_.insert(doc_lengths_.end(), row.begin(), row.end());
          doc_offsets_.push_back(static_cast<int64_t>(doc_lengths_.size()));
        }
      }
    } else if (std::holds_alternative<PrefixLmTerm>(term)) {
      v.mask_kinds |= ATTNB_MASK_PREFIX_LM;
    } else if (std::holds_alternative<PaddingTerm>(term)) {
      v.mask_kinds |= ATTNB_MASK_PADDING;
    } else if (std::holds_alternative<BlockSparseTerm>(term)) {
      v.mask_kinds |= ATTNB_MASK_BLOCK_SPARSE;
    }
  }
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  doc_ids_ = std::move(arrays.doc_ids);  // moving a vector keeps its buffer
  seq_lens_q_ = std::move(arrays.seq_lens_q);
  seq_lens_k_ = std::move(arrays.seq_lens_k);
  v.upper_tl = m.upper_tl;
  v.upper_br = m.upper_br;
  v.lower_br = m.lower_br;
  v.prefix_len = m.prefix_len;
  v.doc_ids = doc_ids_.empty() ? nullptr : doc_ids_.data();
  v.doc_lengths = doc_offsets_.empty() ? nullptr : doc_lengths_.data();
  v.doc_offsets = doc_offsets_.empty() ? nullptr : doc_offsets_.data();
  v.seq_lens_q = seq_lens_q_.empty() ? nullptr : seq_lens_q_.data();
  v.seq_lens_k = seq_lens_k_.empty() ? nullptr : seq_lens_k_.data();
  v.block_density = m.block_density;
  v.block_seed = m.block_seed;
  if (p.layout == Layout::thd) {
    cu_q_ = physical_layout(p, TensorRole::q).cu_seqlens;
    cu_k_ = physical_layout(p, TensorRole::k).cu_seqlens;
    v.cu_seqlens_q = cu_q_.data();
    v.cu_seqlens_k = cu_k_.data();
  }
  v.score_mod = static_cast<int32_t>(p.score_mod.kind);  // same order as attnb_score_mod
  v.softcap = p.score_mod.cap;
  v.max_distance = p.score_mod.max_distance;
  v.bias_numel = p.bias_numel();
}

namespace {

/// A loaded library: its path, the table it returned and the dlopen handle
/// (kept open for the life of the process).
struct Library {
  std::string path;
  const attnb_plugin* api = nullptr;
  /// Name and description copied (and checked) once at load: a plugin that
  /// rewrites its table later changes nothing.
  std::string name, description;
  int32_t device = ATTNB_DEVICE_CPU;
  uint32_t flags = 0;
  /// The declared options (ABI version 2), checked and copied at load.
  OptionSpecs options;
  /// prepare_with_options of a version 2 table, else nullptr.
  decltype(attnb_plugin::prepare_with_options) prepare_with_options = nullptr;
};

/// Memory on the plugin's device: host vectors, or tracked CUDA buffers.
class Storage {
 public:
  virtual ~Storage() = default;
  /// A new zero-or-uninitialised region of `bytes` bytes on the device.
  virtual void* alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  /// Fill with 0xFF bytes: NaN in fp32, fp16 and bf16.
  virtual void poison(void* dst, size_t bytes) = 0;
  virtual void* stream() const { return nullptr; }
  virtual void synchronize() {}
  virtual int device_index() const { return 0; }
  size_t bytes() const { return bytes_; }

 protected:
  size_t bytes_ = 0;
};

class HostStorage final : public Storage {
 public:
  void* alloc(size_t bytes) override {
    blocks_.emplace_back(bytes, uint8_t{0});
    bytes_ += bytes;
    return blocks_.back().data();
  }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void poison(void* dst, size_t bytes) override { std::memset(dst, 0xFF, bytes); }

 private:
  std::vector<std::vector<uint8_t>> blocks_;
};

#ifdef ATTNBENCH_HAVE_CUDA
class CudaStorage final : public Storage {
 public:
  CudaStorage() { ATTNBENCH_CHECK(cudaGetDevice(&device_)); }
  void* alloc(size_t bytes) override {
    buffers_.emplace_back(bytes, 1);
    bytes_ += buffers_.back().allocated_bytes();
    return buffers_.back().data();
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    ATTNBENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.s));
    ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    ATTNBENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.s));
    ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s));
  }
  void poison(void* dst, size_t bytes) override { ATTNBENCH_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, stream_.s)); }
  void* stream() const override { return stream_.s; }
  void synchronize() override { ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s)); }
  int device_index() const override { return device_; }

 private:
  int device_ = 0;
  std::vector<device::DeviceBuffer> buffers_;  // freed after the stream (declared before it)
  device::OwnedStream stream_;
};
#endif

int32_t c_dtype(DType t) {
  return t == DType::fp32 ? ATTNB_FP32 : t == DType::fp16 ? ATTNB_FP16 : ATTNB_BF16;
}
size_t c_dtype_bytes(int32_t t) { return t == ATTNB_FP32 || t == ATTNB_INT32 ? 4 : t == ATTNB_UINT8 ? 1 : 2; }

/// One tensor: its view, its physical layout (4-D tensors) and its size.
struct Slot {
  attnb_tensor view{};
  std::optional<PhysicalLayout> layout;
  int64_t numel = 0;
  size_t bytes() const { return static_cast<size_t>(numel) * c_dtype_bytes(view.dtype); }
};

/// The view of a Q/K/V/O-like tensor in layout `l`: logical [B,H,S,D] with the
/// physical strides, or [T,H,D] for THD.
attnb_tensor view_of(const PhysicalLayout& l, int32_t dtype) {
  attnb_tensor t{};
  t.dtype = dtype;
  if (l.layout == Layout::thd) {
    t.ndim = 3;
    const int64_t shape[3] = {l.cu_seqlens.back(), l.H, l.D}, strides[3] = {l.H * l.D, l.D, 1};
    for (int i = 0; i < 3; ++i) t.shape[i] = shape[i], t.strides[i] = strides[i];
    return t;
  }
  t.ndim = 4;
  const int64_t shape[4] = {l.B, l.H, l.S, l.D};
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i];
  t.strides[0] = l.layout == Layout::bshd ? l.S * l.H * l.D : l.H * l.S * l.D;
  t.strides[1] = l.stride_h();
  t.strides[2] = l.stride_s();
  t.strides[3] = 1;
  return t;
}

attnb_tensor flat_view(int64_t n, int32_t dtype) {
  attnb_tensor t{};
  t.dtype = dtype;
  t.ndim = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  return t;
}

/// One prepared case of a plugin: every tensor allocated on the plugin's
/// device, inputs uploaded, the plugin's own instance handle.
class PluginInstance final : public BackendInstance {
 public:
  PluginInstance(std::shared_ptr<const Library> lib, const Problem& p, const ProblemData& in, size_t workspace,
                 const OptionValues& options)
      : lib_(std::move(lib)), p_(p), cp_(p) {
#ifdef ATTNBENCH_HAVE_CUDA
    if (lib_->device == ATTNB_DEVICE_CUDA) store_ = std::make_unique<CudaStorage>();
#endif
    if (!store_) store_ = std::make_unique<HostStorage>();
    const int32_t dt = c_dtype(p.dtype);
    const PhysicalLayout lq = physical_layout(p, TensorRole::q), lk = physical_layout(p, TensorRole::k),
                         lv = physical_layout(p, TensorRole::v), lo = physical_layout(p, TensorRole::o);
    attnb_tensors& t = tensors_;
    upload4(t.q, in.q, lq, dt);
    upload4(t.k, in.k, lk, dt);
    upload4(t.v, in.v, lv, dt);
    upload4(t.d_o, in.d_o, lo, dt);
    if (!in.bias.empty()) upload_flat(t.bias, in.bias, ATTNB_FP32);
    if (!in.offset.empty()) {
      t.offset = add(flat_view(static_cast<int64_t>(in.offset.size()), ATTNB_INT32), std::nullopt);
      store_->upload(t.offset.data, in.offset.data(), in.offset.size() * sizeof(int32_t));
    }
    t.o = add(view_of(lo, dt), lo);
    attnb_tensor lse{};
    lse.dtype = ATTNB_FP32;
    lse.ndim = 3;
    const int64_t ls[3] = {p.batch, p.heads_q, p.seq_q}, lst[3] = {p.heads_q * p.seq_q, p.seq_q, 1};
    for (int i = 0; i < 3; ++i) lse.shape[i] = ls[i], lse.strides[i] = lst[i];
    t.lse = add(lse, std::nullopt);
    t.dq = add(view_of(lq, dt), lq);
    t.dk = add(view_of(lk, dt), lk);
    t.dv = add(view_of(lv, dt), lv);
    if (p.bias_numel() > 0) t.dbias = add(flat_view(p.bias_numel(), ATTNB_FP32), std::nullopt);
    if (workspace > 0) t.workspace = add(flat_view(static_cast<int64_t>(workspace), ATTNB_UINT8), std::nullopt);
    executed_pairs_ = count_allowed_pairs(p) * p.heads_q;

    attnb_message err{};
    if (lib_->prepare_with_options) {
      for (const auto& spec : lib_->options)
        option_text_.emplace_back(spec.name,
                                  options.all().count(spec.name) ? options.text(spec.name) : spec.default_value);
      for (const auto& [name, value] : option_text_) option_values_.push_back({name.c_str(), value.c_str()});
      if (lib_->prepare_with_options(&cp_.view(), &tensors_, option_values_.data(),
                                     static_cast<uint32_t>(option_values_.size()), &handle_, &err) != 0)
        fail("prepare", err);
    } else if (lib_->api->prepare(&cp_.view(), &tensors_, &handle_, &err) != 0) {
      fail("prepare", err);
    }
    prepared_ = true;
  }
  ~PluginInstance() override {
    if (prepared_) {
      store_->synchronize();
      lib_->api->teardown(handle_);
    }
  }
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  void forward() override {
    attnb_message err{};
    if (lib_->api->forward(handle_, &tensors_, store_->stream(), &err) != 0) fail("forward", err);
  }
  void backward() override {
    if (!lib_->api->backward)
      throw std::runtime_error(where() + ": the plugin has no backward pass (run with --no-backward)");
    attnb_message err{};
    if (lib_->api->backward(handle_, &tensors_, store_->stream(), &err) != 0) fail("backward", err);
  }
  void poison_outputs() override {
    for (const attnb_tensor* t : outputs())
      if (t->data) store_->poison(t->data, slot_of(*t).bytes());
  }
  void synchronize() override { store_->synchronize(); }
  AttentionOutputs read_outputs(bool with_grads) override {
    AttentionOutputs out;
    out.o = read4(tensors_.o);
    out.lse = HostTensor({p_.batch, p_.heads_q, p_.seq_q});
    out.lse.data = read_flat(tensors_.lse);
    if (with_grads) {
      out.dq = read4(tensors_.dq);
      out.dk = read4(tensors_.dk);
      out.dv = read4(tensors_.dv);
      if (tensors_.dbias.data) out.dbias = read_flat(tensors_.dbias);
    }
    return out;
  }
  int64_t executed_pairs() const override { return executed_pairs_; }
  size_t allocated_bytes() const override { return store_->bytes(); }
  void* stream() const override { return store_->stream(); }

 private:
  std::string where() const { return "plugin " + lib_->name + " (" + lib_->path + ")"; }
  [[noreturn]] void fail(const char* call, const attnb_message& err) const {
    std::string msg(err.text, strnlen(err.text, sizeof err.text));
    throw std::runtime_error(where() + ": " + call + " failed: " + (msg.empty() ? "no message given" : msg));
  }
  std::vector<attnb_tensor*> outputs() {
    auto& t = tensors_;
    return {&t.o, &t.lse, &t.dq, &t.dk, &t.dv, &t.dbias};
  }
  attnb_tensor add(attnb_tensor v, std::optional<PhysicalLayout> l) {
    Slot s;
    s.view = v;
    s.view.device = lib_->device;
    s.view.device_index = store_->device_index();
    s.layout = std::move(l);
    s.numel = s.layout ? s.layout->numel() : v.shape[0] * (v.ndim == 3 ? v.shape[1] * v.shape[2] : 1);
    s.view.data = store_->alloc(std::max<size_t>(s.bytes(), 1));
    slots_.push_back(std::move(s));
    return slots_.back().view;
  }
  const Slot& slot_of(const attnb_tensor& t) const {
    for (const auto& s : slots_)
      if (s.view.data == t.data) return s;
    throw std::logic_error("plugin adapter: unknown tensor");
  }
  void upload_flat(attnb_tensor& t, const std::vector<double>& values, int32_t dtype) {
    t = add(flat_view(static_cast<int64_t>(values.size()), dtype), std::nullopt);
    std::vector<uint8_t> bytes(values.size() * c_dtype_bytes(dtype));
    for (size_t i = 0; i < values.size(); ++i)
      attnb_store(bytes.data(), dtype, static_cast<int64_t>(i), static_cast<float>(values[i]));
    store_->upload(t.data, bytes.data(), bytes.size());
  }
  void upload4(attnb_tensor& t, const HostTensor& logical, const PhysicalLayout& l, int32_t dtype) {
    const std::vector<double> phys = to_physical(logical, l);
    t = add(view_of(l, dtype), l);
    std::vector<uint8_t> bytes(phys.size() * c_dtype_bytes(dtype));
    // Inputs are already rounded to the dtype, so the float step is exact.
    for (size_t i = 0; i < phys.size(); ++i)
      attnb_store(bytes.data(), dtype, static_cast<int64_t>(i), static_cast<float>(phys[i]));
    store_->upload(t.data, bytes.data(), bytes.size());
  }
  std::vector<double> read_flat(const attnb_tensor& t) {
    const Slot& s = slot_of(t);
    std::vector<uint8_t> bytes(s.bytes());
    store_->download(bytes.data(), t.data, bytes.size());
    std::vector<double> out(static_cast<size_t>(s.numel));
    for (int64_t i = 0; i < s.numel; ++i) out[static_cast<size_t>(i)] = attnb_load(bytes.data(), t.dtype, i);
    return out;
  }
  HostTensor read4(const attnb_tensor& t) { return from_physical(read_flat(t), *slot_of(t).layout, 0.0); }

  std::shared_ptr<const Library> lib_;
  Problem p_;
  CProblem cp_;
  std::unique_ptr<Storage> store_;
  std::vector<Slot> slots_;
  attnb_tensors tensors_{};
  void* handle_ = nullptr;
  /// The variant's options as handed to prepare_with_options (the strings stay
  /// valid until the instance ends, after teardown()).
  std::vector<std::pair<std::string, std::string>> option_text_;
  std::vector<attnb_option_value> option_values_;
  bool prepared_ = false;
  int64_t executed_pairs_ = 0;
};

/// The Backend face of a loaded plugin.
class PluginBackend final : public Backend {
 public:
  explicit PluginBackend(std::shared_ptr<const Library> lib) : lib_(std::move(lib)) {}
  std::string name() const override { return lib_->name; }
  std::string description() const override {
    return (lib_->description.empty() ? "(no description)" : lib_->description) + " [plugin " + lib_->path + "]";
  }
  Device device() const override { return lib_->device == ATTNB_DEVICE_CUDA ? Device::cuda : Device::cpu; }
  bool available(std::string* why) const override {
    if (lib_->device == ATTNB_DEVICE_CUDA && !device::cuda_device_available(why)) return false;
    if (!lib_->api->available) return true;
    attnb_message m{};
    if (lib_->api->available(&m)) return true;
    if (why) *why = std::string(m.text, strnlen(m.text, sizeof m.text));
    return false;
  }
  Support supports(const Problem& p) const override {
    CProblem cp(p);
    attnb_message m{};
    if (lib_->api->supports(&cp.view(), &m)) return Support::yes();
    std::string reason(m.text, strnlen(m.text, sizeof m.text));
    return Support::no(reason.empty() ? "declined by the plugin without a reason" : reason);
  }
  size_t workspace_bytes(const Problem& p) const override {
    if (!lib_->api->workspace_bytes) return 0;
    CProblem cp(p);
    return lib_->api->workspace_bytes(&cp.view());
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) override {
    return std::make_unique<PluginInstance>(lib_, p, inputs, workspace_bytes(p), option_values());
  }
  bool deterministic() const override { return (lib_->flags & ATTNB_PLUGIN_NONDETERMINISTIC) == 0; }
  /// The options the plugin declares (ABI version 2; none for version 1).
  OptionSpecs option_specs() const override { return lib_->options; }

 private:
  std::shared_ptr<const Library> lib_;
};

bool valid_name(const char* n) {
  if (!n || !*n) return false;
  size_t len = 0;
  for (const char* c = n; *c; ++c, ++len)
    if (len >= kMaxPluginName ||
        !(std::isalnum(static_cast<unsigned char>(*c)) || *c == '_' || *c == '.' || *c == '-'))
      return false;
  return true;
}

/// NULL, or at most kMaxPluginDescription bytes without control characters.
bool valid_description(const char* d) {
  if (!d) return true;
  size_t len = 0;
  for (const char* c = d; *c; ++c, ++len)
    if (len >= kMaxPluginDescription || static_cast<unsigned char>(*c) < 0x20 || *c == 0x7f) return false;
  return true;
}

/// The declarations of a version 2 table as OptionSpecs; throws InputError
/// naming `path` and the option for a malformed one (name, type, default, range,
/// choices, doc).
OptionSpecs plugin_options(const std::string& path, const attnb_plugin* api) {
  OptionSpecs out;
  if (api->n_options > 0 && !api->options) throw InputError(path, "", "attnb_plugin.options is NULL but n_options > 0");
  if (api->n_options > 64) throw InputError(path, "", "attnb_plugin.n_options is over 64");
  for (uint32_t i = 0; i < api->n_options; ++i) {
    const attnb_option& o = api->options[i];
    const std::string where = "attnb_plugin.options[" + std::to_string(i) + "]";
    auto bad = [&](const std::string& why) { return InputError(path, "", where + ": " + why); };
    std::string name = o.name ? o.name : "";
    if (name.empty() || name.size() > 64 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      throw bad("name must be a non-empty [a-z0-9_]+ string of at most 64 characters");
    for (const auto& prev : out)
      if (prev.name == name) throw bad("option \"" + name + "\" declared twice");
    if (!valid_description(o.doc)) throw bad("doc must be one line without control characters");
    const std::string def = o.default_value ? o.default_value : "";
    const std::string doc = o.doc ? o.doc : "";
    try {
      switch (o.type) {
        case ATTNB_OPTION_BOOL:
          if (def != "true" && def != "false") throw bad("a bool default must be \"true\" or \"false\"");
          out.push_back(OptionSpec::flag(name, def == "true", doc));
          break;
        case ATTNB_OPTION_INT: {
          int64_t v = 0;
          const auto [ptr, ec] = std::from_chars(def.data(), def.data() + def.size(), v);
          if (def.empty() || ec != std::errc() || ptr != def.data() + def.size()) throw bad("an int default must be decimal");
          out.push_back(OptionSpec::integer(name, v, o.min, o.max, doc));
          break;
        }
        case ATTNB_OPTION_ENUM: {
          std::vector<std::string> choices;
          std::string c = o.choices ? o.choices : "";
          for (size_t pos = 0; pos <= c.size();) {
            const size_t bar = std::min(c.find('|', pos), c.size());
            choices.push_back(c.substr(pos, bar - pos));
            pos = bar + 1;
          }
          for (const auto& ch : choices)
            if (ch.empty() || ch.find_first_of(",[]= ") != std::string::npos)
              throw bad("enum choices must be non-empty values separated by '|'");
          out.push_back(OptionSpec::choice(name, def, choices, doc));
          break;
        }
        case ATTNB_OPTION_STRING:
          out.push_back(OptionSpec::text(name, def, doc));
          (void)out.back().canonical(def, api->name ? api->name : "", path, "");
          break;
        default:
          throw bad("type " + std::to_string(o.type) + " is not an ATTNB_OPTION_* value");
      }
    } catch (const std::logic_error& e) {  // a default outside its range or choices
      throw bad(e.what());
    }
  }
  return out;
}

/// Check the table a plugin returned; throws InputError naming `path`.
void check_table(const std::string& path, const attnb_plugin* api) {
  auto bad = [&](const std::string& why) { throw InputError(path, "", why); };
  if (!api) bad(std::string(ATTNB_PLUGIN_ENTRY_NAME) + "() returned NULL");
  if (api->abi_version < ATTNB_PLUGIN_ABI_VERSION_MIN || api->abi_version > ATTNB_PLUGIN_ABI_VERSION)
    bad("plugin ABI version " + std::to_string(api->abi_version) + ", but this attnbench speaks versions " +
        std::to_string(ATTNB_PLUGIN_ABI_VERSION_MIN) + " to " + std::to_string(ATTNB_PLUGIN_ABI_VERSION) +
        " (rebuild the plugin against this attnbench's attnbench/plugin.h)");
  const size_t need = api->abi_version == 1 ? ATTNB_PLUGIN_V1_SIZE : sizeof(attnb_plugin);
  if (api->struct_size < need)
    bad("attnb_plugin.struct_size is " + std::to_string(api->struct_size) + ", expected at least " +
        std::to_string(need) + " for ABI version " + std::to_string(api->abi_version));
  if (!valid_name(api->name))
    bad("attnb_plugin.name must be a non-empty [A-Za-z0-9_.-]+ string of at most " + std::to_string(kMaxPluginName) +
        " characters");
  if (!valid_description(api->description))
    bad("attnb_plugin.description must be one line of at most " + std::to_string(kMaxPluginDescription) +
        " bytes without control characters");
  if (api->device != ATTNB_DEVICE_CPU && api->device != ATTNB_DEVICE_CUDA)
    bad("attnb_plugin.device is " + std::to_string(api->device) + ", expected ATTNB_DEVICE_CPU or ATTNB_DEVICE_CUDA");
  const std::pair<const char*, bool> required[] = {{"supports", api->supports != nullptr},
                                                   {"prepare", api->prepare != nullptr ||
                                                                   (api->abi_version >= 2 && api->prepare_with_options)},
                                                   {"forward", api->forward != nullptr},
                                                   {"teardown", api->teardown != nullptr}};
  for (const auto& [fn, present] : required)
    if (!present) bad(std::string("attnb_plugin.") + fn + " is NULL (required)");
}

}  // namespace

std::string load_plugin(const std::string& path) {
  static std::map<std::string, std::string> loaded;  // canonical path -> backend name
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  if (auto it = loaded.find(ec ? path : canonical); it != loaded.end()) return it->second;
  std::error_code ec2;
  if (!std::filesystem::exists(path, ec2)) throw InputError(path, "", "plugin file not found");
  if (!std::filesystem::is_regular_file(path, ec2))  // a FIFO would block dlopen forever
    throw InputError(path, "", "plugin is not a regular file (a FIFO, folder or device?)");
  void* handle = dlopen(path.find('/') == std::string::npos ? ("./" + path).c_str() : path.c_str(),
                        RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw InputError(path, "", std::string("cannot load plugin: ") + dlerror());
  auto entry = reinterpret_cast<attnb_plugin_entry_fn>(dlsym(handle, ATTNB_PLUGIN_ENTRY_NAME));
  if (!entry) {
    dlclose(handle);
    throw InputError(path, "", std::string("missing entry point ") + ATTNB_PLUGIN_ENTRY_NAME +
                                   " (a plugin exports `const attnb_plugin* " + ATTNB_PLUGIN_ENTRY_NAME +
                                   "(void)`, see docs/plugins.md)");
  }
  auto lib = std::make_shared<Library>();
  lib->path = path;
  lib->api = entry();
  try {
    check_table(path, lib->api);
    lib->name = lib->api->name;
    lib->description = lib->api->description ? lib->api->description : "";
    lib->device = lib->api->device;
    lib->flags = lib->api->flags;
    if (lib->api->abi_version >= 2) {  // version 1 tables end before these fields
      lib->options = plugin_options(path, lib->api);
      lib->prepare_with_options = lib->api->prepare_with_options;
      if (!lib->options.empty() && !lib->prepare_with_options)
        throw InputError(path, "", "attnb_plugin declares options but prepare_with_options is NULL (it would never "
                                   "receive their values)");
    }
    const std::string name = lib->name;
    for (const auto& n : BackendRegistry::names())
      if (n == name)
        throw InputError(path, "", "backend name \"" + name +
                                       "\" is already registered (an in-tree backend or another plugin); "
                                       "give the plugin another name");
    BackendRegistry::add(name, [lib] { return std::make_unique<PluginBackend>(lib); });
    loaded[ec ? path : canonical] = name;
    return name;
  } catch (...) {
    dlclose(handle);
    throw;
  }
}

namespace {
[[maybe_unused]] const bool kLoaderInstalled = BackendRegistry::set_plugin_loader(&load_plugin);
}

}  // namespace attnbench::plugin
