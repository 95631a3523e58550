// Environment fingerprint: see environment.hpp.
#include "harness/device/environment.hpp"
#include "harness/model/version.hpp"

#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#if defined(ATTNBENCH_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace attnbench::env {

namespace {

// ------------------------------------------------------------------ NVML, by dlopen
// The few prototypes used, declared from NVML's public API reference (there is no
// nvml.h on the build machines). NVML enums are passed as int.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;   // NVML_CLOCK_SM
constexpr int kNvmlClockMem = 2;  // NVML_CLOCK_MEM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

struct Nvml {
  bool ok = false;
  std::string reason;
  nvmlReturn_t (*init)() = nullptr;                                        // nvmlInit_v2
  const char* (*error_string)(nvmlReturn_t) = nullptr;                     // nvmlErrorString
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;               // nvmlSystemGetDriverVersion
  nvmlReturn_t (*nvml_version)(char*, unsigned) = nullptr;                 // nvmlSystemGetNVMLVersion
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;             // nvmlDeviceGetHandleByIndex_v2
  nvmlReturn_t (*by_pci)(const char*, nvmlDevice_t*) = nullptr;            // nvmlDeviceGetHandleByPciBusId_v2
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;           // nvmlDeviceGetClockInfo
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;       // nvmlDeviceGetMaxClockInfo
  nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long*) = nullptr;    // nvmlDeviceGetCurrentClocksEventReasons
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;     // nvmlDeviceGetTemperature
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned*) = nullptr;                // nvmlDeviceGetPowerUsage (mW)
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;           // nvmlDeviceGetName

  std::string err(nvmlReturn_t r) const {
    return error_string ? std::string(error_string(r)) : "NVML error " + std::to_string(r);
  }

  /// The process-wide NVML, loaded and initialised on first use.
  static const Nvml& get() {
    static Nvml n = load();
    return n;
  }

 private:
  template <class F>
  static void sym(void* h, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(h, name));
  }
  static Nvml load() {
    Nvml n;
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      n.reason = std::string("NVML not loadable: ") + (e ? e : "libnvidia-ml.so.1 not found");
      return n;
    }
    sym(h, "nvmlInit_v2", n.init);
    sym(h, "nvmlErrorString", n.error_string);
    sym(h, "nvmlSystemGetDriverVersion", n.driver_version);
    sym(h, "nvmlSystemGetNVMLVersion", n.nvml_version);
    sym(h, "nvmlDeviceGetHandleByIndex_v2", n.by_index);
    sym(h, "nvmlDeviceGetHandleByPciBusId_v2", n.by_pci);
    sym(h, "nvmlDeviceGetClockInfo", n.clock);
    sym(h, "nvmlDeviceGetMaxClockInfo", n.max_clock);
    sym(h, "nvmlDeviceGetCurrentClocksEventReasons", n.reasons);
    if (!n.reasons) sym(h, "nvmlDeviceGetCurrentClocksThrottleReasons", n.reasons);  // older drivers
    sym(h, "nvmlDeviceGetTemperature", n.temperature);
    sym(h, "nvmlDeviceGetPowerUsage", n.power);
    sym(h, "nvmlDeviceGetName", n.name);
    if (!n.init || !n.by_index) {
      n.reason = "NVML lacks nvmlInit_v2 / nvmlDeviceGetHandleByIndex_v2";
      return n;
    }
    nvmlReturn_t r = n.init();
    if (r != kNvmlSuccess) {
      n.reason = "nvmlInit_v2: " + n.err(r);
      return n;
    }
    n.ok = true;  // the library stays loaded for the process
    return n;
  }
};

/// NVML handle of CUDA device `dev`, or nullptr with `why`.
nvmlDevice_t nvml_device(const Nvml& n, int dev, std::string* why) {
  nvmlDevice_t d = nullptr;
#if defined(ATTNBENCH_HAVE_CUDA)
  char bus[32] = {0};
  if (n.by_pci && cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) == cudaSuccess) {
    if (n.by_pci(bus, &d) == kNvmlSuccess) return d;
  } else {
    (void)cudaGetLastError();
  }
#endif
  nvmlReturn_t r = n.by_index(static_cast<unsigned>(dev), &d);
  if (r != kNvmlSuccess) {
    if (why) *why = "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(dev) + "): " + n.err(r);
    return nullptr;
  }
  return d;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  size_t b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

#if defined(ATTNBENCH_HAVE_CUDA)
/// 12080 -> "12.8".
std::string cuda_version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
#endif

struct Registry {
  std::mutex mu;
  std::map<std::string, std::function<std::string()>> providers;
  static Registry& get() {
    static Registry r;
    return r;
  }
};

}  // namespace

// ------------------------------------------------------------------ clocks

std::vector<std::string> throttle_reason_names(uint64_t mask) {
  static const std::pair<uint64_t, const char*> kBits[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"},
  };
  std::vector<std::string> out;
  uint64_t known = 0;
  for (const auto& [bit, name] : kBits) {
    known |= bit;
    if (mask & bit) out.emplace_back(name);
  }
  for (int b = 0; b < 64; ++b) {
    const uint64_t bit = uint64_t{1} << b;
    if ((mask & bit) && !(known & bit)) out.push_back("bit_" + std::to_string(b));
  }
  return out;
}

nlohmann::json ClockSample::to_json() const {
  nlohmann::json j;
  j["available"] = available;
  j["time"] = time;
  if (!available) {
    j["reason"] = reason;
    return j;
  }
  j["sm_clock_mhz"] = sm_clock_mhz;
  j["mem_clock_mhz"] = mem_clock_mhz;
  j["max_sm_clock_mhz"] = max_sm_clock_mhz;
  j["temperature_c"] = temperature_c;
  j["power_w"] = power_w;
  j["throttle_mask"] = throttle_mask;
  j["throttle_reasons"] = throttle_reasons;
  return j;
}

ClockSample sample_clocks(int cuda_device) {
  ClockSample s;
  s.time = utc_now_iso8601();
  try {
    const Nvml& n = Nvml::get();
    if (!n.ok) {
      s.reason = n.reason;
      return s;
    }
    std::string why;
    nvmlDevice_t d = nvml_device(n, cuda_device, &why);
    if (!d) {
      s.reason = why;
      return s;
    }
    unsigned v = 0;
    if (n.clock && n.clock(d, kNvmlClockSm, &v) == kNvmlSuccess) s.sm_clock_mhz = static_cast<int>(v);
    if (n.clock && n.clock(d, kNvmlClockMem, &v) == kNvmlSuccess) s.mem_clock_mhz = static_cast<int>(v);
    if (n.max_clock && n.max_clock(d, kNvmlClockSm, &v) == kNvmlSuccess) s.max_sm_clock_mhz = static_cast<int>(v);
    if (n.temperature && n.temperature(d, kNvmlTemperatureGpu, &v) == kNvmlSuccess) s.temperature_c = static_cast<int>(v);
    if (n.power && n.power(d, &v) == kNvmlSuccess) s.power_w = static_cast<double>(v) / 1000.0;
    unsigned long long mask = 0;
    if (n.reasons && n.reasons(d, &mask) == kNvmlSuccess) {
      s.throttle_mask = mask;
      s.throttle_reasons = throttle_reason_names(mask);
    }
    s.available = true;
  } catch (const std::exception& e) {
    s.available = false;
    s.reason = e.what();
  }
  return s;
}

ClockSample read_sm_clock(int cuda_device) {
  ClockSample s;
  try {
    const Nvml& n = Nvml::get();
    if (!n.ok) {
      s.reason = n.reason;
      return s;
    }
    static std::mutex mu;
    static std::map<int, nvmlDevice_t> handles;
    nvmlDevice_t d = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = handles.find(cuda_device);
      if (it == handles.end()) {
        std::string why;
        d = nvml_device(n, cuda_device, &why);
        if (!d) {
          s.reason = why;
          return s;
        }
        handles.emplace(cuda_device, d);
      } else {
        d = it->second;
      }
    }
    unsigned v = 0;
    if (n.clock && n.clock(d, kNvmlClockSm, &v) == kNvmlSuccess) s.sm_clock_mhz = static_cast<int>(v);
    if (n.max_clock && n.max_clock(d, kNvmlClockSm, &v) == kNvmlSuccess) s.max_sm_clock_mhz = static_cast<int>(v);
    unsigned long long mask = 0;
    if (n.reasons && n.reasons(d, &mask) == kNvmlSuccess) s.throttle_mask = mask;
    s.available = s.sm_clock_mhz >= 0;
    if (!s.available) s.reason = "nvmlDeviceGetClockInfo failed";
  } catch (const std::exception& e) {
    s.available = false;
    s.reason = e.what();
  }
  return s;
}

// ------------------------------------------------------------------ library versions

bool register_library_version(const std::string& name, std::function<std::string()> provider) {
  Registry& r = Registry::get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.providers[name] = std::move(provider);
  return true;
}

nlohmann::json library_versions() {
  std::map<std::string, std::function<std::string()>> copy;
  {
    Registry& r = Registry::get();
    std::lock_guard<std::mutex> lock(r.mu);
    copy = r.providers;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, f] : copy) {
    try {
      std::string v = f ? f() : std::string();
      j[name] = v.empty() ? std::string("unknown") : v;
    } catch (const std::exception& e) {
      j[name] = std::string("error: ") + e.what();
    }
  }
  return j;
}

// ------------------------------------------------------------------ host

std::string host_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  }
  return "unknown";
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ------------------------------------------------------------------ collect

nlohmann::json collect(const std::string& command_line, int cuda_device) {
  nlohmann::json gpu;
  nlohmann::json versions;
  versions["driver"] = "none";
  versions["cuda_driver_api"] = "none";
  versions["cuda_runtime"] = "none";
#if defined(ATTNBENCH_HAVE_CUDA)
  versions["cuda_runtime_built"] = cuda_version_string(CUDART_VERSION);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) versions["cuda_driver_api"] = cuda_version_string(v);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) versions["cuda_runtime"] = cuda_version_string(v);
  if (e != cudaSuccess || count == 0 || cuda_device < 0 || cuda_device >= count) {
    std::string why = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)
                      : count == 0     ? std::string("no CUDA device")
                                       : "device " + std::to_string(cuda_device) + " out of range (" +
                                         std::to_string(count) + " devices)";
    (void)cudaGetLastError();
    gpu = {{"available", false}, {"name", "none"}, {"reason", why}};
  } else {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, cuda_device) == cudaSuccess) {
      char uuid[64];
      const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
      std::snprintf(uuid, sizeof(uuid),
                    "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                    u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
      char bus[32] = {0};
      if (cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess) (void)cudaGetLastError();
      gpu = {{"available", true},
             {"index", cuda_device},
             {"device_count", count},
             {"name", std::string(p.name)},
             {"uuid", uuid},
             {"pci_bus_id", std::string(bus)},
             {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
             {"sm_count", p.multiProcessorCount},
             {"l2_bytes", p.l2CacheSize},
             {"memory_bytes", static_cast<uint64_t>(p.totalGlobalMem)},
             {"memory_bus_width_bits", p.memoryBusWidth},
             {"shared_memory_per_sm_bytes", static_cast<uint64_t>(p.sharedMemPerMultiprocessor)},
             {"ecc", p.ECCEnabled != 0}};
    } else {
      (void)cudaGetLastError();
      gpu = {{"available", false}, {"name", "none"}, {"reason", "cudaGetDeviceProperties failed"}};
    }
  }
#else
  gpu = {{"available", false}, {"name", "none"}, {"reason", "attnbench was built without CUDA"}};
#endif
  // Driver version and clocks from NVML (also answers in builds without CUDA).
  const Nvml& n = Nvml::get();
  if (n.ok) {
    char buf[96] = {0};
    if (n.driver_version && n.driver_version(buf, sizeof(buf)) == kNvmlSuccess) versions["driver"] = std::string(buf);
    if (n.nvml_version && n.nvml_version(buf, sizeof(buf)) == kNvmlSuccess) versions["nvml"] = std::string(buf);
  } else {
    versions["nvml"] = "none: " + n.reason;
  }
  const nlohmann::json libs = library_versions();  // named: items() must not outlive it
  for (const auto& [name, ver] : libs.items()) versions[name] = ver;
  if (!versions.contains("cudnn")) versions["cudnn"] = "none";
  if (!versions.contains("cublas")) versions["cublas"] = "none";

  nlohmann::json host;
  char hostname[256] = {0};
  host["hostname"] = gethostname(hostname, sizeof(hostname) - 1) == 0 ? std::string(hostname) : "unknown";
  host["cpu_model"] = host_cpu_model();
  host["logical_cpus"] = std::thread::hardware_concurrency();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  host["memory_bytes"] = (pages > 0 && page > 0) ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  struct utsname un {};
  host["os"] = uname(&un) == 0 ? std::string(un.sysname) + " " + un.release + " " + un.machine : "unknown";

  nlohmann::json harness;
  harness["git_revision"] = git_revision();
  harness["command_line"] = command_line;
#if defined(__clang__)
  harness["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  harness["compiler"] = std::string("gcc ") + __VERSION__;
#else
  harness["compiler"] = "unknown";
#endif
#if defined(NDEBUG)
  harness["assertions"] = false;
#else
  harness["assertions"] = true;
#endif
  harness["cuda_build"] =
#if defined(ATTNBENCH_HAVE_CUDA)
      true;
#else
      false;
#endif

  nlohmann::json env;
  env["gpu"] = gpu;
  env["versions"] = versions;
  env["clocks_at_start"] = sample_clocks(cuda_device).to_json();
  env["host"] = host;
  env["harness"] = harness;
  env["time"] = utc_now_iso8601();
  return env;
}

nlohmann::json comparable_identity(const nlohmann::json& environment) {
  auto str = [&](const char* a, const char* b) -> nlohmann::json {
    if (environment.is_object() && environment.contains(a) && environment[a].is_object() &&
        environment[a].contains(b) && !environment[a][b].is_null())
      return environment[a][b];
    return "unknown";
  };
  return {{"gpu", str("gpu", "name")},
          {"sm_count", str("gpu", "sm_count")},
          {"driver", str("versions", "driver")},
          {"cuda_runtime", str("versions", "cuda_runtime")}};
}

}  // namespace attnbench::env
