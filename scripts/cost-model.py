#!/usr/bin/env python3
"""What one thread costs threadbox's control plane on AWS in a month, beside the E2B compute it
manages, for a stated usage profile. Standard library only.

    python3 scripts/cost-model.py                 # the default profile, as a table
    python3 scripts/cost-model.py --json          # the same figures as JSON
    python3 scripts/cost-model.py --check         # the table, then fail unless the ratio is < 1%
    python3 scripts/cost-model.py --execs-per-burst 40 --bursts-per-day 8 --threads 200
    python3 scripts/cost-model.py --summary       # the few figures `threadbox cost` shows (JSON)

docs/cost.md explains the model: the dated price table (PRICES below, the same figures), where
each operation's request counts come from (OPERATIONS below), and the profile.

What the stack deploys is read from infra/template.yaml, not copied here: the functions and
their memory, the alarms and their metrics, the queues and which of them Lambda polls, the
secrets each function reads, the log groups, the janitor's due shards and the warm pool's
defaults. Every resource type the template declares must have a line in RESOURCE_KINDS saying
how it is priced; the model refuses to run on a template with a kind it does not price.
"""

import argparse
import json
import math
import os
import re
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
    "cloudwatch_logs_per_gb_month_stored": 0.03,
    # Standard-resolution alarms: per metric the alarm reads (a metric-math alarm pays for each
    # metric in its expression, the expression itself is free).
    "cloudwatch_alarm_per_metric_month": 0.10,
    "secretsmanager_per_secret_month": 0.40,
    "secretsmanager_per_million_api_calls": 5.00,
    "dynamodb_per_gb_month_stored": 0.25,
    "dynamodb_pitr_per_gb_month": 0.20,
    # E2B, https://e2b.dev/docs/faq/calculate-sandbox-price: $0.000014 per vCPU-second and
    # $0.0000045 per GiB-second while running; paused and killed sandboxes are not billed.
    "e2b_per_vcpu_hour": 0.0504,
    "e2b_per_gib_hour": 0.0162,
}

# --- How each kind of resource the template declares is priced. The model reads the template
# (read_template below) and refuses one whose resource types are not all here, so a new kind of
# resource cannot be deployed unpriced.
RESOURCE_KINDS = {
    "AWS::Serverless::Function": "Lambda requests and GB-seconds (OPERATIONS, the janitor, the warm pool), its log lines",
    "AWS::Serverless::HttpApi": "HTTP API requests, and one access log line each",
    "AWS::DynamoDB::Table": "on-demand read and write units (OPERATIONS), storage and point-in-time recovery per GB-month",
    "AWS::SQS::Queue": "FIFO requests: each message's send, receive and delete; Lambda's pollers on each polled queue",
    "AWS::Lambda::EventSourceMapping": "its pollers' long polls (priced as SQS requests, one mapping per polled queue)",
    "AWS::CloudWatch::Alarm": "per metric it reads, per month",
    "AWS::Logs::LogGroup": "GB ingested and GB-month stored",
    "AWS::SNS::Topic": "nothing at rest; a publish when an alarm changes state (an incident, not a steady cost: 0)",
    "AWS::SNS::Subscription": "nothing at rest; an email when an alarm fires (0, as the topic)",
    "AWS::ApiGatewayV2::Api": "WebSocket messages and connection-minutes",
    "AWS::ApiGatewayV2::Stage": "nothing; its access log lines are log ingestion",
    "AWS::ApiGatewayV2::Route": "nothing (a route of the WebSocket API)",
    "AWS::ApiGatewayV2::Integration": "nothing (the WebSocket API's Lambda integration)",
    "AWS::Lambda::Permission": "nothing",
}
# Not resources of the template but paid for by it: the Secrets Manager secrets its parameters
# name (per secret-month, and each GetSecretValue), the janitor's EventBridge schedule (a
# function's `Schedule` event), and the warm pool's E2B sandboxes (parameter WarmPoolSize).

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "infra", "template.yaml")


def function_name(logical_id):
    """ResolveSessionFunction -> resolve-session: the function's binary, as the tables name it."""
    base = logical_id[: -len("Function")] if logical_id.endswith("Function") else logical_id
    return re.sub(r"(?<!^)(?=[A-Z])", "-", base).lower()


def sections(text):
    """Top-level sections of a CloudFormation template: name -> its lines."""
    out, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            current = line.split(":", 1)[0]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def entries(lines):
    """Two-space-indented keys of a section: name -> the lines of its block."""
    out, current = {}, None
    for line in lines:
        if re.match(r"^  [A-Za-z0-9]+:\s*$", line):
            current = line.strip()[:-1]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def read_template(path=TEMPLATE):
    """What the stack deploys, as the model prices it."""
    with open(path) as f:
        parts = sections(f.read())
    parameters = {}
    for name, block in entries(parts.get("Parameters", [])).items():
        default = None
        for line in block:
            m = re.match(r"^    Default:\s*(.*)$", line)
            if m:
                default = m.group(1).strip().strip('"')
        parameters[name] = default
    glob = "\n".join(parts.get("Globals", []))
    global_mb = int(re.search(r"^    MemorySize:\s*(\d+)", glob, re.M).group(1))
    architecture = re.search(r"^    Architectures:\s*\[(\w+)\]", glob, re.M).group(1)
    kinds, functions, alarms = {}, {}, {}
    queues, polled, log_groups = [], [], []
    for name, block in entries(parts.get("Resources", [])).items():
        kind = next(l.split(":", 1)[1].strip() for l in block if l.startswith("    Type:"))
        kinds.setdefault(kind, []).append(name)
        text = "\n".join(block)
        if kind == "AWS::Serverless::Function":
            m = re.search(r"^      MemorySize:\s*(\d+)", text, re.M)
            functions[function_name(name)] = {
                "logical_id": name,
                "memory_mb": int(m.group(1)) if m else global_mb,
                # Secrets read on every deployment, and those only some deployments name.
                "secrets": len(re.findall(r"_SECRET_ID: !Ref ", text)),
                "optional_secrets": len(re.findall(r"_SECRET_ID: !If ", text)),
            }
        elif kind == "AWS::CloudWatch::Alarm":
            alarms[name] = len(re.findall(r"MetricName:", text))
        elif kind == "AWS::SQS::Queue":
            queues.append(name)
        elif kind == "AWS::Lambda::EventSourceMapping":
            polled.append(name)
        elif kind == "AWS::Logs::LogGroup":
            log_groups.append(name)
    secrets = sorted(p for p in parameters if p.endswith("Secret"))
    return {
        "resource_kinds": {k: len(v) for k, v in sorted(kinds.items())},
        "unpriced_kinds": sorted(k for k in kinds if k not in RESOURCE_KINDS),
        "architecture": architecture,
        "functions": functions,
        "alarms": len(alarms),
        "alarm_metrics": sum(alarms.values()),
        "queues": len(queues),
        "polled_queues": len(polled),
        "log_groups": len(log_groups),
        # A secret parameter with no default must be given; one defaulting to "" is optional.
        "secrets": [p for p in secrets if parameters[p] is None],
        "optional_secrets": [p for p in secrets if parameters[p] is not None],
        "due_shards": int(parameters["DueShards"]),
        "warm_pool_size": int(parameters["WarmPoolSize"]),
        "warm_pool_max_age_seconds": int(parameters["WarmPoolMaxAgeSeconds"]),
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
# are read off the use cases (crates/core/src/usecases/*.rs) and adapters.
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
    # One pause (the janitor's idle pause): the claim `active → pausing` and the result
    # `pausing → paused`, each a transaction with its event, each event sent and marked
    # (measured: 4 writes per pause in the 100,000-session sweep); the due-index read is the
    # sweep's share (measured: 32 RRU for 1,000 due, 0.032 per due session) plus a load. The
    # janitor hands the claim to the transition queue (a send, a receive and a delete) and
    # `pause-queue` carries it out: the record re-read (1 RRU), E2B's pause (a memory snapshot,
    # a few seconds) waited for there, not in the janitor.
    "pause": {
        "rru": 1 + 0.032 + 1, "wru": 2 * (7 + 2), "sqs": 2 + 3, "events": 2,
        "lambda": [("janitor", 0.05), ("pause-queue", 3.0)],
    },
    # One resume (the next command on a paused thread): a load, `paused → resuming` and
    # `resuming → active`, each with its event, sent and marked; E2B's connect takes about a
    # second. Its HTTP request is the command's own (counted under exec_active).
    "resume": {
        "rru": 1, "wru": 2 * (7 + 2), "sqs": 2, "events": 2,
        "lambda": [("sandbox-api", 1.0)],
    },
    # Retention: `paused → deleting → destroyed`, each with its event, through the transition
    # queue as a pause is.
    "destroy": {
        "rru": 1 + 0.032 + 1, "wru": 2 * (7 + 2), "sqs": 2 + 3, "events": 2,
        "lambda": [("janitor", 0.05), ("pause-queue", 0.5)],
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

# Which functions a burst of the thread's work calls, each of which reads its secrets once a
# burst (a cold start, or the 15-minute refresh of `lambda::secrets`, which a 20-minute burst
# passes once): an upper bound when many threads share warm functions.
BURST_FUNCTIONS = ["sandbox-api", "slack-events", "worker", "fanout", "pause-queue"]

# What a deployment pays whoever uses it, shared by its threads.
FIXED_PER_MONTH = {
    # The janitor, every minute: one invocation and its empty index queries (the due shards and
    # as many `unsent` shards at the 0.5 RRU minimum each: BENCHMARKS.md's fixed 4 + the shards).
    "janitor_invocations": 60 * 24 * 30,
    "janitor_seconds": 0.2,
    # Lambda's SQS pollers: long polls (20 s) by about 5 pollers per polled queue, answered or
    # empty alike.
    "sqs_pollers_per_queue": 5,
    "sqs_polls_per_poller_minute": 3,
    # Each warm janitor environment reads its secrets again every 15 minutes.
    "secret_refreshes_per_hour": 4,
    # A warm pool member made: its record written three times (creating, ready, retired), the
    # janitor waiting for E2B's create.
    "pool_create_wru": 3 * (1 + 2),
    "pool_create_seconds": 1.5,
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
    # The function's own JSON lines per invocation; Lambda's START, END and REPORT lines (the
    # template's system log level INFO, JSON); an API access log line (the template's format).
    "log_bytes_per_invocation": 1000,
    "platform_log_bytes_per_invocation": 600,
    "access_log_bytes_per_request": 350,
    # Every DynamoDB item a thread's month leaves (events, the session, Slack status), kept about
    # a month (RecordRetentionDays), with its index entries.
    "stored_bytes_per_event": 600,
    "vcpus": 2.0,
    "memory_gib": 0.5,
    # The template's WarmPoolSize default is read from it; the profiles it is kept for.
    "warm_pool_profiles": 1,
    "optional_secrets": 0,
}


def lambda_cost(deployed, calls, seconds_extra=0.0):
    """Dollars and invocations for a list of (function, seconds) invocations."""
    gb_second = PRICES["lambda_%s_per_gb_second" % deployed["architecture"]]
    dollars, invocations = 0.0, 0
    for function, seconds in calls:
        gb = deployed["functions"][function]["memory_mb"] / 1024.0
        dollars += (seconds + seconds_extra) * gb * gb_second
        dollars += PRICES["lambda_per_million_requests"] / 1e6
        invocations += 1
    return dollars, invocations


def per_million(n, price):
    return n * PRICES[price] / 1e6


def model(p, deployed):
    """The thread-month: control-plane dollars by service (what each thread adds, and the
    deployment's fixed costs, alone and shared by `threads`), and the compute beside them."""
    if deployed["unpriced_kinds"]:
        raise SystemExit(
            "cost-model: infra/template.yaml deploys %s, which RESOURCE_KINDS does not price"
            % ", ".join(deployed["unpriced_kinds"]))
    functions = deployed["functions"]
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
        "dynamodb", "dynamodb_storage", "sqs", "lambda_requests_and_duration", "apigw_http",
        "apigw_websocket", "cloudwatch_logs", "secrets_manager_calls")}
    invocations = 0.0
    events = 0.0
    http_requests = 0.0
    rru = wru = 0.0
    for name, n in counts.items():
        op = OPERATIONS[name]
        rru += n * op.get("rru", 0)
        wru += n * op.get("wru", 0)
        lines["sqs"] += per_million(n * op.get("sqs", 0), "sqs_fifo_per_million_requests")
        http_requests += n * op.get("http", 0)
        extra = p["command_seconds"] if name == "exec_active" else 0.0
        # The worker runs a Slack message's command itself; the API path's exec is the HTTP one.
        calls = op["lambda"]
        if name == "slack_message":
            calls = [(f, s + (p["command_seconds"] if f == "worker" else 0.0)) for f, s in calls]
        dollars, k = lambda_cost(deployed, calls, extra)
        lines["lambda_requests_and_duration"] += n * dollars
        invocations += n * k
        events += n * op.get("events", 0)
    lines["apigw_http"] = per_million(http_requests, "apigw_http_per_million_requests")
    # Fan-out of every event to every target.
    dollars, k = lambda_cost(deployed, FANOUT_PER_EVENT["lambda"])
    lines["lambda_requests_and_duration"] += events * dollars
    invocations += events * k
    lines["sqs"] += per_million(events * FANOUT_PER_EVENT["sqs"], "sqs_fifo_per_million_requests")
    ws_messages = 0.0
    for target in FANOUT_TARGETS.values():
        rru += events * target["rru"]
        wru += events * target["wru"]
        ws_messages += events * target.get("ws_messages_per_subscriber", 0) * p["subscriber_connections"]
    lines["apigw_websocket"] = (
        per_million(ws_messages, "apigw_ws_per_million_messages")
        + per_million(p["ws_connection_hours"] * 60, "apigw_ws_per_million_connection_minutes")
    )
    lines["dynamodb"] = per_million(rru, "dynamodb_per_million_rru") + per_million(wru, "dynamodb_per_million_wru")
    stored_gb = events * p["stored_bytes_per_event"] / 1e9
    lines["dynamodb_storage"] = stored_gb * (PRICES["dynamodb_per_gb_month_stored"] + PRICES["dynamodb_pitr_per_gb_month"])
    # Log ingestion: every invocation's own lines and Lambda's, every HTTP request's access line
    # (the WebSocket stage logs its connects and subscribes: a few lines a connection, left out).
    log_bytes = (
        invocations * (p["log_bytes_per_invocation"] + p["platform_log_bytes_per_invocation"])
        + http_requests * p["access_log_bytes_per_request"]
    )
    lines["cloudwatch_logs"] = log_bytes / 1e9 * (
        PRICES["cloudwatch_logs_per_gb_ingested"] + PRICES["cloudwatch_logs_per_gb_month_stored"])
    secret_calls = bursts * sum(functions[f]["secrets"] for f in BURST_FUNCTIONS)
    lines["secrets_manager_calls"] = per_million(secret_calls, "secretsmanager_per_million_api_calls")
    variable = sum(lines.values())

    # The deployment's fixed costs, paid at any number of threads (0 included).
    f = FIXED_PER_MONTH
    runs = f["janitor_invocations"]
    janitor, _ = lambda_cost(deployed, [("janitor", f["janitor_seconds"])])
    minutes = 60 * 24 * 30
    polls = deployed["polled_queues"] * f["sqs_pollers_per_queue"] * f["sqs_polls_per_poller_minute"] * minutes
    secrets = len(deployed["secrets"]) + p["optional_secrets"]
    hourly = p["vcpus"] * PRICES["e2b_per_vcpu_hour"] + p["memory_gib"] * PRICES["e2b_per_gib_hour"]
    members = deployed["warm_pool_size"] * p["warm_pool_profiles"]
    creates = members * 30 * 24 * 3600 / deployed["warm_pool_max_age_seconds"]
    pool_create, _ = lambda_cost(deployed, [("janitor", f["pool_create_seconds"])], 0.0)
    fixed = {
        "janitor": runs * janitor
        + per_million(runs * 2 * deployed["due_shards"] * 0.5, "dynamodb_per_million_rru")
        + runs * (p["log_bytes_per_invocation"] + p["platform_log_bytes_per_invocation"]) / 1e9
        * (PRICES["cloudwatch_logs_per_gb_ingested"] + PRICES["cloudwatch_logs_per_gb_month_stored"]),
        "eventbridge": per_million(runs, "eventbridge_per_million_invocations"),
        "sqs_pollers": per_million(polls, "sqs_fifo_per_million_requests"),
        "cloudwatch_alarms": deployed["alarm_metrics"] * PRICES["cloudwatch_alarm_per_metric_month"],
        "secrets_manager": secrets * PRICES["secretsmanager_per_secret_month"]
        + per_million(f["secret_refreshes_per_hour"] * 24 * 30 * functions["janitor"]["secrets"],
                      "secretsmanager_per_million_api_calls"),
        # Members run (and bill) until taken or replaced; a taken one is replaced at once.
        "warm_pool_e2b": members * 30 * 24 * hourly,
        "warm_pool_churn": creates * (pool_create + per_million(f["pool_create_wru"], "dynamodb_per_million_wru")),
    }
    fixed_total = sum(fixed.values())
    control = variable + fixed_total / p["threads"]

    running_hours = bursts * (p["burst_minutes"] + p["idle_pause_minutes"]) / 60.0
    compute = running_hours * hourly
    never_paused = 30 * 24 * hourly
    # Below this many threads the fixed costs alone push the control plane past 1% of the
    # compute its threads use: fixed / threads + variable > compute / 100.
    headroom = compute / 100.0 - variable
    break_even = math.ceil(fixed_total / headroom) if headroom > 0 else None
    return {
        "prices_date": PRICES_DATE,
        "architecture": deployed["architecture"],
        "deployed": deployed,
        "profile": p,
        "operations": counts,
        "lifecycle_events": events,
        "dynamodb_rru": rru,
        "dynamodb_wru": wru,
        "lambda_invocations": invocations,
        "secret_calls": secret_calls,
        "per_thread_usd": lines,
        "per_thread_total_usd": variable,
        "fixed_usd_per_month": fixed,
        "fixed_total_usd_per_month": fixed_total,
        "warm_pool_usd_per_member_month": 30 * 24 * hourly + (30 * 24 * 3600 / deployed["warm_pool_max_age_seconds"])
        * (pool_create + per_million(f["pool_create_wru"], "dynamodb_per_million_wru")),
        "control_plane_total_usd": control,
        "sandbox_running_hours": running_hours,
        "sandbox_usd_per_running_hour": hourly,
        "compute_usd": compute,
        "compute_never_paused_usd": never_paused,
        "ratio": control / compute,
        "one_percent_threads": break_even,
    }


def summary(m):
    """The figures `threadbox cost` prints (cli/src/cost_model.json holds this, and
    tests/tests/cost_model.rs checks it is what the model says now)."""
    return {
        "prices_date": m["prices_date"],
        "threads": m["profile"]["threads"],
        "thread_month_usd": round(m["control_plane_total_usd"], 6),
        "per_thread_usd": round(m["per_thread_total_usd"], 6),
        "fixed_usd_per_month": round(m["fixed_total_usd_per_month"], 6),
        "compute_usd": round(m["compute_usd"], 6),
        "ratio": round(m["ratio"], 6),
        "one_percent_threads": m["one_percent_threads"],
        "warm_pool_usd_per_member_month": round(m["warm_pool_usd_per_member_month"], 6),
    }


def render(m):
    p = m["profile"]
    d = m["deployed"]
    out = []
    out.append("threadbox: one thread-month on AWS, prices of %s (us-east-1, on-demand, no free tiers)" % m["prices_date"])
    out.append("profile: %d active days x %d bursts x %d commands of %.1f s; %.0f min of work + %.0f min idle before the"
               " pause per burst; %.0f%% from Slack; %d threads share the fixed costs"
               % (p["active_days"], p["bursts_per_day"], p["execs_per_burst"], p["command_seconds"],
                  p["burst_minutes"], p["idle_pause_minutes"], 100 * p["slack_share"], p["threads"]))
    out.append("deployed (infra/template.yaml): %d functions, %d queues (%d polled), %d alarms on %d metrics,"
               " %d log groups, %d secrets (+%d optional), warm pool %d"
               % (len(d["functions"]), d["queues"], d["polled_queues"], d["alarms"], d["alarm_metrics"],
                  d["log_groups"], len(d["secrets"]), len(d["optional_secrets"]), d["warm_pool_size"]))
    out.append("")
    out.append("%-22s %10s" % ("operation", "per month"))
    for name, n in m["operations"].items():
        out.append("%-22s %10.0f" % (name, n))
    out.append("%-22s %10.0f" % ("lifecycle events", m["lifecycle_events"]))
    out.append("%-22s %10.1f" % ("DynamoDB RRU", m["dynamodb_rru"]))
    out.append("%-22s %10.1f" % ("DynamoDB WRU", m["dynamodb_wru"]))
    out.append("%-22s %10.0f" % ("Lambda invocations", m["lambda_invocations"]))
    out.append("%-22s %10.0f" % ("GetSecretValue calls", m["secret_calls"]))
    out.append("")
    out.append("%-30s %12s" % ("each thread adds", "USD/month"))
    for name, usd in m["per_thread_usd"].items():
        out.append("%-30s %12.6f" % (name, usd))
    out.append("%-30s %12.6f" % ("per thread", m["per_thread_total_usd"]))
    out.append("")
    out.append("%-30s %12s" % ("the deployment, fixed", "USD/month"))
    for name, usd in m["fixed_usd_per_month"].items():
        out.append("%-30s %12.6f" % (name, usd))
    out.append("%-30s %12.6f" % ("fixed (idle)", m["fixed_total_usd_per_month"]))
    out.append("")
    out.append("control plane per thread-month at %d threads: $%.6f per thread + $%.2f / %d = $%.4f"
               % (p["threads"], m["per_thread_total_usd"], m["fixed_total_usd_per_month"], p["threads"],
                  m["control_plane_total_usd"]))
    out.append("a warm pool member (WarmPoolSize) adds $%.2f a month (E2B, running around the clock)"
               % m["warm_pool_usd_per_member_month"])
    out.append("")
    out.append("sandbox compute (E2B, %.1f vCPU + %.2f GiB at $%.4f/h): %.1f running h = $%.4f; never paused: $%.2f"
               % (p["vcpus"], p["memory_gib"], m["sandbox_usd_per_running_hour"], m["sandbox_running_hours"],
                  m["compute_usd"], m["compute_never_paused_usd"]))
    out.append("ratio: control plane / sandbox compute = %.2f%% (goal: under 1%%)" % (100 * m["ratio"]))
    if m["one_percent_threads"] is None:
        out.append("over 1% at any number of threads: each thread's own share is past it")
    else:
        out.append("over 1%% below %d threads (the fixed $%.2f a month divided among fewer)"
                   % (m["one_percent_threads"], m["fixed_total_usd_per_month"]))
    return "\n".join(out) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in DEFAULT_PROFILE.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--template", default=TEMPLATE, help="the SAM template to price (infra/template.yaml)")
    parser.add_argument("--warm-pool-size", type=int, help="warm pool members per profile (the template's default)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--summary", action="store_true", help="print the figures `threadbox cost` shows, as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the ratio is under 1%%")
    args = parser.parse_args(argv)
    profile = {key: getattr(args, key) for key in DEFAULT_PROFILE}
    deployed = read_template(args.template)
    if args.warm_pool_size is not None:
        deployed["warm_pool_size"] = args.warm_pool_size
    m = model(profile, deployed)
    if args.summary:
        print(json.dumps(summary(m), indent=2, sort_keys=True))
    elif args.json:
        print(json.dumps(m, indent=2))
    else:
        sys.stdout.write(render(m))
    if args.check and not m["ratio"] < 0.01:
        sys.stderr.write("cost-model: the control plane is %.2f%% of sandbox compute, not under 1%%\n" % (100 * m["ratio"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
