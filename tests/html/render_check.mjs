// Open an attnbench HTML report in headless Chromium (Debian's /usr/bin/chromium,
// driven by playwright-core from reports/node_modules), wait for the charts,
// save a full-page screenshot and print one JSON line with what was found:
//   {"expected", "drawn", "chart_divs", "svgs", "canvases", "table_rows",
//    "mask_svgs", "errors": [...], "requests": [...]}
// errors: console errors and uncaught page errors; requests: any non-file URL
// the page tried to load (the report must work offline).
//
//   node tests/html/render_check.mjs REPORT.html SCREENSHOT.png
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const reportsDir = process.env.ATTNBENCH_REPORTS_DIR || path.resolve(here, "../../reports");
const require = createRequire(path.join(reportsDir, "package.json"));
const { chromium } = require("playwright-core");

const [, , htmlPath, pngPath] = process.argv;
if (!htmlPath || !pngPath) {
  console.error("usage: render_check.mjs REPORT.html SCREENSHOT.png");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.ATTNBENCH_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
  const errors = [];
  const requests = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith("file:") && !u.startsWith("data:") && !u.startsWith("blob:") && !u.startsWith("about:"))
      requests.push(u);
  });
  await page.goto(pathToFileURL(path.resolve(htmlPath)).href, { waitUntil: "load" });
  await page
    .waitForFunction(() => document.body.dataset.chartsDone === "1", null, { timeout: 60000 })
    .catch((e) => errors.push("charts did not finish: " + e.message));
  const info = await page.evaluate(() => ({
    expected: Number(document.body.dataset.chartsExpected || -1),
    drawn: Number(document.body.dataset.chartsDrawn || 0),
    chart_divs: document.querySelectorAll("div.chart").length,
    svgs: document.querySelectorAll("div.chart svg.marks").length,
    canvases: document.querySelectorAll("div.chart canvas").length,
    table_rows: document.querySelectorAll("#summary tbody tr").length,
    mask_svgs: document.querySelectorAll("svg.mask").length,
    title: document.title,
  }));
  await page.screenshot({ path: pngPath, fullPage: true });
  console.log(JSON.stringify({ ...info, errors, requests }));
} finally {
  await browser.close();
}
