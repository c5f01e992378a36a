package pipeline

import (
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScheduleNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schedule string
		after    string
		want     string // "" for no tick
	}{
		{"rate(5 minutes)", "2024-05-01T12:03:27Z", "2024-05-01T12:05:00Z"},
		{"rate(5 minutes)", "2024-05-01T12:05:00Z", "2024-05-01T12:10:00Z"}, // strictly after
		{"rate(1 minute)", "2024-05-01T12:05:00.5Z", "2024-05-01T12:06:00Z"},
		{"rate(1 hour)", "2024-05-01T12:03:00Z", "2024-05-01T13:00:00Z"},
		{"rate(2 days)", "2024-05-01T12:00:00Z", "2024-05-03T00:00:00Z"}, // 2024-05-01 is an even day since the epoch
		{"rate(3 hour)", "2024-05-01T00:30:00Z", "2024-05-01T03:00:00Z"}, // either form of the unit
		{"rate(5 minutes)", "2024-05-01T14:03:00+02:00", "2024-05-01T12:05:00Z"},
		{"rate(1 hour)", "1969-12-31T22:30:00Z", "1969-12-31T23:00:00Z"}, // before the epoch too
		{"cron(0 12 * * ? *)", "2024-05-01T11:59:00Z", "2024-05-01T12:00:00Z"},
		{"cron(0 12 * * ? *)", "2024-05-01T12:00:00Z", "2024-05-02T12:00:00Z"},
		{"cron(0/15 * ? * MON-FRI *)", "2024-05-01T10:07:00Z", "2024-05-01T10:15:00Z"},
		{"cron(0/15 * ? * MON-FRI *)", "2024-05-03T23:50:00Z", "2024-05-06T00:00:00Z"}, // Friday night → Monday
		{"cron(0 8 ? * 2 *)", "2024-05-01T00:00:00Z", "2024-05-06T08:00:00Z"},          // 2 is Monday
		{"cron(0 0 ? * 1 *)", "2024-05-01T00:00:00Z", "2024-05-05T00:00:00Z"},          // 1 is Sunday
		{"cron(0 0 ? * 7 *)", "2024-05-01T00:00:00Z", "2024-05-04T00:00:00Z"},          // 7 is Saturday
		{"cron(0 9 ? * 2-6 *)", "2024-05-04T00:00:00Z", "2024-05-06T09:00:00Z"},        // 2-6 is MON-FRI
		{"cron(30 6 ? * SUN *)", "2024-05-01T00:00:00Z", "2024-05-05T06:30:00Z"},
		{"cron(0 0 1 1 ? 2030)", "2024-05-01T00:00:00Z", "2030-01-01T00:00:00Z"},
		{"cron(0 0 1 1 ? 2030)", "2030-01-01T00:00:00Z", ""},
		{"cron(0 0 1 JAN ? 2025-2026)", "2026-06-01T00:00:00Z", ""},
		{"cron(0 0 1 1 ? 2024,2031)", "2024-05-01T00:00:00Z", "2031-01-01T00:00:00Z"},
		{"cron(0 0 1 1 ? 2024/3)", "2024-05-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"cron(0 0 1 1 ? 2024/100)", "2024-05-01T00:00:00Z", "2124-01-01T00:00:00Z"},
		{"cron(0 0 1 1 ? 2024/1000)", "2024-05-01T00:00:00Z", ""}, // a step past 2199: the first year only
		// A step so large that adding it to a year overflows an int (it panicked).
		{"cron(0 0 1 1 ? 1970/9223372036854775807)", "1960-05-01T00:00:00Z", "1970-01-01T00:00:00Z"},
		{"cron(0 0 1 1 ? 2199/9223372036854775807)", "2024-05-01T00:00:00Z", "2199-01-01T00:00:00Z"},
		{"*/5 * * * *", "2024-05-01T12:03:00Z", "2024-05-01T12:05:00Z"},
		{"0 9 * * 0", "2024-05-01T00:00:00Z", "2024-05-05T09:00:00Z"}, // five fields: 0 is Sunday
		{"0 0 29 2 *", "2024-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.schedule+" after "+tt.after, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSchedule(tt.schedule)
			if err != nil {
				t.Fatalf("ParseSchedule: %v", err)
			}
			got := s.Next(at(tt.after))
			var want time.Time
			if tt.want != "" {
				want = at(tt.want)
			}
			if !got.Equal(want) || (!got.IsZero() && got.Location() != time.UTC) {
				t.Fatalf("Next = %v, want %v (UTC)", got, want)
			}
		})
	}
}

func TestScheduleString(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"rate(5 minutes)", "rate(5 minutes)"},
		{"rate(1 minutes)", "rate(1 minute)"},
		{"rate(2 day)", "rate(2 days)"},
		{" cron(0  12 * * ? *) ", "cron(0 12 * * ? *)"},
		{"*/5  * * * *", "*/5 * * * *"},
	}
	for _, tt := range tests {
		s, err := ParseSchedule(tt.in)
		if err != nil {
			t.Fatalf("ParseSchedule(%q): %v", tt.in, err)
		}
		if got := s.String(); got != tt.want {
			t.Errorf("ParseSchedule(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	t.Parallel()
	const forms = "must be rate(N minutes|hours|days), cron(minute hour day-of-month month day-of-week year) or a five-field cron line"
	tests := []struct{ in, want string }{
		{"rate(0 minutes)", `bad schedule "rate(0 minutes)": the number must be at least 1`},
		{"rate(5 fortnights)", `bad schedule "rate(5 fortnights)": unknown unit "fortnights": must be minute(s), hour(s) or day(s)`},
		{"rate(five minutes)", `bad schedule "rate(five minutes)": "five" is not a whole number`},
		{"rate(-5 minutes)", `bad schedule "rate(-5 minutes)": "-5" is not a whole number`},
		{"rate(5)", `bad schedule "rate(5)": rate takes a number and a unit, as in rate(5 minutes)`},
		{"cron(0 12 * * *)", `bad schedule "cron(0 12 * * *)": cron() takes six fields: minute hour day-of-month month day-of-week year; found 5`},
		{"cron(0 12 L * ? *)", `bad schedule "cron(0 12 L * ? *)": the L, W and # specials are not supported`},
		{"cron(0 12 15W * ? *)", `bad schedule "cron(0 12 15W * ? *)": the L, W and # specials are not supported`},
		{"cron(0 12 ? * 6#3 *)", `bad schedule "cron(0 12 ? * 6#3 *)": the L, W and # specials are not supported`},
		{"cron(0 12 ? * 6L *)", `bad schedule "cron(0 12 ? * 6L *)": the L, W and # specials are not supported`},
		{"cron(0 12 * * MON *)", `bad schedule "cron(0 12 * * MON *)": exactly one of day-of-month and day-of-week must be ?`},
		{"cron(0 12 ? * ? *)", `bad schedule "cron(0 12 ? * ? *)": exactly one of day-of-month and day-of-week must be ?`},
		{"cron(0 12 ? * 8 *)", `bad schedule "cron(0 12 ? * 8 *)": day-of-week 8 is out of range: use 1-7 (1 is Sunday) or SUN-SAT`},
		{"cron(0 12 * * ? 1969)", `bad schedule "cron(0 12 * * ? 1969)": year "1969" must be between 1970 and 2199`},
		{"cron(0 12 * * ? 2030-2025)", `bad schedule "cron(0 12 * * ? 2030-2025)": year range 2030-2025 runs backwards`},
		{"cron(61 12 * * ? *)", `bad schedule "cron(61 12 * * ? *)": end of range (61) above maximum (59): 61`},
		{"0 12 L * *", `bad schedule "0 12 L * *": the L, W and # specials are not supported`},
		{"every 5 minutes", `bad schedule "every 5 minutes": ` + forms},
		{"@daily", `bad schedule "@daily": ` + forms},
		{"0 0 * * * *", `bad schedule "0 0 * * * *": ` + forms},
		{"", `bad schedule "": ` + forms},
	}
	for _, tt := range tests {
		_, err := ParseSchedule(tt.in)
		if err == nil {
			t.Errorf("ParseSchedule(%q) succeeded, want %q", tt.in, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("ParseSchedule(%q):\n got  %s\n want %s", tt.in, err, tt.want)
		}
	}
	if _, err := ParseSchedule("cron(0 12 ? JUL WED *)"); err != nil {
		t.Errorf("JUL and WED are names, not the L and W specials: %v", err)
	}
}
