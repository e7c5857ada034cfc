package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The STOMP brokers: RabbitMQ's STOMP plugin (enabled by the Makefile's
// rabbitmq-plugins target) and Apache ActiveMQ (Debian's activemq
// package, installed by the Makefile's activemq target), which a test
// starts privately with StartActiveMQ.
const (
	RabbitSTOMPEnv     = "XRDMON_TEST_STOMP_URL"
	RabbitSTOMPDefault = "stomp://127.0.0.1:61613"
	// ActiveMQJar is the launcher of Debian's activemq package.
	ActiveMQJar = "/usr/share/activemq/bin/activemq.jar"
)

// RabbitSTOMP returns the URL of RabbitMQ's STOMP plugin, once it answers,
// and a password file for the user guest.
func RabbitSTOMP(tb testing.TB) (stompURL, user, passwordFile string) {
	tb.Helper()
	u := url(RabbitSTOMPEnv, RabbitSTOMPDefault)
	addr := strings.TrimPrefix(u, "stomp://")
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		Unavailable(tb, "RabbitMQ's STOMP plugin at "+RabbitSTOMPEnv+" ("+RabbitSTOMPDefault+" by default) does not answer (make rabbitmq-plugins enables it): "+err.Error())
	}
	c.Close()
	pf := filepath.Join(tb.TempDir(), "password")
	if err := os.WriteFile(pf, []byte("guest\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return u, "guest", pf
}

// ActiveMQ is an ActiveMQ broker a test started: its own process, data
// directory and ports on 127.0.0.1, a plain STOMP connector and, with
// TLS, a stomp+ssl connector that requires a client certificate signed by
// the test's CA.
type ActiveMQ struct {
	// URL is the plain STOMP connector, stomp://127.0.0.1:PORT.
	URL string
	// TLSURL is the TLS connector (stomp+ssl://127.0.0.1:PORT), when
	// started with TLS.
	TLSURL string
	// Certs are the test's CA and client certificate, when started with
	// TLS.
	Certs *Certs

	dir  string
	java string
	tb   testing.TB
	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{}
}

// Certs are PEM files made by a test: a CA, a server certificate for
// 127.0.0.1 and a client certificate, both signed by the CA.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCA is a second CA's certificate, whose key signed nothing the
	// broker trusts; OtherCert and OtherKey are a client certificate it
	// signed.
	OtherCert, OtherKey string
}

// StartActiveMQ starts a private ActiveMQ broker (skipping the test, or
// failing it in CI, when Debian's activemq package is not installed) and
// stops it at the end of the test. Starting takes several seconds (a JVM).
// Its destinations page in up to 20,000 messages (the STOMP input's
// prefetch, as docs/stomp.md asks of a broker), and its memory limit is
// 60 % of its 256 MiB heap: a queue nobody consumes makes it hold its
// producers back (flow control) rather than run out of heap, which it
// did with 100,000 paged in.
func StartActiveMQ(tb testing.TB, withTLS bool) *ActiveMQ {
	tb.Helper()
	if _, err := os.Stat(ActiveMQJar); err != nil {
		Unavailable(tb, "ActiveMQ is not installed ("+ActiveMQJar+"; make activemq installs Debian's activemq package)")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		Unavailable(tb, "java is not installed (it comes with Debian's activemq package)")
	}
	dir := tb.TempDir()
	a := &ActiveMQ{dir: dir, tb: tb}
	a.URL = fmt.Sprintf("stomp://127.0.0.1:%d", freePort(tb))
	connectors := fmt.Sprintf(`<transportConnector name="stomp" uri="%s"/>`, a.URL)
	sslContext := ""
	if withTLS {
		a.Certs = MakeCerts(tb, dir)
		keystore, truststore := filepath.Join(dir, "server.p12"), filepath.Join(dir, "trust.p12")
		run(tb, "openssl", "pkcs12", "-export", "-in", a.Certs.ServerCert, "-inkey", a.Certs.ServerKey,
			"-out", keystore, "-passout", "pass:secret", "-name", "server")
		run(tb, "keytool", "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", truststore,
			"-storepass", "secret", "-alias", "ca", "-file", a.Certs.CA)
		sslContext = fmt.Sprintf(`<sslContext><sslContext keyStore="file:%s" keyStorePassword="secret" keyStoreType="pkcs12" trustStore="file:%s" trustStorePassword="secret" trustStoreType="pkcs12"/></sslContext>`,
			keystore, truststore)
		port := freePort(tb)
		connectors += fmt.Sprintf(`<transportConnector name="stomp+ssl" uri="stomp+ssl://127.0.0.1:%d?needClientAuth=true"/>`, port)
		a.TLSURL = fmt.Sprintf("stomp+ssl://127.0.0.1:%d", port)
	}
	conf := fmt.Sprintf(`<beans xmlns="http://www.springframework.org/schema/beans" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="xrdmontest" dataDirectory="%[1]s/data" schedulerSupport="false" advisorySupport="false">
    <persistenceAdapter><kahaDB directory="%[1]s/data/kahadb"/></persistenceAdapter>
    <destinationPolicy><policyMap><policyEntries>
      <policyEntry queue=">" maxPageSize="20000"/>
      <policyEntry topic=">" maxPageSize="20000"/>
    </policyEntries></policyMap></destinationPolicy>
    <systemUsage><systemUsage><memoryUsage><memoryUsage percentOfJvmHeap="60"/></memoryUsage></systemUsage></systemUsage>
    %[2]s
    <transportConnectors>%[3]s</transportConnectors>
  </broker>
</beans>
`, dir, sslContext, connectors)
	if err := os.WriteFile(filepath.Join(dir, "activemq.xml"), []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	// The broker's warnings and errors go to its log (activemq.log).
	log4j := "log4j.rootLogger=WARN, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\n" +
		"log4j.appender.out.layout=org.apache.log4j.PatternLayout\nlog4j.appender.out.layout.ConversionPattern=%d %-5p %c{1} - %m%n\n"
	if err := os.WriteFile(filepath.Join(dir, "log4j.properties"), []byte(log4j), 0o600); err != nil {
		tb.Fatal(err)
	}
	a.java = java
	a.Start()
	tb.Cleanup(a.Stop)
	return a
}

// Start starts the broker (again, after Stop or Kill) with the same data
// and ports, and waits until its connectors answer.
func (a *ActiveMQ) Start() {
	a.tb.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return
	}
	log, err := os.OpenFile(filepath.Join(a.dir, "activemq.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		a.tb.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(a.java, "-Xms64M", "-Xmx256M", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dactivemq.base="+a.dir, "-Dactivemq.home=/usr/share/activemq", "-Dactivemq.conf="+a.dir,
		"-Dactivemq.data="+filepath.Join(a.dir, "data"), "-Dlog4j.configuration=file:"+filepath.Join(a.dir, "log4j.properties"),
		"-jar", ActiveMQJar, "start", "xbean:file:"+filepath.Join(a.dir, "activemq.xml"))
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group (Stop signals the JVM's children too), and
	// killed if the test process dies without its cleanups (a timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		a.tb.Fatalf("start activemq: %v", err)
	}
	a.cmd = cmd
	a.exit = make(chan struct{})
	go func(exit chan struct{}) { _ = cmd.Wait(); close(exit) }(a.exit)
	addrs := []string{strings.TrimPrefix(a.URL, "stomp://")}
	if a.TLSURL != "" {
		addrs = append(addrs, strings.TrimPrefix(a.TLSURL, "stomp+ssl://"))
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, addr := range addrs {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-a.exit:
				out, _ := os.ReadFile(filepath.Join(a.dir, "activemq.log"))
				a.tb.Fatalf("activemq exited while starting:\n%s", tail(out, 3000))
			default:
			}
			if time.Now().After(deadline) {
				out, _ := os.ReadFile(filepath.Join(a.dir, "activemq.log"))
				a.tb.Fatalf("activemq does not answer on %s after 90s:\n%s", addr, tail(out, 3000))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Stop stops the broker, as a service manager would (SIGTERM, then
// SIGKILL after 20 s), and waits for it to exit.
func (a *ActiveMQ) Stop() { a.signal(syscall.SIGTERM) }

// Kill kills the broker (SIGKILL) and waits for it to exit.
func (a *ActiveMQ) Kill() { a.signal(syscall.SIGKILL) }

func (a *ActiveMQ) signal(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, sig)
	select {
	case <-a.exit:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.exit
	}
	a.cmd = nil
}

// Log returns the end of the broker's log, for failure messages.
func (a *ActiveMQ) Log() string {
	out, _ := os.ReadFile(filepath.Join(a.dir, "activemq.log"))
	return tail(out, 3000)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// MakeCerts writes a CA, a server certificate for 127.0.0.1 and a client
// certificate (CN xrdmon-test) into dir, and a client certificate of
// another CA that the first does not trust.
func MakeCerts(tb testing.TB, dir string) *Certs {
	tb.Helper()
	c := &Certs{}
	caKey, caCert := newCert(tb, "xrdmon test CA", nil, nil, true)
	c.CA = writePEM(tb, dir, "ca.pem", "CERTIFICATE", caCert.Raw)
	key, cert := newCert(tb, "127.0.0.1", caKey, caCert, false)
	c.ServerCert = writePEM(tb, dir, "server.pem", "CERTIFICATE", cert.Raw)
	c.ServerKey = writeKey(tb, dir, "server.key", key)
	key, cert = newCert(tb, "xrdmon-test", caKey, caCert, false)
	c.ClientCert = writePEM(tb, dir, "client.pem", "CERTIFICATE", cert.Raw)
	c.ClientKey = writeKey(tb, dir, "client.key", key)
	otherKey, otherCA := newCert(tb, "another CA", nil, nil, true)
	key, cert = newCert(tb, "stranger", otherKey, otherCA, false)
	c.OtherCert = writePEM(tb, dir, "other.pem", "CERTIFICATE", cert.Raw)
	c.OtherKey = writeKey(tb, dir, "other.key", key)
	return c
}

func newCert(tb testing.TB, cn string, parentKey *ecdsa.PrivateKey, parent *x509.Certificate, ca bool) (*ecdsa.PrivateKey, *x509.Certificate) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = nil
		parent, parentKey = tmpl, key
	} else if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return key, cert
}

func writePEM(tb testing.TB, dir, name, typ string, der []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

func writeKey(tb testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	tb.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return writePEM(tb, dir, name, "PRIVATE KEY", der)
}
