#!/usr/bin/env python3
"""Fails on any metric, label or label value in the operations kit that Herald does not export.

Starts a Herald binary on a free port, with a temporary SQLite database and a
configuration of its own: two SMS providers in a failover list (fakes served by
this script), an email sink, the in-app inbox, signed generic receipts, an ops
webhook (a fake too) for the dead-letter digest, a token, and a NATS JetStream
server of its own for bus ingest and status publication. A small workload makes
every series the kit names appear, waiting for each state it causes: an unknown
attempt that opens a circuit and fails over (a possible duplicate), a delivery,
a receipt, a dead letter refused by the provider and one whose template cannot
render, a replayed and a mismatched request, wrong tokens on the API and the
console, a digest the webhook refuses and one it takes, and bus messages
accepted, malformed and of an unknown type. Then /metrics is scraped and every
metric selector, label matcher, matched value, grouping label (`by`,
`without`, `on`, `ignoring`, `group_left`, `group_right`) and label a template
names (`$labels.X` in a rule, `{{X}}` in a legend) is checked against what
Herald exported:

    deploy/prometheus/alerts.yml        every rule's expr and annotations
    deploy/prometheus/alerts.test.yml   every input series and expr
    deploy/grafana/herald.json          every target's expr and legend, every variable's query

A grouping or template label must be on one of the expression's metrics (or be
the scrape target's `job` or `instance`); which aggregation it belongs to is not
worked out — promtool's unit tests check what an alert's labels really are.

Usage:

    deploy/check-metrics.py [--bin target/debug/herald] [--save-scrape FILE]
    deploy/check-metrics.py --metrics-file FILE      # check against a saved scrape
    deploy/check-metrics.py --self-test [--bin …|--metrics-file FILE]

--self-test checks the checker: doctored copies of the kit (a made-up metric, a
made-up label, a made-up grouping label, a histogram suffix on a gauge, …) must
each be refused, naming the culprit, and the kit as it stands must pass.

Python 3 standard library only. `nats-server` must be on PATH (Debian's
package), or pass --nats-server.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "deploy/prometheus/alerts.yml")
RULE_TESTS = os.path.join(ROOT, "deploy/prometheus/alerts.test.yml")
DASHBOARD = os.path.join(ROOT, "deploy/grafana/herald.json")

# Labels Prometheus itself puts on every scraped series (the scrape target's),
# so a rule may match or group by them although Herald's text has none.
TARGET_LABELS = {"instance", "job"}

# Labels whose values a deployment chooses (its version and name, its
# providers, templates and streams): a rule or a test may name any. Every other
# label's values are Herald's own (outcome, reason, result, verdict, code, …),
# and a value a rule matches must be one the workload below made Herald export.
OPEN_LABELS = {"version", "deployment", "provider", "template", "template_revision", "stream"}

# -- The exposition -----------------------------------------------------------


class Exported:
    """What one scrape of /metrics holds: per sample name, its labels and their values."""

    def __init__(self, text):
        self.samples = {}  # sample name -> {label -> set of values}
        self.types = {}  # family name -> counter|gauge|histogram|…
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split()
                if len(parts) >= 4 and parts[1] == "TYPE":
                    self.types[parts[2]] = parts[3]
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if not m:
                raise ValueError(f"unreadable exposition line: {line!r}")
            labels = self.samples.setdefault(m.group(1), {})
            for name, value in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""):
                labels.setdefault(name, set()).add(value)

    def histograms(self):
        return {name for name, kind in self.types.items() if kind == "histogram"}


# -- PromQL, scanned ----------------------------------------------------------

KEYWORDS_WITH_LABELS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
AGGREGATIONS = {
    "sum", "avg", "count", "min", "max", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group", "limitk", "limit_ratio",
}

PROMQL_TOKEN = re.compile(
    r"""(?P<ws>\s+|\#[^\n]*)
      | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<range>\[[^\]]*\])
      | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
      | (?P<num>[0-9][0-9a-zA-Z.]*|\.[0-9]+)
      | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
      | (?P<op>=~|!~|!=|==|<=|>=|[=<>+\-*/%^@{}(),])
    """,
    re.VERBOSE,
)


class Selector:
    def __init__(self, metric, matchers):
        self.metric = metric  # a name, or None for {…} without one
        self.matchers = matchers  # [(label, op, value)]


def unquote(s):
    quote, body = s[0], s[1:-1]
    if quote == "`":
        return body
    escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def tokens(expr):
    out, pos = [], 0
    while pos < len(expr):
        m = PROMQL_TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read PromQL at {expr[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            out.append((kind, m.group(kind)))
    return out


def scan(expr):
    """The selectors and the grouping labels of one PromQL expression."""
    toks = tokens(expr)
    selectors, grouping = [], []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "ident" and text.lower() in KEYWORDS_WITH_LABELS:
            i += 1
            if nxt == ("op", "("):
                i += 1
                while i < len(toks) and toks[i] != ("op", ")"):
                    if toks[i][0] == "ident":
                        grouping.append(toks[i][1])
                    i += 1
                i += 1
            continue
        if kind == "ident" and (text.lower() in KEYWORDS or text.lower() in AGGREGATIONS or nxt == ("op", "(")):
            i += 1
            continue
        if kind == "ident" or (kind == "op" and text == "{"):
            metric = text if kind == "ident" else None
            if kind == "ident":
                i += 1
            matchers = []
            if i < len(toks) and toks[i] == ("op", "{"):
                i += 1
                while i < len(toks) and toks[i] != ("op", "}"):
                    if toks[i][0] == "ident" and i + 2 < len(toks) and toks[i + 1][0] == "op":
                        label, op, value = toks[i][1], toks[i + 1][1], toks[i + 2]
                        matchers.append((label, op, unquote(value[1]) if value[0] == "str" else value[1]))
                        i += 3
                    else:
                        i += 1
                i += 1
            if metric is None:
                named = [v for (l, op, v) in matchers if l == "__name__" and op == "="]
                metric = named[0] if named else None
            selectors.append(Selector(metric, [m for m in matchers if m[0] != "__name__"]))
            continue
        i += 1
    return selectors, grouping


# -- The kit's documents --------------------------------------------------------


class Expr:
    """One PromQL expression found in the kit, with the labels its templates name."""

    def __init__(self, where, text, label_refs=(), kind="expr"):
        self.where, self.text, self.label_refs, self.kind = where, text, list(label_refs), kind


def yaml_scalars(text, keys, path):
    """(line number, key, value) of every `key: value` in `keys`: plain, quoted or
    block (`|`, `>`) scalars — the forms the kit writes. Anything else is an error,
    so no expression goes unchecked."""
    lines = text.split("\n")
    found = []
    i = 0
    pattern = re.compile(r"^(\s*)(?:-\s+)?(" + "|".join(keys) + r"):(?:\s+(.*))?$")
    while i < len(lines):
        m = pattern.match(lines[i])
        if not m:
            i += 1
            continue
        indent, key, rest = len(m.group(1)), m.group(2), (m.group(3) or "").strip()
        start = i + 1
        i += 1
        if rest[:1] in ("|", ">"):
            block = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            value = ("\n" if rest[0] == "|" else " ").join(block).strip()
        elif rest.startswith("'"):
            if not rest.endswith("'") or len(rest) < 2:
                raise ValueError(f"{path}:{start}: {key}: a quoted scalar must end on its line")
            value = rest[1:-1].replace("''", "'")
        elif rest.startswith('"'):
            if not rest.endswith('"') or len(rest) < 2:
                raise ValueError(f"{path}:{start}: {key}: a quoted scalar must end on its line")
            value = json.loads(rest)
        elif rest:
            value = re.sub(r"\s+#.*$", "", rest)
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
                if re.match(r"^\s*(-\s|[A-Za-z_]+:(\s|$))", lines[i]):
                    break
                value += " " + lines[i].strip()
                i += 1
        else:
            raise ValueError(f"{path}:{start}: {key}: no value on its line (write it plain, quoted or as a block scalar)")
        found.append((start, key, value))
    return found


def rule_exprs(path, text=None):
    text = open(path).read() if text is None else text
    name = os.path.relpath(path, ROOT)
    found = yaml_scalars(text, ["alert", "record", "expr", "summary", "description"], name)
    exprs, current = [], None
    for line, key, value in found:
        if key in ("alert", "record"):
            current = {"name": value, "line": line, "expr": None, "refs": []}
            exprs.append(current)
        elif current is None:
            raise ValueError(f"{name}:{line}: {key} outside a rule")
        elif key == "expr":
            current["expr"] = value
        else:
            current["refs"] += re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", value)
    out = []
    for r in exprs:
        if r["expr"] is None:
            raise ValueError(f"{name}:{r['line']}: rule {r['name']} has no expr")
        out.append(Expr(f"{name}:{r['line']} {r['name']}", r["expr"], r["refs"]))
    # Every `expr:` line belongs to a rule; none is left unread.
    if text.count("expr:") != len(out):
        raise ValueError(f"{name}: {text.count('expr:')} expr keys but {len(out)} rules read")
    return out


def rule_test_exprs(path, text=None):
    text = open(path).read() if text is None else text
    name = os.path.relpath(path, ROOT)
    out = []
    for line, key, value in yaml_scalars(text, ["series", "expr"], name):
        out.append(Expr(f"{name}:{line} {key}", value, kind="series" if key == "series" else "expr"))
    return out


def dashboard_exprs(path, text=None):
    text = open(path).read() if text is None else text
    name = os.path.relpath(path, ROOT)
    board = json.loads(text)
    out = []

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(board.get("panels", [])):
        for t in p.get("targets", []):
            if "expr" in t:
                refs = re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", t.get("legendFormat", ""))
                out.append(Expr(f"{name} panel {p.get('title', p.get('id'))!r} {t.get('refId', '')}", t["expr"], refs))
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\(\s*(?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q)
        if m:
            out.append(Expr(f"{name} variable {v.get('name')!r}", m.group(1) or "", [m.group(2)], kind="label_values"))
        elif q:
            out.append(Expr(f"{name} variable {v.get('name')!r}", q))
    return out


# -- The check ----------------------------------------------------------------


def labels_of(exported, metric):
    return set(exported.samples.get(metric, {})) | TARGET_LABELS


def literal_alternatives(value):
    """The literal values a `=~` matcher names, or None when it is a real pattern."""
    if re.fullmatch(r"[A-Za-z0-9_:.\-]+(\|[A-Za-z0-9_:.\-]+)*", value):
        return value.split("|")
    return None


def check(exported, exprs):
    problems = []
    histograms = exported.histograms()
    for e in exprs:
        try:
            selectors, grouping = scan(e.text)
        except ValueError as err:
            problems.append(f"{e.where}: {err}")
            continue
        metrics = list(dict.fromkeys(s.metric for s in selectors if s.metric))
        if e.kind == "label_values" and not metrics and e.text.strip() == "":
            known = set().union(*(set(v) for v in exported.samples.values())) | TARGET_LABELS
        else:
            known = set().union(*(labels_of(exported, m) for m in metrics)) if metrics else set(TARGET_LABELS)
        for s in selectors:
            if s.metric is None:
                problems.append(f"{e.where}: a selector without a metric name")
                continue
            if s.metric not in exported.samples:
                if s.metric in histograms:
                    problems.append(
                        f"{e.where}: {s.metric} is a histogram: select {s.metric}_bucket, _sum or _count"
                    )
                else:
                    problems.append(f"{e.where}: unknown metric {s.metric}")
                continue
            has = exported.samples[s.metric]
            for label, op, value in s.matchers:
                if label in TARGET_LABELS:
                    continue
                if label not in has:
                    problems.append(f"{e.where}: {s.metric} has no label {label}")
                    continue
                if label in OPEN_LABELS or "$" in value or op in ("!=", "!~") or value == "":
                    continue
                wanted = [value] if op == "=" else literal_alternatives(value)
                for v in wanted or []:
                    if v not in has[label]:
                        seen = ", ".join(sorted(has[label]))
                        problems.append(f'{e.where}: {s.metric}{{{label}="{v}"}}: no such value (seen: {seen})')
        for label in grouping:
            if label not in known:
                problems.append(f"{e.where}: grouping label {label} is on none of {', '.join(metrics) or 'its metrics'}")
        for label in e.label_refs:
            if label not in known:
                problems.append(f"{e.where}: label {label} (named by a template) is on none of {', '.join(metrics) or 'its metrics'}")
    return list(dict.fromkeys(problems))


def kit_exprs():
    return rule_exprs(RULES) + rule_test_exprs(RULE_TESTS) + dashboard_exprs(DASHBOARD)


# -- Fakes: the SMS providers and the ops webhook ---------------------------------

OK_PHONE = "+15550100001"
DEAD_PHONE = "+15550100099"  # refused for good by both: a dead letter
SLOW_PHONE = "+15550100077"  # answered by `primary` after the timeout the first time: `unknown`


class Fakes:
    def __init__(self, sms_timeout):
        self.lock = threading.Lock()
        self.seen_slow = set()
        self.ops_fail = False
        self.sms_timeout = sms_timeout
        fakes = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body):
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # Herald gave up waiting, as it should.

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path in ("/sms/primary", "/sms/backup"):
                    to = json.loads(body)["to"]
                    key = self.headers.get("idempotency-key", "")
                    if to == DEAD_PHONE:
                        return self.answer(400, {"error": "invalid_destination"})
                    if to == SLOW_PHONE and self.path == "/sms/primary":
                        with fakes.lock:
                            first = key not in fakes.seen_slow
                            fakes.seen_slow.add(key)
                        if first:
                            time.sleep(fakes.sms_timeout * 2.5)
                    return self.answer(200, {"id": "fake-" + key[:12]})
                if self.path == "/ops":
                    return self.answer(500 if fakes.ops_fail else 200, {"ok": not fakes.ops_fail})
                return self.answer(404, {"error": "no such path"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# -- NATS: a JetStream server of our own, and a publisher over its text protocol ---


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, probe, timeout=30.0, every=0.05):
    """Waits until probe() returns something true; fails naming what it waited for."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Exception as err:  # the state is not there yet: look again
            last = err
        time.sleep(every)
    raise SystemExit(f"check-metrics: timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


class Nats:
    def __init__(self, binary, workdir):
        self.port = free_port()
        self.log = open(os.path.join(workdir, "nats.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", os.path.join(workdir, "nats")],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_for("nats-server to listen", lambda: socket.create_connection(("127.0.0.1", self.port), 1).close() or True)
        self.url = f"nats://127.0.0.1:{self.port}"

    def publish(self, subject, payload):
        """A JetStream publish: waits for the stream's ack, so nothing is lost
        to a stream that is not there yet."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as s:
            f = s.makefile("rb")
            f.readline()  # INFO
            inbox = "_INBOX.check." + hashlib.sha256(payload).hexdigest()[:16]
            s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
            s.sendall(f"SUB {inbox} 1\r\n".encode())
            s.sendall(f"PUB {subject} {inbox} {len(payload)}\r\n".encode() + payload + b"\r\n")
            s.sendall(b"PING\r\n")
            while True:
                line = f.readline()
                if not line:
                    raise RuntimeError("NATS closed the connection")
                if line.startswith(b"PING"):
                    s.sendall(b"PONG\r\n")
                elif line.startswith(b"MSG"):
                    size = int(line.split()[-1])
                    ack = json.loads(f.read(size + 2)[:size])
                    if "error" in ack:
                        raise RuntimeError(f"JetStream refused the message: {ack['error']}")
                    return ack
                elif line.startswith(b"-ERR"):
                    raise RuntimeError(line.decode().strip())

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


# -- Herald -------------------------------------------------------------------

TOKEN = "check-metrics-token-0123456789"
RECEIPT_SECRET = "whsec_" + base64.b64encode(b"check-metrics receipt key 32 bytes!").decode()


def herald_config(port, workdir, fakes, nats):
    sha = hashlib.sha256(TOKEN.encode()).hexdigest()
    fake = f"http://127.0.0.1:{fakes.port}"
    return f"""
listen = "127.0.0.1:{port}"
database_url = "sqlite://{workdir}/herald.db"
deployment = "check-metrics"

[retry]
attempts = 4
base = "200ms"
max = "1s"

[worker]
poll_interval = "50ms"

[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms", "email", "in_app"]
failover_on_unknown = true

[channels.email]
sink = "{workdir}/outbox"

[channels.sms]
providers = ["primary", "backup"]
breaker_failures = 1
breaker_cool_down = "1h"

[channels.sms.named.primary]
url = "{fake}/sms/primary"
timeout = "{fakes.sms_timeout}s"

[channels.sms.named.backup]
url = "{fake}/sms/backup"
timeout = "{fakes.sms_timeout}s"

[receipts.generic]
secret = "{RECEIPT_SECRET}"

[ops]
digest_webhook = "{fake}/ops"

[[auth.tokens]]
name = "check-metrics"
tenant = "acme"
token_sha256 = "{sha}"
scopes = ["events:write", "intents:read", "recipients:write", "ops", "admin"]

[[ingest.nats]]
url = "{nats.url}"
stream = "check_events"
subjects = ["check.events.>"]
consumer = "herald"
tenant = "acme"

[publish.nats]
url = "{nats.url}"
stream = "check_status"
interval = "50ms"
"""


class Herald:
    def __init__(self, binary, workdir, fakes, nats):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = os.path.join(workdir, "herald.toml")
        with open(config, "w") as f:
            f.write(herald_config(self.port, workdir, fakes, nats))
        self.log_path = os.path.join(workdir, "herald.log")
        self.log = open(self.log_path, "w")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env["HERALD_LOG"] = "warn"
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", config], stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=workdir
        )

        def up():
            if self.proc.poll() is not None:
                raise SystemExit(f"check-metrics: herald exited with {self.proc.returncode}:\n{self.log_tail()}")
            return self.call("GET", "/healthz", token=None)[0] == 200

        wait_for("herald to answer /healthz", up)

    def log_tail(self):
        self.log.flush()
        with open(self.log_path) as f:
            return "".join(f.readlines()[-30:])

    def call(self, method, path, body=None, token=TOKEN, headers=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None and "content-type" not in {k.lower() for k in (headers or {})}:
            req.add_header("content-type", "application/json")
        if token:
            req.add_header("authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def expect(self, status, method, path, **kw):
        got, body, headers = self.call(method, path, **kw)
        if got != status:
            raise SystemExit(f"check-metrics: {method} {path}: expected {status}, got {got}: {body[:300]!r}")
        return body, headers

    def scrape(self):
        return self.expect(200, "GET", "/metrics")[0].decode()

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def event(entity, recipients, event_type="purchase_order.approved", data=None):
    return {
        "type": event_type,
        "entity": {"type": "purchase_order", "id": entity, "version": 1},
        "occurred_at": "2026-11-29T10:15:00Z",
        "data": data if data is not None else {"po": {"number": entity, "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": recipients,
    }


def signed_receipt(herald, body):
    data = json.dumps(body).encode()
    msg_id, ts = f"msg_{body['key'][:12]}", str(int(time.time()))
    key = base64.b64decode(RECEIPT_SECRET[len("whsec_"):])
    sig = base64.b64encode(hmac.new(key, f"{msg_id}.{ts}.".encode() + data, hashlib.sha256).digest()).decode()
    headers = {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": f"v1,{sig}"}
    return herald.expect(200, "POST", "/v1/receipts/generic", raw=data, token=None, headers=headers)


def sample_value(text, name, **labels):
    """The value of the one sample of `name` with these labels, or None."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def workload(herald, fakes, nats):
    """Makes every kind of series appear, waiting for each state it causes."""

    def post(entity, recipients, status=202, key=None, data=None):
        headers = {"idempotency-key": key} if key else None
        body, _ = herald.expect(status, "POST", "/v1/events", body=event(entity, recipients, data=data), headers=headers)
        return json.loads(body).get("intents")

    def final(intent):
        def probe():
            body, _ = herald.expect(200, "GET", f"/v1/intents/{intent['id']}")
            got = json.loads(body)
            return got if got["state"] in ("sent", "dead") else None
        return wait_for(f"intent {intent['channel']} → {intent['recipient_id']} to end", probe)

    def sms_of(intents):
        return final(next(i for i in intents if i["channel"] == "sms"))

    # First, alone, so that `primary` (first in the list, its circuit closed)
    # takes it: its answer comes after the timeout (unknown), which opens that
    # circuit; the route fails over on unknown, so `backup` accepts the retry —
    # a possible duplicate.
    slow = sms_of(post("PO-1", [{"id": "u-slow", "phone": SLOW_PHONE}]))
    outcomes = [(a["provider"], a["outcome"]) for a in slow["attempts"]]
    if slow["state"] != "sent" or ("primary", "unknown") not in outcomes:
        raise SystemExit(f"check-metrics: the slow number did not go as planned: {outcomes}")

    # Then, with `primary` skipped, one accepted (with an email and an in-app
    # card) and one refused for good (a dead letter).
    recipients = [{"id": "u-ok", "phone": OK_PHONE, "email": "ok@example.com"}, {"id": "u-dead", "phone": DEAD_PHONE}]
    intents = post("PO-2", recipients, key="check-2")
    ended = {(i["channel"], i["recipient_id"]): final(i) for i in intents if i["decision"] == "send"}
    sms = {r: ended[("sms", r)] for r in ("u-ok", "u-dead")}
    if sms["u-ok"]["state"] != "sent" or sms["u-dead"]["state"] != "dead":
        raise SystemExit(f"check-metrics: the fakes did not do what was planned: {json.dumps(sms)[:600]}")
    # The same request again (a replay), and its key with another body (a mismatch).
    post("PO-2", recipients, status=200, key="check-2")
    post("PO-3", recipients, status=422, key="check-2")

    # An event its template cannot render (no approver): dead at once, template_error.
    broken = post("PO-4", [{"id": "u-ok", "phone": OK_PHONE}], data={"po": {"number": "PO-4", "total": "1"}})
    if {(i["state"], i["reason"]) for i in broken if i["decision"] == "send"} != {("dead", "template_error")}:
        raise SystemExit(f"check-metrics: the broken event was not a template error: {broken}")

    # A delivery receipt for the one that was sent.
    signed_receipt(herald, {"key": sms["u-ok"]["key"], "status": "delivered"})

    # Authentication failures: a token Herald does not know, on the API and in the console.
    herald.expect(401, "GET", "/v1/dead-letters", token="not-a-token")
    form, headers = herald.expect(200, "GET", "/console/sign-in", token=None)
    csrf = re.search(rb'name="csrf"\s+value="([^"]+)"', form).group(1).decode()
    cookie = "; ".join(c.split(";")[0] for c in headers.get_all("set-cookie") or [])
    sign_in = urllib.parse.urlencode({"token": "not-a-token", "csrf": csrf}).encode()
    status, _, _ = herald.call(
        "POST", "/console/sign-in", raw=sign_in, token=None,
        headers={"content-type": "application/x-www-form-urlencoded", "cookie": cookie},
    )
    if status not in (401, 403):
        raise SystemExit(f"check-metrics: a wrong console token was answered {status}")

    # The dead-letter digest: once refused by the webhook, once taken.
    fakes.ops_fail = True
    herald.expect(502, "POST", "/v1/ops/dlq-digest")
    fakes.ops_fail = False
    herald.expect(200, "POST", "/v1/ops/dlq-digest")

    # The bus: one event, and two messages it rejects (not JSON; an unknown event type).
    nats.publish("check.events.po", json.dumps(event("PO-BUS", recipients[:1])).encode())
    nats.publish("check.events.po", b"this is not json")
    nats.publish("check.events.po", json.dumps(event("PO-BUS-2", recipients[:1], event_type="no.such.event")).encode())

    def settled():
        text = herald.scrape()
        wanted = [
            ("herald_bus_messages_total", {"verdict": "accepted"}),
            ("herald_bus_messages_total", {"verdict": "rejected"}),
            ("herald_rejected_messages_total", {"code": "malformed_json"}),
            ("herald_rejected_messages_total", {"code": "unknown_event_type"}),
            ("herald_dead_letters_total", {"reason": "template_error"}),
            ("herald_publications_total", {"result": "published"}),
            ("herald_publications_lag_seconds", {}),
            ("herald_receipts_total", {"result": "applied"}),
            ("herald_auth_failures_total", {"surface": "console"}),
            ("herald_ops_digests_total", {"result": "failed"}),
            ("herald_provider_circuit_open", {"provider": "primary"}),
            ("herald_possible_duplicates_total", {"provider": "backup"}),
        ]
        missing = [f"{n}{l}" for n, l in wanted if sample_value(text, n, **l) is None]
        published = sample_value(text, "herald_publications_total", result="published") or 0
        if missing or published < 1:
            raise RuntimeError(f"not yet: {', '.join(missing) or 'nothing published'}")
        return text

    return wait_for("the bus, the publisher and the counters to show the workload", settled)


def run_herald(args):
    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        raise SystemExit(f"check-metrics: no Herald binary at {args.bin} (cargo build first, or pass --bin)")
    nats_bin = shutil.which(args.nats_server)
    if not nats_bin:
        raise SystemExit(f"check-metrics: {args.nats_server} not found (apt-get install nats-server, or pass --nats-server)")
    workdir = tempfile.mkdtemp(prefix="herald-check-metrics-")
    fakes = Fakes(sms_timeout=1)
    nats = herald = None
    try:
        nats = Nats(nats_bin, workdir)
        herald = Herald(os.path.abspath(args.bin), workdir, fakes, nats)
        return workload(herald, fakes, nats)
    except SystemExit:
        if herald:
            sys.stderr.write(herald.log_tail())
        raise
    finally:
        if herald:
            herald.close()
        if nats:
            nats.close()
        fakes.close()
        shutil.rmtree(workdir, ignore_errors=True)


# -- Self-test: the checker refuses what it should ---------------------------------


def doctored_cases():
    """(what, document, original text, doctored text, the words the refusal must name)."""
    rules = open(RULES).read()
    tests = open(RULE_TESTS).read()
    board = open(DASHBOARD).read()
    cases = []

    def swap(doc, text, old, new, what, names):
        if old not in text:
            raise SystemExit(f"check-metrics: self-test: {old!r} is not in {doc}; update the self-test")
        cases.append((what, doc, text.replace(old, new, 1), names))

    swap("rules", rules, "herald_queue_oldest_due_age_seconds", "herald_queue_oldest_age_seconds",
         "a made-up metric in a rule", ["unknown metric herald_queue_oldest_age_seconds"])
    swap("rules", rules, 'outcome="unknown"', 'result="unknown"',
         "a made-up label in a rule's matcher", ["herald_attempts_total has no label result"])
    swap("rules", rules, 'outcome="unknown"', 'outcome="unknwon"',
         "a made-up value in a rule's matcher", ['herald_attempts_total{outcome="unknwon"}: no such value'])
    swap("rules", rules, "by (job, provider)", "by (job, provider_name)",
         "a made-up grouping label in a rule", ["grouping label provider_name"])
    swap("rules", rules, "$labels.provider", "$labels.vendor",
         "a made-up label in a rule's annotation", ["label vendor (named by a template)"])
    swap("dashboard", board, "herald_attempt_duration_seconds_bucket", "herald_attempt_duration_seconds",
         "a histogram selected without its suffix", ["herald_attempt_duration_seconds is a histogram"])
    swap("rule tests", tests, "herald_rejected_messages_total{", "herald_rejected_message_total{",
         "a made-up metric in a test's series", ["unknown metric herald_rejected_message_total"])
    swap("rule tests", tests, 'code="malformed_json"', 'code="malformed"',
         "a made-up value in a test's series", ['herald_rejected_messages_total{code="malformed"}: no such value'])
    swap("dashboard", board, "herald_queue_depth{", "herald_queue_depth_bucket{",
         "a histogram suffix on a gauge in the dashboard", ["unknown metric herald_queue_depth_bucket"])
    swap("dashboard", board, "by (channel, outcome)", "by (channel, result)",
         "a made-up grouping label in the dashboard", ["grouping label result"])
    swap("dashboard", board, "{{provider}}", "{{gateway}}",
         "a made-up label in a legend", ["label gateway (named by a template)"])
    return cases


def self_test(exported):
    failures = []
    clean = check(exported, kit_exprs())
    if clean:
        failures.append("the kit as it stands is refused:\n  " + "\n  ".join(clean))
    for what, doc, text, names in doctored_cases():
        exprs = {
            "rules": lambda: rule_exprs(RULES, text) + rule_test_exprs(RULE_TESTS) + dashboard_exprs(DASHBOARD),
            "rule tests": lambda: rule_exprs(RULES) + rule_test_exprs(RULE_TESTS, text) + dashboard_exprs(DASHBOARD),
            "dashboard": lambda: rule_exprs(RULES) + rule_test_exprs(RULE_TESTS) + dashboard_exprs(DASHBOARD, text),
        }[doc]()
        problems = check(exported, exprs)
        missed = [n for n in names if not any(n in p for p in problems)]
        if missed:
            failures.append(f"{what}: not caught (wanted {missed}; got {problems})")
        else:
            print(f"check-metrics: self-test: {what}: caught — {next(p for p in problems if names[0] in p)}")
    # The scanner reads what Grafana and promtool write.
    sel, grouping = scan('sum by (le, channel) (rate(herald_attempt_duration_seconds_bucket{provider=~"$provider"}[$__rate_interval]))')
    if [s.metric for s in sel] != ["herald_attempt_duration_seconds_bucket"] or grouping != ["le", "channel"]:
        failures.append(f"the scanner misread a Grafana query: {[s.metric for s in sel]}, {grouping}")
    if failures:
        raise SystemExit("check-metrics: SELF-TEST FAILED:\n" + "\n".join(failures))
    print(f"check-metrics: self-test passed ({len(doctored_cases())} doctored copies refused, the kit accepted)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/debug/herald", help="the Herald binary to run")
    ap.add_argument("--nats-server", default="nats-server", help="the nats-server binary")
    ap.add_argument("--metrics-file", help="check against this saved scrape instead of running Herald")
    ap.add_argument("--save-scrape", help="write the scrape here")
    ap.add_argument("--self-test", action="store_true", help="check that doctored copies of the kit are refused")
    ap.add_argument("--print", action="store_true", help="print the scrape")
    args = ap.parse_args()

    if args.metrics_file:
        text = open(args.metrics_file).read()
    else:
        text = run_herald(args)
    if args.save_scrape:
        with open(args.save_scrape, "w") as f:
            f.write(text)
    if args.print:
        print(text)
    exported = Exported(text)
    if args.self_test:
        return self_test(exported)
    exprs = kit_exprs()
    problems = check(exported, exprs)
    if problems:
        print("check-metrics: the kit names what Herald does not export:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        sys.exit(1)
    names = {s.metric for e in exprs for s in scan(e.text)[0]}
    print(f"check-metrics: {len(exprs)} expressions, {len(names)} metrics: every metric, label and value is exported")


if __name__ == "__main__":
    main()
