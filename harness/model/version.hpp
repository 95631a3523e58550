// The harness revision recorded in reports and printed by --version.
#pragma once

namespace attnbench {

/// Short git revision of the source tree at configure time ("unknown" outside a
/// checkout). Defined in one translation unit so that a new revision recompiles
/// only that file.
const char* git_revision();

}  // namespace attnbench
