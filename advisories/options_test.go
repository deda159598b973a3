package advisories

import (
	"testing"

	"registryd/config"
)

// TestDefaultsAreConfigs: an Options field left zero takes registryd's own
// default (config.Default), so that a test leaving it zero runs what the
// daemon runs by default.
func TestDefaultsAreConfigs(t *testing.T) {
	c := config.Default().Advisories
	o := Options{}.withDefaults()
	if o.RefreshInterval != c.RefreshInterval || o.MaxBytes != int64(c.MaxBytes) || o.BatchSize != c.BatchSize ||
		len(o.Sources) != len(c.AdvisorySources()) {
		t.Fatalf("defaults %+v differ from config's %+v", o, c)
	}
}
