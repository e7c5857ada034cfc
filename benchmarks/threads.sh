#!/bin/bash
# threads.sh XRDMON [SECONDS]: one `bench` step at 150,000 packets/s with the
# xrdmon binary XRDMON; 40 s into it, the collector's threads are sampled
# for SECONDS (default 10): context switches a second (voluntary,
# involuntary) and CPU per thread. The runtime's monitor thread (sysmon) is
# the process's second thread. BENCHMARKS.md, "seventeenth check", says what
# this found.
set -eu
bin=$1 secs=${2:-10}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
"$bin" bench --pregenerate --scenario 'rate=150000' --step-duration 60s --workdir "$d" --csv "$d/out.csv" >"$d/log" 2>&1 &
bench=$!
sleep 40
pid=$(pgrep -f "collect --listen.udp=.*--store.path=$d" | head -1)
snap() {
	for t in /proc/"$pid"/task/*; do
		echo "$(basename "$t") $(awk '/^voluntary_ctxt_switches|^nonvoluntary/{printf "%s ", $2}' "$t/status") $(awk '{print $14, $15}' "$t/stat")"
	done
}
snap >"$d/cs1"
sleep "$secs"
snap >"$d/cs2"
# fields: tid vol invol utime stime (ticks of 1/100 s), before then after
join "$d/cs1" "$d/cs2" | awk -v s="$secs" '
	NR == 2 { sv = ($6 - $2) / s; sc = ($8 - $4 + $9 - $5) / s }
	{ tv += $6 - $2; tn += $7 - $3; tu += $8 - $4; ts += $9 - $5 }
	END { printf "sysmon: %d wakeups/s, %.1f %% of a core; all threads: %d voluntary and %d involuntary switches/s, user %.1f %%, system %.1f %% of a core\n", sv, sc, tv / s, tn / s, tu / s, ts / s }'
wait "$bench"
tail -1 "$d/out.csv"
