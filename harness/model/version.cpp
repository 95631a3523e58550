#include "harness/model/version.hpp"

#ifndef ATTNBENCH_GIT_REV
#define ATTNBENCH_GIT_REV "unknown"
#endif

namespace attnbench {

const char* git_revision() { return ATTNBENCH_GIT_REV; }

}  // namespace attnbench
