"""The calls the OpenAI Agents SDK's E2B sandbox client makes, with E2B's Python SDK.

Usage: sdk_agents.py BASE_URL API_KEY PREFIX

Read from openai/openai-agents-python, src/agents/extensions/sandbox/e2b/sandbox.py (commit
7f7a44f8dc06, 2026-08-22): `E2BSandboxClient.create` and `.resume`, and `E2BSandboxSession`'s
exec (`commands.run` with timeout, cwd and envs), PTY sessions (`pty.create`, `pty.send_stdin`),
file reads and writes in bytes, `make_dir`, `remove`, the tar workspace persistence
(`tar -cf - . | base64 -w0`, then `tar -xf`), `is_running`, `pause` on exit and `kill`. The
same arguments, on the async SDK it uses, against threadbox's E2B API; prints what it saw as
JSON for cli/tests/e2b_sdk.rs.
"""

import asyncio
import base64
import json
import os
import sys

base, key, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["E2B_API_URL"] = f"{base}/e2b"
os.environ["E2B_SANDBOX_URL"] = f"{base}/e2b"
os.environ["E2B_API_KEY"] = key

from e2b import AsyncSandbox  # noqa: E402
from e2b.sandbox.commands.command_handle import PtySize  # noqa: E402

seen = {}


async def create():
    # `_sandbox_create` with the client's defaults: no template, no timeout, secure, internet,
    # no network (no exposed ports), lifecycle on_timeout=pause with auto_resume, no envs.
    return await AsyncSandbox.create(
        template=None,
        timeout=None,
        metadata={"threadbox_thread": f"{prefix}-session", "agent": prefix},
        envs=None,
        secure=True,
        allow_internet_access=True,
        network=None,
        lifecycle={"on_timeout": "pause", "auto_resume": True},
    )


async def main():
    sbx = await create()
    seen["created"] = sbx.sandbox_id
    root = "/home/user/workspace"
    made = await sbx.files.make_dir(root, request_timeout=10)
    await sbx.files.write(f"{root}/task.txt", b"write a haiku\n", request_timeout=10)
    run = await sbx.commands.run(
        "cat task.txt; echo $AGENT_STEP",
        timeout=30,
        cwd=root,
        envs={"AGENT_STEP": "1"},
        user=None,
    )
    seen["exec"] = {"made": made, "stdout": run.stdout, "exit_code": run.exit_code}
    read = await sbx.files.read(f"{root}/task.txt", format="bytes")
    seen["read"] = bytes(read).decode()

    # An interactive session on a terminal, as the client's tty exec does.
    chunks = []
    pty = await sbx.pty.create(
        size=PtySize(rows=24, cols=80),
        cwd=root,
        envs={"AGENT_STEP": "2"},
        timeout=30,
        on_data=lambda data: chunks.append(bytes(data)),
    )
    await sbx.pty.send_stdin(pty.pid, b"echo from-the-pty-$AGENT_STEP; exit\n", request_timeout=10)
    ended = await pty.wait()
    seen["pty"] = {
        "output": b"".join(chunks).decode(errors="replace"),
        "exit_code": ended.exit_code,
    }

    # The tar workspace persistence: the archive travels as base64 on stdout, then is unpacked.
    archived = await sbx.commands.run(f"tar -C {root} -cf - . | base64 -w0", timeout=60)
    tar = base64.b64decode(archived.stdout)
    await sbx.files.write("/tmp/workspace.tar", tar, request_timeout=30)
    await sbx.files.remove(f"{root}/task.txt", request_timeout=10)
    await sbx.commands.run(f"tar -C {root} -xf /tmp/workspace.tar", timeout=60)
    restored = await sbx.files.read(f"{root}/task.txt", format="bytes")
    seen["tar"] = {"bytes": len(tar), "restored": bytes(restored).decode()}

    # pause_on_exit, then `resume`: connect by id, and the workspace is still there.
    await sbx.pause()
    again = await AsyncSandbox.connect(sandbox_id=sbx.sandbox_id, timeout=None)
    seen["resume"] = {
        "id": again.sandbox_id,
        "running": await again.is_running(request_timeout=10),
        "read": bytes(await again.files.read(f"{root}/task.txt", format="bytes")).decode(),
    }
    seen["killed"] = await again.kill()
    seen["running_after_kill"] = await again.is_running(request_timeout=10)
    print(json.dumps(seen), flush=True)


asyncio.run(main())
# The async SDK's teardown at interpreter exit sometimes aborts (SIGABRT, nothing on stderr)
# after everything above has run and been printed; end here, as a finished client would.
os._exit(0)
