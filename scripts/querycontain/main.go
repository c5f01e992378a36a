// Command querycontain measures how the Query Service contains hostile statements, against a
// running server: the server's peak memory while statements ask for gigabytes (memory), how soon
// a tenant's next query is answered once a client gave up on a planner-bound statement (gone),
// and another tenant's SELECT 1 latency while one tenant saturates the slots (fair). run.sh
// starts a fresh baton dev for it, so that two builds can be measured side by side:
//
//	go build -o /tmp/baton ./cmd/baton && go build -o /tmp/querycontain ./scripts/querycontain
//	scripts/querycontain/run.sh /tmp/baton memory
//	scripts/querycontain/run.sh /tmp/baton gone --query-concurrency 1
//	scripts/querycontain/run.sh /tmp/baton fair
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	url  = flag.String("url", "http://127.0.0.1:8080", "the server's producer listener")
	keyA = flag.String("a", "", "an API key of tenant A")
	keyB = flag.String("b", "", "an API key of tenant B")
	pid  = flag.Int("pid", 0, "the server's process id, whose memory is sampled")
)

func rss() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid))
	for _, l := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(r), "kB")), 10, 64)
			return n << 10
		}
	}
	return -1
}

func query(ctx context.Context, key, sql string) (int, string, time.Duration) {
	body, _ := json.Marshal(map[string]any{"sql": sql})
	req, _ := http.NewRequestWithContext(ctx, "POST", *url+"/v1/query", bytes.NewReader(body))
	req.Header.Set("x-api-key", key)
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1, err.Error(), time.Since(start)
	}
	defer res.Body.Close()
	var v map[string]any
	json.NewDecoder(res.Body).Decode(&v)
	return res.StatusCode, fmt.Sprint(v["error"]), time.Since(start)
}

func nested(d int) string { return strings.Repeat("SELECT (", d) + "1" + strings.Repeat(")", d) }

func main() {
	flag.Parse()
	phase := flag.Arg(0)
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			if r := rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	switch phase {
	case "memory":
		fmt.Printf("server RSS before: %d MiB\n", rss()>>20)
		for _, sql := range []string{"SELECT length(range(100000000))", "SELECT repeat('x', 1000000000)", "SELECT length(repeat('x', 1000000000))"} {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			code, e, d := query(ctx, *keyA, sql)
			cancel()
			fmt.Printf("%-45s %d %s in %v; server peak RSS so far %d MiB\n", sql, code, e, d.Round(time.Millisecond), peak.Load()>>20)
		}
		time.Sleep(200 * time.Millisecond)
		fmt.Printf("server peak RSS: %d MiB\n", peak.Load()>>20)
	case "gone":
		// A client gives up on a planner-bound statement after 1 s; then the same tenant asks SELECT 1.
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			code, e, _ := query(ctx, *keyA, nested(27))
			cancel()
			gone := time.Now()
			fmt.Printf("planner-bound, client gone after 1 s: %d %.40s\n", code, e)
			code, e, d := query(context.Background(), *keyA, "SELECT 1")
			fmt.Printf("next SELECT 1: %d %s, answered %v after the client went away (took %v)\n", code, e, time.Since(gone).Round(time.Millisecond), d.Round(time.Millisecond))
		}
	case "fair":
		// Tenant A saturates (4 planner-bound statements, re-sent as they end); B asks SELECT 1 30 times.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					query(ctx, *keyA, nested(27))
				}
			}()
		}
		time.Sleep(2 * time.Second)
		var lat []time.Duration
		codes := map[int]int{}
		for range 30 {
			code, _, d := query(context.Background(), *keyB, "SELECT 1")
			codes[code]++
			lat = append(lat, d)
		}
		cancel()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		fmt.Printf("tenant B's SELECT 1 while A saturates: codes %v, p50 %v, p99 %v, max %v\n", codes,
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
		fmt.Printf("server peak RSS: %d MiB\n", peak.Load()>>20)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	close(stop)
}
