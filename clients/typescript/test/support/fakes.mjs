// Peers for the live tests, each a real HTTP server on a port the system picks:
// an SMS provider speaking Herald's HTTP provider protocol, and a proxy in front
// of Herald that can answer for it (a 503, a dropped connection) before
// forwarding.
import { createHmac } from "node:crypto";
import { createServer, request as httpRequest } from "node:http";

async function listen(server) {
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${server.address().port}`;
}

async function close(server) {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/**
 * `POST /sms` with `{"to", "body", "encoding", "segments"}` and an
 * `Idempotency-Key`: accepted with a message id, except for the numbers in
 * `refusing`, answered as a provider refuses a message for good (a 400).
 */
export async function fakeSmsProvider() {
  const received = [];
  const refusing = new Set();
  const server = createServer(async (req, res) => {
    const body = JSON.parse((await readBody(req)).toString("utf8"));
    const message = { to: body.to, body: body.body, key: req.headers["idempotency-key"] };
    received.push(message);
    if (refusing.has(body.to)) {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "sender_not_registered" }));
      return;
    }
    message.id = `msg-${received.length}`;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: message.id }));
  });
  const url = `${await listen(server)}/sms`;
  return { url, received, refusing, close: () => close(server) };
}

/**
 * Forwards every request to `target`, unless a planned answer is waiting for
 * that method and path: `{status, headers, body}` is answered instead,
 * `"reset"` drops the connection without an answer, and `"lose-answer"`
 * forwards the request but drops the connection instead of passing Herald's
 * answer on. Each request is logged with who answered it.
 */
export async function proxy(target) {
  const seen = [];
  const plans = new Map();
  const server = createServer(async (req, res) => {
    const route = `${req.method} ${req.url.split("?")[0]}`;
    const body = await readBody(req);
    const planned = plans.get(route)?.shift();
    if (planned === "reset") {
      seen.push({ route, answeredBy: "proxy", status: "reset" });
      req.socket.destroy();
      return;
    }
    if (planned && planned !== "lose-answer") {
      seen.push({ route, answeredBy: "proxy", status: planned.status, at: Date.now() });
      res.writeHead(planned.status, planned.headers ?? {});
      res.end(planned.body ?? "");
      return;
    }
    const upstream = httpRequest(new URL(req.url, target), { method: req.method, headers: req.headers }, (answer) => {
      seen.push({ route, answeredBy: "herald", status: answer.statusCode, at: Date.now() });
      if (planned === "lose-answer") {
        // Herald has done the work; its answer never reaches the client.
        answer.resume();
        answer.on("end", () => req.socket.destroy());
        return;
      }
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", () => res.destroy());
    upstream.end(body);
  });
  const url = await listen(server);
  return {
    url,
    seen,
    /** The next requests to `route` ("POST /v1/events") get these answers, in order. */
    plan(route, ...answers) {
      plans.set(route, [...(plans.get(route) ?? []), ...answers]);
    },
    forRoute: (route) => seen.filter((s) => s.route === route),
    close: () => close(server),
  };
}

/** Headers signing `body` per Standard Webhooks with a `whsec_…` secret, as Herald checks a receipt. */
export function standardWebhookHeaders(secret, id, body) {
  const timestamp = Math.floor(Date.now() / 1000).toString();
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const signature = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64");
  return { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": `v1,${signature}` };
}
