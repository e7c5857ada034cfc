package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeployConfigs: the example configurations of deploy/ load and
// validate (Load validates), with the secrets the unit's environment file
// gives them, and say what they claim: the bus-fed one consumes RabbitMQ
// without UDP, the WLCG one consumes STOMP and sends WLCG records over
// STOMP, the direct one listens on UDP.
func TestDeployConfigs(t *testing.T) {
	env := []string{ // /etc/xrdmon/xrdmon.env
		"XRDMON_OUTPUTS_POSTGRES_URL=postgres://xrdmon@db.example.org/accounting",
		"XRDMON_OUTPUTS_AMQP_URL=amqps://xrdmon@broker.example.org:5671/osg",
	}
	direct, err := Load("../../deploy/xrdmon.yaml", env, nil)
	if err != nil {
		t.Fatalf("deploy/xrdmon.yaml: %v", err)
	}
	if direct.Listen.UDP == "" || !direct.Outputs.Postgres.Enabled || direct.HTTP.APITokenFile == "" {
		t.Errorf("deploy/xrdmon.yaml: udp %q, postgres %v, api token %q", direct.Listen.UDP, direct.Outputs.Postgres.Enabled, direct.HTTP.APITokenFile)
	}
	bus, err := Load("../../deploy/xrdmon-bus.yaml", env[:1], nil)
	if err != nil {
		t.Fatalf("deploy/xrdmon-bus.yaml: %v", err)
	}
	if bus.Listen.UDP != "" || !bus.AMQPInput.Enabled || bus.AMQPInput.TokenFile == "" {
		t.Errorf("deploy/xrdmon-bus.yaml: udp %q, amqp input %v, token %q", bus.Listen.UDP, bus.AMQPInput.Enabled, bus.AMQPInput.TokenFile)
	}
	wlcg, err := Load("../../deploy/xrdmon-wlcg.yaml", nil, nil)
	if err != nil {
		t.Fatalf("deploy/xrdmon-wlcg.yaml: %v", err)
	}
	if wlcg.Listen.UDP != "" || !wlcg.STOMPInput.Enabled || wlcg.STOMPInput.PasswordFile == "" ||
		!wlcg.Outputs.STOMP.Enabled || wlcg.Outputs.STOMP.Destinations.WLCG == "" || wlcg.Outputs.STOMP.TLS.Cert == "" {
		t.Errorf("deploy/xrdmon-wlcg.yaml: udp %q, stomp input %v, password file %q, stomp output %v, wlcg %q, cert %q",
			wlcg.Listen.UDP, wlcg.STOMPInput.Enabled, wlcg.STOMPInput.PasswordFile, wlcg.Outputs.STOMP.Enabled,
			wlcg.Outputs.STOMP.Destinations.WLCG, wlcg.Outputs.STOMP.TLS.Cert)
	}
	member, err := Load("../../deploy/xrdmon-cluster.yaml", append(env, "XRDMON_CLUSTER_URL=postgres://xrdmon@db.example.org/accounting"), nil)
	if err != nil {
		t.Fatalf("deploy/xrdmon-cluster.yaml: %v", err)
	}
	if !member.Cluster.Enabled || !member.AMQPInput.SingleActiveConsumer || member.Correlate.Shards == 0 {
		t.Errorf("deploy/xrdmon-cluster.yaml: cluster %v, single active consumer %v, shards %d",
			member.Cluster.Enabled, member.AMQPInput.SingleActiveConsumer, member.Correlate.Shards)
	}
}

// TestSystemdUnit: systemd-analyze accepts deploy/xrdmon.service (with its
// binary path pointed at an executable that exists here), and the unit
// runs `collect` with the configuration the examples are installed as.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/xrdmon.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/bin/xrdmon collect --config /etc/xrdmon/xrdmon.yaml") {
		t.Error("the unit does not run xrdmon collect with /etc/xrdmon/xrdmon.yaml")
	}
	router, err := os.ReadFile("../../deploy/xrdmon-router.service")
	if err != nil {
		t.Fatal(err)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	member, err := os.ReadFile("../../deploy/xrdmon@.service")
	if err != nil {
		t.Fatal(err)
	}
	// The template is verified as an instance (systemd-analyze wants one).
	for name, text := range map[string][]byte{"xrdmon.service": unit, "xrdmon-router.service": router, "xrdmon@00.service": member} {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(text), "/usr/bin/xrdmon", self)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// TestSystemdTemplateUnit: the template unit for several collectors on one
// machine gives each instance (a shard number) its own queue, HTTP port,
// holder name and store, through variables the configuration reads over
// deploy/xrdmon-cluster.yaml.
func TestSystemdTemplateUnit(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/xrdmon@.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("%i", "03", "%H", "node7").Replace(string(unit))
	env := []string{"XRDMON_CLUSTER_URL=postgres://xrdmon@db.example.org/accounting"}
	var args []string
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			env = append(env, v)
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			args = strings.Fields(v)
		}
	}
	if len(args) < 4 || args[1] != "collect" || args[3] != "/etc/xrdmon/xrdmon-cluster.yaml" ||
		!strings.Contains(text, "--store.path /var/lib/xrdmon/03") || !strings.Contains(text, "StateDirectory=xrdmon/03") {
		t.Fatalf("the template does not run the cluster configuration on a store of the instance's own: %q", args)
	}
	cfg, err := Load("../../deploy/xrdmon-cluster.yaml", env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AMQPInput.Queue != "xrdmon.shard.03" || cfg.HTTP.Address != ":9903" || cfg.Cluster.Holder != "node7/03" {
		t.Errorf("instance 03: queue %q, http %q, holder %q", cfg.AMQPInput.Queue, cfg.HTTP.Address, cfg.Cluster.Holder)
	}
}
