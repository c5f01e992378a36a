package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresServer is a private PostgreSQL cluster a test started for itself: its own data
// directory, its own port, its own settings. Tests use one when they need a setting the shared
// server does not have (autovacuum, for the retention soak) and must not change that server's
// configuration.
type PostgresServer struct {
	URL     string // connects to its "postgres" database as the superuser "postgres"
	Version string // e.g. "15.20"
	Dir     string // holds its data directory, log and socket; removed when the test ends
}

// StartPostgresServer runs initdb and postgres from the local installation in a new temporary
// directory, on a free 127.0.0.1 port with its socket in that directory, with the given settings
// (name=value, passed as -c) over the stock configuration. It waits until the server accepts
// connections, and stops it (fast shutdown) and removes the directory when the test ends. It skips
// the test, saying why, when no PostgreSQL installation is found. PostgreSQL refuses to run as
// root: a root test runs it as the "postgres" system user.
func StartPostgresServer(t testing.TB, settings ...string) *PostgresServer {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL installation to start a server from: %v", err)
	}
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "baton-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the PostgreSQL directory: %v", err)
		}
	})
	if os.Geteuid() == 0 {
		if cred, err = postgresUser(); err != nil {
			t.Fatalf("run PostgreSQL as root's stand-in: %v", err)
		}
		// The directory is under the world-traversable temporary directory; the server owns it.
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	var version string
	if out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output(); err == nil {
		// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
		if _, after, ok := strings.Cut(string(out), ") "); ok {
			version = strings.Fields(after)[0]
		}
	}
	// A free port can be taken between picking it and the server binding it: try a few.
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1"}
		for _, s := range settings {
			args = append(args, "-c", s)
		}
		srv := exec.Command(filepath.Join(bin, "postgres"), args...)
		srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		logPath := filepath.Join(dir, "server.log")
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		srv.Stdout, srv.Stderr = logFile, logFile
		if err := srv.Start(); err != nil {
			logFile.Close()
			t.Fatalf("start postgres: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- srv.Wait(); logFile.Close() }()
		url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		if err := awaitPostgres(url, exited); err != nil {
			srv.Process.Kill()
			log, _ := os.ReadFile(logPath)
			if strings.Contains(string(log), "Address already in use") {
				continue
			}
			t.Fatalf("postgres did not start: %v\n%s", err, log)
		}
		t.Cleanup(func() {
			// SIGINT is the fast shutdown: sessions are ended, the server checkpoints and exits.
			srv.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				srv.Process.Kill()
				<-exited
				t.Errorf("postgres did not stop within 30 s of SIGINT; killed")
			}
		})
		return &PostgresServer{URL: url, Version: version, Dir: dir}
	}
	t.Fatal("postgres did not start: every port tried was taken")
	return nil
}

// NewDatabaseAt creates a database for the test on the server adminURL connects to (as a user
// allowed to create databases), dropped with its connections when the test ends.
func NewDatabaseAt(t testing.TB, adminURL string) *PostgresDatabase {
	t.Helper()
	db, err := sql.Open("pgx", adminURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", adminURL, err)
	}
	name := uniqueName()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		db.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		if _, err := db.ExecContext(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return &PostgresDatabase{Name: name, URL: withDatabase(t, adminURL, name)}
}

// postgresBinDir is where the server binaries are: pg_config's answer, or else the newest
// /usr/lib/postgresql/<version>/bin (Debian and Ubuntu install them there, off the PATH).
func postgresBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			found = append(found, d)
		}
	}
	if len(found) == 0 {
		return "", errors.New("neither pg_config --bindir nor /usr/lib/postgresql/*/bin holds initdb")
	}
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) < version(found[j]) })
	return found[len(found)-1], nil
}

// postgresUser is the credential of the "postgres" system user.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort is a TCP port on 127.0.0.1 nothing listens on at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// awaitPostgres waits until the server at url answers a query, or exits, or 60 s pass.
func awaitPostgres(url string, exited <-chan error) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("the server exited: %v", werr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection within 60 s: %w", err)
		}
	}
}
