// Start a Herald for the tests and the generated-types check: `herald serve` on
// a port the system picks, a fresh SQLite database and the given configuration,
// all in a temporary directory; resolved once it answers /readyz.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../../../", import.meta.url));

/** HERALD_BIN, else the repository's release build, else its debug build (what CI builds). */
export function heraldBin() {
  if (process.env.HERALD_BIN) return process.env.HERALD_BIN;
  const candidates = [join(repo, "target/release/herald"), join(repo, "target/debug/herald")];
  const found = candidates.find((path) => existsSync(path));
  if (!found) {
    throw new Error(`no Herald binary: set HERALD_BIN, or build one (looked for ${candidates.join(" and ")})`);
  }
  return found;
}

/**
 * `config` is a herald.toml without `listen` and `database_url`: those, and
 * JSON logs (to find the port), are set through HERALD_… variables.
 */
export async function startHerald({ config = "", readyWithinMs = 30_000 } = {}) {
  const bin = heraldBin();
  const dir = await mkdtemp(join(tmpdir(), "herald-ts-"));
  const configFile = join(dir, "herald.toml");
  await writeFile(configFile, config);
  // Herald refuses a HERALD_… variable that is not one of its keys, and this
  // process may hold some (HERALD_BIN): the child gets only its own.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HERALD_")));
  Object.assign(env, {
    HERALD_LISTEN: "127.0.0.1:0",
    HERALD_DATABASE_URL: `sqlite://${join(dir, "herald.db")}`,
    HERALD_LOG__FORMAT: "json",
  });
  const child = spawn(bin, ["serve", "--config", configFile], { env, stdio: ["ignore", "ignore", "pipe"] });
  const log = [];
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));

  const address = new Promise((resolve, reject) => {
    let pending = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      pending += chunk;
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        log.push(line);
        try {
          const fields = JSON.parse(line).fields ?? {};
          if (fields.message === "herald is listening") resolve(fields.addr);
        } catch {
          // Not a JSON log line (a panic message): kept in the log all the same.
        }
      }
    });
    child.once("error", (e) => reject(new Error(`could not run ${bin}: ${e.message}`)));
    exited.then(({ code, signal }) =>
      reject(new Error(`herald exited (${signal ?? code}) before listening:\n${log.join("\n")}`)),
    );
  });

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };

  try {
    const baseUrl = `http://${await withDeadline(address, readyWithinMs, "herald to listen")}`;
    await waitFor(
      async () => {
        const answer = await fetch(`${baseUrl}/readyz`).catch(() => undefined);
        return answer?.ok;
      },
      { within: readyWithinMs, what: "herald's /readyz" },
    );
    return { baseUrl, dir, log, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Poll `check` until it returns something truthy (returned), or fail after `within` ms. */
export async function waitFor(check, { within = 10_000, every = 25, what = "the condition" } = {}) {
  const deadline = Date.now() + within;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${within} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, every));
  }
}

function withDeadline(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
