package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeFileConfiguresRealCommands reads deploy/compose.yaml, which no test can start
// without a container runtime, and checks what it asks of the binary: every Baton service runs
// a command baton has, and a serving command's flags and environment make a configuration that
// baton config print accepts, with the database, transport and listeners the file means.
func TestComposeFileConfiguresRealCommands(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	commands := map[string]bool{}
	for _, c := range commandTable() {
		commands[c.name] = true
	}
	var servers []string
	for name, svc := range compose.Services {
		if svc.Image != "baton:local" {
			continue
		}
		if len(svc.Command) == 0 || !commands[svc.Command[0]] {
			t.Errorf("service %s runs %q, not a baton command", name, svc.Command)
			continue
		}
		if svc.Command[0] != "server" {
			continue
		}
		servers = append(servers, name)
		if _, ok := svc.DependsOn["migrate"]; !ok {
			t.Errorf("service %s does not wait for the migrations", name)
		}
		env := func(k string) (string, bool) { v, ok := svc.Environment[k]; return v, ok }
		ctx := withConfigMode(context.Background(), configMode{lookupEnv: env})
		var stdout, stderr bytes.Buffer
		if code := run(ctx, append([]string{"config", "print"}, svc.Command...), &stdout, &stderr); code != 0 {
			t.Errorf("service %s: baton config print %s: exit %d\n%s", name, strings.Join(svc.Command, " "), code, stderr.String())
			continue
		}
		for _, want := range []string{
			"database-url: postgres://baton:REDACTED@postgres:5432/baton?sslmode=disable # env BATON_DATABASE_URL",
			"transport: redis # env BATON_TRANSPORT",
			"redis-url: redis://redis:6379/0 # env BATON_REDIS_URL",
			"listen: 0.0.0.0:8080 # flag",
			"internal-listen: 0.0.0.0:8081 # flag",
			"internal-insecure: true # flag",
		} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("service %s: the effective configuration lacks %q:\n%s", name, want, stdout.String())
			}
		}
	}
	slices.Sort(servers)
	if !slices.Equal(servers, []string{"baton-1", "baton-2"}) {
		t.Errorf("server replicas %v, want baton-1 and baton-2", servers)
	}
}
