#!/usr/bin/env python3
"""The table scripts/perf-beside ends with: each Herald setup and build beside the BullMQ
notifier of the same run, as ratios. Usage: perf-ratios.py SUMMARY.txt

A figure line is `label_metric value unit`; labels are `bullmq_<pass>` and
`herald_<setup>_<build><round>_<pass>` (pass: distinct, storm, faults)."""
import os
import re
import sys
from collections import defaultdict

figures = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) >= 2:
        try:
            figures[parts[0]] = float(parts[1])
        except ValueError:
            pass

PASSES = ("distinct", "storm", "faults")
# herald_<setup>_<A|B><round>_<pass>_<metric>; bullmq<round>_<pass>_<metric> (no round: a
# summary from before the notifier ran in every round, one notifier run for all)
HERALD = re.compile(r"^herald_(.+)_([A-F])(\d+)_(distinct|storm|faults)_(.+)$")
NOTIFIER = re.compile(r"^bullmq(\d*)_(distinct|storm|faults)_(.+)$")
runs = defaultdict(lambda: defaultdict(dict))  # (setup, build) -> round -> "pass_metric" -> value
bullmq = defaultdict(dict)  # round -> "pass_metric" -> value
for name, value in figures.items():
    if m := HERALD.match(name):
        setup, build, round_, pass_, metric = m.groups()
        runs[(setup, build)][round_][f"{pass_}_{metric}"] = value
    elif m := NOTIFIER.match(name):
        round_, pass_, metric = m.groups()
        bullmq[round_][f"{pass_}_{metric}"] = value


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def averaged(rounds):
    """A system's figure by name, the mean of its rounds' runs."""
    return lambda key: mean([got.get(key) for got in rounds.values()])


notifier = averaged(bullmq)


def notifier_of(round_, key):
    """The notifier's figure in one round: the one its Herald runs are divided by."""
    got = bullmq.get(round_) or (bullmq.get("") if len(bullmq) == 1 else None) or {}
    return got.get(key)


def ratios(rounds, key):
    """Each round's Herald figure over the same round's notifier figure."""
    out = []
    for round_, got in sorted(rounds.items(), key=lambda kv: int(kv[0])):
        h, n = got.get(key), notifier_of(round_, key)
        if h is not None and n:
            out.append(h / n)
    return out


def cpu_per_1k(get, pass_):
    """CPU seconds per 1,000 notifications: the system under test, and Postgres + Redis."""
    sent = get(f"{pass_}_sink_accepted")
    if not sent:
        return None, None
    own = get(f"{pass_}_sut_cpu")
    db = (get(f"{pass_}_cpu_postgres") or 0.0) + (get(f"{pass_}_cpu_redis_server") or 0.0)
    return (own / sent * 1000 if own is not None else None), db / sent * 1000


def faults_cell(sent, duplicates):
    """Sends that arrived under the faults pass, and how many of them were second sends."""
    return "—" if sent is None else f"{sent:,.0f}/{duplicates or 0:,.0f}"


def fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def duplicates(rounds):
    """Second sends in one system's runs: a distinct run's repeats, and a storm's sends past its one."""
    return sum((got.get("distinct_sink_duplicate_sends") or 0) + max((got.get("storm_sink_accepted") or 1) - 1, 0)
               for got in rounds)


def ratio(values):
    return "—" if not values else f"{mean(values):.2f}×"


rows = [("setup", "build", "e2e/s", "×", "storm/s", "×", "p99 ms", "×", "RSS MiB", "×",
         "CPU s/1k own+pg/redis", "dup", "503s e2e/s", "×", "503s sent/dup")]
bull = notifier
own, db = cpu_per_1k(notifier, "distinct")
rows.append(("BullMQ notifier", "", fmt(bull("distinct_e2e_rate")), "1", fmt(bull("storm_ingest_rate")), "1",
             fmt(bull("distinct_ingest_p99"), "{:.1f}"), "1", fmt(bull("distinct_peak_rss_mib"), "{:.0f}"), "1",
             f"{fmt(own, '{:.2f}')}+{fmt(db, '{:.2f}')}", fmt(duplicates(bullmq.values())),
             fmt(bull("faults_e2e_rate")), "1" if bull("faults_e2e_rate") else "—",
             faults_cell(bull("faults_sink_accepted"), bull("faults_sink_duplicate_sends"))))
for (setup, build), rounds in sorted(runs.items()):
    get = averaged(rounds)
    e2e, storm, p99, rss = get("distinct_e2e_rate"), get("storm_ingest_rate"), get("distinct_ingest_p99"), get("distinct_peak_rss_mib")
    own, db = cpu_per_1k(get, "distinct")
    rows.append((setup, build, fmt(e2e), ratio(ratios(rounds, "distinct_e2e_rate")), fmt(storm),
                 ratio(ratios(rounds, "storm_ingest_rate")), fmt(p99, "{:.1f}"), ratio(ratios(rounds, "distinct_ingest_p99")),
                 fmt(rss, "{:.0f}"), ratio(ratios(rounds, "distinct_peak_rss_mib")),
                 f"{fmt(own, '{:.2f}')}+{fmt(db, '{:.2f}')}", fmt(duplicates(rounds.values())), fmt(get("faults_e2e_rate")),
                 ratio(ratios(rounds, "faults_e2e_rate")),
                 faults_cell(get("faults_sink_accepted"), get("faults_sink_duplicate_sends"))))

widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
print("# Herald beside the BullMQ notifier, one run; figures are the mean of the rounds, × the mean of each "
      "round's Herald ÷ the same round's notifier")
for r in rows:
    print("  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
if runs and max(len(rounds) for rounds in runs.values()) > 1:
    for what, key in (("end to end", "distinct_e2e_rate"), ("ingest p99", "distinct_ingest_p99")):
        print(f"# {what} × by round: " + "; ".join(
            f"{setup} {build} " + " · ".join(f"{r:.2f}" for r in ratios(rounds, key))
            for (setup, build), rounds in sorted(runs.items())))


def written(get, pass_, per):
    """What a system wrote for a notification (a distinct run) or a post (a storm): Postgres's
    WAL, its records by kind where pg_waldump could read them, and Redis's commands."""
    n = get(f"{pass_}_{per}")
    wal, cmds = get(f"{pass_}_wal_bytes"), get(f"{pass_}_redis_commands")
    if not n or wal is None:
        return None
    out = f"{wal / n:,.0f} B of WAL"
    rows = get(f"{pass_}_wal_row_versions")
    if rows is not None:
        each = lambda k: (get(f"{pass_}_wal_{k}") or 0) / n  # noqa: E731
        out += (f" ({each('row_versions'):.1f} row versions, {each('hot_updates'):.1f} of them HOT;"
                f" {each('rows_deleted'):.1f} deleted, {each('rows_locked'):.1f} locked;"
                f" {each('index_entries'):.1f} index entries; {each('commits'):.2f} commits;"
                f" {each('fpi_bytes'):,.0f} B of full pages)")
    return out + f" + {cmds / n:.1f} Redis commands"


def cpu_parts(get):
    """CPU ms a notification of a distinct run: the system's processes, Postgres, Redis."""
    sent = get("distinct_sink_accepted")
    if not sent:
        return None
    part = lambda k: 1000 * (get(f"distinct_{k}") or 0.0) / sent  # noqa: E731
    return f"CPU {part('sut_cpu'):.3f} ms own, {part('cpu_postgres'):.3f} Postgres, {part('cpu_redis_server'):.3f} Redis"


# A SQLite setup's writes are in its own file, not Postgres's WAL: not counted here.
systems = [("BullMQ notifier", notifier)] + [
    (f"{setup} {build}", averaged(rounds)) for (setup, build), rounds in sorted(runs.items()) if setup.startswith("pg")]
if any(written(get, "distinct", "sink_accepted") for _, get in systems):
    print("# what each wrote (durably: Postgres's WAL; in memory: Redis), and its CPU by process: a notification of a "
          "distinct run; a post of a storm")
    for who, get in systems:
        distinct, storm = written(get, "distinct", "sink_accepted"), written(get, "storm", "requests")
        if distinct or storm:
            print(f"#   {who}: {distinct or '—'}; {cpu_parts(get) or ''}; storm {storm or '—'}")
every_run = [(f"notifier round {r or 1}", got) for r, got in sorted(bullmq.items())] + [
    (f"{setup} {build}{r}", got) for (setup, build), rounds in sorted(runs.items()) for r, got in sorted(rounds.items())]
for who, got in every_run:
    for p in PASSES:
        if p != "storm" and got.get(f"{p}_requests") and (got.get(f"{p}_sink_accepted") or 0) < got[f"{p}_requests"]:
            print(f"# INCOMPLETE {who}: {p} sent {fmt(got.get(p + '_sink_accepted'))} of {fmt(got[p + '_requests'])}")

floor = figures.get("floor_pg_cpu_per_notification")
if floor is not None:
    sent = notifier("distinct_sink_accepted")
    whole = sum(notifier(f"distinct_{k}") or 0.0 for k in ("sut_cpu", "cpu_postgres", "cpu_redis_server"))
    if sent:
        per = 1000 * whole / sent
        print(f"# floor: the rows Herald's promises require cost Postgres {floor:.3f} ms a notification at best "
              f"(scripts/perf-floor, batches of 50); the notifier's whole stack (process, Postgres, Redis) {per:.3f} ms.")
        for (setup, build), rounds in sorted(runs.items()):
            own, _ = cpu_per_1k(averaged(rounds), "distinct")
            if own is not None and setup.startswith("pg"):
                # Every core busy with nothing but Herald's own work and the floor's
                # Postgres work: a ceiling whatever the notifier's own bound is.
                ceiling = os.cpu_count() * 1000 / (floor + own)
                rate = notifier("distinct_e2e_rate")
                print(f"#   {setup} {build}: with Herald's own {own:.3f} ms, {os.cpu_count()} cores busy with nothing "
                      f"else carry at most {ceiling:.0f} notifications/s: {ceiling / rate:.2f}x the notifier's "
                      f"{rate:.0f}/s of this run")

sqlite_floor = figures.get("floor_sqlite_rate")
rate = notifier("distinct_e2e_rate")
if sqlite_floor is not None and rate:
    print(f"# SQLite floor: its one writer commits the rows Herald's promises require for at most {sqlite_floor:.0f} "
          f"notifications/s (scripts/perf-floor-sqlite, batches of 32, nothing else paid for: "
          f"{figures.get('floor_sqlite_writer_cpu_per_notification', 0):.3f} ms CPU a notification, "
          f"writer {figures.get('floor_sqlite_writer_busy', 0):.0f} % busy); "
          f"so SQLite end to end cannot pass {sqlite_floor / rate:.2f}x the notifier on this host")
