package server

import (
	"net/http"

	"github.com/gatectl/gatectl/server/ui"
)

// registerUI mounts the web console (server/ui) at /ui: the page and its
// embedded assets. It reads only the decision API, like any other client.
func (s *Server) registerUI(mux *http.ServeMux) {
	h := ui.Handler()
	mux.Handle(ui.Prefix, h)
	mux.Handle(ui.Prefix+"/", h)
}
