package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestAlertRules: deploy/prometheus/xrdmon.rules.yml passes `promtool check
// rules`, its unit tests (xrdmon.rules.test.yml: a silent server, kernel
// drops, loss and dead letters fire, and only then) pass, and every metric
// it names is one docs/metrics.md documents.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed (CI must install it: make promtool)")
		}
		t.Skip("promtool is not installed: apt-get install prometheus (make promtool does) to check the alert rules")
	}
	const dir = "../../deploy/prometheus"
	for _, args := range [][]string{{"check", "rules", "xrdmon.rules.yml"}, {"test", "rules", "xrdmon.rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
	rules, err := os.ReadFile(dir + "/xrdmon.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\bxrdmon_[a-z0-9_]+`).FindAll(rules, -1) {
		if !bytes.Contains(doc, []byte("`"+string(m)+"`")) {
			t.Errorf("the rules name %s, which docs/metrics.md does not document", m)
		}
	}
}
