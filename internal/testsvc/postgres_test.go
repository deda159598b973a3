package testsvc

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

func TestPostgresRestart(t *testing.T) {
	pg := Postgres(t)
	if pg2 := Postgres(t); pg2 != pg {
		t.Fatal("a second call started another server")
	}
	dsn := pg.NewDatabase(t)
	if !strings.HasPrefix(dsn, "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(dsn, "?sslmode=disable") {
		t.Fatalf("dsn %q", dsn)
	}
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	if err := pg.ExecIn(db, "CREATE TABLE x(a int); INSERT INTO x VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	pg.Stop()
	if c, err := net.DialTimeout("tcp", pg.addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("port still accepts connections after Stop")
	}
	if err := pg.ExecIn(db, "SELECT 1"); err == nil {
		t.Fatal("query succeeded on a stopped server")
	}
	pg.Start(t)
	// Same port, same data.
	if err := pg.ExecIn(db, "DO $$ BEGIN IF (SELECT a FROM x) <> 42 THEN RAISE 'lost'; END IF; END $$"); err != nil {
		t.Fatal(err)
	}
}

func TestPostgresPrivate(t *testing.T) {
	pg := PostgresPrivate(t)
	if pg == Postgres(t) {
		t.Fatal("private server is the shared one")
	}
	if err := pg.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
}
