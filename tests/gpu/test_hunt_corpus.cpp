// The hunt regression corpus (tests/data/hunt, docs/hunt.md) on the own GPU
// backends: every problem a backend supports passes the rule (the check of
// `attnbench run`, through hunt::replay_corpus). Found failures join the corpus
// after their fix.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "harness/backend/backend.hpp"
#include "harness/hunt/hunt.hpp"

TEST_CASE("hunt corpus: tests/data/hunt passes on flash, varlen, flex and cudnn") {
  namespace fs = std::filesystem;
  using namespace attnbench;
  const std::string corpus = std::string(ATTNBENCH_TEST_DATA_DIR) + "/hunt";
  int64_t run_total = 0;
  for (const char* backend : {"flash", "varlen", "flex", "cudnn"}) {
    auto b = BackendRegistry::create(backend);
    if (!b || !b->available(nullptr)) continue;
    hunt::HuntOptions o;
    o.backends = {backend};
    o.isolate = RunOptions::Isolate::off;
    o.quiet = true;
    o.out_dir = (fs::temp_directory_path() / ("attnbench_hunt_corpus_" + std::to_string(::getpid()) + "_" + backend)).string();
    const hunt::HuntSummary s = hunt::replay_corpus(corpus, o);
    CAPTURE(backend);
    CHECK(s.counts.generated >= 4);
    CHECK(s.counts.failed == 0);
    run_total += s.counts.run;
    fs::remove_all(o.out_dir);
  }
  CHECK(run_total > 0);  // some backend ran some problem
}
