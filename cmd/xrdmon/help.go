package main

import (
	"embed"
	"strings"
)

// helpFiles holds each command's synopsis, printed by -h after the usage
// line and before the flags: help/<command>.txt.
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText returns the synopsis of the command name (help/<name>.txt
// without its final newline).
func helpText(name string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic("xrdmon: no help text for " + name + ": " + err.Error()) // the files are embedded at build time
	}
	return strings.TrimSuffix(string(b), "\n")
}
