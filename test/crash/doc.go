// Package crash holds xrdmon's crash and fault tests: the collector is run as
// a process (built once by TestMain) and killed with SIGKILL, starved of disk,
// and cut off from RabbitMQ and PostgreSQL, and every record must still
// arrive. The tests carry the build tag "crash", stop and start the shared
// services, and must run one at a time:
//
//	go test -tags crash -p 1 -count=1 ./test/crash/
//
// (make crash). Without the tag this package has no tests.
package crash
