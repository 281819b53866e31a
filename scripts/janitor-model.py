#!/usr/bin/env python3
"""How many shards, how much concurrency and what wall time the janitor needs on DynamoDB and
Lambda for a number of threads (1 M and 10 M by default), from figures measured in this repo and
limits AWS publishes. Standard library only.

    python3 scripts/janitor-model.py                      # the recorded inputs (BENCHMARKS.md)
    python3 scripts/janitor-model.py --inputs run.json    # a new run's `model inputs:` line
    python3 scripts/janitor-model.py --threads 1e6 1e7 --due-per-minute 0.01 --memory-gib 2

The path it models (crates/core/src/usecases/janitor.rs, pause.rs): every minute one janitor Lambda
queries the `due` GSI's shards concurrently and claims each due thread with one conditional
write (a transaction: the session and its event), marks the event sent, and hands the claim to
the FIFO transition queue (SendMessageBatch, 10 a call). The pause-queue Lambda takes batches of
10 (threads in a batch run at once), re-reads the record (GetItem), pauses at the provider, and
writes the result (a transaction again, and the event marked sent). Each written event is also
sent to the lifecycle queue (one SendMessage per state change).

Inputs, and where each comes from:

  measured here (crates/aws/benches/janitor_sweep.rs, 1,000,000 sessions / 10,000 due on SQLite;
  the figures are in BENCHMARKS.md, and the bench's last line is the JSON --inputs reads):
    rows_read_per_due        index rows read per due thread (1.0: the index, never a scan)
    sweep_writes_per_claim   store writes per claim (the claim transaction, the event marked sent)
    handler_reads_per_item   store reads per handed-off pause (the re-read)
    handler_writes_per_item  store writes per handed-off pause (the result, the event marked sent)
    session_item_bytes       a due session's DynamoDB item size (adapters/dynamo/capacity.rs rules)
    event_bytes              a lifecycle event as stored
    work_item_bytes          a transition queue message body
    handler_ms_per_item      the handler's own time per item (drain wall time / items), with an
                             instant provider

  from the issue: E2B pauses at about 4 s per GiB of sandbox memory (--pause-s-per-gib, and
  --memory-gib for the sandbox size, 1 GiB by default).

  assumed, not measurable here (say so when quoting): a DynamoDB or SQS request's latency from
  Lambda in the same region (--request-ms, 8 ms); activity writes (a resolve touching the record)
  per thread per minute (--activity-per-minute, equal to the due fraction by default).

  published by AWS:
    DynamoDB: a partition serves at most 3,000 read units and 1,000 write units per second; a
      GSI partition likewise (the `due` GSI's partition key is the shard); a write unit is 1 KB
      (transactions cost two per KB), an eventually consistent read unit 8 KB (0.5 per 4 KB),
      a strongly consistent one 4 KB; an update that moves an item's GSI sort key writes the GSI
      twice (the old entry deleted, the new put).
    Lambda: 1,000 concurrent executions per account and region by default; an SQS event source
      mapping's MaximumConcurrency is 2 to 1,000; a FIFO mapping scales with the active message
      groups (here: threads), so it is not the bound.
    SQS FIFO, high-throughput mode: 70,000 messages per second per queue in the largest regions
      (per message group 300); SendMessageBatch carries 10.
"""

import argparse
import json
import math

# Measured by crates/aws/benches/janitor_sweep.rs; see BENCHMARKS.md ("Janitor at scale").
RECORDED = {
    "sessions": 1_000_000,
    "due": 10_000,
    "shards": 8,
    "page_size": 100,
    "rows_read_per_due": 1.0,
    "sweep_writes_per_claim": 2.0,
    "handler_reads_per_item": 1.0,
    "handler_writes_per_item": 2.0,
    "handler_ms_per_item": 1.69,
    "session_item_bytes": 220,
    "event_bytes": 232,
    "work_item_bytes": 122,
}

PARTITION_RCU = 3_000
PARTITION_WCU = 1_000
LAMBDA_ACCOUNT_CONCURRENCY = 1_000
ESM_MAX_CONCURRENCY = 1_000
SQS_BATCH = 10
SQS_FIFO_HT_MESSAGES_PER_S = 70_000
SWEEP_BUDGET_S = 45.0
LEASE_S = 120.0
HEADROOM = 0.5  # plan partitions at half their published limit


def write_units(item_bytes, transactional=False):
    units = max(1, math.ceil(item_bytes / 1024))
    return units * (2 if transactional else 1)


def model(threads, m, a):
    due_per_min = threads * a.due_per_minute
    due_per_s = due_per_min / 60.0
    session_wcu = write_units(m["session_item_bytes"])
    event_wcu = write_units(m["event_bytes"])

    # Base tables (keyed by thread id / event id): on-demand partitions split by themselves.
    # The `due` GSI: its partition key is the shard, so every write that moves a session's
    # next action lands on one shard's partition: 2 GSI writes (delete + put) per such write.
    session_writes_per_s = due_per_s * 2 + threads * a.activity_per_minute / 60.0
    due_gsi_wcu = session_writes_per_s * 2 * session_wcu
    # The sweep's reads of the index: pages of `page_size` items, eventually consistent.
    page_bytes = m["page_size"] * m["session_item_bytes"] * m["rows_read_per_due"]
    due_gsi_rcu = (due_per_s / m["page_size"]) * 0.5 * math.ceil(page_bytes / 4096)
    shards_for_writes = math.ceil(due_gsi_wcu / (PARTITION_WCU * HEADROOM))
    shards_for_reads = math.ceil(due_gsi_rcu / (PARTITION_RCU * HEADROOM))
    # The sweep claims `due_per_min` inside its budget: requests per claim, one after another.
    # Plus the lifecycle event's SendMessage (the outbox hands it to the fan-out queue).
    claim_requests = m["sweep_writes_per_claim"] + 1
    claim_s = claim_requests * a.request_ms / 1000.0
    claims_needed_per_s = due_per_min / (SWEEP_BUDGET_S * 0.8)
    sweep_in_flight = math.ceil(claims_needed_per_s * claim_s)
    per_shard = a.per_shard_concurrency
    shards_for_sweep = math.ceil(sweep_in_flight / per_shard)
    shards = max(8, shards_for_writes, shards_for_reads, shards_for_sweep)
    # Power of two for an even spread (ThreadId::shard is a hash modulo the count).
    shards = 1 << (shards - 1).bit_length()

    # The sweep's wall time with `shards` shards walked at once, `per_shard` claims at once in
    # each, a query per page and the page's claims sent 10 a call.
    per_shard_due = due_per_min / shards
    pages = max(1, math.ceil(per_shard_due / m["page_size"]))
    page_claims = min(m["page_size"], per_shard_due)
    page_s = (
        a.request_ms / 1000.0
        + math.ceil(page_claims / per_shard) * claim_s
        + math.ceil(page_claims / SQS_BATCH) * a.request_ms / 1000.0
    )
    sweep_wall_s = pages * page_s

    # The handlers: each item re-reads, pauses at the provider, writes the result.
    pause_s = a.pause_s_per_gib * a.memory_gib
    store_s = (m["handler_reads_per_item"] + m["handler_writes_per_item"] + 1) * a.request_ms / 1000.0
    item_s = pause_s + store_s + m["handler_ms_per_item"] / 1000.0
    # Little's law: items in flight so the minute's pauses take a minute.
    in_flight = math.ceil(due_per_s * item_s)
    lambdas = math.ceil(in_flight / SQS_BATCH)
    # With `lambdas` running, the minute's backlog drains in about a minute; it must drain
    # well inside the lease, or the janitor recovers claims still queued.
    drain_s = due_per_min * item_s / (lambdas * SQS_BATCH)
    # The old path: one Lambda pausing in sequence.
    sequential_s = due_per_min * (pause_s + (claim_requests + 3) * a.request_ms / 1000.0)

    return {
        "threads": threads,
        "due_per_min": due_per_min,
        "due_gsi_wcu": due_gsi_wcu,
        "due_gsi_rcu": due_gsi_rcu,
        "shards_for_writes": shards_for_writes,
        "shards_for_sweep": shards_for_sweep,
        "shards": shards,
        "sweep_in_flight": shards * per_shard,
        "sweep_wall_s": sweep_wall_s,
        "item_s": item_s,
        "in_flight": in_flight,
        "lambdas": lambdas,
        "drain_s": drain_s,
        "sequential_s": sequential_s,
        "sqs_per_s": due_per_s,
        "table_wcu": due_per_s * 2 * (2 * session_wcu + 2 * event_wcu + event_wcu),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=float, nargs="+", default=[1e6, 1e7])
    p.add_argument("--due-per-minute", type=float, default=0.01,
                   help="fraction of threads falling due each minute (issue: 1%%)")
    p.add_argument("--activity-per-minute", type=float, default=None,
                   help="activity writes per thread per minute (assumed; default: the due fraction)")
    p.add_argument("--pause-s-per-gib", type=float, default=4.0, help="E2B pause time (issue: ~4 s/GiB)")
    p.add_argument("--memory-gib", type=float, default=1.0, help="sandbox memory")
    p.add_argument("--request-ms", type=float, default=8.0,
                   help="DynamoDB/SQS request latency from Lambda (assumed)")
    p.add_argument("--per-shard-concurrency", type=int, default=8,
                   help="claims at once per shard (SweepOptions::concurrency)")
    p.add_argument("--inputs", help="JSON from the bench's `model inputs:` line (or a file holding that line)")
    a = p.parse_args()
    if a.activity_per_minute is None:
        a.activity_per_minute = a.due_per_minute
    m = dict(RECORDED)
    source = "recorded run (BENCHMARKS.md)"
    if a.inputs:
        text = open(a.inputs).read()
        text = text[text.index("{"):text.rindex("}") + 1]
        m.update({k: v for k, v in json.loads(text).items() if v})
        source = a.inputs

    print(f"janitor model: inputs from {source}")
    print(f"  measured: {m['rows_read_per_due']:.2f} index rows, {m['sweep_writes_per_claim']:.2f} writes per claim; "
          f"handler {m['handler_reads_per_item']:.2f} reads + {m['handler_writes_per_item']:.2f} writes per item, "
          f"{m['handler_ms_per_item']:.2f} ms own time")
    print(f"  sizes: session item {m['session_item_bytes']} B, event {m['event_bytes']} B, work item {m['work_item_bytes']} B")
    print(f"  issue: pause {a.pause_s_per_gib:g} s/GiB x {a.memory_gib:g} GiB; assumed: {a.request_ms:g} ms per request, "
          f"{a.activity_per_minute:.2%} of threads active per minute")
    print(f"  published: partition {PARTITION_RCU} RCU / {PARTITION_WCU} WCU per s (planned at {HEADROOM:.0%}), "
          f"Lambda {LAMBDA_ACCOUNT_CONCURRENCY} concurrent per account, SQS FIFO HT {SQS_FIFO_HT_MESSAGES_PER_S} msg/s")
    print()
    for threads in a.threads:
        r = model(int(threads), m, a)
        print(f"{r['threads']:,} threads, {a.due_per_minute:.0%} due a minute: {r['due_per_min']:,.0f} pauses a minute ({r['sqs_per_s']:,.0f}/s)")
        print(f"  due GSI load      {r['due_gsi_wcu']:,.0f} WCU/s, {r['due_gsi_rcu']:,.1f} RCU/s "
              f"(shards for writes {r['shards_for_writes']}, for the sweep's concurrency {r['shards_for_sweep']})")
        print(f"  shards            {r['shards']} (THREADBOX_DUE_SHARDS; a power of two, at least 8)")
        print(f"  sweep             {r['sweep_in_flight']} claims in flight, wall time {r['sweep_wall_s']:.1f} s "
              f"of the {SWEEP_BUDGET_S:.0f} s budget{'' if r['sweep_wall_s'] <= SWEEP_BUDGET_S else '  << OVER BUDGET'}")
        print(f"  pause handlers    {r['item_s']:.2f} s per item -> {r['in_flight']:,} items in flight = "
              f"{r['lambdas']:,} Lambda executions (batches of {SQS_BATCH}) = TransitionConcurrency"
              f"{'' if r['lambdas'] <= ESM_MAX_CONCURRENCY else '  << ABOVE THE 1,000 LIMIT'}")
        print(f"  drain             a minute's claims done in {r['drain_s']:.0f} s (lease {LEASE_S:.0f} s)")
        print(f"  tables            {r['table_wcu']:,.0f} WCU/s on the base tables for the pauses (on-demand; "
              f"spread by thread id)")
        print(f"  for comparison    one Lambda pausing in sequence: {r['sequential_s']:,.0f} s a minute's work "
              f"({r['sequential_s'] / SWEEP_BUDGET_S:,.0f}x its budget)")
        print()


if __name__ == "__main__":
    main()
