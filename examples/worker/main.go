// Command worker runs the five tasks of examples/job.json: each handler echoes its input
// and its parents' outputs. BATON_INTERNAL_URL points at the server's internal listener.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-dev/baton/worker"
)

func main() {
	w, err := worker.New(os.Getenv("BATON_INTERNAL_URL"), worker.WithConcurrency(4))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"scrape-store", "analyze-competitors", "color-tags", "font-pairing", "compile-result"} {
		w.Handle(name, func(ctx context.Context, t *worker.Task) (any, error) {
			return map[string]any{"task": t.Key, "input": t.Input, "from": t.DependencyOutputs}, nil
		})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
