package api

import (
	"net/http"

	"github.com/xrdmon/xrdmon/internal/monitored"
)

// ServersAnswer is the answer of /servers: every server the collector
// has heard (at most monitored.MaxTracked), silent ones first.
type ServersAnswer struct {
	// Silent is the number of servers silent beyond their usual interval.
	Silent  int                `json:"silent"`
	Servers []monitored.Server `json:"servers"`
}

func (a *API) servers(w http.ResponseWriter, r *http.Request) {
	if a.opts.Servers == nil {
		writeError(w, http.StatusNotFound, "no server activity here")
		return
	}
	ans := ServersAnswer{Servers: a.opts.Servers()}
	if ans.Servers == nil {
		ans.Servers = []monitored.Server{}
	}
	for _, s := range ans.Servers {
		if s.Silent {
			ans.Silent++
		}
	}
	a.writeJSON(w, http.StatusOK, ans)
}
