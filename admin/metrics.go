package admin

import "github.com/prometheus/client_golang/prometheus"

// metrics of the admin listener, registered on the injected registerer.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "admin", Name: "requests_total",
			Help: "Admin API requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "registryd", Subsystem: "admin", Name: "request_duration_seconds",
			Help:    "Admin API request latency by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"route"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
