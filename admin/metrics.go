package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the admin listener, registered on the injected registerer.
// Every label value comes from a closed set, never from the request as sent:
// route is the pattern that matched ("unmatched" for none), method one of
// methodLabels, code the status we answered. A label taken from the request
// would let anyone, without credentials, create series at will (50,000
// requests with invented methods made 50,000 series, +112 MB).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// methodOther is the method label of every method not in methodLabels.
const methodOther = "other"

// methodLabels are the methods that keep their name as a label: RFC 9110's
// and PATCH, as sent (methods are case-sensitive: "get" is another method).
var methodLabels = map[string]string{
	http.MethodGet: http.MethodGet, http.MethodHead: http.MethodHead, http.MethodPost: http.MethodPost,
	http.MethodPut: http.MethodPut, http.MethodPatch: http.MethodPatch, http.MethodDelete: http.MethodDelete,
	http.MethodOptions: http.MethodOptions, http.MethodConnect: http.MethodConnect, http.MethodTrace: http.MethodTrace,
}

// methodLabel is the method label of a request.
func methodLabel(method string) string {
	if m, ok := methodLabels[method]; ok {
		return m
	}
	return methodOther
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "registryd", Subsystem: "admin", Name: "requests_total",
			Help: "Admin API requests by route pattern, method (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, " +
				"CONNECT, TRACE; other for any other) and status code.",
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
