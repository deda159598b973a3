package auth

import (
	"testing"

	"registryd/config"
)

// TestDefaultsAreConfigs: an Options field left zero takes registryd's own
// default (config.Default), so that a test leaving it zero runs what the
// daemon runs by default.
func TestDefaultsAreConfigs(t *testing.T) {
	c := config.Default()
	o := Options{}.withDefaults()
	if o.CacheTTL != c.Auth.CacheTTL || o.CacheSize != c.Auth.CacheSize || string(o.Plan) != string(c.License.Plan) ||
		o.DisableVirtualRegistry != !c.Features.VirtualRegistry {
		t.Fatalf("defaults %+v differ from config's %+v, %+v, %+v", o, c.Auth, c.License, c.Features)
	}
}
