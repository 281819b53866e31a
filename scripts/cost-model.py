#!/usr/bin/env python3
"""What one thread costs threadbox's control plane on AWS in a month, beside the E2B compute it
manages, for a stated usage profile. Standard library only.

    python3 scripts/cost-model.py                 # the default profile, as a table
    python3 scripts/cost-model.py --json          # the same figures as JSON
    python3 scripts/cost-model.py --check         # the table, then fail unless the ratio is < 1%
    python3 scripts/cost-model.py --execs-per-burst 40 --bursts-per-day 8 --threads 200

docs/cost.md explains the model: the dated price table (PRICES below, the same figures), where
each operation's request counts come from (OPERATIONS below), and the profile.
"""

import argparse
import json
import sys

# --- Prices: US East (N. Virginia), on-demand list prices, free tiers ignored. Dated 2026-11-26;
# docs/cost.md has the table with its sources. Keep the two in step.
PRICES_DATE = "2026-11-26"
PRICES = {
    "dynamodb_per_million_wru": 0.625,
    "dynamodb_per_million_rru": 0.125,
    "sqs_fifo_per_million_requests": 0.50,
    "lambda_per_million_requests": 0.20,
    "lambda_arm64_per_gb_second": 0.0000133334,
    "lambda_x86_per_gb_second": 0.0000166667,
    "apigw_http_per_million_requests": 1.00,
    "apigw_ws_per_million_messages": 1.00,
    "apigw_ws_per_million_connection_minutes": 0.25,
    # The template's janitor schedule is an EventBridge scheduled rule (`Type: Schedule`); priced
    # at EventBridge Scheduler's per-invocation rate as an upper bound.
    "eventbridge_per_million_invocations": 1.00,
    "cloudwatch_logs_per_gb_ingested": 0.50,
    # E2B, https://e2b.dev/docs/faq/calculate-sandbox-price: $0.000014 per vCPU-second and
    # $0.0000045 per GiB-second while running; paused and killed sandboxes are not billed.
    "e2b_per_vcpu_hour": 0.0504,
    "e2b_per_gib_hour": 0.0162,
}

# --- The functions, as infra/template.yaml sizes them (Globals: arm64, 256 MB; sandbox-api and
# worker 512 MB). The architecture picks the GB-second price.
ARCHITECTURE = "arm64"
LAMBDA_MEMORY_MB = {
    "resolve-session": 256,
    "pause": 256,
    "resume": 256,
    "sandbox-api": 512,
    "janitor": 256,
    "fanout": 256,
    "slack-events": 256,
    "worker": 512,
    "ws": 256,
}

# --- Requests per operation. Every DynamoDB item threadbox writes is under 1 KB (a session item
# is 192 bytes on average, BENCHMARKS.md) and every read under 4 KB, so:
#   GetItem (strongly consistent)             1 RRU
#   conditional PutItem of a session          1 WRU, + 2 on the `due` index (its key, the next
#                                             action's time, moves on every write)
#   a state change: TransactWriteItems of the session and its event (the outbox)
#                                             2 + 2 WRU (transactional writes count double),
#                                             + 2 on `due`, + 1 on `unsent` (the new event)
#   marking the event sent (UpdateItem)       1 WRU, + 1 on `unsent` (the entry leaves it)
# Counts marked "measured" are BENCHMARKS.md's (store round trips counted by the stores); the rest
# are read off the use cases (shared/src/usecases/*.rs) and adapters.
OPERATIONS = {
    # POST /v1/threads/{id}/resolve on an active thread: one read, one conditional write
    # (measured: 1.00 read + 1.00 write per call on SQLite and on DynamoDB via moto).
    "resolve_active": {
        "rru": 1, "wru": 1 + 2, "http": 1,
        "lambda": [("resolve-session", 0.030)],
    },
    # A command on an active thread (POST /v1/threads/{id}/exec, or a Slack code block through the
    # worker): acquire a hold (a resolve: 1 read + 1 write) and release it (1 read + 1 write),
    # holds.rs `with_sandbox`. The function waits for the command, so its duration is billed:
    # see the profile's command seconds (added per exec below).
    "exec_active": {
        "rru": 2, "wru": 2 * (1 + 2), "http": 1,
        "lambda": [("sandbox-api", 0.050)],
    },
    # The first resolve: the record is read (a miss), the `creating` record and its event are
    # inserted (a transaction: 7 WRU, + 1 on the `by_thread` listing index for a new thread), the
    # event is sent and marked; then `creating → active` with its event, sent and marked.
    # E2B's create takes about a second, which the function waits for.
    "resolve_new": {
        "rru": 1, "wru": (7 + 1) + 2 + 7 + 2, "sqs": 2, "events": 2, "http": 1,
        "lambda": [("resolve-session", 1.5)],
    },
    # One pause (the janitor's idle pause or a user's): the claim `active → pausing` and the
    # result `pausing → paused`, each a transaction with its event, each event sent and marked
    # (measured: 4 writes per pause in the 100,000-session sweep); the due-index read is the
    # sweep's share (measured: 32 RRU for 1,000 due, 0.032 per due session) plus a load. E2B's
    # pause (a memory snapshot) takes a few seconds, which the janitor waits for.
    "pause": {
        "rru": 1 + 0.032, "wru": 2 * (7 + 2), "sqs": 2, "events": 2,
        "lambda": [("janitor", 3.0)],
    },
    # One resume (the next command on a paused thread): a load, `paused → resuming` and
    # `resuming → active`, each with its event, sent and marked; E2B's connect takes about a
    # second. Its HTTP request is the command's own (counted under exec_active).
    "resume": {
        "rru": 1, "wru": 2 * (7 + 2), "sqs": 2, "events": 2,
        "lambda": [("sandbox-api", 1.0)],
    },
    # Retention: `paused → deleting → destroyed`, each with its event.
    "destroy": {
        "rru": 1 + 0.032, "wru": 2 * (7 + 2), "sqs": 2, "events": 2,
        "lambda": [("janitor", 0.5)],
    },
    # A command from Slack: slack-events verifies the message, drops duplicates (a conditional
    # put on the dedupe table), counts it against the rate limits (a thread and a team window:
    # 2 updates) and enqueues it for the worker (one FIFO send, one receive and one delete); the
    # worker runs the command through the same use case as exec_active (hold acquired and
    # released: 2 reads, 2 writes) and waits for it (the command's seconds are added).
    "slack_message": {
        "rru": 2, "wru": (1 + 2) + 2 * (1 + 2), "sqs": 3, "http": 1,
        "lambda": [("slack-events", 0.030), ("worker", 0.050)],
    },
}

# Per lifecycle event, per fan-out target: the dedupe check (1 RRU) and record (1 WRU), and the
# target's own work. The lifecycle queue's receive and delete are per event (batches of one at a
# thread's pace), and the fan-out function runs once per event.
FANOUT_PER_EVENT = {"sqs": 2, "lambda": [("fanout", 0.25)]}
FANOUT_TARGETS = {
    # The thread's Slack status message: its record read and written, one chat.update (free).
    "slack_status": {"rru": 1 + 1, "wru": 1 + 1},
    # Live subscribers: who subscribes to the thread (a query of the by_thread index) and one
    # PostToConnection per connection (a WebSocket message each).
    "subscribers": {"rru": 1 + 0.5, "wru": 1, "ws_messages_per_subscriber": 1},
}

# What a deployment pays whoever uses it, shared by its threads.
FIXED_PER_MONTH = {
    # The janitor, every minute: one invocation and its empty index queries (8 `due` shards and
    # 8 `unsent` shards at the 0.5 RRU minimum each: BENCHMARKS.md's fixed 4 + the due shards).
    "janitor_invocations": 60 * 24 * 30,
    "janitor_seconds": 0.2,
    "janitor_rru_per_run": 16 * 0.5,
    # Lambda's SQS pollers: long polls (20 s) by about 5 pollers per consumed queue, on the
    # lifecycle and work queues, answered or empty alike.
    "sqs_poll_requests": 2 * 5 * 3 * 60 * 24 * 30,
}

DEFAULT_PROFILE = {
    "threads": 1000,
    "active_days": 20,
    "bursts_per_day": 4,
    "execs_per_burst": 15,
    "command_seconds": 2.0,
    "burst_minutes": 20.0,
    "idle_pause_minutes": 10.0,
    "slack_share": 0.5,
    "subscriber_connections": 1.0,
    "ws_connection_hours": 20.0,
    "log_bytes_per_invocation": 1000,
    "vcpus": 2.0,
    "memory_gib": 0.5,
}


def lambda_cost(calls, seconds_extra=0.0):
    """Dollars and invocations for a list of (function, seconds) invocations."""
    gb_second = PRICES["lambda_%s_per_gb_second" % ARCHITECTURE]
    dollars, invocations = 0.0, 0
    for function, seconds in calls:
        gb = LAMBDA_MEMORY_MB[function] / 1024.0
        dollars += (seconds + seconds_extra) * gb * gb_second
        dollars += PRICES["lambda_per_million_requests"] / 1e6
        invocations += 1
    return dollars, invocations


def model(p):
    """The thread-month: control-plane dollars by service, and the compute beside them."""
    bursts = p["active_days"] * p["bursts_per_day"]
    execs = bursts * p["execs_per_burst"]
    counts = {
        "resolve_new": 1,
        "exec_active": execs * (1 - p["slack_share"]),
        "pause": bursts,
        "resume": bursts - 1,
        "destroy": 1,
        # The other commands arrive as Slack messages.
        "slack_message": execs * p["slack_share"],
    }
    lines = {k: 0.0 for k in (
        "dynamodb", "sqs", "lambda_requests_and_duration", "apigw_http", "apigw_websocket",
        "cloudwatch_logs", "eventbridge")}
    invocations = 0.0
    events = 0.0
    rru = wru = 0.0
    for name, n in counts.items():
        op = OPERATIONS[name]
        rru += n * op.get("rru", 0)
        wru += n * op.get("wru", 0)
        lines["sqs"] += n * op.get("sqs", 0) * PRICES["sqs_fifo_per_million_requests"] / 1e6
        lines["apigw_http"] += n * op.get("http", 0) * PRICES["apigw_http_per_million_requests"] / 1e6
        extra = p["command_seconds"] if name == "exec_active" else 0.0
        # The worker runs a Slack message's command itself; the API path's exec is the HTTP one.
        calls = op["lambda"]
        if name == "slack_message":
            calls = [(f, s + (p["command_seconds"] if f == "worker" else 0.0)) for f, s in calls]
        dollars, k = lambda_cost(calls, extra)
        lines["lambda_requests_and_duration"] += n * dollars
        invocations += n * k
        events += n * op.get("events", 0)
    # Fan-out of every event to every target.
    dollars, k = lambda_cost(FANOUT_PER_EVENT["lambda"])
    lines["lambda_requests_and_duration"] += events * dollars
    invocations += events * k
    lines["sqs"] += events * FANOUT_PER_EVENT["sqs"] * PRICES["sqs_fifo_per_million_requests"] / 1e6
    ws_messages = 0.0
    for target in FANOUT_TARGETS.values():
        rru += events * target["rru"]
        wru += events * target["wru"]
        ws_messages += events * target.get("ws_messages_per_subscriber", 0) * p["subscriber_connections"]
    lines["apigw_websocket"] = (
        ws_messages * PRICES["apigw_ws_per_million_messages"] / 1e6
        + p["ws_connection_hours"] * 60 * PRICES["apigw_ws_per_million_connection_minutes"] / 1e6
    )
    # The deployment's fixed share.
    f = FIXED_PER_MONTH
    janitor, _ = lambda_cost([("janitor", f["janitor_seconds"])])
    fixed = (
        f["janitor_invocations"] * janitor
        + f["janitor_invocations"] * f["janitor_rru_per_run"] * PRICES["dynamodb_per_million_rru"] / 1e6
        + f["janitor_invocations"] * PRICES["eventbridge_per_million_invocations"] / 1e6
        + f["sqs_poll_requests"] * PRICES["sqs_fifo_per_million_requests"] / 1e6
        + f["janitor_invocations"] * p["log_bytes_per_invocation"] / 1e9 * PRICES["cloudwatch_logs_per_gb_ingested"]
    )
    lines["eventbridge"] = f["janitor_invocations"] * PRICES["eventbridge_per_million_invocations"] / 1e6 / p["threads"]
    lines["dynamodb"] = rru * PRICES["dynamodb_per_million_rru"] / 1e6 + wru * PRICES["dynamodb_per_million_wru"] / 1e6
    lines["cloudwatch_logs"] = invocations * p["log_bytes_per_invocation"] / 1e9 * PRICES["cloudwatch_logs_per_gb_ingested"]
    lines["deployment_fixed_share"] = fixed / p["threads"] - lines["eventbridge"]
    control = sum(lines.values())

    running_hours = bursts * (p["burst_minutes"] + p["idle_pause_minutes"]) / 60.0
    hourly = p["vcpus"] * PRICES["e2b_per_vcpu_hour"] + p["memory_gib"] * PRICES["e2b_per_gib_hour"]
    compute = running_hours * hourly
    never_paused = 30 * 24 * hourly
    return {
        "prices_date": PRICES_DATE,
        "architecture": ARCHITECTURE,
        "lambda_memory_mb": LAMBDA_MEMORY_MB,
        "profile": p,
        "operations": counts,
        "lifecycle_events": events,
        "dynamodb_rru": rru,
        "dynamodb_wru": wru,
        "lambda_invocations": invocations,
        "control_plane_usd": lines,
        "control_plane_total_usd": control,
        "sandbox_running_hours": running_hours,
        "sandbox_usd_per_running_hour": hourly,
        "compute_usd": compute,
        "compute_never_paused_usd": never_paused,
        "ratio": control / compute,
    }


def render(m):
    p = m["profile"]
    out = []
    out.append("threadbox: one thread-month on AWS, prices of %s (us-east-1, on-demand, no free tiers)" % m["prices_date"])
    out.append("profile: %d active days x %d bursts x %d commands of %.1f s; %.0f min of work + %.0f min idle before the"
               " pause per burst; %.0f%% from Slack; %d threads share the fixed costs"
               % (p["active_days"], p["bursts_per_day"], p["execs_per_burst"], p["command_seconds"],
                  p["burst_minutes"], p["idle_pause_minutes"], 100 * p["slack_share"], p["threads"]))
    out.append("")
    out.append("%-22s %10s" % ("operation", "per month"))
    for name, n in m["operations"].items():
        out.append("%-22s %10.0f" % (name, n))
    out.append("%-22s %10.0f" % ("lifecycle events", m["lifecycle_events"]))
    out.append("%-22s %10.1f" % ("DynamoDB RRU", m["dynamodb_rru"]))
    out.append("%-22s %10.1f" % ("DynamoDB WRU", m["dynamodb_wru"]))
    out.append("%-22s %10.0f" % ("Lambda invocations", m["lambda_invocations"]))
    out.append("")
    out.append("%-30s %12s" % ("control plane", "USD/month"))
    for name, usd in m["control_plane_usd"].items():
        out.append("%-30s %12.6f" % (name, usd))
    out.append("%-30s %12.6f" % ("total", m["control_plane_total_usd"]))
    out.append("")
    out.append("sandbox compute (E2B, %.1f vCPU + %.2f GiB at $%.4f/h): %.1f running h = $%.4f; never paused: $%.2f"
               % (p["vcpus"], p["memory_gib"], m["sandbox_usd_per_running_hour"], m["sandbox_running_hours"],
                  m["compute_usd"], m["compute_never_paused_usd"]))
    out.append("ratio: control plane / sandbox compute = %.2f%% (goal: under 1%%)" % (100 * m["ratio"]))
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in DEFAULT_PROFILE.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the ratio is under 1%%")
    args = parser.parse_args(argv)
    profile = {key: getattr(args, key) for key in DEFAULT_PROFILE}
    m = model(profile)
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        sys.stdout.write(render(m))
    if args.check and not m["ratio"] < 0.01:
        sys.stderr.write("cost-model: the control plane is %.2f%% of sandbox compute, not under 1%%\n" % (100 * m["ratio"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
