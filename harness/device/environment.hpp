// The environment fingerprint of a run (docs/semantics.md section 9): GPU, SM count, L2
// size, clocks and throttle reasons, driver, CUDA / cuDNN / cuBLAS versions,
// harness revision, command line, host. Recorded in every report header
// ("environment") so that `attnbench compare` can refuse runs from different GPUs.
//
// Everything here works without a GPU: fields then read "none" with the reason.
// Clocks and throttle reasons come from NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1") (no link dependency on the driver); CUDA facts from
// the CUDA runtime when attnbench is built with CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench::env {

/// Clocks and throttle state of one GPU at one moment (NVML).
struct ClockSample {
  bool available = false;        ///< false: no NVML or no GPU (see `reason`)
  std::string reason;            ///< why not available
  std::string time;              ///< ISO 8601 UTC
  int sm_clock_mhz = -1;         ///< current SM clock
  int mem_clock_mhz = -1;        ///< current memory clock
  int max_sm_clock_mhz = -1;     ///< highest SM clock the board allows
  int temperature_c = -1;        ///< GPU core temperature
  double power_w = -1;           ///< board power draw, watts
  uint64_t throttle_mask = 0;    ///< NVML clocks-event (throttle) reason bits
  std::vector<std::string> throttle_reasons;  ///< names of the set bits, e.g. "sw_power_cap"
  nlohmann::json to_json() const;
};

/// Sample the clocks of CUDA device `cuda_device` (matched to NVML by PCI bus id
/// when the CUDA runtime is there, else by index). Never throws: without NVML or
/// a GPU the sample has available == false and the reason.
ClockSample sample_clocks(int cuda_device = 0);

/// The SM clock, the maximum SM clock and the clocks-event (throttle) reasons of
/// CUDA device `cuda_device` only: the cheap reading time_pass takes after every
/// GPU sample (three NVML queries; the device handle is looked up once per
/// device). Other fields stay -1. Never throws: available == false with the
/// reason without NVML or a GPU (a CPU-only build included).
ClockSample read_sm_clock(int cuda_device);

/// Names of the NVML throttle (clocks-event) reason bits set in `mask`, from
/// NVML's public API documentation: gpu_idle 0x1, applications_clocks_setting 0x2,
/// sw_power_cap 0x4, hw_slowdown 0x8, sync_boost 0x10, sw_thermal_slowdown 0x20,
/// hw_thermal_slowdown 0x40, hw_power_brake_slowdown 0x80,
/// display_clock_setting 0x100; other bits as "bit_N".
std::vector<std::string> throttle_reason_names(uint64_t mask);

/// Registration hook for library versions that only a backend knows (cuDNN,
/// cuBLAS, ...): `provider` is called when the environment is collected and
/// returns the version string ("" = unknown). Registering a name again replaces
/// the provider. Returns true (for static initialisers):
///   static const bool reg = attnbench::env::register_library_version(
///       "cudnn", [] { return std::to_string(cudnnGetVersion()); });
bool register_library_version(const std::string& name, std::function<std::string()> provider);
/// The registered versions, evaluated now, as {name: version}; a provider that
/// throws yields "error: <what>".
nlohmann::json library_versions();

/// Host CPU model from /proc/cpuinfo ("model name"), or "unknown".
std::string host_cpu_model();
/// Current UTC time as ISO 8601, e.g. "2026-03-01T12:34:56Z".
std::string utc_now_iso8601();

/// Collect the whole fingerprint (docs/report-format.md, "environment"):
/// {"gpu": {...}, "versions": {...}, "clocks_at_start": ClockSample,
///  "host": {...}, "harness": {...}, "time": ISO 8601}. `command_line` is
/// recorded as given; `cuda_device` is the device the run uses. Never throws.
nlohmann::json collect(const std::string& command_line, int cuda_device = 0);

/// The fields that must match for two runs to be compared (GPU name, SM count,
/// driver version, CUDA runtime), taken from a collected environment object:
/// {"gpu": name, "sm_count": n, "driver": version, "cuda_runtime": version}.
/// Missing fields read "unknown".
nlohmann::json comparable_identity(const nlohmann::json& environment);

}  // namespace attnbench::env
