// Builds in place of process_group_nccl.cpp when CUDA is off (see process_group_nccl.hpp).
#include "comm/backend/nccl/process_group_nccl.hpp"

#include "base/error.hpp"

namespace actorch::dist {

std::shared_ptr<process_group> make_process_group_nccl(std::shared_ptr<store>, int, int,
                                                       milliseconds, std::vector<int>, int) {
  ACTORCH_FAIL("the nccl backend is not available: this build has no CUDA (configure with "
               "ACTORCH_ENABLE_CUDA=ON where nvcc is found); use the gloo backend for CPU "
               "tensors");
}

} // namespace actorch::dist
