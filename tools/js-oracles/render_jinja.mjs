// Renders Jinja templates with @huggingface/jinja (the reference our C++ engine is tested
// against). Usage: node render_jinja.mjs [CASE.json|-] [NODE_MODULES]
// Reads the case from the file (stdin when absent or "-"); loads @huggingface/jinja from
// NODE_MODULES when given, else from the node_modules next to this script.
//   {"template": "...", "context": {...}}  -> prints the rendered text, or a line starting
//                                             with JINJA_ERROR: and the message (exit 0)
//   [{"template": ..., "context": ...}, ...] -> prints a JSON array of {"output": text} or
//                                             {"error": message}, one per case
// Contexts are parsed with JSON.parse, so objects keep their key order.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[3];
const { Template } = modules
  ? await import(pathToFileURL(join(modules, "@huggingface/jinja/dist/index.js")).href)
  : await import("@huggingface/jinja");

const file = process.argv[2];
const input = readFileSync(file === undefined || file === "-" ? 0 : file, "utf8");
const request = JSON.parse(input);

function render(c) {
  try {
    return { output: new Template(c.template).render(c.context ?? {}) };
  } catch (e) {
    return { error: String(e && e.message ? e.message : e) };
  }
}

if (Array.isArray(request)) {
  process.stdout.write(JSON.stringify(request.map(render)));
} else {
  const r = render(request);
  process.stdout.write("error" in r ? `JINJA_ERROR: ${r.error}\n` : r.output);
}
