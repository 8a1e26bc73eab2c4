#!/usr/bin/env node
// npm run check-generated [-- --from URL_OR_FILE]
// Starts Herald (HERALD_BIN, else the repository's build), fetches its OpenAPI
// document, generates the types into a temporary file and fails, showing the
// difference, when the committed src/generated/openapi.ts is not that text.
// With --from, checks against that document instead of starting Herald.
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { heraldBin, startHerald } from "./herald.mjs";
import { GENERATED_FILE, generateTypes, option, readDocument } from "./openapi-types.mjs";

const committedPath = fileURLToPath(GENERATED_FILE);
const shownPath = relative(process.cwd(), committedPath) || committedPath;

let from = option(process.argv.slice(2), "from");
let herald;
if (!from) {
  try {
    herald = await startHerald();
  } catch (e) {
    console.error(`check-generated: ${e.message}`);
    process.exit(2);
  }
  from = `${herald.baseUrl}/v1/openapi.json`;
}
const scratch = await mkdtemp(join(tmpdir(), "herald-ts-check-"));
try {
  const fresh = await generateTypes(await readDocument(from));
  const committed = await readFile(committedPath, "utf8").catch(() => "");
  if (fresh === committed) {
    console.log(`${shownPath} matches the OpenAPI document of ${herald ? heraldBin() : from}`);
  } else {
    const freshPath = join(scratch, "openapi.ts");
    await writeFile(freshPath, fresh);
    console.error(`${shownPath} is not what the OpenAPI document of ${herald ? heraldBin() : from} generates.`);
    console.error("The difference (- committed, + generated from the document):\n");
    console.error(difference(committedPath, freshPath, committed, fresh));
    console.error(
      `\nIf the API changed on purpose, regenerate and commit the file:\n` +
        `  npm run generate -- --from http://HOST:PORT/v1/openapi.json\n` +
        `and adapt the hand-written client in src/ where the types changed.`,
    );
    process.exitCode = 1;
  }
} finally {
  await rm(scratch, { recursive: true, force: true });
  await herald?.stop();
}

/** `diff -u` when the system has it; else the first line that differs. */
function difference(committedPath, freshPath, committed, fresh) {
  const diff = spawnSync("diff", ["-u", "--label", "committed", "--label", "generated", committedPath, freshPath], {
    encoding: "utf8",
  });
  if (diff.status === 1 && diff.stdout) return diff.stdout;
  const a = committed.split("\n");
  const b = fresh.split("\n");
  let line = 0;
  while (line < a.length && line < b.length && a[line] === b[line]) line++;
  return `first difference at line ${line + 1}:\n- ${a[line] ?? "(end of file)"}\n+ ${b[line] ?? "(end of file)"}`;
}
