#!/usr/bin/env node
// npm run generate -- --from URL_OR_FILE [--out FILE]
// Writes src/generated/openapi.ts (or FILE) from Herald's OpenAPI document.
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { GENERATED_FILE, generateTypes, option, readDocument } from "./openapi-types.mjs";

const args = process.argv.slice(2);
const from = option(args, "from");
if (!from) {
  console.error("usage: npm run generate -- --from URL_OR_FILE [--out FILE]");
  console.error("  URL_OR_FILE: a running Herald's http://HOST:PORT/v1/openapi.json, or that document saved to a file");
  process.exit(2);
}
const out = option(args, "out") ?? fileURLToPath(GENERATED_FILE);
await writeFile(out, await generateTypes(await readDocument(from)));
console.log(`wrote ${out} from ${from}`);
