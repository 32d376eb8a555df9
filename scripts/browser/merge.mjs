// Joins saved reports into one whose benchmarks carry backend labels, as a
// run that benchmarked several backends side by side writes it.
//
// usage: node merge.mjs OUT.json LABEL=REPORT.json [LABEL=REPORT.json ...]
import { readFileSync, writeFileSync } from 'node:fs';

const [out, ...inputs] = process.argv.slice(2);
let merged = null;
for (const input of inputs) {
  const at = input.indexOf('=');
  const label = input.slice(0, at);
  const report = JSON.parse(readFileSync(input.slice(at + 1), 'utf8'));
  for (const b of report.benchmarks) b.backend = label;
  if (merged === null) merged = report;
  else merged.benchmarks.push(...report.benchmarks);
}
writeFileSync(out, JSON.stringify(merged));
