package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/xrdmon/xrdmon/internal/amqpconn"
	"github.com/xrdmon/xrdmon/internal/bus"
	"github.com/xrdmon/xrdmon/internal/web"
)

// runBus implements `xrdmon bus`.
func runBus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bus", helpText("bus"), stderr)
	def := bus.DefaultTopology()
	url := fs.String("url", os.Getenv("XRDMON_BUS_URL"), "broker `URL` (amqp:// or amqps://; default $XRDMON_BUS_URL)")
	tokenFile := fs.String("token-file", "", "`FILE` holding a JWT used as the password, re-read at every connect")
	shards := fs.Int("shards", def.Shards, "shard queues (`N`); a collector consumes one of them (run one collector per shard on a machine that serves several: deploy/xrdmon@.service)")
	exchange := fs.String("exchange", def.Exchange, "the consistent-hash `exchange`")
	prefix := fs.String("queue-prefix", def.QueuePrefix, "`prefix` of the shard queues' names (prefix00, prefix01, ...)")
	from := fs.String("from", def.From, "the shoveler's `exchange`")
	fromKey := fs.String("from-key", def.FromKey, "binding `key` of the route queue on the shoveler's exchange")
	routeQueue := fs.String("route-queue", def.RouteQueue, "the router's input `queue`")
	fromType := fs.String("declare-from", "", "setup: declare the shoveler's exchange as this `type` (fanout, topic) if it does not exist")
	httpAddr := fs.String("http", "", "route: serve /metrics, /healthz on `ADDR` (e.g. 127.0.0.1:9940)")
	if len(args) == 0 || (args[0] != "setup" && args[0] != "route") {
		fmt.Fprintln(stderr, "xrdmon bus: say setup or route")
		fs.Usage()
		return errUsage
	}
	action := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *url == "" {
		fmt.Fprintln(stderr, "xrdmon bus: no broker: --url or XRDMON_BUS_URL")
		return errUsage
	}
	topo := bus.Topology{From: *from, FromKey: *fromKey, RouteQueue: *routeQueue, FromType: *fromType,
		Exchange: *exchange, QueuePrefix: *prefix, Shards: *shards}
	if err := topo.Validate(); err != nil {
		return err
	}
	dialer, err := amqpconn.NewDialer(amqpconn.Config{URL: *url, TokenFile: *tokenFile}, amqpconn.Options{})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	if action == "setup" {
		conn, err := dialer.Dial(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := bus.Setup(conn, topo); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "exchange %s (x-consistent-hash) on %s\n", topo.Exchange, dialer.URL())
		for _, q := range topo.Queues() {
			fmt.Fprintf(stdout, "queue %s (durable, single active consumer), weight 1\n", q)
		}
		if topo.From != "" {
			fmt.Fprintf(stdout, "queue %s bound to %s (%s): run `xrdmon bus route`\n", topo.RouteQueue, topo.From, topo.FromKey)
		}
		return nil
	}

	reg, err := newRegistry()
	if err != nil {
		return err
	}
	r, err := bus.NewRouter(dialer, topo, bus.DefaultRouterOptions(), log, reg)
	if err != nil {
		return err
	}
	if *httpAddr == "" {
		return r.Run(ctx)
	}
	srv := web.New(web.Config{Address: *httpAddr}, reg, log.With("component", "web"))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 1)
	go func() { errs <- srv.Run(ctx) }()
	err = r.Run(ctx)
	cancel()
	if werr := <-errs; err == nil {
		err = werr
	}
	return err
}
