// Plugins (docs/plugins.md) loaded without running their code in this process:
// a probe child of the attnbench binary (`attnbench __plugin-probe PATH RESULT`)
// dlopens the library, checks its table and reports its metadata; this process
// registers a stand-in backend (Backend::isolated_only()) whose every call the
// runner sends to an isolated child. A library that crashes (SIGBUS of a
// truncated file, SIGSEGV in a constructor), hangs or exits while loading is an
// input error naming the file, never the end of the run.
#pragma once

#include <string>

namespace attnbench {

/// Load the plugin at `path` through a probe child (killed after `timeout_s`)
/// and register its stand-in under the plugin's name; returns the name. Loading
/// one canonical path twice returns the same name. The stand-in's available()
/// asks the plugin's available() in another probe child (`--available`, same
/// time limit), once per process: a child that crashes, hangs or exits reads
/// as unavailable with the way it ended as the reason (`list backends`,
/// `hunt`, and a CUDA build's run deciding whether to measure the ceilings);
/// a run's rows ask it in each isolated unit.
/// Throws InputError naming `path`: not a regular file (FIFOs, folders, devices
/// are refused before anything opens them), every loading error of
/// plugin::load_plugin() as the child reports it, a child that crashed, hung or
/// exited without an answer, or a name already registered.
std::string probe_plugin(const std::string& path, double timeout_s = 60.0);

/// The probe child (`attnbench __plugin-probe [--available] PATH RESULT`): load
/// `path` in this process and write {"name", "description", "device",
/// "deterministic", "options"} (the declarations, OptionSpec::to_json), with
/// `available` also {"available": bool, "why": reason} from the plugin's
/// available() (or {"input_error": message}), to the JSON file `result`. Returns
/// the exit code (0; 2 after an input error).
int plugin_probe_main(const std::string& path, const std::string& result, bool available = false);

}  // namespace attnbench
