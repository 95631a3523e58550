// CUPTI activity collection for harness/device/kernel_trace.hpp (CUDA builds).
#include "harness/device/kernel_trace.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "harness/device/device.hpp"

#if defined(ATTNBENCH_HAVE_CUPTI)
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace attnbench::device {

#if defined(ATTNBENCH_HAVE_CUPTI)
namespace {

std::mutex g_mu;
std::vector<TracedActivity> g_acts;  // filled by the buffer-completed callback
bool g_running = false;
bool g_callbacks = false;

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlign = 8;

/// "CUPTI error in `expr`: <CUPTI's text>".
std::string cupti_error(CUptiResult r, const char* expr) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return std::string("CUPTI error in `") + expr + "`: " + (s ? s : "unknown");
}

void check_cupti(CUptiResult r, const char* expr) {
  if (r != CUPTI_SUCCESS) throw std::runtime_error(cupti_error(r, expr));
}
#define ATTNBENCH_CUPTI(x) check_cupti((x), #x)

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out(d);
  std::free(d);
  return out;
}

const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    default: return "memcpy";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<TracedActivity> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    TracedActivity a;
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      a.kind = "kernel";
      a.name = demangle(k->name);
      a.start_ns = k->start;
      a.end_ns = k->end;
      a.grid[0] = k->gridX; a.grid[1] = k->gridY; a.grid[2] = k->gridZ;
      a.block[0] = k->blockX; a.block[1] = k->blockY; a.block[2] = k->blockZ;
      a.registers = k->registersPerThread;
      a.shared_bytes = static_cast<int64_t>(k->staticSharedMemory) + k->dynamicSharedMemory;
      a.stream = k->streamId;
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      a.kind = "memset";
      a.name = "memset";
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.bytes = m->bytes;
      a.stream = m->streamId;
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      a.kind = "memcpy";
      a.name = copy_kind(m->copyKind);
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.bytes = m->bytes;
      a.stream = m->streamId;
    } else {
      continue;
    }
    got.push_back(std::move(a));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto& a : got) g_acts.push_back(std::move(a));
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};

}  // namespace

bool kernel_trace_available(std::string* why) { return cuda_device_available(why); }

void kernel_trace_start() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_running) throw std::runtime_error("kernel_trace_start: a trace is already running");
  }
  // Work queued before the trace must not land in it.
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    throw std::runtime_error(std::string("kernel_trace_start: cudaDeviceSynchronize: ") + cudaGetErrorString(e));
  if (!g_callbacks) {
    ATTNBENCH_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    g_callbacks = true;
  }
  size_t enabled = 0;
  try {
    for (auto k : kKinds) {
      ATTNBENCH_CUPTI(cuptiActivityEnable(k));
      ++enabled;
    }
  } catch (...) {
    // Leave nothing recording: the kinds already enabled are turned off again.
    for (size_t i = 0; i < enabled; ++i) (void)cuptiActivityDisable(kKinds[i]);
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    throw;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_acts.clear();  // records flushed after the last stop, before this start
  g_running = true;
}

std::vector<TracedActivity> kernel_trace_stop() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_running) throw std::runtime_error("kernel_trace_stop: no trace is running");
    g_running = false;
  }
  // Every kind is disabled and the buffers are flushed whatever fails; the first
  // failure is reported afterwards.
  cudaError_t e = cudaDeviceSynchronize();
  std::string failure;
  auto keep = [&](CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS && failure.empty()) failure = cupti_error(r, what);
  };
  for (auto k : kKinds) keep(cuptiActivityDisable(k), "cuptiActivityDisable");
  keep(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("kernel_trace_stop: cudaDeviceSynchronize: ") + cudaGetErrorString(e));
  if (!failure.empty()) throw std::runtime_error(failure);
  std::vector<TracedActivity> out;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    out.swap(g_acts);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TracedActivity& a, const TracedActivity& b) { return a.start_ns < b.start_ns; });
  return out;
}

#else  // CUDA build without CUPTI

bool kernel_trace_available(std::string* why) {
  if (why) *why = "attnbench was built without CUPTI (CUDA::cupti not found at configure time)";
  return false;
}
void kernel_trace_start() { throw std::runtime_error("kernel trace: attnbench was built without CUPTI"); }
std::vector<TracedActivity> kernel_trace_stop() {
  throw std::runtime_error("kernel trace: attnbench was built without CUPTI");
}

#endif

}  // namespace attnbench::device
