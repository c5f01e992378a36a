package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The functions the pages' templates call.

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// prettyJSON indents a JSON document for display; "" for none.
func prettyJSON(b json.RawMessage) string {
	if len(b) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

func compactJSON(b json.RawMessage) string {
	if len(b) == 0 || string(b) == "null" || string(b) == "{}" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// funcs are the templates' helpers.
func (u *UI) funcs() template.FuncMap {
	return template.FuncMap{
		// Times are rendered absolute, in a <time> element that the page's script turns into "12s
		// ago" (or, for ages, "12s") and keeps current: a live page's HTML then changes only when
		// its data does.
		"ago": func(t time.Time) template.HTML { return timeElement(t, "ago") },
		"age": func(t time.Time) template.HTML { return timeElement(t, "age") },
		"stamp": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
		},
		"ms": func(n int64) string { return since(time.Duration(n) * time.Millisecond) },
		"pct": func(a, b int) int {
			if b == 0 {
				return 0
			}
			return 100 * a / b
		},
		"perMinute": func(n int, window time.Duration) string {
			return strconv.FormatFloat(float64(n)/window.Minutes(), 'f', 1, 64)
		},
		"minutes": func(d time.Duration) string { return fmt.Sprintf("%g minutes", d.Minutes()) },
		"f1":      func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
		"short":   func(s string) string { return truncate(s, 13) },
		"plus":    func(a, b int) int { return a + b },
		"half":    func(n int) int { return n / 2 },
		"nodeW":   func() int { return nodeW },
		"nodeH":   func() int { return nodeH },
		"asset":   func(name string) string { return u.assets[name] },
		"jobURL":  func(id string) string { return "/ui/jobs/" + url.PathEscape(id) },
		"taskURL": func(jobID, taskID string) string {
			return "/ui/jobs/" + url.PathEscape(jobID) + "/tasks/" + url.PathEscape(taskID)
		},
		"pathEscape": url.PathEscape,
		"join":       strings.Join,
		"deref": func(p *int64) string {
			if p == nil {
				return ""
			}
			return strconv.FormatInt(*p, 10)
		},
	}
}

// timeElement is t as a <time> element of the given class; a dash for the zero time.
func timeElement(t time.Time, class string) template.HTML {
	if t.IsZero() {
		return "—"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time class="%s" datetime="%s" title="%s">%s</time>`, class,
		u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05.000 UTC"), u.Format("Jan 2 15:04:05")))
}

// since says a duration the way a person reads it: 850ms, 12s, 4m 10s, 3h 5m, 2d 4h.
func since(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}
