#!/usr/bin/env bash
# The bus path against the OSG collector, side by side in one run on one
# input (issue #11, item 3). See BENCHMARKS.md, "Bus path against the OSG
# collector".
#
#   benchmarks/osg/run.sh OSG_SRC [WORKDIR]
#
# OSG_SRC is a clone of github.com/opensciencegrid/xrootd-monitoring-shoveler
# (its cmd/collector is built from it). The script
#   1. patches the clone's file input to block instead of dropping lines when
#      the collector is busy (a stock run drops input; see PATCH below), and
#      builds its cmd/collector;
#   2. builds xrdmon and generates the workload with `xrdmon loadgen`: the
#      same shoveler messages into a JSON-lines file and into a RabbitMQ
#      queue (loadgen is deterministic: both outputs carry the same bytes);
#   3. runs on loopback, in turns, the OSG collector (file in, file out)
#      and `xrdmon replay --schema gracc` (file in, GRACC JSON lines and
#      events out); then `xrdmon collect` draining the queue into its store
#      (RabbitMQ in);
#   4. checks that each one accounted for every message and made every
#      record, and prints one table and the ratio of each turn.
#
# Needs: go, curl, bc, a RabbitMQ at $AMQP_URL (default the local one,
# guest/guest) and rabbitmqctl (to delete the queue before and after).
# Knobs: REPEAT (runs of each collector, the table shows every run; default 3).
set -euo pipefail

OSG_SRC=${1:?usage: run.sh OSG_SRC [WORKDIR]}
WORK=${2:-$(mktemp -d /tmp/xrdmon-osgbench.XXXXXX)}
AMQP_URL=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
REPEAT=${REPEAT:-3}
HTTP_PORT=${HTTP_PORT:-39949}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
QUEUE=xrdmon-osgbench
EXCHANGE=xrdmon-osgbench

# The workload of the issue: 16 servers x 2,000 sessions x up to 4 files,
# 16 KiB f-stream buffers. --think 24h makes each of the 2,000 client slots
# per server run one session (32,000 sessions in all).
LOADGEN_FLAGS=(--servers 16 --clients 2000 --files-per-session 4 --fbsz 16384 --think 24h --duration 1m --seed 1)

mkdir -p "$WORK"
OSG_SRC=$(cd "$OSG_SRC" && pwd)
log() { echo "run.sh: $*" >&2; }

# --- 1. The OSG collector, patched to block rather than drop --------------
# Stock, FileReader.readLoop (input/input.go) sends each line with a select
# whose default branch drops it when the 100-slot channel is full, i.e.
# whenever the correlator is behind: a file is then only partly processed.
# The patch removes that default branch (the send blocks). Its g-stream
# queue (state.gstream_queue_size, default 20,000) also drops when full; the
# configuration below raises it beyond the number of messages.
PATCH=$(cat <<'EOF'
--- a/input/input.go
+++ b/input/input.go
@@ -411,13 +411,11 @@ func (f *FileReader) readLoop() {
 			data = []byte(jl.Data)
 		}
 
-		// Emit to channel with remote address (non-blocking)
+		// Emit to channel with remote address (blocking: benchmark patch, no drops)
 		select {
 		case f.packetsWithAddr <- PacketWithAddr{Data: data, RemoteAddr: jl.Remote}:
 		case <-f.stopChan:
 			return
-		default:
-			// Channel full, drop packet
 		}
 	}
 }
EOF
)
if (cd "$OSG_SRC" && echo "$PATCH" | patch -p1 -R --dry-run -s >/dev/null 2>&1); then
	log "OSG file input already patched (blocking)"
else
	(cd "$OSG_SRC" && echo "$PATCH" | patch -p1 -s) || { log "patching $OSG_SRC/input/input.go failed"; exit 1; }
	log "patched $OSG_SRC/input/input.go: FileReader.readLoop blocks instead of dropping"
fi
(cd "$OSG_SRC" && go build -o "$WORK/osg-collector" ./cmd/collector)
OSG_COMMIT=$(cd "$OSG_SRC" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
(cd "$REPO" && go build -o "$WORK/xrdmon" ./cmd/xrdmon)
XRDMON_COMMIT=$(cd "$REPO" && git rev-parse --short HEAD)

# --- 2. The workload --------------------------------------------------------
rabbitmqctl delete_queue "$QUEUE" >/dev/null 2>&1 || true
"$WORK/xrdmon" loadgen "${LOADGEN_FLAGS[@]}" --jsonl "$WORK/input.jsonl" 2>"$WORK/loadgen.log"
N=$(wc -l <"$WORK/input.jsonl")
log "workload: $N shoveler messages, $(du -m "$WORK/input.jsonl" | cut -f1) MB ($(head -1 "$WORK/loadgen.log"))"

# cpu PID: user+system CPU seconds of a live process.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' "/proc/$1/stat"; }
now() { date +%s.%N; }

ROWS=()
row() { ROWS+=("$(printf '| %s | %s | %.3f | %.2f | %s | %s |' "$1" "$2" "$3" "$4" "$(printf '%.0f' "$(echo "$2 / $3" | bc -l)")" "$5")"); }

# --- 3a/3b. OSG collector and xrdmon replay, in turns ------------------------
# Run i of the OSG collector (file in, file out) is followed at once by run
# i of `xrdmon replay --schema gracc` (file in, GRACC JSON lines and events
# out): this VM's speed drifts by tens of percent within minutes, so each
# ratio is taken between two runs a second apart, and the line after the
# table gives every ratio and their median. Wall time is measured around
# each process with nanosecond clocks (/usr/bin/time's is in hundredths of
# a second, a twentieth of a replay run); CPU is /usr/bin/time's user +
# system.
cat >"$WORK/osg.yaml" <<EOF
mode: collector
input:
  type: file
  path: $WORK/input.jsonl
  base64_encoded: true
  follow: false
state:
  gstream_queue_size: $((N + 1000))
output:
  type: file
  path: $WORK/osg-out.jsonl
debug: false
metrics: false
EOF
OSG_ROWS=() REPLAY_ROWS=() RATIOS=()
for r in $(seq "$REPEAT"); do
	rm -f "$WORK/osg-out.jsonl"
	t0=$(now)
	/usr/bin/time -f '%U %S' -o "$WORK/osg.time" "$WORK/osg-collector" -c "$WORK/osg.yaml" 2>"$WORK/osg.log"
	osg_wall=$(echo "$(now) - $t0" | bc)
	read -r u s <"$WORK/osg.time"
	out=$(wc -l <"$WORK/osg-out.jsonl")
	row "OSG collector $OSG_COMMIT (file → file)" "$N" "$osg_wall" "$(echo "$u + $s" | bc)" "$out"
	OSG_ROWS+=("${ROWS[-1]}")

	t0=$(now)
	/usr/bin/time -f '%U %S' -o "$WORK/replay.time" "$WORK/xrdmon" replay --schema gracc \
		--out "$WORK/replay-gracc.jsonl" --events "$WORK/replay-events.jsonl" "$WORK/input.jsonl" 2>"$WORK/replay.log"
	wall=$(echo "$(now) - $t0" | bc)
	read -r u s <"$WORK/replay.time"
	grep -q "^packets: $N handled, $N accounted, 0 rejected, 0 lost" "$WORK/replay.log" || { log "replay did not account every message:"; cat "$WORK/replay.log" >&2; exit 1; }
	out=$(($(wc -l <"$WORK/replay-gracc.jsonl") + $(wc -l <"$WORK/replay-events.jsonl")))
	row "xrdmon replay --schema gracc (file → file)" "$N" "$wall" "$(echo "$u + $s" | bc)" "$out"
	REPLAY_ROWS+=("${ROWS[-1]}")
	RATIOS+=("$(echo "$osg_wall / $wall" | bc -l)")
done
ROWS=("${OSG_ROWS[@]}" "${REPLAY_ROWS[@]}")
RECS=$(wc -l <"$WORK/replay-gracc.jsonl")
EVS=$(wc -l <"$WORK/replay-events.jsonl")

# --- 3c. xrdmon collect: RabbitMQ in, store out ------------------------------
# The queue is filled before the collector starts (loadgen writes the same
# messages as above: same flags, same seed). The time runs from the start of
# the process until every message is received and every record and event
# is in the store (its metrics, polled every 50 ms with curl); then the
# collector is stopped and the queue must be empty (every message
# acknowledged, i.e. durable).
metric() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v k="$1" '$1 == k {printf "%d", $2}'; }
for r in $(seq "$REPEAT"); do
	rabbitmqctl delete_queue "$QUEUE" >/dev/null 2>&1 || true
	"$WORK/xrdmon" loadgen "${LOADGEN_FLAGS[@]}" --amqp "$AMQP_URL" --exchange "$EXCHANGE" --queue "$QUEUE" 2>"$WORK/loadgen-amqp.log"
	rm -rf "$WORK/store"
	t0=$(now)
	XRDMON_AMQP_INPUT_URL=$AMQP_URL "$WORK/xrdmon" collect --store.path="$WORK/store" --listen.udp= --dns.enabled=false \
		--http.address="127.0.0.1:$HTTP_PORT" --amqp_input.enabled=true --amqp_input.queue="$QUEUE" \
		--amqp_input.exchange=- 2>"$WORK/collect.log" &
	pid=$!
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then log "collect exited:"; tail "$WORK/collect.log" >&2; exit 1; fi
		got=$(metric xrdmon_amqp_messages_received_total || true)
		recs=$(metric xrdmon_store_records_appended_total || true)
		evs=$(metric xrdmon_store_events_appended_total || true)
		if [ "${got:-0}" -ge "$N" ] && [ "${recs:-0}" -ge "$RECS" ] && [ "${evs:-0}" -ge "$EVS" ]; then break; fi
		sleep 0.05
	done
	t1=$(now)
	cpu=$(cpu_of "$pid")
	kill -TERM "$pid"
	wait "$pid" || { log "collect failed:"; tail "$WORK/collect.log" >&2; exit 1; }
	left=$(rabbitmqctl list_queues -q name messages 2>/dev/null | awk -v q="$QUEUE" '$1 == q {print $2}')
	[ "${left:-0}" = 0 ] || { log "collect left $left messages unacknowledged"; exit 1; }
	row "xrdmon collect (RabbitMQ → store)" "$got" "$(echo "$t1 - $t0" | bc)" "$cpu" "$((recs + evs))"
done
rabbitmqctl delete_queue "$QUEUE" >/dev/null 2>&1 || true

# --- 4. The table --------------------------------------------------------------
OSG_OUT=$(wc -l <"$WORK/osg-out.jsonl")
[ "$OSG_OUT" -eq $((RECS + EVS)) ] || log "WARNING: the OSG collector wrote $OSG_OUT records and events, xrdmon $((RECS + EVS)): not every message was processed"
echo
echo "xrdmon $XRDMON_COMMIT, OSG collector $OSG_COMMIT; $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg); work dir $WORK"
echo "expected: $RECS records + $EVS events = $((RECS + EVS)) out"
echo
echo "| collector | messages | wall s | CPU s | messages/s | records out |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo
printf 'replay against the OSG collector, turn by turn (wall): %s(median %.2f×)\n' \
	"$(printf '%.2f× ' "${RATIOS[@]}")" "$(printf '%s\n' "${RATIOS[@]}" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')"
