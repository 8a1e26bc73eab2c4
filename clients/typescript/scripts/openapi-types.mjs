// Herald's OpenAPI document → TypeScript types, shared by `npm run generate`
// and `npm run check-generated` so both write exactly the same text.
import { readFile } from "node:fs/promises";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

export const GENERATED_FILE = new URL("../src/generated/openapi.ts", import.meta.url);

const HEADER = `// Herald's API types, generated from its GET /v1/openapi.json by openapi-typescript.
// Regenerate: npm run generate -- --from http://127.0.0.1:8080/v1/openapi.json
// (or a saved document). \`npm run check-generated\` fails when this file and the
// document of the Herald it starts differ.
`;

/** The document at an http(s) URL or in a file, parsed. */
export async function readDocument(from) {
  let text;
  if (/^https?:\/\//i.test(from)) {
    const answer = await fetch(from);
    if (!answer.ok) throw new Error(`GET ${from} answered ${answer.status}`);
    text = await answer.text();
  } else {
    text = await readFile(from, "utf8");
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${from} is not JSON: ${e.message}`);
  }
}

/** The text of src/generated/openapi.ts for a parsed document. */
export async function generateTypes(document) {
  // A free-form object (an event's `data`, a dead letter's `event`) is `Record<string, unknown>`,
  // not `Record<string, never>`, which would take no data at all.
  const ast = await openapiTS(document, { emptyObjectsUnknown: true });
  return COMMENT_HEADER + HEADER + "\n" + astToString(ast);
}

/** `--from VALUE` or `--from=VALUE` among the arguments, else undefined. */
export function option(args, name) {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}`) return args[i + 1];
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
  }
  return undefined;
}
