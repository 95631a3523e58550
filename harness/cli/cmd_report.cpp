// `attnbench report`, `attnbench compare` and `attnbench merge`
// (docs/report-format.md; exit codes of docs/semantics.md section 12).
#include <cstdio>
#include <fstream>
#include <memory>

#include "harness/cli/cli.hpp"
#include "reports/compare.hpp"
#include "harness/model/errors.hpp"
#include "reports/journal.hpp"
#include "harness/model/printable.hpp"
#include "reports/report.hpp"
#include "reports/html_report.hpp"
#include "reports/summary.hpp"

namespace attnbench::cli {

namespace {

/// Write an output file atomically (reports/journal.hpp: exclusive temporary,
/// no symlink following, rename); failures are bad input naming the file (exit 2).
void write_text(const std::string& path, const std::string& text) {
  try {
    write_file_atomic(path, text);
  } catch (const std::runtime_error& e) {
    throw InputError(path, "", e.what());
  }
}

/// Write an output file atomically piece by piece (AtomicFileWriter): `produce`
/// hands its text to the writer it is given; failures are bad input naming the file (exit 2).
void write_streamed(const std::string& path,
                    const std::function<void(const std::function<void(std::string_view)>&)>& produce) {
  try {
    AtomicFileWriter out(path);
    produce([&](std::string_view text) { out.write(text); });
    out.commit();
  } catch (const std::runtime_error& e) {
    throw InputError(path, "", e.what());
  }
}

void add_report(CLI::App& app, Action& action) {
  struct Args {
    std::string input, output = "report.html", baseline, title;
    bool no_charts = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("report", "render report.json as one self-contained HTML file");
  cmd->add_option("report", a->input, "report.json written by `attnbench run` or `attnbench merge`")->required();
  cmd->add_option("-o,--output", a->output, "HTML file to write")->capture_default_str();
  cmd->add_option("--baseline", a->baseline, "backend the speed-up columns are relative to");
  cmd->add_option("--title", a->title, "page title (default: from the scenario)");
  cmd->add_flag("--no-charts", a->no_charts, "do not inline the Vega bundles (tables only)");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      nlohmann::json doc = load_report(a->input);
      html::HtmlOptions o;
      o.baseline_backend = a->baseline;
      o.title = a->title;
      o.source_file = a->input;
      o.inline_charts = !a->no_charts;
      std::string why;
      if (o.inline_charts && html::find_chart_assets(&why).empty())
        std::fprintf(stderr,
                     "attnbench: warning: charts left out: the Vega bundles are missing (%s); run `npm ci` in "
                     "reports/ or set ATTNBENCH_NODE_MODULES\n",
                     why.c_str());
      write_text(a->output, html::render_report(doc, o));
      std::printf("attnbench: wrote %s (%zu rows)\n", printable(a->output).c_str(), doc["results"].size());
      return kExitOk;
    };
  });
}

void add_compare(CLI::App& app, Action& action) {
  struct Args {
    std::string base, neu, max_slowdown = "5%", markdown, json_out;
    double alpha = 0.05;
    bool allow_env_mismatch = false, fail_on_ambiguous = false, fail_on_missing = false, quiet = false;
    bool allow_nondeterminism = false, allow_nonfinite = false;
    bool allow_missing = false, allow_unfinished = false, allow_new_errors = false, allow_no_timing = false;
    HistoryCompareArgs history;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "compare",
      "regression gate: compare NEW against BASE per (case, backend, pass); exit 0 nothing regressed, 1 a "
      "slowdown beyond the tolerance or a correctness failure, 2 bad input; --history DB NEW judges NEW against a "
      "results history (docs/history.md)");
  cmd->add_option("base", a->base, "baseline report.json")->required();
  cmd->add_option("new", a->neu, "new report.json (with --history: give NEW alone)");
  cmd->add_option("--max-slowdown", a->max_slowdown, "tolerated slowdown of the median, e.g. 5% or 0.05")
      ->capture_default_str();
  cmd->add_option("--alpha", a->alpha, "significance level of the Mann-Whitney U test")->capture_default_str();
  cmd->add_flag("--allow-env-mismatch", a->allow_env_mismatch, "compare runs from different GPUs / drivers");
  cmd->add_flag("--fail-on-ambiguous", a->fail_on_ambiguous, "count AMBIGUOUS timings as regressions");
  cmd->add_flag("--fail-on-missing", a->fail_on_missing, "(the default now; kept for old command lines)");
  cmd->add_flag("--allow-missing", a->allow_missing, "do not gate on rows of BASE missing from NEW");
  cmd->add_flag("--allow-unfinished", a->allow_unfinished, "do not gate on a NEW report that did not finish");
  cmd->add_flag("--allow-new-errors", a->allow_new_errors,
                "do not gate on rows that became crashed, error, timeout or oom (NEW-only rows included)");
  cmd->add_flag("--allow-no-timing", a->allow_no_timing, "do not gate on NEW rows without BASE's timings");
  cmd->add_flag("--allow-nondeterminism", a->allow_nondeterminism,
                "do not gate on a row that was bitwise deterministic in BASE and is not in NEW");
  cmd->add_flag("--allow-nonfinite", a->allow_nonfinite, "do not gate on a row whose outputs gain NaN/Inf");
  cmd->add_option("--markdown", a->markdown, "also write the markdown summary to this file");
  cmd->add_option("--json", a->json_out, "write the full comparison as JSON to this file");
  cmd->add_flag("-q,--quiet", a->quiet, "do not print the markdown summary to stdout");
  add_history_compare_options(cmd, a->history);
  cmd->callback([a, &action] {
    action = [a]() -> int {
      CompareOptions o;
      o.max_slowdown = parse_fraction(a->max_slowdown, "--max-slowdown");
      o.alpha = a->alpha;
      o.allow_env_mismatch = a->allow_env_mismatch;
      o.fail_on_ambiguous = a->fail_on_ambiguous;
      o.fail_on_missing = a->fail_on_missing;
      o.allow_nondeterminism = a->allow_nondeterminism;
      o.allow_nonfinite = a->allow_nonfinite;
      o.allow_missing = a->allow_missing;
      o.allow_unfinished = a->allow_unfinished;
      o.allow_new_errors = a->allow_new_errors;
      o.allow_no_timing = a->allow_no_timing;
      if (!a->history.db.empty()) {
        if (!a->neu.empty())
          throw InputError("<command line>", "--history", "give NEW.json alone: the baseline comes from the history");
        return run_history_compare(a->history, o, a->base, a->markdown, a->json_out, a->quiet);
      }
      if (a->neu.empty()) throw InputError("<command line>", "compare", "give BASE.json and NEW.json (or --history DB NEW.json)");
      Comparison c = compare_report_files(a->base, a->neu, o);  // row by row: bounded memory
      const std::string md = c.markdown();
      if (!a->quiet) std::fputs(md.c_str(), stdout);
      if (!a->markdown.empty()) write_text(a->markdown, md);
      if (!a->json_out.empty()) write_streamed(a->json_out, [&](const auto& write) { c.write_json(write); });
      std::fprintf(stderr, "attnbench compare: %lld gate failure(s); %lld SLOWER, %lld FASTER, %lld AMBIGUOUS, %lld SAME\n",
                   static_cast<long long>(c.regressions()), static_cast<long long>(c.count(Verdict::slower)),
                   static_cast<long long>(c.count(Verdict::faster)), static_cast<long long>(c.count(Verdict::ambiguous)),
                   static_cast<long long>(c.count(Verdict::same)));
      if (c.regressions() > 0) std::fprintf(stderr, "attnbench compare: gate failures: %s\n", c.gate_breakdown().c_str());
      return c.exit_code();
    };
  });
}

void add_merge(CLI::App& app, Action& action) {
  struct Args {
    std::vector<std::string> inputs;
    std::string output;
    bool allow_env_mismatch = false, replace = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("merge", "merge reports (e.g. shards of one sweep) into one report.json");
  cmd->add_option("reports", a->inputs, "report.json files, in order")->required()->expected(1, -1);
  cmd->add_option("-o,--output", a->output, "merged report.json to write")->required();
  cmd->add_flag("--allow-env-mismatch", a->allow_env_mismatch, "merge runs from different GPUs / drivers");
  cmd->add_flag("--replace", a->replace, "a later file's (case, backend) row replaces an earlier one");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      MergeOptions o;
      o.allow_env_mismatch = a->allow_env_mismatch;
      o.replace_duplicates = a->replace;
      const MergeTotals t = merge_report_files(a->inputs, a->output, o);  // row by row: bounded memory
      std::printf("attnbench: merged %zu reports, %zu rows, into %s\n", t.reports, t.rows, printable(a->output).c_str());
      return kExitOk;
    };
  });
}

void add_summary(CLI::App& app, Action& action) {
  auto input = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("summary",
                                 "print a report's verdict: per backend pass/fail/unsupported counts, the fastest "
                                 "passing backend per case, where each failure comes from (exit 0; 2 bad input)");
  cmd->add_option("report", *input, "report.json written by `attnbench run` or `attnbench merge`")->required();
  cmd->callback([input, &action] {
    action = [input]() -> int {
      std::fputs(summarize_report_file(*input).text().c_str(), stdout);  // row by row: bounded memory
      return kExitOk;
    };
  });
}

}  // namespace

void add_report_commands(CLI::App& app, Action& action) {
  add_report(app, action);
  add_summary(app, action);
  add_compare(app, action);
  add_merge(app, action);
}

}  // namespace attnbench::cli
