// Package proxy is the download listener (fasthttp): Maven clients GET and
// HEAD artifacts of a virtual registry here, resolved across its ordered
// upstreams through the content-addressed cache.
package proxy

import (
	"context"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"registryd/auth"
	"registryd/config"
	"registryd/proxy/upstream"
	"registryd/store"
)

// Deps are the proxy listener's collaborators.
type Deps struct {
	Config     config.Config
	Store      *store.Store
	Auth       *auth.Service
	Upstream   *upstream.Client
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Server is the proxy listener.
type Server struct {
	cfg config.Config
	log *slog.Logger
	srv *fasthttp.Server
}

// New builds the proxy server with explicit limits.
func New(d Deps) (*Server, error) {
	s := &Server{cfg: d.Config, log: d.Logger}
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		Name:                  "registryd",
		ReadTimeout:           d.Config.Proxy.ReadTimeout,
		WriteTimeout:          d.Config.Proxy.WriteTimeout,
		IdleTimeout:           d.Config.Proxy.IdleTimeout,
		ReadBufferSize:        int(d.Config.Proxy.MaxHeaderBytes),
		Concurrency:           d.Config.Proxy.Concurrency,
		NoDefaultServerHeader: false,
		NoDefaultDate:         false,
		CloseOnShutdown:       true,
	}
	return s, nil
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusNotFound)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":"404 Not Found"}`)
}

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.srv.Serve(ln) }

// Shutdown stops accepting and waits for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }
