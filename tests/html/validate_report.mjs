// Validate report.json files against reports/report.schema.json with Ajv
// (JSON Schema draft 2020-12), from reports/node_modules (`npm ci` in reports/).
//
//   node tests/html/validate_report.mjs SCHEMA REPORT.json [REPORT.json ...]
//
// Prints one JSON line per report: {"file", "valid", "errors": [...]}; exits 0
// when every report is valid, 1 when one is not, 2 on usage or load errors.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const reportsDir = process.env.ATTNBENCH_REPORTS_DIR || path.resolve(here, "../../reports");
const require = createRequire(path.join(reportsDir, "package.json"));

const [, , schemaPath, ...files] = process.argv;
if (!schemaPath || files.length === 0) {
  console.error("usage: validate_report.mjs SCHEMA REPORT.json [...]");
  process.exit(2);
}
let Ajv2020;
try {
  Ajv2020 = require("ajv/dist/2020").default;
} catch (e) {
  console.error(`validate_report: ajv not found under ${reportsDir}/node_modules (run npm ci there): ${e.message}`);
  process.exit(2);
}
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
let validate;
try {
  validate = ajv.compile(JSON.parse(readFileSync(schemaPath, "utf8")));
} catch (e) {
  console.error(`validate_report: ${schemaPath}: ${e.message}`);
  process.exit(2);
}
let allValid = true;
for (const f of files) {
  let doc;
  try {
    doc = JSON.parse(readFileSync(f, "utf8"));
  } catch (e) {
    console.error(`validate_report: ${f}: ${e.message}`);
    process.exit(2);
  }
  const valid = validate(doc);
  allValid = allValid && valid;
  const errors = (validate.errors || []).slice(0, 20).map((e) => `${e.instancePath || "/"} ${e.message}`);
  console.log(JSON.stringify({ file: f, valid, errors }));
}
process.exit(allValid ? 0 : 1);
