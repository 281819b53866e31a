//! Scripts that tests run inside real sandboxes, written once for every test that needs them.

/// Python that fills the sandbox's process table: it prints `filling` first (a process's
/// output ring forks its writer when the first output comes, and could not at the limit),
/// forks sleepers until the kernel refuses, prints `full after N`, and sleeps.
pub const FILL_PROCESS_TABLE: &str = "import os, time\n\
    print('filling', flush=True)\n\
    time.sleep(1)\n\
    n = 0\n\
    while True:\n\
    \x20   try:\n\
    \x20       pid = os.fork()\n\
    \x20   except OSError:\n\
    \x20       break\n\
    \x20   if pid == 0:\n\
    \x20       time.sleep(600)\n\
    \x20       os._exit(0)\n\
    \x20   n += 1\n\
    print('full after', n, flush=True)\n\
    time.sleep(600)\n";
