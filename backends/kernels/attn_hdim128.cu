// Instantiation of the fused attention kernels for head dimension 128 (bf16 and
// fp16; forward, dK/dV in both dQ modes, deterministic dQ (portable and Hopper), Dsum, dQ convert; the
// flex path: BlockMask forward, dK/dV with dBias, dQ).
#include "backends/kernels/attn_launch_impl.cuh"

namespace attnbench::kernels {
template void launch_forward_hdim<128>(const AttnParams&, const WorkItem*, int, int, cudaStream_t, FwdPath,
                                        const KvTensorMaps*, int);
template void launch_backward_hdim<128>(const AttnParams&, const WorkItem*, int, const WorkItem*, int, int, bool,
                                        int64_t, cudaStream_t, const BwdTensorMaps*);
template void launch_flex_forward_hdim<128>(const AttnParams&, const WorkItem*, int, cudaStream_t,
                                             const KvTensorMaps*, int);
template void launch_flex_backward_hdim<128>(const AttnParams&, const WorkItem*, int, const WorkItem*, int, int64_t,
                                             int64_t, cudaStream_t, const BwdTensorMaps*, bool);
}  // namespace attnbench::kernels
