package admin

import (
	"testing"

	"registryd/config"
)

// TestDefaultsAreConfigs: an Options field left zero takes registryd's own
// default (config.Default), so that a test leaving it zero runs what the
// daemon runs by default.
func TestDefaultsAreConfigs(t *testing.T) {
	c := config.Default().Admin
	o := Options{}.withDefaults()
	if o.MaxBodyBytes != int64(c.MaxBodyBytes) || o.MaxSBOMBytes != int64(c.MaxSBOMBytes) || o.MaxSBOMIngests != c.MaxSBOMIngests {
		t.Fatalf("defaults %+v differ from config's %+v", o, c)
	}
}

// TestSizeText: a 413 names a limit as the configuration writes it.
func TestSizeText(t *testing.T) {
	for _, n := range []config.ByteSize{1, 1000, config.KiB, 4 * config.KiB, 1536 * config.KiB, config.MiB, 64 * config.MiB,
		config.GiB, 5 * config.GiB, config.GiB + 1} {
		if got := sizeText(int64(n)); got != n.String() {
			t.Errorf("sizeText(%d) = %q, config says %q", n, got, n.String())
		}
	}
}
