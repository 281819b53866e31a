//! The scripts that run in the sandbox for its background processes (see the parent module for
//! the record they keep). Every script is a constant; the caller's values arrive as positional
//! arguments.

/// The processes' folder and one process's, from its id (`$1`); exit 3 when it does not exist.
pub(super) const PROCESS_DIR: &str = r#"
base="${HOME:-/home/user}/.threadbox/processes"
D="$base/$1"
if [ ! -d "$D" ] || [ -L "$D" ]; then printf 'no such process: %s\n' "$1" >&2; exit 3; fi
"#;

/// `val FILE VAR [N]`: the first line (or with N, the first N characters) of one of a record's
/// files into VAR, empty when it cannot be read. The sandbox writes these files and may plant
/// anything in their place, so only a regular file is read; it is opened read-write, which
/// never blocks even on a FIFO swapped in after the check, and read with a timeout and a bound.
/// All builtins: no process is forked.
pub(super) const VAL: &str = r#"
val() {
  local __v=
  if [ -f "$1" ] && [ ! -L "$1" ]; then
    if [ -n "$3" ]; then IFS= read -r -t 1 -N "$3" __v <> "$1"; else IFS= read -r -t 1 -n 64 __v <> "$1"; fi || :
  fi 2>/dev/null
  printf -v "$2" '%s' "$__v"
}
num() { case $1 in ''|*[!0-9]*) return 1;; esac; [ ${#1} -le 18 ]; }
"#;

/// One line describing the process in `$D` (its id is `${D##*/}`): tab-separated id, state,
/// exit code, started, ended, pty, output bytes, output start, then the command (tabs and line
/// breaks in it replaced by spaces). Fails (status 1, nothing printed) for a record whose chunk
/// size is not a number. Leaves the chunk size, output bytes and start in `R_C`, `R_BYTES` and
/// `R_START`. The host checks every field again (`RawRecord::check`).
pub(super) const DESCRIBE: &str = r#"
describe() {
  local d=$1 id=${1##*/} state=running code= started= ended= last=-1 first=-1 size=0 pty=0 cmd= C= sup= f n bytes start
  val "$d/chunk" C
  num "$C" && [ ${#C} -le 9 ] && [ "$C" -gt 0 ] && [ $((C % 8)) -eq 0 ] || return 1
  { [ -e "$d/tty" ] || [ -e "$d/pty" ]; } && pty=1
  val "$d/started_at" started
  if [ -e "$d/status" ]; then state=exited; val "$d/status" code; val "$d/ended_at" ended
  else
    val "$d/supervisor" sup
    if ! num "$sup" || ! kill -0 "$sup" 2>/dev/null; then state=lost; fi
  fi
  for f in "$d"/out.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    n=${f##*.}; n=$((10#$n))
    [ $last -lt $n ] && last=$n
    { [ $first -lt 0 ] || [ $first -gt $n ]; } && first=$n
  done
  if [ $last -ge 0 ]; then
    size=$(stat -c %s -- "$d/out.$(printf %09d $last)" 2>/dev/null); num "$size" || size=0
    bytes=$((last * C + size)); start=$((first * C))
  else bytes=0; start=0; fi
  val "$d/command" cmd 300
  cmd=${cmd//[$'\t\n\r']/ }
  R_C=$C; R_BYTES=$bytes; R_START=$start
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$state" "$code" "$started" "$ended" "$pty" "$bytes" "$start" "$cmd"
}
"#;

/// Runs the command: records its process group, sets up the terminal, then becomes the command.
/// `$D`, `$PTY` (`COLSxROWS` or empty), `$WORKDIR` and `$OWN` come from the environment.
pub(super) const RUNNER: &str = r#"read -r _ _ _ _ g _ < /proc/$$/stat; echo "$g" > "$D/pgid"
if [ -n "$PTY" ]; then tty > "$D/tty"; stty cols "${PTY%x*}" rows "${PTY#*x}" 2>/dev/null; fi
[ -z "$OWN" ] || chown -h -- "$OWN" "$D/pgid" "$D/tty" 2>/dev/null
unset OWN
cd -- "$WORKDIR" || exit 126
while IFS= read -r -d '' kv; do export "$kv"; done < "$D/env"
mapfile -d '' -t argv < "$D/argv"
exec "${argv[@]}"
"#;

/// `split`'s filter for each new chunk: delete the chunk `$KEEP` places back, then write this one.
pub(super) const RING_FILTER: &str = r#"n=${FILE##*.}; old=$((10#$n - KEEP)); if [ $old -ge 0 ]; then rm -f -- "$D/out.$(printf %09d $old)" "$D/err.$(printf %09d $old)"; fi; exec cat > "$FILE""#;

/// The ring's writer when stdout and stderr are kept apart: reads both (`$0`'s stdin and fd 3)
/// as they come, writes the bytes in the order they arrive into the ring as `split` would, and
/// for stderr's bytes sets their bits in the chunk's tag bitmap (`err.N`: bit i, least
/// significant first, is byte i of `out.N`) before writing the bytes, so a reader that sees
/// output sees its tags. A chunk without a tag file is all stdout. `$ARGV[0]` is the process
/// folder, `$ARGV[1]` the chunk size (a multiple of 8), `$ARGV[2]` the chunks kept. Perl is
/// `perl-base`, part of every Debian and Ubuntu system; without it the supervisor merges the
/// streams as before.
pub(super) const RELAY: &str = r#"use strict; use warnings;
my ($d, $c, $keep) = @ARGV;
open(my $err, '<&=', 3) or die "no stderr pipe: $!";
my @in = (\*STDIN, $err);
my ($pos, $k, $out, $tags, $bits) = (0, -1, undef, undef, '');
sub name { sprintf('%s/%s.%09d', $d, @_) }
sub put_all { my ($fh, $s) = @_; while (length $s) { my $w = syswrite($fh, $s); die "write: $!" unless defined $w; substr($s, 0, $w, ''); } }
sub mark { my ($from, $to) = @_;
  while ($from < $to && ($from & 7)) { vec($bits, $from++, 1) = 1 }
  while ($to > $from && ($to & 7)) { vec($bits, --$to, 1) = 1 }
  return if $to <= $from;
  my ($at, $n) = ($from >> 3, ($to - $from) >> 3);
  $bits .= "\0" x ($at + $n - length $bits) if length $bits < $at + $n;
  substr($bits, $at, $n) = "\xff" x $n;
}
sub put { my ($buf, $is_err) = @_;
  while (length $buf) {
    my $n = int($pos / $c);
    if ($n != $k) {
      ($k, $tags, $bits) = ($n, undef, '');
      unlink(name('out', $k - $keep), name('err', $k - $keep)) if $k >= $keep;
      open($out, '>', name('out', $k)) or die "open: $!";
    }
    my $off = $pos % $c;
    my $piece = substr($buf, 0, $c - $off, '');
    my $len = length $piece;
    if ($is_err) {
      if (!$tags) { open($tags, '+>', name('err', $k)) or die "open: $!" }
      mark($off, $off + $len);
      my ($first, $last) = ($off >> 3, ($off + $len - 1) >> 3);
      sysseek($tags, $first, 0) or die "seek: $!";
      put_all($tags, substr($bits, $first, $last - $first + 1));
    }
    put_all($out, $piece);
    $pos += $len;
  }
}
my %live = (0 => 1, 1 => 1);
while (%live) {
  my ($rin, $rout) = ('', '');
  vec($rin, fileno($in[$_]), 1) = 1 for keys %live;
  if (select($rout = $rin, undef, undef, undef) < 0) { next if $!{EINTR}; die "select: $!" }
  for my $i (sort keys %live) {
    next unless vec($rout, fileno($in[$i]), 1);
    my $r = sysread($in[$i], my $buf, 65536);
    if (!defined $r) { next if $!{EINTR} || $!{EAGAIN}; delete $live{$i}; next }
    if ($r == 0) { delete $live{$i}; next }
    put($buf, $i);
  }
}
"#;

/// The supervisor: runs the command (through `script` with a PTY) in a session of its own, its
/// output through the ring, then records how it ended. `$1` is the process folder. Without a
/// terminal, stdout and stderr reach the ring through two FIFOs and [`RELAY`], which keeps
/// which stream each byte came from; with one (a terminal has one output) or without perl,
/// they are merged into `split`, as a terminal shows them.
///
/// Started as root, `$OWN` (`uid:gid`) is the user who owns the record: what root writes into
/// it is given to them, so the user's own calls (a follow, a listing, input, a clean-up) read
/// and write it as any other, and the ring's writer runs as them (`setpriv`; where there is none,
/// as root, its chunks still readable by all and removable from the user's folder).
pub(super) const SUPERVISOR: &str = r#"export D=$1
C=$(cat "$D/chunk")
as_owner=
if [ -n "$OWN" ] && command -v setpriv > /dev/null 2>&1; then as_owner="setpriv --reuid=${OWN%:*} --regid=${OWN#*:} --clear-groups"; fi
mine() { [ -z "$OWN" ] || chown -h -- "$OWN" "$@" 2>/dev/null; }
if [ -z "$PTY" ] && command -v perl > /dev/null 2>&1 && mkfifo -m 600 "$D/stdout.pipe" "$D/stderr.pipe"; then
  mine "$D/stdout.pipe" "$D/stderr.pipe"
  $as_owner perl -e "$(cat "$D/relay")" "$D" "$C" "$KEEP" < "$D/stdout.pipe" 3< "$D/stderr.pipe" &
  relay=$!
  setsid -w bash "$D/runner" <> "$D/stdin" > "$D/stdout.pipe" 2> "$D/stderr.pipe"
  echo $? > "$D/code"; mine "$D/code"
  wait "$relay"
  rm -f -- "$D/stdout.pipe" "$D/stderr.pipe"
else
{
  if [ -n "$PTY" ]; then
    setsid -w script -qfec "bash $(printf %q "$D/runner")" /dev/null <> "$D/stdin" 2>&1
  else
    setsid -w bash "$D/runner" <> "$D/stdin" 2>&1
  fi
  echo $? > "$D/code"; mine "$D/code"
} | SHELL=/bin/bash $as_owner split -b "$C" -d -a 9 --filter="$(cat "$D/filter")" - "$D/out."
fi
date +%s%3N > "$D/ended_at"; mine "$D/ended_at"
mv -f "$D/code" "$D/status" 2>/dev/null || { echo 255 > "$D/status"; mine "$D/status"; }
"#;

/// `$RECORDS_HOME` is the home the records live under (the user's, when started as root);
/// `$1` id, `$2` command text, `$3` chunk bytes, `$4` chunks kept, `$5` PTY size or empty, `$6`
/// working directory or empty, `$7` most processes, `$8` how many `NAME=value` arguments follow
/// for the command's environment; the rest is the argv.
pub(super) const START: &str = r#"set -e
home=${RECORDS_HOME:-${HOME:-/home/user}}
base="$home/.threadbox/processes"
mkdir -p "$base"
D="$base/$1"
running=0
for d in "$base"/*/; do
  [ -d "$d" ] || continue
  [ -e "$d/status" ] && continue
  val "$d/supervisor" s
  num "$s" && kill -0 "$s" 2>/dev/null && running=$((running + 1))
done
if [ "$running" -ge "$7" ]; then printf 'this sandbox already runs %s background processes; stop one first\n' "$running" >&2; exit 4; fi
# Forget the oldest ended processes past the limit.
ls -1tr "$base" | while read -r old; do
  [ "$(ls -1 "$base" | wc -l)" -ge "$7" ] || break
  case $old in ''|*[!A-Za-z0-9]*) continue;; esac
  if [ -e "$base/$old/status" ]; then rm -rf -- "${base:?}/$old"; fi
done || true
if [ -e "$D" ]; then printf 'process %s exists already\n' "$1" >&2; exit 4; fi
mkdir "$D"
printf '%s' "$2" > "$D/command"
printf '%s' "$3" > "$D/chunk"
printf '%s' "$RUNNER" > "$D/runner"
printf '%s' "$FILTER" > "$D/filter"
printf '%s' "$RELAY" > "$D/relay"
[ -z "$5" ] || printf '%s' "$5" > "$D/pty"
mkfifo -m 600 "$D/stdin"
date +%s%3N > "$D/started_at"
WORKDIR=${6:-${HOME:-/home/user}}; export WORKDIR; PTY=$5; export PTY; KEEP=$4; export KEEP
max=$7; nenv=$8; shift 8
: > "$D/env"
[ "$nenv" -eq 0 ] || printf '%s\0' "${@:1:$nenv}" > "$D/env"
shift "$nenv"
printf '%s\0' "$@" > "$D/argv"
# Started as root (not a rootless sandbox's, whose user is uid 0): the record is the user's.
OWN=
if [ "$(id -u)" = 0 ]; then
  OWN=$(stat -c %u:%g -- "$home") || OWN=
  case $OWN in 0:*) OWN=;; esac
  if [ -n "$OWN" ]; then chown -h -- "$OWN" "$home/.threadbox" "$base" && chown -hR -- "$OWN" "$D" || OWN=; fi
fi
export OWN
setsid bash -c "$SUPERVISOR" supervise "$D" < /dev/null > /dev/null 2>&1 &
echo $! > "$D/supervisor"
set +e
# Wait (briefly) until the command has said it runs, so a signal right after reaches it.
for _ in $(seq 200); do if [ -e "$D/pgid" ] || [ -e "$D/status" ]; then break; fi; sleep 0.01; done
describe "$D"
"#;

/// `$1` the most records to describe. Only folders named like a process id are records: a
/// name with a tab or a line break in it must not be able to forge one.
pub(super) const LIST: &str = r#"base="${HOME:-/home/user}/.threadbox/processes"
[ -d "$base" ] && [ ! -L "$base" ] || exit 0
n=0
for d in "$base"/*; do
  id=${d##*/}
  case $id in ''|*[!A-Za-z0-9]*) continue;; esac
  [ ${#id} -le 32 ] && [ -d "$d" ] && [ ! -L "$d" ] || continue
  n=$((n + 1)); [ $n -le "$1" ] || break
  describe "$d"
done
exit 0
"#;

/// `tags FROM TO`: the stream tags of output bytes [FROM, TO) (absolute offsets in one or more
/// chunks of `$C` bytes, a multiple of 8), as bitmap bytes [FROM/8, (TO+7)/8): each chunk's
/// `err.N` where there is one, zeros where not (all stdout). Always exactly that many bytes.
pub(super) const TAGS: &str = r#"
tags() {
  local from=$1 to=$2 j lo hi n t
  while [ "$from" -lt "$to" ]; do
    j=$((from / C)); lo=$((from - j * C)); hi=$((to - j * C)); [ $hi -gt $C ] && hi=$C
    n=$(((hi + 7) / 8 - lo / 8)); t="$D/err.$(printf %09d $j)"
    if [ -f "$t" ] && [ ! -L "$t" ]; then
      { dd if="$t" iflag=nonblock,skip_bytes,count_bytes skip=$((lo / 8)) count=$n bs=65536 status=none 2>/dev/null; head -c $n /dev/zero; } | head -c $n
    else head -c $n /dev/zero; fi
    from=$(((j + 1) * C))
  done
}
"#;

/// `$2` offset, `$3` most bytes: the description line, then `POS LEN` (where the bytes start,
/// the ring's start when the offset has left it, and how many follow at most), the bytes'
/// tags (see [`TAGS`]) and the bytes.
pub(super) const READ: &str = r#"describe "$D" || { echo "the record of process $1 is damaged" >&2; exit 6; }
C=$R_C; bytes=$R_BYTES; start=$R_START
pos=$2; [ "$pos" -lt "$start" ] && pos=$start
[ "$pos" -ge "$bytes" ] && exit 0
want=$3; [ $((bytes - pos)) -lt "$want" ] && want=$((bytes - pos))
printf '%s %s\n' "$pos" "$want"
tags "$pos" $((pos + want))
k=$((pos / C)); off=$((pos % C)); last=$(((bytes - 1) / C))
{
  dd if="$D/out.$(printf %09d $k)" iflag=nonblock,skip_bytes skip="$off" bs=65536 status=none 2>/dev/null
  j=$((k + 1)); while [ $j -le $last ]; do dd if="$D/out.$(printf %09d $j)" iflag=nonblock bs=65536 status=none 2>/dev/null; j=$((j + 1)); done
} | head -c "$want"
"#;

/// The most output bytes in one frame of a follow.
pub(super) const FRAME_BYTES: u64 = 65536;

/// `$2` offset: output from there as it comes, until the process has ended and all of it is
/// sent, as frames: a line `POS LEN`, the bytes' tags (see [`TAGS`]), then LEN bytes (at most
/// [`FRAME_BYTES`]). A frame after output that left the ring starts past where the last ended.
pub(super) const FOLLOW: &str = r#"val "$D/chunk" C
num "$C" && [ ${#C} -le 9 ] && [ "$C" -gt 0 ] && [ $((C % 8)) -eq 0 ] || { echo "the record of process $1 is damaged" >&2; exit 6; }
pos=$2
while :; do
  k=$((pos / C)); off=$((pos % C)); f="$D/out.$(printf %09d $k)"
  ended=0; [ -e "$D/status" ] && ended=1
  if [ -f "$f" ] && [ ! -L "$f" ]; then
    size=$(stat -c %s -- "$f"); num "$size" || size=0
    if [ "$size" -gt "$off" ]; then
      n=$((size - off)); [ $n -gt 65536 ] && n=65536; [ $((off + n)) -gt $C ] && n=$((C - off))
      printf '%s %s\n' "$pos" "$n"
      tags "$pos" $((pos + n))
      { dd if="$f" iflag=nonblock,skip_bytes,count_bytes skip="$off" count=$n bs=65536 status=none 2>/dev/null; head -c $n /dev/zero; } | head -c $n
      pos=$((pos + n)); continue
    fi
    if [ "$size" -ge "$C" ]; then pos=$(((k + 1) * C)); continue; fi
  else
    first=-1
    for g in "$D"/out.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]; do [ -f "$g" ] || continue; n=${g##*.}; n=$((10#$n)); { [ $first -lt 0 ] || [ $n -lt $first ]; } && first=$n; done
    if [ $first -gt $k ]; then pos=$((first * C)); continue; fi
  fi
  if [ $ended = 1 ]; then exit 0; fi
  if [ ! -e "$D/status" ] && { val "$D/supervisor" sup; ! num "$sup" || ! kill -0 "$sup" 2>/dev/null; }; then exit 0; fi
  sleep "$POLL"
done
"#;

/// `$2` signal name: to the command's whole process group.
pub(super) const SIGNAL: &str = r#"if [ -e "$D/status" ]; then exit 0; fi
val "$D/pgid" g
num "$g" && [ "$g" -gt 1 ] || { echo "the process has not started yet" >&2; exit 5; }
kill -s "$2" -- "-$g" 2>/dev/null || kill -s "$2" -- "$g" 2>/dev/null || true
"#;

/// Input on stdin goes to the process's input.
pub(super) const INPUT: &str = r#"if [ -e "$D/status" ]; then echo "the process has ended" >&2; exit 5; fi
[ -p "$D/stdin" ] || { echo "the process takes no input" >&2; exit 5; }
exec cat > "$D/stdin"
"#;

/// `$2` columns, `$3` rows.
pub(super) const RESIZE: &str = r#"if [ ! -e "$D/tty" ]; then echo "the process has no terminal" >&2; exit 5; fi
[ -e "$D/status" ] && exit 0
val "$D/tty" t
case $t in /dev/pts/[0-9]*) ;; *) echo "the process has no terminal" >&2; exit 5;; esac
stty -F "$t" cols "$2" rows "$3"
"#;
