# Fills a sandbox's process table: forks children that sleep until fork fails at the limit.
# It says so before it fills the table ("filling"), as the output ring forks its writer when
# the first output comes and could not at the limit, then how many it made ("full after N").
import os, time
print('filling', flush=True)
time.sleep(1)
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    n += 1
print('full after', n, flush=True)
time.sleep(600)
