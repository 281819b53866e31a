// E2B's official JS SDK (pinned in scripts/lib.sh) against threadbox's E2B API.
//
// Usage: node sdk_js.cjs BASE_URL API_KEY PREFIX   (NODE_PATH: the SDK's node_modules)
//
// Sets only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, runs what code written for E2B does,
// and prints what it saw as one JSON object for cli/tests/e2b_sdk.rs to check. The JS SDK sends
// no idempotency key: threads are named by the `threadbox_thread` metadata entry.

const [base, key, prefix] = process.argv.slice(2)
process.env.E2B_API_URL = `${base}/e2b`
process.env.E2B_SANDBOX_URL = `${base}/e2b`
process.env.E2B_API_KEY = key

const {
  AuthenticationError,
  CommandExitError,
  Sandbox,
  SandboxNotFoundError,
} = require('e2b')

const name = (suffix) => `${prefix}-${suffix}`
const seen = {}

async function main() {
  const sbx = await Sandbox.create({
    metadata: { threadbox_thread: name('agent'), suite: prefix },
  })
  const again = await Sandbox.create({ metadata: { threadbox_thread: name('agent') } })
  seen.by_metadata = { id: sbx.sandboxId, again: again.sandboxId }

  // Eight creates at once for one new thread.
  const errors = []
  const burst = await Promise.all(
    Array.from({ length: 8 }, () =>
      Sandbox.create({ metadata: { threadbox_thread: name('burst') } })
        .then((s) => s.sandboxId)
        .catch((e) => {
          errors.push(String(e))
          return null
        })
    )
  )
  const ids = burst.filter((id) => id !== null)
  seen.burst = { ids: [...new Set(ids)].sort(), count: ids.length, errors }

  // A command's output arrives while it runs (chunks; each line is written on its own).
  const start = Date.now()
  const lines = []
  const result = await sbx.commands.run('echo first; sleep 2; echo second', {
    onStdout: (data) => lines.push([data.trim(), (Date.now() - start) / 1000]),
  })
  seen.run = {
    stdout: result.stdout,
    exit_code: result.exitCode,
    lines,
    took: (Date.now() - start) / 1000,
  }
  try {
    await sbx.commands.run('echo oops; exit 3')
    seen.failing = { raised: false }
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    seen.failing = { raised: true, exit_code: e.exitCode, stdout: e.stdout }
  }

  // stdout and stderr apart, each as it comes, and in a failing command's error.
  const outSeen = []
  const errSeen = []
  const mixed = await sbx.commands.run('echo out1; echo err1 >&2; sleep 0.3; echo out2; echo err2 >&2', {
    onStdout: (data) => outSeen.push(data),
    onStderr: (data) => errSeen.push(data),
  })
  seen.streams = {
    stdout: mixed.stdout,
    stderr: mixed.stderr,
    on_stdout: outSeen.join(''),
    on_stderr: errSeen.join(''),
  }
  try {
    await sbx.commands.run('echo fine; echo bad >&2; exit 4')
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    seen.streams.failing = { stdout: e.stdout, stderr: e.stderr }
  }

  // Who a command runs as: the sandbox's user, or its root when asked.
  const rootRun = await sbx.commands.run('id -u; touch ~/by-root && chown 0:0 ~/by-root && stat -c %u ~/by-root', { user: 'root' })
  const rootBackground = await sbx.commands.run('id -u', { user: 'root', background: true })
  seen.users = {
    default: (await sbx.commands.run('id -u')).stdout.trim(),
    user: (await sbx.commands.run('id -u', { user: 'user' })).stdout.trim(),
    root: rootRun.stdout.split(/\s+/).filter((w) => w),
    root_background: (await rootBackground.wait()).stdout.trim(),
  }

  // Watching a folder: events stream in as the folder changes.
  await sbx.files.makeDir('jswatched')
  const watched = []
  const watch = await sbx.files.watchDir('jswatched', (e) => watched.push([e.name, e.type]))
  // Each change is seen before the next is made (up to 10 s each, however loaded the machine).
  const seenEvents = async (count) => {
    for (let i = 0; i < 100 && watched.length < count; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  await sbx.files.write('jswatched/a.txt', 'one')
  await seenEvents(1)
  await sbx.files.write('jswatched/a.txt', 'one more')
  await seenEvents(2)
  await sbx.files.remove('jswatched/a.txt')
  await seenEvents(3)
  // Nothing more comes of a quiet folder.
  await new Promise((resolve) => setTimeout(resolve, 1200))
  await watch.stop()
  seen.watch = watched

  // A background command: listed, then killed.
  const handle = await sbx.commands.run('sleep 600', { background: true })
  const listed = (await sbx.commands.list()).map((p) => p.pid)
  const killed = await sbx.commands.kill(handle.pid)
  await new Promise((r) => setTimeout(r, 500))
  const after = (await sbx.commands.list()).map((p) => p.pid)
  seen.background = { pid: handle.pid, listed, killed, after }

  // Files: write, read, list, exists, makeDir, rename, remove.
  await sbx.files.write('notes/hello.txt', 'hello from js\n')
  await sbx.files.write('notes/two.txt', 'two')
  const made = await sbx.files.makeDir('notes/sub')
  const madeAgain = await sbx.files.makeDir('notes/sub')
  await sbx.files.rename('notes/two.txt', 'notes/three.txt')
  const entries = (await sbx.files.list('notes')).map((e) => e.name).sort()
  const text = await sbx.files.read('notes/hello.txt')
  await sbx.files.remove('notes/three.txt')
  seen.files = {
    read: text,
    list: entries,
    made,
    made_again: madeAgain,
    exists_after_remove: await sbx.files.exists('notes/three.txt'),
    exists: await sbx.files.exists('notes/hello.txt'),
  }

  // Pause, then connect: the files are still there, under the same id.
  const paused = await sbx.pause()
  const info = await Sandbox.getInfo(sbx.sandboxId)
  const resumed = await Sandbox.connect(sbx.sandboxId)
  seen.pause = {
    paused,
    state: info.state,
    connected_id: resumed.sandboxId,
    read_after: await resumed.files.read('notes/hello.txt'),
    running: await resumed.isRunning(),
  }

  // List, filtered by metadata.
  const mine = await Sandbox.list({ query: { metadata: { suite: prefix } } }).nextItems()
  seen.list = mine.map((s) => s.sandboxId).sort()

  // Kill a sandbox of its own: gone for the control plane and for envd.
  const doomed = await Sandbox.create({ metadata: { threadbox_thread: name('doomed') } })
  seen.kill = {
    first: await Sandbox.kill(doomed.sandboxId),
    second: await Sandbox.kill(doomed.sandboxId),
  }
  try {
    await Sandbox.getInfo(doomed.sandboxId)
    seen.kill.info = 'found'
  } catch (e) {
    seen.kill.info = e instanceof SandboxNotFoundError ? 'not found' : `${e.name}: ${e.message}`
  }
  seen.kill.running = await doomed.isRunning()

  // A wrong key is refused.
  try {
    await Sandbox.create({ apiKey: 'not-a-threadbox-key', metadata: { threadbox_thread: name('intruder') } })
    seen.wrong_key = 'created'
  } catch (e) {
    seen.wrong_key = e instanceof AuthenticationError ? 'AuthenticationError' : `${e.name}: ${e.message}`
  }
  process.stdout.write(JSON.stringify(seen) + '\n')
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
