// One float64 gold per case: see gold_cache.hpp for the model and the file layout.
#include "harness/run/gold_cache.hpp"

#include <utility>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include "harness/model/dtype_codec.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/printable.hpp"
#include "harness/model/thread_pool.hpp"
#include "harness/model/version.hpp"
#include "reference/reference.hpp"

namespace attnbench {

namespace {

constexpr char kMagic[8] = {'A', 'B', 'G', 'O', 'L', 'D', '0', '1'};
constexpr const char* kFormat = "attnbench-gold 3";  // 2: bf16 / fp16 bits; 3: outputs stored sliced [slices, H/Hkv, ...]
constexpr size_t kChunk = size_t{1} << 22;  // elements per write chunk (32 MiB as float64)

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The file's name of a storage type ("bf16", "fp16", "f4", "f8"); f8 is nullopt.
const char* storage_name(std::optional<DType> t) {
  if (!t) return "f8";
  return *t == DType::bf16 ? "bf16" : *t == DType::fp16 ? "fp16" : "f4";
}

/// The narrowest type that stores `v` exactly (representable()): bf16, else fp16,
/// else fp32, else float64 (nullopt). NaN counts as exact everywhere.
std::optional<DType> storage_type(const std::vector<double>& v) {
  for (DType t : {DType::bf16, DType::fp16, DType::fp32})
    if (representable(v, t)) return t;
  return std::nullopt;
}

/// CRC-32 (zlib) of `bytes` at `data`, computed in pieces on the pass pool and
/// joined with crc32_combine: the same value as one crc32_z over the whole.
uint32_t crc_of(const void* data, size_t bytes) {
  constexpr size_t kPiece = size_t{1} << 21;  // bytes a task
  const size_t pieces = (bytes + kPiece - 1) / kPiece;
  std::vector<uint32_t> crcs(pieces);
  const auto* p = static_cast<const Bytef*>(data);
  parallel_pass(static_cast<int64_t>(pieces), [&](int64_t i) {
    const size_t b = static_cast<size_t>(i) * kPiece;
    crcs[static_cast<size_t>(i)] = static_cast<uint32_t>(crc32_z(0, p + b, std::min(bytes, b + kPiece) - b));
  });
  uLong crc = crc32_z(0, Z_NULL, 0);
  for (size_t i = 0; i < pieces; ++i)
    crc = crc32_combine(crc, crcs[i], static_cast<z_off_t>(std::min(bytes, (i + 1) * kPiece) - i * kPiece));
  return static_cast<uint32_t>(crc);
}

/// Append one array to `out` in storage_type(t) (chunked: narrow types encoded
/// through a small buffer on the pass pool, the CRC-32 taken there too); returns
/// its trailer entry.
nlohmann::json write_array(std::FILE* out, const std::string& name, const HostTensor& t, uint64_t offset,
                           const std::string& path) {
  const std::optional<DType> narrow = storage_type(t.data);
  const size_t width = narrow ? static_cast<size_t>(dtype_bytes(*narrow)) : 8;
  uLong crc = crc32_z(0, Z_NULL, 0);
  std::unique_ptr<unsigned char[]> buf(narrow ? new unsigned char[std::min(t.data.size(), kChunk) * width] : nullptr);
  for (size_t b = 0; b < t.data.size(); b += kChunk) {
    const size_t e = std::min(t.data.size(), b + kChunk);
    const void* src = t.data.data() + b;
    if (narrow) {
      parallel_chunks(e - b, [&](size_t i0, size_t i1) { encode_span(t.data.data() + b + i0, i1 - i0, *narrow, buf.get(), i0); });
      src = buf.get();
    }
    const size_t bytes = (e - b) * width;
    if (std::fwrite(src, 1, bytes, out) != bytes) throw std::runtime_error(path + ": write failed (disk full?)");
    crc = crc32_combine(crc, crc_of(src, bytes), static_cast<z_off_t>(bytes));
  }
  return {{"name", name},
          {"shape", t.shape},
          {"dtype", storage_name(narrow)},
          {"offset", offset},
          {"bytes", static_cast<uint64_t>(t.data.size() * width)},
          {"crc32", static_cast<uint32_t>(crc)}};
}

/// Read exactly `bytes` at `offset` of `fd` into `dst` (pread: no shared file
/// position, so tasks read their pieces at once); false on an error or end of file.
bool pread_all(int fd, void* dst, size_t bytes, uint64_t offset) {
  auto* p = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

/// Read one array described by `a` from `fd` (payload of `payload` bytes);
/// false with `why` on any mismatch. Each task of the pass pool reads its piece,
/// takes its CRC-32 and decodes it (the pieces' CRCs joined with crc32_combine),
/// so nothing but the trailer is read on one thread.
bool read_array(int fd, const nlohmann::json& a, uint64_t payload, HostTensor& t, std::string& why) {
  const std::string dtype = a.at("dtype").get<std::string>();
  std::optional<DType> narrow;
  for (DType n : {DType::bf16, DType::fp16, DType::fp32})
    if (dtype == storage_name(n)) narrow = n;
  if (!narrow && dtype != storage_name(std::nullopt)) return why = "unknown dtype " + dtype, false;
  const size_t width = narrow ? static_cast<size_t>(dtype_bytes(*narrow)) : 8;
  t.shape = a.at("shape").get<std::vector<int64_t>>();
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return why = "negative extent", false;
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t offset = a.at("offset").get<uint64_t>(), bytes = a.at("bytes").get<uint64_t>();
  if (bytes != numel * width || offset > payload || bytes > payload - offset)
    return why = "array " + a.at("name").get<std::string>() + " does not fit the file", false;
  t.data.resize(numel);
  constexpr size_t kPiece = size_t{1} << 18;  // elements a task
  const size_t pieces = (numel + kPiece - 1) / kPiece;
  std::vector<uint32_t> crcs(pieces);
  std::vector<std::unique_ptr<unsigned char[]>> scratch(narrow ? static_cast<size_t>(ThreadPool::passes().size()) : 0);
  std::atomic<bool> read_ok{true};
  ThreadPool::passes().parallel_for(static_cast<int64_t>(pieces), 0, [&](int64_t i, int worker) {
    const size_t b = static_cast<size_t>(i) * kPiece, e = std::min<size_t>(numel, b + kPiece);
    unsigned char* dst = reinterpret_cast<unsigned char*>(t.data.data() + b);
    if (narrow) {
      auto& mine = scratch[static_cast<size_t>(worker)];  // no two tasks of one worker overlap
      if (!mine) mine.reset(new unsigned char[kPiece * width]);
      dst = mine.get();
    }
    if (!read_ok.load(std::memory_order_relaxed) || !pread_all(fd, dst, (e - b) * width, offset + b * width)) {
      read_ok = false;
      return;
    }
    crcs[static_cast<size_t>(i)] = static_cast<uint32_t>(crc32_z(0, dst, (e - b) * width));
    if (narrow) decode_span(dst, 0, e - b, *narrow, t.data.data() + b);
  });
  if (!read_ok) return why = "short read", false;
  uLong crc = crc32_z(0, Z_NULL, 0);
  for (size_t i = 0; i < pieces; ++i)
    crc = crc32_combine(crc, crcs[i], static_cast<z_off_t>((std::min<size_t>(numel, (i + 1) * kPiece) - i * kPiece) * width));
  if (crc != a.at("crc32").get<uint32_t>()) return why = "CRC-32 mismatch in " + a.at("name").get<std::string>(), false;
  return true;
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

HostTensor as_tensor(const std::vector<double>& v) {
  HostTensor t;
  t.shape = {static_cast<int64_t>(v.size())};
  t.data = v;
  return t;
}

void warn(const std::string& what) {
  std::fprintf(stderr, "attnbench: warning: %s; the case's other units compute their own\n", printable(what).c_str());
}

const char* kOutputNames[] = {"o", "lse", "dq", "dk", "dv"};

/// The sliced outputs' arrays (check.hpp, slice_outputs: only the checked slices,
/// shapes [slices, H/Hkv, ...]) and dBias under `prefix`, not copied.
void output_refs(std::vector<std::pair<std::string, const HostTensor*>>& refs, const std::string& prefix,
                 const AttentionOutputs& o, const HostTensor& dbias) {
  const HostTensor* ts[] = {&o.o, &o.lse, &o.dq, &o.dk, &o.dv};
  for (size_t i = 0; i < 5; ++i) refs.emplace_back(prefix + kOutputNames[i], ts[i]);
  refs.emplace_back(prefix + "dbias", &dbias);
}

/// The arrays under `prefix` into `o`, as stored; false when one is missing or
/// does not have the sliced shape of its logical one (`full`: o, lse, dq, dk, dv).
bool take_outputs(GoldBundle& b, const std::string& prefix, AttentionOutputs& o, const Problem& p,
                  const reference::SliceSet& s, bool grads) {
  const std::vector<int64_t> full[] = {{p.batch, p.heads_q, p.seq_q, p.head_dim_v},
                                       {p.batch, p.heads_q, p.seq_q},
                                       {p.batch, p.heads_q, p.seq_q, p.head_dim},
                                       {p.batch, p.heads_kv, p.seq_k, p.head_dim},
                                       {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}};
  HostTensor* ts[] = {&o.o, &o.lse, &o.dq, &o.dk, &o.dv};
  for (size_t i = 0; i < 5; ++i) {
    auto it = b.arrays.find(prefix + kOutputNames[i]);
    if (it == b.arrays.end()) return false;
    *ts[i] = std::move(it->second);
    const bool empty_grad = i >= 2 && !grads && ts[i]->data.empty();
    if (!empty_grad && ts[i]->shape != sliced_shape(full[i], p, s)) return false;
  }
  auto it = b.arrays.find(prefix + "dbias");
  if (it == b.arrays.end()) return false;
  o.dbias = std::move(it->second.data);
  return true;
}

}  // namespace

// ------------------------------------------------------------------ file layout

namespace {

/// An array to write under a name, not copied (the inputs are GBs).
using ArrayRefs = std::vector<std::pair<std::string, const HostTensor*>>;

/// write_gold_bundle() of `arrays` and `meta`.
void write_arrays(const std::filesystem::path& path, const nlohmann::json& key, const nlohmann::json& meta,
                  const ArrayRefs& arrays_in) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  try {
    File out(std::fopen(tmp.c_str(), "wb"));
    if (!out) throw std::runtime_error(tmp.string() + ": cannot create: " + std::strerror(errno));
    nlohmann::json arrays = nlohmann::json::array();
    uint64_t offset = 0;
    for (const auto& [name, t] : arrays_in) {
      arrays.push_back(write_array(out.get(), name, *t, offset, tmp.string()));
      offset += arrays.back()["bytes"].get<uint64_t>();
    }
    const std::string trailer =
        nlohmann::json{{"format", kFormat}, {"key", key}, {"meta", meta}, {"arrays", arrays}}.dump();
    const uint64_t len = trailer.size();
    if (std::fwrite(trailer.data(), 1, trailer.size(), out.get()) != trailer.size() ||
        std::fwrite(&len, sizeof len, 1, out.get()) != 1 || std::fwrite(kMagic, 1, 8, out.get()) != 8 ||
        std::fflush(out.get()) != 0)
      throw std::runtime_error(tmp.string() + ": write failed (disk full?)");
    out.reset();
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace

void write_gold_bundle(const std::filesystem::path& path, const nlohmann::json& key, const GoldBundle& bundle) {
  ArrayRefs refs;
  for (const auto& [name, t] : bundle.arrays) refs.emplace_back(name, &t);
  write_arrays(path, key, bundle.meta, refs);
}

std::optional<GoldBundle> read_gold_bundle(const std::filesystem::path& path, const nlohmann::json& key,
                                           std::string* why) {
  std::string reason;
  auto fail = [&](const std::string& r) -> std::optional<GoldBundle> {
    if (why) *why = r;
    return std::nullopt;
  };
  File in(std::fopen(path.c_str(), "rb"));
  if (!in) return fail("no file");
  try {
    if (::fseeko(in.get(), 0, SEEK_END) != 0) return fail("seek failed");
    const off_t size = ::ftello(in.get());
    if (size < 16 || ::fseeko(in.get(), size - 16, SEEK_SET) != 0) return fail("too short");
    uint64_t len = 0;
    char magic[8];
    if (std::fread(&len, sizeof len, 1, in.get()) != 1 || std::fread(magic, 1, 8, in.get()) != 8 ||
        std::memcmp(magic, kMagic, 8) != 0)
      return fail("no trailer (torn or foreign file)");
    if (len > static_cast<uint64_t>(size) - 16) return fail("trailer longer than the file");
    const uint64_t payload = static_cast<uint64_t>(size) - 16 - len;
    std::string text(len, '\0');
    if (::fseeko(in.get(), static_cast<off_t>(payload), SEEK_SET) != 0 ||
        std::fread(text.data(), 1, len, in.get()) != len)
      return fail("short trailer");
    const nlohmann::json t = jsonu::parse_text(text, path.string());
    if (t.value("format", "") != kFormat) return fail("another format");
    if (!t.contains("key") || t["key"] != key) return fail("stale: its key differs");
    GoldBundle b;
    b.meta = t.value("meta", nlohmann::json());
    for (const auto& a : t.at("arrays")) {
      HostTensor arr;
      if (!read_array(::fileno(in.get()), a, payload, arr, reason)) return fail(reason);
      b.arrays[a.at("name").get<std::string>()] = std::move(arr);
    }
    return b;
  } catch (const std::exception& e) {  // a malformed trailer (InputError, json type errors)
    return fail(std::string("unreadable trailer: ") + e.what());
  }
}

// ------------------------------------------------------------------ the store

nlohmann::json GoldStore::inputs_key(const Problem& p) {
  return {{"kind", "inputs"}, {"format", kFormat}, {"revision", git_revision()}, {"problem", to_json(p, true)}};
}

nlohmann::json GoldStore::gold_key(const Problem& p, CheckMode mode, bool grads) {
  nlohmann::json k = inputs_key(p);
  k["kind"] = "gold";
  k["check"] = to_string(mode);
  k["grads"] = grads;
  k["sample_slices"] = kSampleSlices;
  return k;
}

std::filesystem::path GoldStore::file_for(const nlohmann::json& key) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char ch : key.dump()) h = (h ^ ch) * 1099511628211ull;
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx.%s", static_cast<unsigned long long>(h),
                key.value("kind", "bin").c_str());
  return dir_ / name;
}

std::optional<ProblemData> GoldStore::load_inputs(const Problem& p) const {
  if (!enabled()) return std::nullopt;
  auto b = read_gold_bundle(file_for(inputs_key(p)), inputs_key(p));
  if (!b) return std::nullopt;
  ProblemData in;
  const std::pair<const char*, HostTensor*> parts[] = {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"do", &in.d_o}};
  for (const auto& [name, t] : parts) {
    auto it = b->arrays.find(name);
    if (it == b->arrays.end()) return std::nullopt;
    *t = std::move(it->second);
  }
  auto bias = b->arrays.find("bias"), offset = b->arrays.find("offset");
  if (bias == b->arrays.end() || offset == b->arrays.end()) return std::nullopt;
  in.bias = std::move(bias->second.data);
  in.offset.assign(offset->second.data.begin(), offset->second.data.end());
  return in;
}

bool GoldStore::save_inputs(const Problem& p, const ProblemData& in) const {
  if (!enabled()) return false;
  const HostTensor bias = as_tensor(in.bias);
  const HostTensor offset = as_tensor(std::vector<double>(in.offset.begin(), in.offset.end()));
  const ArrayRefs arrays = {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"do", &in.d_o}, {"bias", &bias}, {"offset", &offset}};
  try {
    write_arrays(file_for(inputs_key(p)), inputs_key(p), nlohmann::json(), arrays);
    return true;
  } catch (const std::exception& e) {
    warn(std::string("cannot share the case's inputs: ") + e.what());
    return false;
  }
}

bool GoldStore::load_gold(const Problem& p, CheckMode mode, bool grads, GoldCache& out) const {
  if (!enabled()) return false;
  const nlohmann::json key = gold_key(p, mode, grads);
  auto b = read_gold_bundle(file_for(key), key);
  if (!b) return false;
  try {
    GoldCache g;
    const nlohmann::json& plan = b->meta.at("plan");
    g.plan.mode = parse_check_mode(plan.at("mode").get<std::string>());
    g.plan.slices.all = plan.at("all").get<bool>();
    g.plan.slices.selected = plan.at("selected").get<std::vector<uint8_t>>();
    g.plan.estimated_flops = plan.at("estimated_flops").get<double>();
    g.plan.description = plan.at("description").get<std::string>();
    g.ms = b->meta.at("ms").get<double>();
    if (!take_outputs(*b, "gold.", g.gold, p, g.plan.slices, grads) ||
        !take_outputs(*b, "lp.", g.lp, p, g.plan.slices, grads))
      return false;
    g.ready = true;
    out = std::move(g);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool GoldStore::save_gold(const Problem& p, CheckMode mode, bool grads, const GoldCache& g) const {
  if (!enabled()) return false;
  const nlohmann::json meta = {{"plan",
                                {{"mode", to_string(g.plan.mode)},
                                 {"all", g.plan.slices.all},
                                 {"selected", g.plan.slices.selected},
                                 {"estimated_flops", g.plan.estimated_flops},
                                 {"description", g.plan.description}}},
                               {"ms", g.ms}};
  const HostTensor gold_dbias = as_tensor(g.gold.dbias), lp_dbias = as_tensor(g.lp.dbias);
  ArrayRefs arrays;
  output_refs(arrays, "gold.", g.gold, gold_dbias);
  output_refs(arrays, "lp.", g.lp, lp_dbias);
  const nlohmann::json key = gold_key(p, mode, grads);
  try {
    write_arrays(file_for(key), key, meta, arrays);
    return true;
  } catch (const std::exception& e) {
    warn(std::string("cannot share the case's reference: ") + e.what());
    return false;
  }
}

void GoldStore::clear() const {
  if (!enabled()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::shared_ptr<void> GoldStore::lock_gold(const Problem& p, CheckMode mode, bool grads) const {
  if (!enabled()) return nullptr;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string path = file_for(gold_key(p, mode, grads)).string() + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return nullptr;
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct Held {
    int fd = -1;
    ~Held() {
      if (fd >= 0) ::close(fd);  // closing releases the lock
    }
  };
  auto held = std::make_shared<Held>();
  held->fd = fd;
  return held;
}

// ------------------------------------------------------------------ per process

const ProblemData& CaseGold::get_inputs(const Problem& p, GoldProvenance* how) {
  return obtain_inputs(p, how, false);
}

const ProblemData& CaseGold::obtain_inputs(const Problem& p, GoldProvenance* how, bool prefetch) {
  std::lock_guard<std::mutex> hold(inputs_mu_);
  GoldProvenance got{"shared", 0};
  if (!prefetch && how && prefetched_inputs_) {  // the first row after the prefetch pays for them
    got = *prefetched_inputs_;
    prefetched_inputs_.reset();
  }
  if (!inputs) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto loaded = store.load_inputs(p)) {
      inputs = std::make_unique<ProblemData>(std::move(*loaded));
      got.ms = ms_since(t0);
      inputs_published_ = true;
    } else {
      inputs = std::make_unique<ProblemData>(make_inputs(p));
      got = {"computed", ms_since(t0)};
      inputs_published_ = store.save_inputs(p, *inputs);
    }
    if (prefetch) prefetched_inputs_ = got;
  }
  if (how) *how = got;
  return *inputs;
}

const GoldCache& CaseGold::get_gold(const Problem& p, CheckMode mode, bool grads, GoldProvenance* how) {
  return obtain_gold(p, mode, grads, how, false);
}

std::optional<GoldProvenance> CaseGold::claim_prefetched_gold() {
  std::lock_guard<std::mutex> hold(gold_mu_);
  return std::exchange(prefetched_, std::nullopt);
}

std::optional<GoldProvenance> CaseGold::claim_prefetched_inputs() {
  std::lock_guard<std::mutex> hold(inputs_mu_);
  return std::exchange(prefetched_inputs_, std::nullopt);
}

void CaseGold::prefetch_inputs(const Problem& p) { obtain_inputs(p, nullptr, true); }

void CaseGold::prefetch_gold(const Problem& p, CheckMode mode, bool grads) { obtain_gold(p, mode, grads, nullptr, true); }

const GoldCache& CaseGold::obtain_gold(const Problem& p, CheckMode mode, bool grads, GoldProvenance* how,
                                       bool prefetch) {
  std::lock_guard<std::mutex> hold(gold_mu_);
  GoldProvenance got{"shared", 0};
  if (!prefetch && how && prefetched_) {  // the first row after the prefetch pays for it
    got = *prefetched_;
    prefetched_.reset();
  }
  if (!gold.ready) {
    const auto t0 = std::chrono::steady_clock::now();
    // Another unit of the case (a finished child still checking) may be computing
    // it: wait for it and load it rather than compute it twice.
    const std::shared_ptr<void> lock = store.lock_gold(p, mode, grads);
    if (store.load_gold(p, mode, grads, gold)) {
      got.ms = ms_since(t0);  // no inputs needed (they may have been released)
    } else {
      const auto t_in = std::chrono::steady_clock::now();
      const ProblemData& in = get_inputs(p);
      const double inputs_ms = ms_since(t_in);  // not the reference's cost
      gold.plan = plan_check(p, mode, grads);
      reference::Options sliced;  // only the checked slices are ever allocated
      sliced.sliced = true;
      gold.gold = reference::gold(p, in, grads, gold.plan.slices, sliced);
      gold.lp = reference::lp(p, in, grads, gold.plan.slices, sliced);
      gold.ms = ms_since(t0) - inputs_ms;
      gold.ready = true;
      got = {"computed", gold.ms};
      store.save_gold(p, mode, grads, gold);
    }
    if (prefetch) prefetched_ = got;
  }
  if (how) *how = got;
  return gold;
}

bool CaseGold::release_inputs(const Problem& p, CheckMode mode, bool grads) {
  std::scoped_lock hold(gold_mu_, inputs_mu_);  // get_gold's order: gold, then inputs
  if (!inputs || !inputs_published_) return false;
  std::error_code ec;
  if (mode != CheckMode::off && !gold.ready && !std::filesystem::exists(store.file_for(GoldStore::gold_key(p, mode, grads)), ec))
    return false;
  inputs.reset();
  inputs_published_ = false;
  return true;
}

}  // namespace attnbench
