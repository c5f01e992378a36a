package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is when a cron source fires. All schedules are in UTC.
type Schedule interface {
	// Next returns the first tick strictly after after, in UTC, or the zero time if there is
	// none (a year field whose years are past).
	Next(after time.Time) time.Time
	// String is the schedule in its normalized spelling.
	String() string
}

// ParseSchedule reads a cron source's schedule, in one of three forms:
//
//   - rate(N unit): every N minutes, hours or days (unit singular or plural), ticking at the
//     multiples of the period since the Unix epoch, so that every replica agrees on the ticks;
//   - cron(minute hour day-of-month month day-of-week year): AWS EventBridge's six fields, with
//     day-of-week 1-7 (or SUN-SAT) for Sunday to Saturday and exactly one of day-of-month and
//     day-of-week set to "?"; L, W and # are not supported;
//   - a standard five-field cron line (minute hour day-of-month month day-of-week, Sunday 0).
//
// The error says what is wrong, quoting s: bad schedule "rate(5 fortnights)": ...
func ParseSchedule(s string) (Schedule, error) {
	sched, err := parseSchedule(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("bad schedule %q: %w", s, err)
	}
	return sched, nil
}

func parseSchedule(s string) (Schedule, error) {
	switch {
	case strings.HasPrefix(s, "rate(") && strings.HasSuffix(s, ")"):
		return parseRate(s[len("rate(") : len(s)-1])
	case strings.HasPrefix(s, "cron(") && strings.HasSuffix(s, ")"):
		return parseAWSCron(s[len("cron(") : len(s)-1])
	}
	fields := strings.Fields(s)
	if len(fields) != 5 || strings.HasPrefix(s, "@") {
		return nil, errors.New("must be rate(N minutes|hours|days), cron(minute hour day-of-month month day-of-week year) or a five-field cron line")
	}
	if err := refuseSpecials(fields[2], fields[4]); err != nil {
		return nil, err
	}
	spec, err := fieldParser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, err
	}
	return &cronSchedule{spec: utc(spec), text: strings.Join(fields, " ")}, nil
}

// fieldParser reads the five standard fields; descriptors (@daily) and time zones are refused.
var fieldParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

func utc(s cron.Schedule) *cron.SpecSchedule {
	spec := s.(*cron.SpecSchedule) // what the parser returns for fields
	spec.Location = time.UTC
	return spec
}

// rateUnits maps each unit, singular or plural, to its length.
var rateUnits = map[string]time.Duration{
	"minute": time.Minute, "minutes": time.Minute,
	"hour": time.Hour, "hours": time.Hour,
	"day": 24 * time.Hour, "days": 24 * time.Hour,
}

type rate struct {
	n      int64
	unit   string // singular
	period int64  // seconds
}

func parseRate(inner string) (Schedule, error) {
	f := strings.Fields(inner)
	if len(f) != 2 {
		return nil, errors.New("rate takes a number and a unit, as in rate(5 minutes)")
	}
	if !isDecimalInt(f[0]) || strings.HasPrefix(f[0], "-") || strings.HasPrefix(f[0], "+") {
		return nil, fmt.Errorf("%q is not a whole number", f[0])
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 1 {
		return nil, errors.New("the number must be at least 1")
	}
	unit, ok := rateUnits[f[1]]
	if !ok {
		return nil, fmt.Errorf("unknown unit %q: must be minute(s), hour(s) or day(s)", f[1])
	}
	secs := int64(unit / time.Second)
	if n > math.MaxInt64/secs/2 {
		return nil, errors.New("the period is too long")
	}
	return &rate{n: n, unit: strings.TrimSuffix(f[1], "s"), period: n * secs}, nil
}

func (r *rate) Next(after time.Time) time.Time {
	s := after.Unix() // the second at or before after
	k := s / r.period
	if s%r.period != 0 && s < 0 {
		k-- // floor, for times before the epoch
	}
	return time.Unix((k+1)*r.period, 0).UTC()
}

func (r *rate) String() string {
	if r.n == 1 {
		return "rate(1 " + r.unit + ")"
	}
	return fmt.Sprintf("rate(%d %ss)", r.n, r.unit)
}

// cronSchedule is a five-field cron line, or the first five fields of an AWS cron expression
// (translated) with its years.
type cronSchedule struct {
	spec  *cron.SpecSchedule
	years *yearSet // nil: every year
	text  string
}

func (c *cronSchedule) Next(after time.Time) time.Time {
	t := after.UTC()
	for {
		next := c.spec.Next(t)
		if next.IsZero() || c.years == nil || c.years.has(next.Year()) {
			return next.UTC()
		}
		y, ok := c.years.after(next.Year())
		if !ok {
			return time.Time{}
		}
		t = time.Date(y, time.January, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond)
	}
}

func (c *cronSchedule) String() string { return c.text }

// refuseSpecials gives a clear answer for the AWS and Quartz day specials robfig/cron lacks.
// No month or weekday name contains L or W except WED, and none contains #.
func refuseSpecials(dom, dow string) error {
	if strings.ContainsAny(strings.ToUpper(dom), "LW#") || strings.ContainsAny(strings.ToUpper(dow), "L#") {
		return errors.New("the L, W and # specials are not supported")
	}
	return nil
}

const awsFieldsHelp = "cron() takes six fields: minute hour day-of-month month day-of-week year"

func parseAWSCron(inner string) (Schedule, error) {
	f := strings.Fields(inner)
	if len(f) != 6 {
		return nil, fmt.Errorf("%s; found %d", awsFieldsHelp, len(f))
	}
	minute, hour, dom, month, dow, year := f[0], f[1], f[2], f[3], f[4], f[5]
	if err := refuseSpecials(dom, dow); err != nil {
		return nil, err
	}
	if (dom == "?") == (dow == "?") {
		return nil, errors.New("exactly one of day-of-month and day-of-week must be ?")
	}
	dow, err := awsWeekdays(dow)
	if err != nil {
		return nil, err
	}
	spec, err := fieldParser.Parse(strings.Join([]string{minute, hour, dom, month, dow}, " "))
	if err != nil {
		return nil, err
	}
	c := &cronSchedule{spec: utc(spec), text: "cron(" + strings.Join(f, " ") + ")"}
	if year != "*" {
		if c.years, err = parseYears(year); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// awsWeekdays turns AWS day-of-week numbers, 1 (Sunday) to 7 (Saturday), into cron's 0 to 6.
// Names, "*", "?" and steps pass through.
func awsWeekdays(field string) (string, error) {
	items := strings.Split(field, ",")
	for i, item := range items {
		rng, step, hasStep := strings.Cut(item, "/")
		ends := strings.Split(rng, "-")
		for k, e := range ends {
			if !isDecimalInt(e) {
				continue // a name or * or ?; the cron parser judges it
			}
			d, err := strconv.Atoi(e)
			if err != nil || d < 1 || d > 7 {
				return "", fmt.Errorf("day-of-week %s is out of range: use 1-7 (1 is Sunday) or SUN-SAT", e)
			}
			ends[k] = strconv.Itoa(d - 1)
		}
		items[i] = strings.Join(ends, "-")
		if hasStep {
			items[i] += "/" + step
		}
	}
	return strings.Join(items, ","), nil
}

// AWS accepts the years 1970 to 2199.
const (
	minYear = 1970
	maxYear = 2199
)

// yearSet is the years an AWS cron expression runs in.
type yearSet [maxYear - minYear + 1]bool

func (s *yearSet) has(y int) bool {
	return y >= minYear && y <= maxYear && s[y-minYear]
}

// after returns the first year of the set after y.
func (s *yearSet) after(y int) (int, bool) {
	for y = max(y+1, minYear); y <= maxYear; y++ {
		if s[y-minYear] {
			return y, true
		}
	}
	return 0, false
}

// parseYears reads a year field: a comma list of *, Y, Y1-Y2, each optionally /step.
func parseYears(field string) (*yearSet, error) {
	var s yearSet
	for _, item := range strings.Split(field, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		lo, hi := minYear, maxYear
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = year(a); err != nil {
				return nil, err
			}
			hi = lo
			if isRange {
				if hi, err = year(b); err != nil {
					return nil, err
				}
			} else if hasStep {
				hi = maxYear
			}
			if lo > hi {
				return nil, fmt.Errorf("year range %s runs backwards", rng)
			}
		}
		step := 1
		if hasStep {
			var err error
			if step, err = strconv.Atoi(stepText); err != nil || step < 1 {
				return nil, fmt.Errorf("year step %q must be a whole number of at least 1", stepText)
			}
		}
		for y := lo; ; y += step {
			s[y-minYear] = true
			if hi-y < step { // the next year is past hi (and y+step might overflow)
				break
			}
		}
	}
	return &s, nil
}

func year(text string) (int, error) {
	y, err := strconv.Atoi(text)
	if err != nil || y < minYear || y > maxYear {
		return 0, fmt.Errorf("year %q must be between %d and %d", text, minYear, maxYear)
	}
	return y, nil
}
