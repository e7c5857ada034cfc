#!/usr/bin/env bash
# Throughput of a bus cluster with 1, 2 and 3 collectors (issue #15, item 4;
# docs/scale-out.md). For each N: the OSG benchmark's workload (BENCHMARKS.md,
# 16 servers x 2,000 sessions; here --servers 48 so that 3 shards get work)
# is published to a fresh shoveler exchange, routed by `xrdmon bus route` into
# N shard queues, and then N collectors in cluster mode (state in PostgreSQL)
# drain them at once; the time is from their start to the last record in
# PostgreSQL.
#
#   benchmarks/cluster/run.sh [WORKDIR]
#
# Needs the local RabbitMQ (with rabbitmq_consistent_hash_exchange) and
# PostgreSQL (db test), curl, bc.
set -euo pipefail
WORK=${1:-$(mktemp -d /tmp/xrdmon-clusterbench.XXXXXX)}
U=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
PG=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
X=$WORK/xrdmon
(cd "$REPO" && go build -o "$X" ./cmd/xrdmon)
LOADGEN=(--servers 48 --clients 700 --files-per-session 4 --fbsz 16384 --think 24h --duration 1m --seed 1)

echo "| collectors | messages | records | drain s | messages/s | collector CPU s (sum) |"
echo "|---|---|---|---|---|---|"
for N in 1 2 3; do
  name=xrdmon-cb-$N-$$; schema=$(echo "$name" | tr - _)
  bus=(--url "$U" --shards "$N" --exchange "$name.shards" --queue-prefix "$name.shard." --from "$name.shov" --route-queue "$name.route")
  "$X" bus setup "${bus[@]}" --declare-from fanout >/dev/null
  "$X" bus route "${bus[@]}" --http 127.0.0.1:19941 2>"$WORK/router-$N.log" &
  router=$!
  "$X" loadgen --amqp "$U" --exchange "$name.shov" "${LOADGEN[@]}" 2>"$WORK/loadgen-$N.log"
  msgs=$(grep -o '[0-9]* emitted' "$WORK/loadgen-$N.log" | grep -o '[0-9]*')
  recs=$(grep -o 'expected [0-9]* records' "$WORK/loadgen-$N.log" | grep -o '[0-9]*')
  until [ "$(curl -s 127.0.0.1:19941/metrics | awk '/^xrdmon_bus_routed_total/{print $2}')" = "$msgs" ]; do sleep 0.1; done
  kill -INT $router; wait $router || true
  pids=()
  t0=$(date +%s.%N)
  for ((i = 0; i < N; i++)); do
    "$X" collect --listen.udp= --http.address=127.0.0.1:$((19950 + i)) --store.path="$WORK/store-$N-$i" --store.retention=0 \
      --dns.enabled=false --log.level=warn --amqp_input.enabled=true --amqp_input.url="$U" \
      --amqp_input.queue="$(printf '%s.shard.%02d' "$name" "$i")" --amqp_input.exchange=- --amqp_input.single_active_consumer=true \
      --correlate.shards=2 --cluster.enabled=true --cluster.url="$PG" --cluster.schema="$schema" 2>"$WORK/collect-$N-$i.log" &
    pids+=($!)
  done
  until [ "$(psql -qtA "$PG" -c "SELECT count(*) FROM $schema.records" 2>/dev/null || echo 0)" -ge "$recs" ]; do sleep 0.1; done
  t1=$(date +%s.%N)
  cpu=0
  for p in "${pids[@]}"; do
    c=$(awk '{print ($14+$15)/100}' /proc/$p/stat); cpu=$(echo "$cpu + $c" | bc)
    kill -TERM $p
  done
  wait "${pids[@]}" || true
  d=$(echo "$t1 - $t0" | bc)
  printf '| %d | %d | %d | %.2f | %.0f | %.2f |\n' "$N" "$msgs" "$recs" "$d" "$(echo "$msgs / $d" | bc -l)" "$cpu"
  PGOPTIONS="-c client_min_messages=warning" psql -q "$PG" -c "DROP SCHEMA $schema CASCADE" >/dev/null
  for q in "$name.route" $(for ((i = 0; i < N; i++)); do printf '%s.shard.%02d ' "$name" "$i"; done); do
    rabbitmqctl delete_queue "$q" >/dev/null 2>&1 || true
  done
done
