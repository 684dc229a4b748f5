// Package parallel runs indexed work on a fixed number of goroutines: the bulk API
// writes of the lab driver, the kwok scale setup and the policy scale bench.
package parallel

import (
	"context"
	"sync"
)

// ForEach runs fn for 0…n-1 on workers goroutines and returns the first error fn
// returned (the others stop taking work then), or ctx's error when it ended first.
func ForEach(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
