// The instance table of the fused attention kernel family: one runner per
// (direction, path, head_dim, dtype), defined by launch_sm80.cuh /
// launch_sm90.cuh and instantiated one per generated .cu file
// (cmake/attn_instances.cmake writes them and the table into the build tree).
#pragma once

#include <span>

#include "backends/kernels/attn_launch.hpp"

namespace attnbench::kernels {

/// A runner: one direction of one path at one head dimension and element type.
using Runner = void (*)(const AttnParams&, const LaunchArgs&);

/// Portable (mma.sync, sm_80 and up) forward / backward, dense and flex.
template <int D, bool Bf16>
void run_forward_sm80(const AttnParams& p, const LaunchArgs& a);
template <int D, bool Bf16>
void run_backward_sm80(const AttnParams& p, const LaunchArgs& a);
/// Hopper (wgmma, TMA; sm_90a) forward / backward, dense and flex.
template <int D, bool Bf16>
void run_forward_sm90(const AttnParams& p, const LaunchArgs& a);
template <int D, bool Bf16>
void run_backward_sm90(const AttnParams& p, const LaunchArgs& a);

/// One entry of the table.
struct Instance {
  InstanceKey key;
  Runner run = nullptr;
};

/// The compiled instances with their runners (generated: attn_instance_table.cpp);
/// the keys are compiled_instances() in the same order.
std::span<const Instance> instance_table();

}  // namespace attnbench::kernels
