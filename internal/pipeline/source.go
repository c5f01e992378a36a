package pipeline

import "strings"

// source reads a source job's source.
func (w *walker) source(n *node, path string, dc *docContext) *Source {
	if !w.object(n, path, "kind", "schedule", "webhook_path") {
		return nil
	}
	s := &Source{}
	if v := w.required(n, path, "kind"); v != nil {
		s.Kind, _ = w.oneOf(v, child(path, "kind"), SourceCron, SourceAlwaysOn, SourceManual, SourceWebhook)
	}
	sched, hook := n.lookup("schedule"), n.lookup("webhook_path")
	if s.Kind == "" {
		return s // the kind is invalid: which other keys belong is unknown
	}
	if s.Kind == SourceCron {
		if v := w.required(n, path, "schedule"); v != nil {
			if text, ok := w.str(v, child(path, "schedule")); ok {
				if _, err := ParseSchedule(text); err != nil {
					w.node(v, child(path, "schedule"), "%s", err)
				}
				s.Schedule = text
			}
		}
	} else if sched != nil {
		w.node(sched, child(path, "schedule"), "only allowed when kind is cron")
	}
	if s.Kind == SourceWebhook {
		if v := w.required(n, path, "webhook_path"); v != nil {
			s.WebhookPath = w.webhookPath(v, child(path, "webhook_path"), dc)
		}
	} else if hook != nil {
		w.node(hook, child(path, "webhook_path"), "only allowed when kind is webhook")
	}
	return s
}

// webhookPath reads a webhook path: absolute, without "..", unique in the document.
func (w *walker) webhookPath(n *node, path string, dc *docContext) string {
	p, ok := w.str(n, path)
	if !ok {
		return ""
	}
	switch {
	case !strings.HasPrefix(p, "/"):
		w.node(n, path, `must start with "/"`)
	case strings.Contains(p, ".."):
		w.node(n, path, `must not contain ".."`)
	case !webhookPathRE.MatchString(p):
		w.node(n, path, "%q does not match %s", p, webhookPathRE)
	case dc.webhooks[p]:
		w.node(n, path, "duplicate webhook path %q", p)
	default:
		dc.webhooks[p] = true
	}
	return p
}
