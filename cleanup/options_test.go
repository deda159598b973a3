package cleanup

import (
	"testing"

	"registryd/config"
)

// TestDefaultsAreConfigs: an Options field left zero takes registryd's own
// default (config.Default), so that a test leaving it zero runs what the
// daemon runs by default.
func TestDefaultsAreConfigs(t *testing.T) {
	c := config.Default().Cleanup
	o := Options{}.withDefaults()
	if o.CheckInterval != c.CheckInterval || o.BatchSize != c.BatchSize || o.RunNowInterval != c.RunNowInterval {
		t.Fatalf("defaults %+v differ from config's %+v", o, c)
	}
}
