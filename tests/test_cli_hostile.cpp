// Hostile and careless input through the real binary (ATTNBENCH_BINARY): sizes
// beyond the budget (exit 2 naming file, JSON pointer and value, fast and without
// allocating), wrapped sums, bad numbers, an oversized case inside a sweep (an
// error row, the sweep goes on), unchecked rows and the compare guards, and
// control characters in input strings kept off the terminal.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_util.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using namespace attnbench::test::cli;

}  // namespace

TEST_CASE("describe: a 200-byte file whose document lengths wrap to seq_q is refused, not allocated") {
  TempDir t;
  const std::string f = t.write(
      "wrap.json",
      R"({"batch": 1, "heads_q": 1, "seq_q": 2, "head_dim": 8, "mask": [{"kind": "document", "doc_lengths": [[9223372036854775807, 9223372036854775805]]}]})");
  CHECK(fs::file_size(f) < 200);
  Result r = run("describe '" + f + "'", t);
  CHECK(r.code == 2);
  CHECK(contains(r.err, f + ": /mask/0/doc_lengths/0: document lengths sum to more than 2^63"));
}

TEST_CASE("describe and run: seq_q 2^40 and heads 2^45 x seq 2^17 are exit 2 at once, naming field and value") {
  TempDir t;
  const std::string big = t.write("big.json", R"({"batch": 1, "heads_q": 32, "seq_q": 1099511627776, "head_dim": 64})");
  Result d = run("describe '" + big + "'", t);
  CHECK(d.code == 2);
  CHECK(contains(d.err, big + ": /seq_q: Q would need 2251799813685248 elements"));
  CHECK(contains(d.err, "(value 1099511627776)"));
  Result r = run("run '" + big + "' --backends cpu --out '" + (t.path / "out").string() + "'", t);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "/seq_q: Q would need"));
  const std::string wrap =
      t.write("wrap.json", R"({"batch": 1, "heads_q": 35184372088832, "seq_q": 131072, "head_dim": 64})");
  Result w = run("describe '" + wrap + "'", t);
  CHECK(w.code == 2);
  CHECK(contains(w.err, "/heads_q: Q would need more than 2^63 elements"));
  CHECK_FALSE(contains(w.out, " 0 "));  // no "useful 0" table
}

TEST_CASE("bad numbers are exit 2 naming the file and field") {
  TempDir t;
  struct Bad {
    const char* body;
    const char* expect;
  };
  for (const Bad& b : {Bad{R"({"batch": 1, "heads_q": 1, "seq_q": 1e400, "head_dim": 8})", "/seq_q"},
                       Bad{R"({"batch": 1, "heads_q": 1, "seq_q": 1.5, "head_dim": 8})", "/seq_q"},
                       Bad{R"({"batch": 1, "heads_q": 1, "seq_q": 18446744073709551616, "head_dim": 8})", "/seq_q"},
                       Bad{R"({"batch": 1, "heads_q": 1, "seq_q": -4, "head_dim": 8})", "/seq_q"},
                       Bad{R"({"batch": 1, "heads_q": 1, "seq_q": 8, "head_dim": 8, "score_mod": {"kind": "rel_bias", "max_distance": 9223372036854775807}})",
                           "/score_mod"}}) {
    const std::string f = t.write("bad.json", b.body);
    Result r = run("describe '" + f + "'", t);
    CAPTURE(b.body);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, f + ": " + b.expect));
  }
}

TEST_CASE("run: an oversized case in a sweep becomes an error row and the sweep goes on") {
  TempDir t;
  const std::string f = t.write("sweep.json", R"({
    "name": "sweep", "base": {"batch": 1, "heads_q": 2, "head_dim": 16, "dtype": "fp32"},
    "axes": {"seq": [32, 1099511627776, 48]}})");
  Result d = run("describe '" + f + "'", t);
  CHECK(d.code == 0);
  CHECK(contains(d.out, "1 case over the size budget"));
  CHECK(contains(d.out, "S1099511627776: " + f + ": /axes/seq/1: Q would need"));
  Result dj = run("describe '" + f + "' --json", t);
  REQUIRE(dj.code == 0);
  const json cases = json::parse(dj.out)["cases"];
  REQUIRE(cases.size() == 3);
  CHECK(cases[1]["invalid"].get<std::string>().find("/axes/seq/1") != std::string::npos);
  CHECK(cases[2]["useful_pairs"] == 2 * 48 * 48);

  const std::string out = (t.path / "out").string();
  Result r = run("run '" + f + "' --backends cpu --no-timing --out '" + out + "'", t);
  CHECK(r.code == 1);  // an error row
  CHECK(contains(r.out, "3 rows: 2 pass, 0 fail, 0 unsupported, 1 error"));
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  REQUIRE(rep["results"].size() == 3);
  CHECK(rep["results"][0]["status"] == "pass");
  CHECK(rep["results"][1]["case_id"] == "S1099511627776");
  CHECK(rep["results"][1]["status"] == "error");
  CHECK(contains(rep["results"][1]["message"].get<std::string>(), "/axes/seq/1: Q would need"));
  CHECK(rep["results"][2]["status"] == "pass");
  CHECK(rep["results"][2]["case_id"] == "S48");
}

TEST_CASE("run --check off writes unchecked rows, counted apart; compare never reads them as a pass") {
  TempDir t;
  const std::string f = t.write("small.json", R"({"name": "small", "batch": 1, "heads_q": 2, "seq_q": 32, "head_dim": 16, "dtype": "fp32"})");
  const std::string checked = (t.path / "checked").string(), off = (t.path / "off").string();
  Result a = run("run '" + f + "' --backends cpu --out '" + checked + "' --max-seconds 0.05 --min-samples 3", t);
  REQUIRE(a.code == 0);
  Result b = run("run '" + f + "' --backends cpu --check off --out '" + off + "' --max-seconds 0.05 --min-samples 3", t);
  CHECK(b.code == 0);
  CHECK(contains(b.out, "1 rows: 0 pass, 0 fail, 0 unsupported, 0 error, 0 oom, 0 timeout, 0 crashed, 1 unchecked"));
  const json rep = json::parse(slurp(fs::path(off) / "report.json"));
  CHECK(rep["results"][0]["status"] == "unchecked");
  CHECK(rep["results"][0]["check"]["mode"] == "off");
  CHECK(rep["results"][0]["check"]["nonfinite"]["O"] == 0);
  Result c = run("compare '" + checked + "/report.json' '" + off + "/report.json' --max-slowdown 99%", t);
  CHECK(c.code == 1);
  CHECK(contains(c.out, "| rows unchecked in new (correctness unknown) | 1 |"));
  CHECK(contains(c.out, "| pass | unchecked | **yes** |"));
  // The HTML counts unchecked apart.
  const std::string html = (t.path / "r.html").string();
  Result h = run("report '" + off + "/report.json' -o '" + html + "' --no-charts", t);
  CHECK(h.code == 0);
  CHECK(contains(slurp(html), "st-unchecked\">unchecked 1</span> (outputs not checked: correctness unknown)"));
}

TEST_CASE("compare CLI: determinism and NaN/Inf guards gate unless allowed") {
  TempDir t;
  const std::string base_file = std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100.json";
  json doc = json::parse(slurp(base_file));
  json nondet = doc, nonfinite = doc;
  size_t i = 0;
  for (; i < doc["results"].size(); ++i)
    if (doc["results"][i]["backend"] == "naive" && doc["results"][i]["extra"]["deterministic"] == true) break;
  REQUIRE(i < doc["results"].size());
  nondet["results"][i]["extra"]["deterministic"] = false;
  nonfinite["results"][i]["status"] = "fail";
  nonfinite["results"][i]["check"]["tensors"][1]["nan_mismatch"] = 12;
  const std::string nd = t.write("nondet.json", nondet.dump()), nf = t.write("nonfinite.json", nonfinite.dump());
  Result a = run("compare '" + base_file + "' '" + nd + "'", t);
  CHECK(a.code == 1);
  CHECK(contains(a.out, "nondeterministic | **yes**"));
  CHECK(run("compare '" + base_file + "' '" + nd + "' --allow-nondeterminism", t).code == 0);
  Result b = run("compare '" + base_file + "' '" + nf + "'", t);
  CHECK(b.code == 1);
  CHECK(contains(b.out, "nonfinite | **yes** | outputs gained 12 non-finite element(s)"));
  // The status flip (pass -> fail) still gates with the NaN guard allowed.
  CHECK(run("compare '" + base_file + "' '" + nf + "' --allow-nonfinite", t).code == 1);
}

TEST_CASE("control characters in input strings never reach the terminal raw") {
  TempDir t;
  const std::string f = t.write(
      "esc.json", "{\"name\": \"evil\\u001b[2J\\u0007\", \"description\": \"line\\rover\", \"batch\": 1, \"heads_q\": 1, "
                  "\"seq_q\": 8, \"head_dim\": 8}");
  Result d = run("describe '" + f + "'", t);
  CHECK(d.code == 0);
  CHECK_FALSE(contains(d.out, "\x1b"));
  CHECK_FALSE(contains(d.out, "\a"));
  CHECK_FALSE(contains(d.out, "\r"));
  CHECK(contains(d.out, "evil\\e[2J\\x07"));
  CHECK(contains(d.out, "line\\rover"));
  // An error message quoting input is escaped too.
  const std::string g = t.write("esc2.json", "{\"batch\": 1, \"heads_q\": 1, \"seq_q\": 8, \"head_dim\": 8, \"dtype\": \"bf\\u001b[31m16\"}");
  Result e = run("describe '" + g + "'", t);
  CHECK(e.code == 2);
  CHECK_FALSE(contains(e.err, "\x1b"));
}

TEST_CASE("packing: a sweep case that would draw billions of documents is an error row, drawn no further") {
  TempDir t;
  // 65536 packs of 131072 one-token documents: 2^33 documents within every size
  // budget of the problem itself; the document budget (2^24) stops the drawing.
  // 65536 packs by first fit over 2^21 documents: 2^37 steps, beyond 2^36.
  const std::string f = t.write("pk.json", R"({"name": "pk", "base": {"heads_q": 1, "head_dim": 1, "dtype": "bf16"},
    "axes": {"packing": [
      {"source": {"kind": "fixed", "length": 1}, "num_packs": 65536, "max_seq_len": 131072, "strategy": "greedy"},
      {"source": {"kind": "fixed", "length": 32}, "num_packs": 65536, "max_seq_len": 1024, "strategy": "ffd"},
      {"source": {"kind": "fixed", "length": 8}, "num_packs": 2, "max_seq_len": 64}]}})");
  Result d = run("describe '" + f + "'", t);
  CHECK(d.code == 0);
  CHECK(contains(d.out, "2 cases over the size budget"));
  CHECK(contains(d.out, "fixed1-greedy: " + f + ": /axes/packing/0: packing would draw more than 16777216 documents"));
  CHECK(contains(d.out, "fixed32-ffd: " + f + ": /axes/packing/1: first-fit-decreasing of 2097152 documents into 65536 packs"));
  CHECK(contains(d.out, "fixed8-greedy  2"));
}
