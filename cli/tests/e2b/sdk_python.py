"""E2B's official Python SDK (pinned in scripts/lib.sh) against threadbox's E2B API.

Usage: sdk_python.py BASE_URL API_KEY PREFIX

Sets only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, runs what code written for E2B does,
and prints what it saw as one JSON object for cli/tests/e2b_sdk.rs to check. PREFIX keeps the
thread names of one run apart from another's.
"""

import base64
import json
import os
import struct
import sys
import threading
import time
import urllib.request

import httpx  # the SDK's own HTTP client

base, key, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["E2B_API_URL"] = f"{base}/e2b"
os.environ["E2B_SANDBOX_URL"] = f"{base}/e2b"
os.environ["E2B_API_KEY"] = key

from e2b import (  # noqa: E402  (the variables above must be set first)
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    Sandbox,
    SandboxQuery,
)

seen = {}


def name(suffix):
    return f"{prefix}-{suffix}"


# Create by idempotency key: the same key is the same thread, so the same sandbox.
sbx = Sandbox.create(idempotency_key=name("agent"), metadata={"suite": prefix})
again = Sandbox.create(idempotency_key=name("agent"))
seen["by_key"] = {"id": sbx.sandbox_id, "again": again.sandbox_id}

# The create's envs are every command's default environment; a command's own win.
with_envs = Sandbox.create(idempotency_key=name("envs"), envs={"GREETING": "hi", "WHO": "nobody"})
seen["envs"] = with_envs.commands.run("echo $GREETING $WHO", envs={"WHO": "there"}).stdout

# Create by the thread's metadata entry, as an SDK without idempotency keys does.
by_meta = Sandbox.create(metadata={"threadbox_thread": name("meta"), "suite": prefix})
by_meta_again = Sandbox.create(metadata={"threadbox_thread": name("meta")})
seen["by_metadata"] = {"id": by_meta.sandbox_id, "again": by_meta_again.sandbox_id}

# Eight creates at once for one new thread.
burst, errors = [], []


def create_burst():
    try:
        burst.append(Sandbox.create(idempotency_key=name("burst")).sandbox_id)
    except Exception as e:  # noqa: BLE001  (reported to the test, which fails on it)
        errors.append(repr(e))


threads = [threading.Thread(target=create_burst) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
seen["burst"] = {"ids": sorted(set(burst)), "count": len(burst), "errors": errors}

# A command's output arrives while it runs.
start = time.monotonic()
lines = []
result = sbx.commands.run(
    "echo first; sleep 2; echo second",
    on_stdout=lambda line: lines.append([line, time.monotonic() - start]),
)
seen["run"] = {
    "stdout": result.stdout,
    "exit_code": result.exit_code,
    "lines": lines,
    "took": time.monotonic() - start,
}
try:
    sbx.commands.run("echo oops; exit 3")
    seen["failing"] = {"raised": False}
except CommandExitException as e:
    seen["failing"] = {"raised": True, "exit_code": e.exit_code, "stdout": e.stdout}

# stdout and stderr apart, each as it comes, and in a failing command's exception.
out_seen, err_seen = [], []
mixed = sbx.commands.run(
    "echo out1; echo err1 >&2; sleep 0.3; echo out2; echo err2 >&2",
    on_stdout=out_seen.append,
    on_stderr=err_seen.append,
)
seen["streams"] = {
    "stdout": mixed.stdout,
    "stderr": mixed.stderr,
    "on_stdout": "".join(out_seen),
    "on_stderr": "".join(err_seen),
}
try:
    sbx.commands.run("echo fine; echo bad >&2; exit 4")
except CommandExitException as e:
    seen["streams"]["failing"] = {"stdout": e.stdout, "stderr": e.stderr}

# Who a command runs as: the sandbox's user, or its root when asked.
seen["users"] = {
    "default": sbx.commands.run("id -u").stdout.strip(),
    "user": sbx.commands.run("id -u", user="user").stdout.strip(),
    "root": sbx.commands.run("id -u; touch ~/by-root && chown 0:0 ~/by-root && stat -c %u ~/by-root", user="root").stdout.split(),
    "root_background": sbx.commands.run("id -u", user="root", background=True).wait().stdout.strip(),
}

# Watching a folder: the sync SDK polls a watcher for what changed since it last asked.
sbx.files.make_dir("watched/sub")
watcher = sbx.files.watch_dir("watched", recursive=True)
sbx.files.write("watched/a.txt", "one")
sbx.files.write("watched/sub/b.txt", "two")
first = sorted((e.name, e.type.value) for e in watcher.get_new_events())
sbx.files.write("watched/a.txt", "one more")
sbx.files.remove("watched/sub/b.txt")
second = sorted((e.name, e.type.value) for e in watcher.get_new_events())
quiet = watcher.get_new_events()
watcher.stop()
seen["watch"] = {"first": first, "second": second, "quiet": len(quiet)}

# A background command: listed, then killed.
handle = sbx.commands.run("sleep 600", background=True)
listed = [p.pid for p in sbx.commands.list()]
killed = sbx.commands.kill(handle.pid)
time.sleep(0.5)
after = [p.pid for p in sbx.commands.list()]
seen["background"] = {"pid": handle.pid, "listed": listed, "killed": killed, "after": after}

# A client that goes away ends the server's follow of its command (the command runs on): no
# follow is left holding the thread for the rest of its keepalive window.
lingering = sbx.commands.run("sleep 30", background=True)
lingering.disconnect()
time.sleep(2)
request = urllib.request.Request(
    f"{base}/v1/threads/{name('agent')}", headers={"Authorization": f"Bearer {key}"}
)
with urllib.request.urlopen(request) as reply:
    holds = json.load(reply)["session"]["holds"]
seen["follows_after_disconnect"] = [h["owner"] for h in holds if h["owner"] == "process-follow"]
sbx.commands.kill(lingering.pid)

# The thread's cap on running processes holds through Start as through threadbox's API.
capped = Sandbox.create(idempotency_key=name("capped"))
started, refusal = [], None
for _ in range(40):
    try:
        started.append(capped.commands.run("sleep 60", background=True).pid)
    except Exception as e:  # noqa: BLE001  (the test reads which refusal it was)
        refusal = f"{type(e).__name__}: {e}"
        break
seen["process_cap"] = {"started": len(started), "refusal": refusal}
capped.kill()

# Stdin in one piece larger than threadbox's 64 KiB a write: envd takes it whole.
counter = sbx.commands.run("head -c 200000 | wc -c", background=True, stdin=True, timeout=30)
try:
    sbx.commands.send_stdin(counter.pid, "x" * 200000)
    seen["big_stdin"] = counter.wait().stdout.strip()
except Exception as e:  # noqa: BLE001  (reported to the test, which fails on it)
    seen["big_stdin"] = repr(e)
    counter.kill()

# StreamInput, envd's client stream of input (no SDK method sends it; Connect clients can):
# `start` naming the process, then `data` and `keepalive` messages, one envelope each.
def envelope(message):
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload

upper = sbx.commands.run("head -c 11 | tr a-z A-Z", background=True, stdin=True, timeout=30)
try:
    body = (
        envelope({"start": {"process": {"pid": upper.pid}}})
        + envelope({"data": {"input": {"stdin": base64.b64encode(b"hello ").decode()}}})
        + envelope({"keepalive": {}})
        + envelope({"data": {"input": {"stdin": base64.b64encode(b"world").decode()}}})
    )
    answer = httpx.post(
        f"{sbx.envd_api_url}/process.Process/StreamInput",
        content=body,
        headers={
            "content-type": "application/connect+json",
            "connect-protocol-version": "1",
            "X-Access-Token": sbx._envd_access_token,
            "E2b-Sandbox-Id": sbx.sandbox_id,
            "Authorization": "Basic " + base64.b64encode(b"user:").decode(),
        },
        timeout=30,
    )
    seen["stream_input"] = {"status": answer.status_code, "stdout": upper.wait().stdout}
except Exception as e:  # noqa: BLE001  (reported to the test, which fails on it)
    seen["stream_input"] = repr(e)
    upper.kill()

# A download past the 100 MiB a provider reads into memory: streamed, as threadbox's API does.
sbx.commands.run("head -c 110000000 /dev/zero > ~/big.bin")
try:
    seen["big_download"] = len(sbx.files.read("big.bin", format="bytes"))
except Exception as e:  # noqa: BLE001  (reported to the test, which fails on it)
    seen["big_download"] = repr(e)
sbx.files.remove("big.bin")

# A gzip-compressed upload is refused, not written as the compressed bytes.
try:
    sbx.files.write("zipped.txt", "not compressed on disk", gzip=True)
    seen["gzip_upload"] = "written: " + sbx.files.read("zipped.txt")[:20]
except Exception as e:  # noqa: BLE001  (the test reads which refusal it was)
    seen["gzip_upload"] = f"{type(e).__name__}: {e}"

# Code in the sandbox links out of its areas; the file calls do not follow it there.
sbx.commands.run("ln -sf /etc/passwd ~/escape; ln -sf /proc/1/root/etc/hostname ~/escape2")
escapes = {}
for link in ["escape", "escape2", "/tmp/../etc/passwd", "/etc/passwd"]:
    try:
        escapes[link] = "read: " + sbx.files.read(link)[:40]
    except Exception as e:  # noqa: BLE001  (the test reads which refusal it was)
        escapes[link] = type(e).__name__
try:
    sbx.files.write("escape", "overwritten")
    escapes["write escape"] = "wrote"
except Exception as e:  # noqa: BLE001
    escapes["write escape"] = type(e).__name__
seen["escapes"] = escapes

# Files: write, read, list, exists, make_dir, rename, remove.
sbx.files.write("notes/hello.txt", "hello from python\n")
sbx.files.write_files([{"path": "notes/two.txt", "data": b"two"}])
made = sbx.files.make_dir("notes/sub")
made_again = sbx.files.make_dir("notes/sub")
sbx.files.rename("notes/two.txt", "notes/three.txt")
entries = sorted(e.name for e in sbx.files.list("notes"))
text = sbx.files.read("notes/hello.txt")
sbx.files.remove("notes/three.txt")
seen["files"] = {
    "read": text,
    "list": entries,
    "made": made,
    "made_again": made_again,
    "exists_after_remove": sbx.files.exists("notes/three.txt"),
    "exists": sbx.files.exists("notes/hello.txt"),
}

# Pause, then connect: the files are still there, under the same id.
paused = sbx.pause()
info = Sandbox.get_info(sbx.sandbox_id)
resumed = Sandbox.connect(sbx.sandbox_id)
seen["pause"] = {
    "paused": paused,
    "state": str(info.state.value if hasattr(info.state, "value") else info.state),
    "connected_id": resumed.sandbox_id,
    "read_after": resumed.files.read("notes/hello.txt"),
    "running": resumed.is_running(),
}

# List, filtered by metadata.
mine = Sandbox.list(query=SandboxQuery(metadata={"suite": prefix})).next_items()
seen["list"] = sorted(s.sandbox_id for s in mine)

# Kill: gone for the control plane, and for envd.
seen["kill"] = {"first": Sandbox.kill(by_meta.sandbox_id), "second": Sandbox.kill(by_meta.sandbox_id)}
try:
    Sandbox.get_info(by_meta.sandbox_id)
    seen["kill"]["info"] = "found"
except NotFoundException:
    seen["kill"]["info"] = "not found"
except Exception as e:  # noqa: BLE001
    seen["kill"]["info"] = f"{type(e).__name__}: {e}"
seen["kill"]["running"] = by_meta.is_running()

# A wrong key is refused.
try:
    Sandbox.create(idempotency_key=name("intruder"), api_key="not-a-threadbox-key")
    seen["wrong_key"] = "created"
except AuthenticationException:
    seen["wrong_key"] = "AuthenticationException"
except Exception as e:  # noqa: BLE001
    seen["wrong_key"] = f"{type(e).__name__}: {e}"

print(json.dumps(seen))
