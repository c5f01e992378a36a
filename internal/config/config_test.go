package config_test

import (
	"testing"

	"github.com/baton-dev/baton/internal/config"
)

// Secrets never reach config print: a secret flag's whole value, a URL's password, a token and
// secret query parameters, and the value of a NAME=VALUE item of a secret flag.
func TestRedaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value, want string }{
		{"database-url", "postgres://u:p@h/db", "postgres://u:REDACTED@h/db"},
		{"database-url", "postgres://u@h/db", "postgres://u@h/db"},
		{"database-url", "postgres://u:p@h/db?password=x&sslmode=require", "postgres://u:REDACTED@h/db?password=REDACTED&sslmode=require"},
		{"database-url", "/var/lib/baton/data.db", "/var/lib/baton/data.db"},
		{"nats-url", "nats://tok@h:4222", "nats://REDACTED@h:4222"},
		{"nats-url", "nats://u:p@h:4222", "nats://u:REDACTED@h:4222"},
		{"redis-url", "rediss://default:p@h:6380/1", "rediss://default:REDACTED@h:6380/1"},
		{"otlp-endpoint", "http://h:4318/v1/traces?api_key=k", "http://h:4318/v1/traces?api_key=REDACTED"},
		{"listen", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"internal-tls-key", "/etc/baton/key.pem", "/etc/baton/key.pem"},
		{"task-credentials-role", "arn:aws:iam::1:role/baton", "arn:aws:iam::1:role/baton"},
		{"api-key", "bk_live_123=", "REDACTED"},
		{"webhook-token", "t", "REDACTED"},
		{"some-password", "", ""},
	} {
		if got := config.RedactValue(tc.name, tc.value); got != tc.want {
			t.Errorf("RedactValue(%q, %q) = %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}
	for _, tc := range []struct{ name, item, want string }{
		{"push-secret", "resize=s3cr3t", "resize=REDACTED"},
		{"push-secret", "resize=@/run/secrets/resize", "resize=@/run/secrets/resize"},
		{"push-target", "resize=https://u:p@h/x", "resize=https://u:REDACTED@h/x"},
		{"child-env", "DATABASE_URL=postgres://u:p@h/db", "DATABASE_URL=postgres://u:REDACTED@h/db"},
		{"child-env", "MODE=fast", "MODE=fast"},
		{"task", "resize", "resize"},
	} {
		if got := config.RedactItem(tc.name, tc.item); got != tc.want {
			t.Errorf("RedactItem(%q, %q) = %q, want %q", tc.name, tc.item, got, tc.want)
		}
	}
}
