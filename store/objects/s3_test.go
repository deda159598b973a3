package objects_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"registryd/internal/testsvc"
	"registryd/store/objects"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.StopAllMinIO()
	os.Exit(code)
}

func newS3(t *testing.T, prefix string) (*objects.S3, *testsvc.S3) {
	t.Helper()
	srv := testsvc.MinIO(t)
	s, err := objects.NewS3(objects.S3Options{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Region: "us-east-1",
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, PathStyle: true, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s, srv
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestS3RoundTrip(t *testing.T) {
	s, _ := newS3(t, "inst")
	c := ctx(t)
	if _, err := s.Stat(c, "a/x"); !errors.Is(err, objects.ErrNotFound) || errors.Is(err, objects.ErrUnavailable) {
		t.Fatalf("Stat of a missing object: %v", err)
	}
	if _, err := s.Get(c, "a/x"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("Get of a missing object: %v", err)
	}
	small := []byte("hello")
	// Larger than one part: a multipart upload, streamed from the reader.
	big := make([]byte, 20<<20+3)
	rand.Read(big)
	for key, body := range map[string][]byte{"a/x": small, "a/y": big, "b/z": small} {
		if err := s.Put(c, key, bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
	}
	info, err := s.Stat(c, "a/y")
	if err != nil || info.Size != int64(len(big)) || info.Key != "a/y" || time.Since(info.Modified) > time.Minute {
		t.Fatalf("Stat: %+v %v", info, err)
	}
	r, err := s.Get(c, "a/y")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get: %d bytes, %v", len(got), err)
	}
	var keys []string
	if err := s.List(c, "a/", func(i objects.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "a/x,a/y" {
		t.Fatalf("List a/: %v", keys)
	}
	stop := errors.New("stop")
	if err := s.List(c, "", func(objects.Info) error { return stop }); err != stop {
		t.Fatalf("List stopped by fn: %v", err)
	}
	if err := s.Delete(c, "a/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(c, "a/x"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	if _, err := s.Stat(c, "a/x"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("after Delete: %v", err)
	}
}

// A reader shorter than the size given leaves no object, in one PUT and in
// a multipart upload.
func TestS3ShortReaderLeavesNothing(t *testing.T) {
	s, _ := newS3(t, "")
	c := ctx(t)
	for _, n := range []int64{1000, 40 << 20} {
		body := io.LimitReader(rand.Reader, n-1)
		if err := s.Put(c, "k", body, n); err == nil {
			t.Fatalf("Put of %d bytes from a shorter reader succeeded", n)
		}
		if _, err := s.Stat(c, "k"); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("after a failed Put of %d: %v", n, err)
		}
	}
}

// While the server is away every call fails with ErrUnavailable and a
// reason, within its ctx; afterwards the data is there again.
func TestS3Outage(t *testing.T) {
	s, srv := newS3(t, "")
	c := ctx(t)
	if err := s.Put(c, "k", strings.NewReader("abc"), 3); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	restarted := false
	defer func() {
		if !restarted {
			srv.Start()
		}
	}()
	short, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Stat(short, "k")
	if !errors.Is(err, objects.ErrUnavailable) || errors.Is(err, objects.ErrNotFound) || objects.Reason(err) == "" {
		t.Fatalf("Stat during an outage: %v (reason %q)", err, objects.Reason(err))
	}
	if _, err := s.Get(short, "k"); !errors.Is(err, objects.ErrUnavailable) {
		t.Fatalf("Get during an outage: %v", err)
	}
	srv.Start()
	restarted = true
	if info, err := s.Stat(c, "k"); err != nil || info.Size != 3 {
		t.Fatalf("after the restart: %+v %v", info, err)
	}
}

func TestNewS3Validates(t *testing.T) {
	for _, ep := range []string{"", "ftp://x", "http://x/path", "127.0.0.1:9000"} {
		if _, err := objects.NewS3(objects.S3Options{Endpoint: ep, Bucket: "b"}); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	if _, err := objects.NewS3(objects.S3Options{Endpoint: "http://x"}); err == nil {
		t.Error("no bucket accepted")
	}
}
