package proxy

import "time"

// Options are the proxy's settings, in the sections of registryd's
// configuration they come from (cmd maps config.Config onto them). A zero
// field takes the default its comment gives, which is registryd's own
// (config.Default; TestDefaultsAreConfigs keeps them equal). Where 0 is a
// setting of its own in the configuration (off, none), a negative value
// says it here.
type Options struct {
	Listener  ListenerOptions
	Cache     CacheOptions
	Upstreams UpstreamOptions
	Metadata  MetadataOptions
	Audit     AuditOptions
	Memory    MemoryOptions
	// Hooks are the engine's test hooks; nil in production.
	Hooks *Hooks
}

// ListenerOptions bound the fasthttp listener (the proxy section).
type ListenerOptions struct {
	// HeaderTimeout bounds receiving one request line plus its headers
	// (proxy.header_timeout). Default 10s.
	HeaderTimeout time.Duration
	// ReadTimeout bounds reading one request's body, from the end of its
	// headers (proxy.read_timeout). Default 60s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response (proxy.write_timeout).
	// Default 30m.
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (proxy.idle_timeout).
	// Default 120s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request line plus headers; larger requests
	// get 431 (proxy.max_header_bytes). Default 16KiB.
	MaxHeaderBytes int
	// Concurrency caps the connections served at once; one more is
	// answered 503 (proxy.concurrency). Default 8192.
	Concurrency int
	// MaxConnsPerClient caps the open connections of one client, with a
	// fair share once half of Concurrency is open
	// (proxy.max_conns_per_client). Default 256; negative turns both off.
	MaxConnsPerClient int
	// MaxUploadBytes caps a gateway upload body (proxy.max_upload_bytes).
	// Default 5GiB.
	MaxUploadBytes int64
	// AccessLogJSON writes the access log (Deps.AccessLog) as JSON lines
	// (log.format json). Default false: text.
	AccessLogJSON bool
}

// withDefaults fills the zero fields of o with their defaults and turns
// the negative ones into the 0 (off, none) the code below reads.
func (o Options) withDefaults() Options {
	l := &o.Listener
	l.HeaderTimeout = orDefault(l.HeaderTimeout, 10*time.Second)
	l.ReadTimeout = orDefault(l.ReadTimeout, 60*time.Second)
	l.WriteTimeout = orDefault(l.WriteTimeout, 30*time.Minute)
	l.IdleTimeout = orDefault(l.IdleTimeout, 120*time.Second)
	l.MaxHeaderBytes = orDefault(l.MaxHeaderBytes, 16<<10)
	l.Concurrency = orDefault(l.Concurrency, 8192)
	l.MaxConnsPerClient = orOff(l.MaxConnsPerClient, 256)
	l.MaxUploadBytes = orDefault(l.MaxUploadBytes, 5<<30)
	e := o.engine().withDefaults()
	o.Cache, o.Upstreams, o.Metadata, o.Audit, o.Memory, o.Hooks = e.Cache, e.Upstreams, e.Metadata, e.Audit, e.Memory, e.Hooks
	return o
}

// engine is o's sections for the engine.
func (o Options) engine() engineOptions {
	return engineOptions{Cache: o.Cache, Upstreams: o.Upstreams, Metadata: o.Metadata, Audit: o.Audit, Memory: o.Memory,
		Hooks: o.Hooks}
}
